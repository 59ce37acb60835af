#include "proxy/control/events.hpp"

#include <algorithm>
#include <charconv>

namespace cordon::proxy::control {

event_bus::event_bus(std::function<std::uint64_t(const event&)> persist, std::uint64_t last_id)
    : persist_(std::move(persist)), last_id_(last_id) {}

std::uint64_t event_bus::publish(std::string type, std::string session, std::string json) {
    event e{0, std::move(type), std::move(session), std::move(json)};
    std::uint64_t id = persist_ ? persist_(e) : 0;
    if (id == 0 || id <= last_id_) {
        id = last_id_ + 1;  // not persisted: still strictly increasing for live consumers
    }
    e.id = id;
    last_id_ = id;
    recent_.push_back(std::move(e));
    if (recent_.size() > keep) {
        recent_.pop_front();
    }
    for (auto* t : waiters_) {
        t->cancel();
    }
    return id;
}

std::vector<event> event_bus::since(std::uint64_t after, std::string_view session,
                                    bool& complete) const {
    // Complete when nothing was published after `after`, or memory reaches back to it.
    complete = reaches_back_to(after);
    std::vector<event> out;
    for (const auto& e : recent_) {
        if (e.id > after && concerns(e, session)) {
            out.push_back(e);
        }
    }
    return out;
}

awaitable<void> event_bus::wait(std::uint64_t after, std::chrono::milliseconds timeout) {
    if (last_id_ > after) {
        co_return;
    }
    net::steady_timer timer(co_await net::this_coro::executor, timeout);
    waiters_.push_back(&timer);
    co_await timer.async_wait(use_nothrow);
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &timer));
}

std::optional<std::uint64_t> parse_event_id(std::string_view text) noexcept {
    if (text.empty() || text.size() > 20 ||
        text.find_first_not_of("0123456789") != std::string_view::npos) {
        return std::nullopt;
    }
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) {
        return std::nullopt;  // above 2^64 - 1
    }
    return v;
}

std::string_view resume_lost(const std::optional<std::uint64_t>& id, const event_bus& bus,
                             const std::function<std::uint64_t(std::uint64_t)>& next_stored) {
    if (!id) {
        return "malformed";
    }
    if (*id > bus.last_id()) {
        return "ahead";
    }
    if (!bus.reaches_back_to(*id) && (!next_stored || next_stored(*id) != *id + 1)) {
        return "gone";
    }
    return {};
}

}  // namespace cordon::proxy::control
