#pragma once
// The seam between the daemon and where its durable state lives: the kill switch, sessions with
// their token hashes and revocations, the event log and the measured kill times. Two
// implementations: state_store (SQLite, one host: the default) and etcd_store (etcd, a fleet of
// instances: the policy's `cluster` section). No sockets, no Asio in this header.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/time.hpp"
#include "proxy/control/sessions.hpp"

namespace cordon::proxy::control {

/// The network kill switch as persisted.
struct kill_state {
    bool engaged = false;
    std::string reason;
    std::string by;
    common::wall_clock::time_point at{};  ///< when it was engaged (or revived); epoch if never
};

/// A kill as measured inside cordon: from the kill call to every connection it cut closed
/// (kill_outcome::elapsed_ms). The last one of each scope is kept, for the worksheet.
struct kill_timing {
    std::string scope;      ///< "network" or "session"
    double elapsed_ms = 0;  ///< stored to the microsecond
    std::uint64_t connections_closed = 0;
    common::wall_clock::time_point at{};  ///< when the kill was made
};

/// One entry of the event log (GET /v1/events). `json` is the event as the API serves it.
struct stored_event {
    std::uint64_t id = 0;  ///< assigned by append_event(); increasing, never reused
    common::wall_clock::time_point ts{};
    std::string type;     ///< e.g. "kill.network", "kill.session", "token.revoke"
    std::string session;  ///< empty for events of no one session (network kill, revive)
    std::string json;
};

/// Everything needed at start-up. `kill` is the default (not engaged) if never saved;
/// `sessions` are in seq order, tokens in minting order; `last_event_id` is the largest id
/// ever assigned (0 if none), pruned events included.
struct loaded_state {
    kill_state kill;
    std::vector<stored_session> sessions;
    std::uint64_t last_event_id = 0;
};

/// One instance's confirmation of a kill (fleet): what it closed and how long that took.
struct instance_confirmation {
    std::string instance;
    std::uint64_t connections_closed = 0;
    double elapsed_ms = 0;
};

/// A kill as the fleet saw it: the instances that confirmed within the wait (this one first),
/// those that did not, and the totals (elapsed: from the call to the last confirmation seen).
struct fleet_outcome {
    std::uint64_t connections_closed = 0;
    double elapsed_ms = 0;
    std::vector<instance_confirmation> instances;
    std::vector<std::string> missing;
};

/// Where the durable state lives. Every write returns only once the state is durable there
/// (on disk for SQLite, committed by the etcd cluster for etcd): false, with `error` set and
/// the caller keeping the change as unsaved, otherwise. Called on the control thread.
class state_backend {
public:
    virtual ~state_backend() = default;

    /// What and where: the SQLite file, or "etcd ENDPOINTS PREFIX".
    virtual const std::string& path() const noexcept = 0;

    /// Inserts or replaces the session with its tokens (`s.tokens`).
    virtual bool save_session(const stored_session& s, std::string& error) = 0;
    /// Replaces the network kill state.
    virtual bool save_kill(const kill_state& k, std::string& error) = 0;
    /// Replaces the last measured kill of `t.scope`.
    virtual bool save_kill_timing(const kill_timing& t, std::string& error) = 0;
    /// The last measured kill of each scope measured so far.
    virtual bool kill_timings(std::vector<kill_timing>& out, std::string& error) = 0;
    /// Appends `e` and sets e.id to its new id (larger than every id assigned before).
    virtual bool append_event(stored_event& e, std::string& error) = 0;
    /// Reads the whole state. False, with `error` set, if it cannot be read or holds something
    /// invalid: the caller fails closed.
    virtual bool load(loaded_state& out, std::string& error) = 0;
    /// Events with id > `after`, oldest first, at most `limit` (see state_store); may be empty
    /// where events are kept in memory only.
    virtual std::vector<stored_event> events_after(std::uint64_t after, std::string_view session,
                                                   std::size_t limit) = 0;
    /// Deletes what ended before `before` (where the backend does not expire it itself).
    virtual bool prune(common::wall_clock::time_point before, std::string& error) = 0;
    /// Whether writes are durable now; `error` says why not. Cheap: called every second.
    virtual bool check(std::string& error) = 0;
    /// True while a space reserve is spent (SQLite on a full disk).
    virtual bool reserve_used() const = 0;
};

}  // namespace cordon::proxy::control
