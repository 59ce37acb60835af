#pragma once
// Sessions held by a follower that must end them when it goes away: `cordon run` opens its
// event stream with `?lifeline=GRACE`; when the last such stream of a session closes and
// none reopens within the grace (the shim reconnects within 250 ms when it lives), the
// session is ended by cordon itself, so a shim that died (SIGKILL, OOM, a crash) does not
// leave its session's tokens working until they expire. Control thread only.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/asio.hpp"

namespace cordon::proxy::control {

class lifelines {
public:
    /// `on_lost(session)` runs on `ex` when a session's last lifeline has been gone for its
    /// grace.
    lifelines(net::any_io_executor ex, std::function<void(const std::string&)> on_lost);

    /// Held while one lifeline stream is open; releasing the last one starts the grace.
    class hold {
    public:
        hold(lifelines* owner, std::string session, std::chrono::milliseconds grace);
        hold(hold&& other) noexcept;
        hold& operator=(hold&&) = delete;
        hold(const hold&) = delete;
        ~hold();

    private:
        lifelines* owner_;
        std::string session_;
        std::chrono::milliseconds grace_;
    };

    hold open(const std::string& session, std::chrono::milliseconds grace);

    /// Sessions with a lifeline open or in its grace (for tests and status).
    std::size_t size() const { return entries_.size(); }

    /// At shutdown, once the control loop has stopped and before its io_context goes: drops
    /// every grace timer, and releases from then on (holds destroyed with the io_context's
    /// suspended coroutines) start none, so no timer outlives the io_context it is bound to.
    void stop();

private:
    struct entry {
        int open = 0;
        std::uint64_t generation = 0;  ///< a grace timer of an older generation does nothing
        std::unique_ptr<net::steady_timer> timer;
    };
    void release(const std::string& session, std::chrono::milliseconds grace);

    net::any_io_executor ex_;
    std::function<void(const std::string&)> on_lost_;
    std::map<std::string, entry, std::less<>> entries_;
    bool stopped_ = false;
};

}  // namespace cordon::proxy::control
