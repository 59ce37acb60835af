#pragma once
// The event stream operators and the `cordon run` shim follow to learn of kills within
// milliseconds: kill.network, revive, kill.session, session.end, token.revoke. Each event
// has an increasing id; a consumer that reconnects with the last id it saw misses none.
// Internal to proxy/ (Asio); used only on the control thread.

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "proxy/asio.hpp"
#include "proxy/tokens.hpp"

namespace cordon::proxy {

struct event {
    std::uint64_t id = 0;
    std::string type;
    std::string session;  ///< empty for events that concern everyone (kill.network, revive)
    std::string json;     ///< the data line: one JSON object
};

/// Keeps the latest events in memory and wakes waiting streams. Not thread-safe: the
/// control thread owns it.
class event_bus {
public:
    /// `persist` stores an event and returns its id (0 on failure); without it ids count
    /// from `first_id`.
    event_bus(std::function<std::uint64_t(const event&)> persist, std::uint64_t last_id);

    /// Publishes an event; returns its id.
    std::uint64_t publish(std::string type, std::string session, std::string json);

    /// Events after `after`, for `session` (empty: all), oldest first, from memory. Sets
    /// `complete` false when older events than memory holds were asked for.
    std::vector<event> since(std::uint64_t after, std::string_view session,
                             bool& complete) const;

    std::uint64_t last_id() const noexcept { return last_id_; }

    /// Waits until an event after `after` is published or `timeout` passes.
    awaitable<void> wait(std::uint64_t after, std::chrono::milliseconds timeout);

    static bool concerns(const event& e, std::string_view session) {
        return session.empty() || e.session.empty() || e.session == session;
    }

private:
    static constexpr std::size_t keep = 4096;
    std::function<std::uint64_t(const event&)> persist_;
    std::uint64_t last_id_;
    std::deque<event> recent_;
    std::vector<net::steady_timer*> waiters_;
};

}  // namespace cordon::proxy
