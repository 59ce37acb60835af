// Opening the state store: the schema and its upgrades, file checks, creation, configuration.
#include "proxy/control/state_store.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "proxy/control/sqlite.hpp"
#include "proxy/control/state_store_impl.hpp"

namespace cordon::proxy::control {

using detail::errno_text;
using detail::untouched;
using sqlite::connection;
using sqlite::is_damage;
using sqlite::query_column;
using sqlite::statement;

namespace {

namespace fs = std::filesystem;

constexpr int busy_timeout_ms = 5000;
constexpr int min_sqlite_version = 3037000;  // STRICT tables

// The schema as version 1 wrote it; a new store applies it and then each upgrade below, so
// a table is declared once and a new file and an upgraded one are the same. STRICT tables make
// SQLite check the column types; times are milliseconds since the epoch; hash is the SHA-256
// of a token, never the token.
constexpr const char* schema_v1_sql = R"sql(
CREATE TABLE meta (schema_version INTEGER NOT NULL) STRICT;
CREATE TABLE kill_switch (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  engaged INTEGER NOT NULL CHECK (engaged IN (0, 1)),
  reason TEXT NOT NULL,
  actor TEXT NOT NULL,
  at_ms INTEGER NOT NULL
) STRICT;
CREATE TABLE sessions (
  id TEXT PRIMARY KEY NOT NULL,
  job TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('active', 'ended', 'killed')),
  end_reason TEXT NOT NULL,
  ended_ms INTEGER NOT NULL,
  seq INTEGER NOT NULL CHECK (seq >= 0)
) STRICT;
CREATE TABLE tokens (
  session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  id TEXT NOT NULL,
  ord INTEGER NOT NULL,
  hash BLOB NOT NULL CHECK (length(hash) = 32),
  created_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL,
  revoked INTEGER NOT NULL CHECK (revoked IN (0, 1)),
  revoked_reason TEXT NOT NULL,
  expiry_reported INTEGER NOT NULL CHECK (expiry_reported IN (0, 1)),
  PRIMARY KEY (session_id, id)
) STRICT, WITHOUT ROWID;
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  ts_ms INTEGER NOT NULL,
  type TEXT NOT NULL,
  session TEXT NOT NULL,
  json TEXT NOT NULL
) STRICT;
CREATE INDEX events_ts ON events (ts_ms);
INSERT INTO meta (schema_version) VALUES (1);
)sql";

// From version 1 to 2: the last measured kill of each scope. Additive, in one transaction.
constexpr const char* migrate_1_to_2_sql = R"sql(
CREATE TABLE kill_timings (
  scope TEXT PRIMARY KEY NOT NULL CHECK (scope IN ('network', 'session')),
  elapsed_us INTEGER NOT NULL CHECK (elapsed_us >= 0),
  connections_closed INTEGER NOT NULL CHECK (connections_closed >= 0),
  at_ms INTEGER NOT NULL
) STRICT;
UPDATE meta SET schema_version = 2;
)sql";

/// mkdir -p, the last component 0700. Leaves the mode of an existing directory as it is.
bool make_dir(const std::string& dir, std::string& error) {
    fs::path p = fs::path(dir).lexically_normal();
    if (!p.has_filename() && p.has_parent_path() && p.parent_path() != p) {
        p = p.parent_path();  // "a/b/" -> "a/b"
    }
    std::error_code ec;
    if (p.has_parent_path()) {
        fs::create_directories(p.parent_path(), ec);
        if (ec) {
            error = "cannot create state directory " + dir + ": " + ec.message();
            return false;
        }
    }
    if (::mkdir(p.c_str(), 0700) != 0 && errno != EEXIST) {
        error = "cannot create state directory " + dir + ": " + errno_text(errno);
        return false;
    }
    if (!fs::is_directory(p, ec)) {
        error = "state path " + dir + " is not a directory";
        return false;
    }
    return true;
}

/// 0, or the errno of the failed open or fsync.
int fsync_path(const std::string& path, int flags) {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
    if (fd < 0) {
        return errno;
    }
    const int err = ::fsync(fd) == 0 ? 0 : errno;
    ::close(fd);
    return err;
}

