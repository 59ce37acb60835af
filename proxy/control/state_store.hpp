#pragma once
// The durable state of one cordon: kill switch, sessions with their token hashes and
// revocations, and the event log the shim follows. SQLite in WAL mode; no sockets, no Asio.
// The default state_backend (state_backend.hpp); a fleet uses etcd_store instead.
// Kills are persisted: a restart does not undo one.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/time.hpp"
#include "proxy/control/sessions.hpp"
#include "proxy/control/state_backend.hpp"
#include "proxy/control/tokens.hpp"

namespace cordon::proxy::control {

/// SQLite in WAL mode at DIR/cordon.db (DIR created 0700; the file is 0600). Every write is one
/// transaction with synchronous=FULL, so it is on disk when the call returns. Exclusive locking:
/// no -shm file and nothing memory-mapped (a failing mapped file is a SIGBUS, not an error), and
/// no other process opens the file while the store is open. A write returns true only if the
/// path still names the file opened (device and inode): a store whose directory was removed or
/// whose file was replaced fails every write from then on (check() says why). A write failing
/// for want of space deletes DIR/cordon.db.reserve (1 MiB held for this) and is tried again.
/// Times are kept as integer milliseconds since the epoch (finer parts are floored).
/// Thread-safe: one mutex serialises every call (they are rare control-plane operations; a
/// write costs an fsync).
class state_store final : public state_backend {
public:
    /// The schema this build reads and writes (meta.schema_version).
    static constexpr std::int64_t schema_version = 2;  ///< a version 1 file is upgraded

    /// Opens DIR/cordon.db, or creates it (and DIR) if it does not exist. A new store is built
    /// under a temporary name and renamed into place, so an existing cordon.db is always a
    /// complete store. On an unreadable, truncated, corrupt (PRAGMA quick_check not "ok"),
    /// non-SQLite, non-cordon or newer-schema file returns nullptr and sets `error` to a
    /// message naming the file and the problem; the file is never reset or overwritten.
    static std::unique_ptr<state_store> open(const std::string& dir, std::string& error);

    ~state_store() override;
    state_store(const state_store&) = delete;
    state_store& operator=(const state_store&) = delete;

    /// The database file (DIR/cordon.db).
    const std::string& path() const noexcept override;

    /// Inserts or replaces the session and replaces its tokens with `s.tokens`.
    /// False (and `error` set, nothing written) on failure.
    bool save_session(const stored_session& s, std::string& error) override;

    /// Replaces the kill switch state.
    bool save_kill(const kill_state& k, std::string& error) override;

    /// Replaces the last measured kill of `t.scope` (network or session).
    bool save_kill_timing(const kill_timing& t, std::string& error) override;
    /// The last measured kill of each scope measured so far (none, one or two; by scope).
    /// False, with `error` set, on a read error.
    bool kill_timings(std::vector<kill_timing>& out, std::string& error) override;

    /// Appends `e` and sets e.id to its new id (autoincrement: larger than every id ever
    /// assigned, pruned ones included).
    bool append_event(stored_event& e, std::string& error) override;

    /// Everything needed at start-up (state_backend.hpp).
    using loaded = loaded_state;

    /// Reads the whole state. False, with `error` set, if it cannot be read or a row is
    /// invalid (unknown state, hash not 32 bytes, time out of range): the caller fails closed.
    bool load(loaded& out, std::string& error) override;

    /// Events with id > `after`, oldest first, at most `limit`. With a non-empty `session`,
    /// only that session's events and those with an empty session (network-wide ones).
    /// Returns an empty vector on a read error (the caller polls again).
    std::vector<stored_event> events_after(std::uint64_t after, std::string_view session,
                                           std::size_t limit) override;

    /// Deletes ended and killed sessions (with their tokens) whose ended_at is before `before`,
    /// and events whose ts is before `before`. Active sessions and the kill state are kept.
    bool prune(common::wall_clock::time_point before, std::string& error) override;

    /// Whether writes are durable now: false, with `error` set, when the last write failed
    /// or the path no longer names the file opened (then for good). Makes the space reserve
    /// again if it was used and there is room. Cheap (a stat or two): called every second.
    bool check(std::string& error) override;
    /// True while the space reserve is spent (the disk filled up; not yet made again).
    bool reserve_used() const override;

private:
    struct impl;
    explicit state_store(std::unique_ptr<impl> p);
    static bool save_session_rows(impl& d, const stored_session& s, std::string& error);

    std::unique_ptr<impl> impl_;
};

}  // namespace cordon::proxy::control
