#include "proxy/control/lifelines.hpp"

#include <utility>

namespace cordon::proxy::control {

lifelines::lifelines(net::any_io_executor ex, std::function<void(const std::string&)> on_lost)
    : ex_(std::move(ex)), on_lost_(std::move(on_lost)) {}

lifelines::hold::hold(lifelines* owner, std::string session, std::chrono::milliseconds grace)
    : owner_(owner), session_(std::move(session)), grace_(grace) {}

lifelines::hold::hold(hold&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      session_(std::move(other.session_)),
      grace_(other.grace_) {}

lifelines::hold::~hold() {
    if (owner_ != nullptr) {
        owner_->release(session_, grace_);
    }
}

lifelines::hold lifelines::open(const std::string& session, std::chrono::milliseconds grace) {
    entry& e = entries_[session];
    ++e.open;
    ++e.generation;  // a grace in progress is void: the follower is back
    if (e.timer) {
        e.timer->cancel();
        e.timer.reset();
    }
    return hold(this, session, grace);
}

void lifelines::release(const std::string& session, std::chrono::milliseconds grace) {
    const auto it = entries_.find(session);
    if (it == entries_.end() || --it->second.open > 0) {
        return;
    }
    entry& e = it->second;
    if (stopped_) {
        return;  // shutting down: the grace would outlive the loop that runs it
    }
    const std::uint64_t gen = ++e.generation;
    e.timer = std::make_unique<net::steady_timer>(ex_, grace);
    e.timer->async_wait([this, session, gen](boost::system::error_code ec) {
        const auto i = entries_.find(session);
        if (ec || i == entries_.end() || i->second.generation != gen || i->second.open > 0) {
            return;  // cancelled, or the follower came back
        }
        entries_.erase(i);
        on_lost_(session);
    });
}

void lifelines::stop() {
    stopped_ = true;
    for (auto& [session, e] : entries_) {
        e.timer.reset();  // cancels its wait; the handler is destroyed with the io_context
    }
}

}  // namespace cordon::proxy::control