void remove_with_companions(const std::string& path) {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
        ::unlink((path + suffix).c_str());
    }
}

std::uint32_t be32(const unsigned char* p) {
    return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
           std::uint32_t{p[3]};
}

/// Checks an existing database file before SQLite sees it, for what SQLite would not report:
/// a file too short for its header (SQLite takes it for an empty database), a file of another
/// kind, and a file shorter than its header says (SQLite reads the missing pages as zeros).
bool check_file(const std::string& path, std::string& error) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        error = "cannot read state store " + path + ": " + errno_text(errno);
        return false;
    }
    struct stat st {};
    std::array<unsigned char, 100> header{};
    ssize_t got = -1;
    const bool stat_ok = ::fstat(fd, &st) == 0;
    const int stat_errno = errno;
    if (stat_ok && S_ISREG(st.st_mode)) {
        got = ::pread(fd, header.data(), header.size(), 0);
    }
    const int read_errno = errno;
    ::close(fd);
    if (!stat_ok) {
        error = "cannot read state store " + path + ": " + errno_text(stat_errno);
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        error = "state store " + path + " is not a regular file";
        return false;
    }
    if (got < 0) {
        error = "cannot read state store " + path + ": " + errno_text(read_errno);
        return false;
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const std::string where = "state store " + path;
    const std::string bytes = std::to_string(size) + " bytes";
    static constexpr char magic[] = "SQLite format 3";  // 16 bytes with the NUL
    const auto n = static_cast<std::size_t>(got);
    if (std::memcmp(header.data(), magic, std::min(n, sizeof magic)) != 0) {
        error = where + " is not a SQLite database" + std::string(untouched);
        return false;
    }
    if (n < header.size()) {
        error = where + " is truncated (" + bytes + ", shorter than a SQLite header)" +
                std::string(untouched);
        return false;
    }
    std::uint64_t page_size = (std::uint64_t{header[16]} << 8) | header[17];
    if (page_size == 1) {
        page_size = 65536;
    }
    if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0) {
        error = where + " is corrupt (invalid page size in its header)" + std::string(untouched);
        return false;
    }
    if (size < page_size || size % page_size != 0) {
        error = where + " is truncated (" + bytes + " is not a whole number of " +
                std::to_string(page_size) + "-byte pages)" + std::string(untouched);
        return false;
    }
    // The page count in the header is valid when "version-valid-for" equals the change
    // counter. With frames in the WAL the file may lag its header, so SQLite judges then.
    const std::uint64_t pages = be32(&header[28]);
    const bool pages_valid = be32(&header[92]) == be32(&header[24]);
    struct stat wal {};
    const bool wal_has_frames = ::stat((path + "-wal").c_str(), &wal) == 0 &&
                                wal.st_size > 32;  // 32: WAL header
    if (pages_valid && !wal_has_frames && size / page_size < pages) {
        error = where + " is truncated (" + bytes + ", its header says " + std::to_string(pages) +
                " pages of " + std::to_string(page_size) + " bytes)" + std::string(untouched);
        return false;
    }
    return true;
}

