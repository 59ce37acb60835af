#pragma once
// The state store's internals shared by state_store.cpp and state_schema.cpp (internal).

#include <sys/stat.h>

#include <mutex>
#include <string>
#include <string_view>

#include "proxy/control/sqlite.hpp"
#include "proxy/control/state_store.hpp"

namespace cordon::proxy::control {

namespace detail {

/// Left on every message about a damaged file: cordon never repairs or replaces it.
inline constexpr std::string_view untouched =
    "; the file was left untouched: restore a backup, or move it away to start with an empty "
    "store";

/// The text of errno value `err`.
std::string errno_text(int err);

}  // namespace detail

/// The open store: one connection, its prepared statements, and what the file was when opened.
struct state_store::impl {
    std::string path;
    std::string reserve_path;  // DIR/cordon.db.reserve
    std::mutex mutex;
    // What `path` and its WAL were when opened: a write is durable only while the path
    // still names those files (a directory removed, or the file replaced, leaves the
    // connection writing to a file no restart reads).
    struct stat identity {};
    struct stat wal_identity {};
    bool have_wal_identity = false;
    std::string broken;       // why the store can never be trusted again in this process
    std::string last_error;   // the last write's failure; empty after a success
    int last_rc = SQLITE_OK;  // of the last statement run()
    bool reserve_used = false;
    sqlite::connection db;  // declared before the statements: finalized first, closed last
    sqlite::statement begin, commit, rollback;
    sqlite::statement upsert_session, delete_tokens, insert_token, upsert_kill, insert_event;
    sqlite::statement select_kill, select_sessions, select_tokens, select_last_event, select_events;
    sqlite::statement prune_sessions, prune_events;
    sqlite::statement upsert_kill_timing, select_kill_timings;

    std::string fail(std::string_view what, int rc) const {
        return "state store " + path + ": " + std::string(what) + ": " + db.message(rc);
    }

    /// Runs a statement that returns no rows, then resets it.
    bool run(sqlite::statement& st, std::string_view what, std::string& error) {
        const sqlite::reset_on_exit reset(st);
        const int rc = st.step();
        last_rc = rc;
        if (rc != SQLITE_DONE) {
            error = fail(what, rc);
            return false;
        }
        return true;
    }

    /// Records what `path` (and its WAL) are now; called once the file is open.
    void remember_identity();

    /// False, with `error` (and `broken`) set, when `path` no longer names the file opened:
    /// compared by device and inode, never by name.
    bool check_identity(std::string& error);

    /// Deletes the reserve file: true if there was one (space was freed).
    bool release_reserve();

    /// Makes the reserve file if it is missing and there is room; best effort.
    void make_reserve();

    /// One write transaction: `body` runs between BEGIN IMMEDIATE and COMMIT. A failure for
    /// want of space is tried once more after the reserve is released. True only when the
    /// commit succeeded and the file is still the one opened (check_identity).
    template <class Body>
    bool write(std::string& error, Body&& body);

    bool prepare_all(std::string& error);
    bool validate_and_configure(std::string& error);

    class transaction;
};

}  // namespace cordon::proxy::control
