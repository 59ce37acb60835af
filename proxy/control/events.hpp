#pragma once
// The event stream operators and the `cordon run` shim follow to learn of kills within
// milliseconds: kill.network, revive, kill.session, session.end, token.revoke. Each event
// has an increasing id; a consumer that reconnects with the last id it saw misses none.
// Internal to proxy/ (Asio); used only on the control thread.

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/asio.hpp"
#include "proxy/control/tokens.hpp"

namespace cordon::proxy::control {

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
    std::vector<event> since(std::uint64_t after, std::string_view session, bool& complete) const;

    std::uint64_t last_id() const noexcept { return last_id_; }

    /// True when memory holds every event after `after` (or nothing came after it).
    bool reaches_back_to(std::uint64_t after) const noexcept {
        return after >= last_id_ || (!recent_.empty() && recent_.front().id <= after + 1);
    }

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

/// A Last-Event-ID (or ?after=) as a follower sends it: 1-20 decimal digits that fit in 64
/// bits, nothing else ("-1", "+1", " 1", "1x" and 2^64 are not ids). nullopt otherwise.
std::optional<std::uint64_t> parse_event_id(std::string_view text) noexcept;

/// Why a stream cannot resume after `id` ("" when it can): `malformed` (no id:
/// parse_event_id), `ahead` (beyond the last id: the store was reset or replaced, or the id
/// wrapped), `gone` (older than memory holds, and the store does not hold the event right
/// after it: `next_stored` is the id of the first stored event after `id`, 0 if none).
/// `next_stored` is asked only for `gone`, so the store is read only for old ids.
std::string_view resume_lost(const std::optional<std::uint64_t>& id, const event_bus& bus,
                             const std::function<std::uint64_t(std::uint64_t)>& next_stored);

}  // namespace cordon::proxy::control