/// Builds a new, complete store at `path` (which does not exist): under a temporary name, then
/// renamed into place without replacing anything, so a crash never leaves a partial cordon.db.
/// A WAL or journal left from a database that is gone would be replayed into the new one: an
/// empty one is removed, one with content is an error.
bool create_store(const std::string& dir, const std::string& path, std::string& error) {
    for (const char* suffix : {"-wal", "-journal"}) {
        const std::string leftover = path + suffix;
        struct stat st {};
        if (::stat(leftover.c_str(), &st) != 0) {
            continue;
        }
        if (!S_ISREG(st.st_mode) || st.st_size > 0) {
            error = "state store " + path + " is missing but " + leftover +
                    " is there: the database was moved or deleted without it; move it away "
                    "too (it was left untouched)";
            return false;
        }
        ::unlink(leftover.c_str());
    }
    ::unlink((path + "-shm").c_str());

    const std::string tmp = path + ".init-" + std::to_string(::getpid());
    remove_with_companions(tmp);
    const int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        error = "cannot create state store " + tmp + ": " + errno_text(errno);
        return false;
    }
    ::close(fd);

    const auto fail = [&](const std::string& what) {
        error = "cannot create state store " + path + ": " + what;
        remove_with_companions(tmp);
        return false;
    };
    {
        connection db;
        int rc = db.open(tmp);
        if (rc != SQLITE_OK) {
            return fail("open: " + db.message(rc));
        }
        // The schema is written with a rollback journal, then the file switches to WAL (a
        // persistent property of the file); closing leaves no WAL behind.
        if ((rc = db.exec("PRAGMA synchronous=FULL")) != SQLITE_OK ||
            (rc = db.exec("BEGIN IMMEDIATE")) != SQLITE_OK ||
            (rc = db.exec(schema_v1_sql)) != SQLITE_OK ||
            (rc = db.exec(migrate_1_to_2_sql)) != SQLITE_OK ||
            (rc = db.exec("COMMIT")) != SQLITE_OK) {
            return fail("schema: " + db.message(rc));
        }
        std::vector<std::string> mode;
        if ((rc = query_column(db, "PRAGMA journal_mode=WAL", mode)) != SQLITE_OK) {
            return fail("journal_mode: " + db.message(rc));
        }
        if (mode != std::vector<std::string>{"wal"}) {
            return fail("SQLite refused WAL mode");
        }
        if ((rc = db.close()) != SQLITE_OK) {
            return fail("close: " + db.message(rc));
        }
    }
    struct stat wal {};
    if (::stat((tmp + "-wal").c_str(), &wal) == 0 && wal.st_size > 0) {
        return fail("the new database was not checkpointed");
    }
    if (const int err = fsync_path(tmp, O_RDONLY); err != 0) {
        return fail("fsync: " + errno_text(err));
    }
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) != 0) {
        const int err = errno;
        remove_with_companions(tmp);
        if (err == EEXIST) {
            return true;  // another process made it first: open that one
        }
        error = "cannot create state store " + path + ": rename: " + errno_text(err);
        return false;
    }
    remove_with_companions(tmp);  // the -shm, if any
    if (const int err = fsync_path(dir, O_RDONLY | O_DIRECTORY); err != 0) {
        error = "cannot create state store " + path + ": fsync of " + dir + ": " + errno_text(err);
        return false;
    }
    return true;
}

}  // namespace

