#include "proxy/events.hpp"

#include <algorithm>

namespace cordon::proxy {

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
    complete = after >= last_id_ || (!recent_.empty() && recent_.front().id <= after + 1);
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

}  // namespace cordon::proxy