bool state_store::impl::validate_and_configure(std::string& error) {
    const std::string where = "state store " + path;
    int rc = SQLITE_OK;
    // Until the file has passed, closing must not write to it (no checkpoint on close).
    if ((rc = db.checkpoint_on_close(false)) != SQLITE_OK ||
        (rc = db.busy_timeout(busy_timeout_ms)) != SQLITE_OK) {
        error = fail("configure", rc);
        return false;
    }
    // Before the first access in WAL mode: exclusive locking keeps the WAL index in this
    // process's heap, so there is no -shm file mapped into memory, whose failure (a full,
    // immutable or truncated file) would be a SIGBUS, not an error code; and no file is
    // mapped at all (mmap_size 0). It also keeps a second cordon off the same store.
    {
        std::vector<std::string> mode;
        if ((rc = query_column(db, "PRAGMA locking_mode=EXCLUSIVE", mode)) != SQLITE_OK ||
            mode != std::vector<std::string>{"exclusive"}) {
            error = where + ": locking_mode=EXCLUSIVE did not take";
            return false;
        }
        if ((rc = db.exec("PRAGMA mmap_size=0")) != SQLITE_OK) {
            error = fail("configure", rc);
            return false;
        }
    }
    std::vector<std::string> rows;
    rc = query_column(db, "PRAGMA quick_check", rows);
    if (is_damage(rc)) {
        error = where + " is corrupt: " + db.message(rc) + std::string(untouched);
        return false;
    }
    if (rc != SQLITE_OK) {
        error = fail("cannot read it (PRAGMA quick_check)", rc);
        return false;
    }
    if (rows != std::vector<std::string>{"ok"}) {
        std::string found;
        for (std::size_t i = 0; i < rows.size() && i < 3; ++i) {
            found += (i == 0 ? "" : "; ") + rows[i];
        }
        error = where + " is corrupt (PRAGMA quick_check: " + found + ")" + std::string(untouched);
        return false;
    }

    rows.clear();
    rc = query_column(db, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name = 'meta'",
                      rows);
    if (rc != SQLITE_OK) {
        error = fail("cannot read its schema", rc);
        return false;
    }
    if (rows.empty()) {
        error = where + " is a SQLite database but not a cordon state store (no meta table)" +
                std::string(untouched);
        return false;
    }
    statement version;
    if ((rc = version.prepare(db.get(), "SELECT schema_version FROM meta", false)) != SQLITE_OK) {
        error = fail("cannot read meta", rc);
        return false;
    }
    std::vector<std::int64_t> versions;
    while ((rc = version.step()) == SQLITE_ROW) {
        versions.push_back(version.is_integer(0) ? version.integer(0) : -1);
    }
    if (rc != SQLITE_DONE) {
        error = fail("cannot read meta", rc);
        return false;
    }
    if (versions.size() != 1 || versions[0] < 1) {
        error = where + " is corrupt (meta must hold one positive schema_version)" +
                std::string(untouched);
        return false;
    }
    if (versions[0] > schema_version) {
        error = where + " was written by a newer cordon (schema version " +
                std::to_string(versions[0]) + "; this build supports up to " +
                std::to_string(schema_version) +
                "); the file was left untouched: run that "
                "cordon version or a newer one";
        return false;
    }

    // Durability settings, each checked by reading it back.
    rows.clear();
    if ((rc = query_column(db, "PRAGMA journal_mode=WAL", rows)) != SQLITE_OK) {
        error = fail("cannot set WAL mode", rc);
        return false;
    }
    if (rows != std::vector<std::string>{"wal"}) {
        error = where + ": SQLite refused WAL mode";
        return false;
    }
    if ((rc = db.exec("PRAGMA synchronous=FULL")) != SQLITE_OK ||
        (rc = db.exec("PRAGMA foreign_keys=ON")) != SQLITE_OK) {
        error = fail("cannot configure", rc);
        return false;
    }
    rows.clear();
    if ((rc = query_column(db, "PRAGMA synchronous", rows)) != SQLITE_OK ||
        rows != std::vector<std::string>{"2"}) {
        error = where + ": synchronous=FULL did not take";
        return false;
    }
    rows.clear();
    if ((rc = query_column(db, "PRAGMA foreign_keys", rows)) != SQLITE_OK ||
        rows != std::vector<std::string>{"1"}) {
        error = where + ": foreign_keys=ON did not take";
        return false;
    }
    if (versions[0] < 2) {
        // Upgraded in one transaction that commits only if every statement of this build
        // then prepares: a file that is not a whole version 1 store is left as it was.
        if ((rc = db.exec("BEGIN IMMEDIATE")) != SQLITE_OK ||
            (rc = db.exec(migrate_1_to_2_sql)) != SQLITE_OK) {
            if (db.in_transaction()) {
                db.exec("ROLLBACK");
            }
            error = fail("cannot upgrade the schema from version 1 to 2", rc);
            return false;
        }
        if (!prepare_all(error)) {
            db.exec("ROLLBACK");
            return false;
        }
        if ((rc = db.exec("COMMIT")) != SQLITE_OK) {
            db.exec("ROLLBACK");
            error = fail("cannot upgrade the schema from version 1 to 2", rc);
            return false;
        }
    } else if (!prepare_all(error)) {
        return false;
    }
    if ((rc = db.checkpoint_on_close(true)) != SQLITE_OK) {
        error = fail("configure", rc);
        return false;
    }
    return true;
}

bool state_store::impl::prepare_all(std::string& error) {
    const std::pair<statement*, std::string_view> all[] = {
        {&begin, "BEGIN IMMEDIATE"},
        {&commit, "COMMIT"},
        {&rollback, "ROLLBACK"},
        {&upsert_session,
         "INSERT INTO sessions (id, job, created_ms, expires_ms, state, end_reason, ended_ms, seq) "
         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (id) DO UPDATE SET "
         "job = excluded.job, created_ms = excluded.created_ms, "
         "expires_ms = excluded.expires_ms, state = excluded.state, "
         "end_reason = excluded.end_reason, ended_ms = excluded.ended_ms, seq = excluded.seq"},
        {&delete_tokens, "DELETE FROM tokens WHERE session_id = ?1"},
        {&insert_token,
         "INSERT INTO tokens (session_id, id, ord, hash, created_ms, expires_ms, revoked, "
         "revoked_reason, expiry_reported) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"},
        {&upsert_kill,
         "INSERT INTO kill_switch (id, engaged, reason, actor, at_ms) VALUES (1, ?1, ?2, ?3, ?4) "
         "ON CONFLICT (id) DO UPDATE SET engaged = excluded.engaged, reason = excluded.reason, "
         "actor = excluded.actor, at_ms = excluded.at_ms"},
        {&insert_event, "INSERT INTO events (ts_ms, type, session, json) VALUES (?1, ?2, ?3, ?4)"},
        {&select_kill, "SELECT engaged, reason, actor, at_ms FROM kill_switch WHERE id = 1"},
        {&select_sessions,
         "SELECT id, job, created_ms, expires_ms, state, end_reason, ended_ms, seq FROM sessions "
         "ORDER BY seq, id"},
        {&select_tokens,
         "SELECT session_id, id, hash, created_ms, expires_ms, revoked, revoked_reason, "
         "expiry_reported FROM tokens ORDER BY session_id, ord"},
        {&select_last_event,
         "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0), "
         "coalesce((SELECT max(id) FROM events), 0))"},
        {&select_events, "SELECT id, ts_ms, type, session, json FROM events WHERE id > ?1 "
                         "AND (?2 = '' OR session = ?2 OR session = '') ORDER BY id LIMIT ?3"},
        {&prune_sessions, "DELETE FROM sessions WHERE state <> 'active' AND ended_ms < ?1"},
        {&prune_events, "DELETE FROM events WHERE ts_ms < ?1"},
        {&upsert_kill_timing,
         "INSERT INTO kill_timings (scope, elapsed_us, connections_closed, at_ms) "
         "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (scope) DO UPDATE SET "
         "elapsed_us = excluded.elapsed_us, connections_closed = excluded.connections_closed, "
         "at_ms = excluded.at_ms"},
        {&select_kill_timings,
         "SELECT scope, elapsed_us, connections_closed, at_ms FROM kill_timings ORDER BY scope"},
    };
    for (const auto& [st, sql] : all) {
        const int rc = st->prepare(db.get(), sql, true);
        if (rc != SQLITE_OK) {
            error = "state store " + path +
                    " does not have the expected schema: " + db.message(rc) +
                    std::string(untouched);
            return false;
        }
    }
    return true;
}

std::unique_ptr<state_store> state_store::open(const std::string& dir, std::string& error) {
    if (dir.empty()) {
        error = "state path is empty";
        return nullptr;
    }
    if (sqlite3_libversion_number() < min_sqlite_version) {
        error = std::string("state store needs SQLite 3.37 or later, found ") +
                sqlite3_libversion();
        return nullptr;
    }
    if (!make_dir(dir, error)) {
        return nullptr;
    }
    const std::string path = (fs::path(dir) / "cordon.db").string();
    std::error_code ec;
    const bool exists = fs::symlink_status(path, ec).type() != fs::file_type::not_found;
    if (ec && ec != std::errc::no_such_file_or_directory) {
        error = "cannot read state store " + path + ": " + ec.message();
        return nullptr;
    }
    if (!exists && !create_store(dir, path, error)) {
        return nullptr;
    }
    if (!check_file(path, error)) {
        return nullptr;
    }

    auto p = std::make_unique<impl>();
    p->path = path;
    const int rc = p->db.open(path);
    if (rc != SQLITE_OK) {
        error = is_damage(rc) ? "state store " + path + " is corrupt: " + p->db.message(rc) +
                                    std::string(untouched)
                              : p->fail("cannot open", rc);
        return nullptr;
    }
    if (!p->validate_and_configure(error)) {
        return nullptr;
    }
    p->remember_identity();
    p->reserve_path = path + ".reserve";
    p->make_reserve();
    return std::unique_ptr<state_store>(new state_store(std::move(p)));
}

}  // namespace cordon::proxy::control
