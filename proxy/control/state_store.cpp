#include "common/time.hpp"
#include "proxy/control/state_store.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <system_error>
#include <unordered_map>
#include <utility>

namespace cordon::proxy::control {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr int busy_timeout_ms = 5000;
/// DIR/cordon.db.reserve: space held for the kills of a full disk. When a write fails for
/// want of space, the reserve is deleted and the write tried once more; it is made again
/// when there is room (state_store::check).
constexpr off_t reserve_bytes = 1 << 20;
constexpr int min_sqlite_version = 3037000;  // STRICT tables
constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();

/// Left on every message about a damaged file: cordon never repairs or replaces it.
constexpr std::string_view untouched =
    "; the file was left untouched: restore a backup, or move it away to start with an empty "
    "store";

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

std::int64_t to_ms(common::wall_clock::time_point t) {
    return std::chrono::floor<milliseconds>(t.time_since_epoch()).count();
}

/// False if `ms` does not fit the clock (only a damaged or foreign row does that).
bool from_ms(std::int64_t ms, common::wall_clock::time_point& out) {
    constexpr auto lo = std::chrono::duration_cast<milliseconds>(common::wall_clock::duration::min());
    constexpr auto hi = std::chrono::duration_cast<milliseconds>(common::wall_clock::duration::max());
    if (ms < lo.count() || ms > hi.count()) {
        return false;
    }
    out =
        common::wall_clock::time_point(std::chrono::duration_cast<common::wall_clock::duration>(milliseconds(ms)));
    return true;
}

std::string errno_text(int err) {
    return std::error_code(err, std::generic_category()).message();
}

/// True for the result codes that mean the file's content is damaged.
bool is_damage(int rc) {
    const int primary = rc & 0xff;
    return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

// ---- A tiny RAII wrapper: every raw sqlite3 call of this file is in these two classes. ----

/// One prepared statement. Binds record their first failure, which step() then returns, so a
/// sequence of binds is checked once. reset() also clears the bindings, so bound text is never
/// referenced after the caller's strings are gone (they are bound without a copy).
class statement {
public:
    statement() = default;
    ~statement() { sqlite3_finalize(stmt_); }
    statement(const statement&) = delete;
    statement& operator=(const statement&) = delete;

    int prepare(sqlite3* db, std::string_view sql, bool persistent) {
        sqlite3_finalize(stmt_);
        stmt_ = nullptr;
        return sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                  persistent ? SQLITE_PREPARE_PERSISTENT : 0, &stmt_, nullptr);
    }

    void bind(int i, std::int64_t v) { note(sqlite3_bind_int64(stmt_, i, v)); }
    void bind(int i, std::string_view v) {
        // A null pointer would bind SQL NULL; the empty string is "".
        note(sqlite3_bind_text64(stmt_, i, v.empty() ? "" : v.data(), v.size(), nullptr,
                                 SQLITE_UTF8));
    }
    void bind_blob(int i, const void* data, std::size_t size) {
        note(sqlite3_bind_blob64(stmt_, i, data, size, nullptr));
    }

    /// SQLITE_ROW, SQLITE_DONE, or an error code (a failed bind included).
    int step() { return bind_rc_ != SQLITE_OK ? bind_rc_ : sqlite3_step(stmt_); }

    void reset() {
        sqlite3_reset(stmt_);  // its code repeats the step's, already handled
        sqlite3_clear_bindings(stmt_);
        bind_rc_ = SQLITE_OK;
    }

    std::int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
    bool is_integer(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_INTEGER; }
    std::string text(int col) const {
        const auto* p = sqlite3_column_text(stmt_, col);
        const int n = sqlite3_column_bytes(stmt_, col);
        return p == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(p),
                                                          static_cast<std::size_t>(n));
    }
    /// False unless the column is a blob of exactly out.size() bytes.
    bool hash(int col, secret_hash& out) const {
        if (sqlite3_column_type(stmt_, col) != SQLITE_BLOB) {
            return false;
        }
        const void* p = sqlite3_column_blob(stmt_, col);
        if (p == nullptr || sqlite3_column_bytes(stmt_, col) != static_cast<int>(out.size())) {
            return false;
        }
        std::memcpy(out.data(), p, out.size());
        return true;
    }

private:
    void note(int rc) {
        if (bind_rc_ == SQLITE_OK && rc != SQLITE_OK) {
            bind_rc_ = rc;
        }
    }

    sqlite3_stmt* stmt_ = nullptr;
    int bind_rc_ = SQLITE_OK;
};

/// Resets a statement when the scope ends, whatever the path: a statement left mid-step would
/// hold a read transaction and keep the WAL from being checkpointed.
class reset_on_exit {
public:
    explicit reset_on_exit(statement& s) : s_(s) {}
    ~reset_on_exit() { s_.reset(); }
    reset_on_exit(const reset_on_exit&) = delete;
    reset_on_exit& operator=(const reset_on_exit&) = delete;

private:
    statement& s_;
};

/// One connection, closed on destruction.
class connection {
public:
    connection() = default;
    ~connection() { sqlite3_close_v2(db_); }
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    /// Opens an existing file (never creates one), with extended result codes.
    int open(const std::string& path) {
        sqlite3_close_v2(db_);
        db_ = nullptr;
        return sqlite3_open_v2(path.c_str(), &db_,
                               SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
                               nullptr);
    }
    /// Closes now; SQLITE_OK or the reason it could not (statements must be finalized first).
    int close() {
        const int rc = sqlite3_close(db_);
        if (rc == SQLITE_OK) {
            db_ = nullptr;
        }
        return rc;
    }

    sqlite3* get() const noexcept { return db_; }

    /// "message (code N)" for the last error on this connection, or the generic text of `rc`.
    std::string message(int rc) const {
        const char* msg = db_ != nullptr && sqlite3_extended_errcode(db_) == rc
                              ? sqlite3_errmsg(db_)
                              : sqlite3_errstr(rc);
        return std::string(msg) + " (code " + std::to_string(rc) + ")";
    }

    int busy_timeout(int ms) { return sqlite3_busy_timeout(db_, ms); }
    /// Whether closing the connection may checkpoint the WAL into the database file.
    int checkpoint_on_close(bool on) {
        return sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, on ? 0 : 1, nullptr);
    }
    /// Runs statements that take no parameters and return no rows (the schema).
    int exec(const char* sql) { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr); }
    std::int64_t last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
    bool in_transaction() const { return sqlite3_get_autocommit(db_) == 0; }

private:
    sqlite3* db_ = nullptr;
};

/// Runs `sql` once and collects the first column of every row as text.
int query_column(connection& db, std::string_view sql, std::vector<std::string>& rows) {
    statement st;
    int rc = st.prepare(db.get(), sql, false);
    if (rc != SQLITE_OK) {
        return rc;
    }
    while ((rc = st.step()) == SQLITE_ROW) {
        rows.push_back(st.text(0));
    }
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

// ---- Files ----

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
    return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
           (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
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
    const bool wal_has_frames =
        ::stat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 32;  // 32: WAL header
    if (pages_valid && !wal_has_frames && size / page_size < pages) {
        error = where + " is truncated (" + bytes + ", its header says " +
                std::to_string(pages) + " pages of " + std::to_string(page_size) + " bytes)" +
                std::string(untouched);
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
        error = "cannot create state store " + path + ": fsync of " + dir + ": " +
                errno_text(err);
        return false;
    }
    return true;
}

}  // namespace

// ---- The store ----

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
    std::string broken;      // why the store can never be trusted again in this process
    std::string last_error;  // the last write's failure; empty after a success
    int last_rc = SQLITE_OK;  // of the last statement run()
    bool reserve_used = false;
    connection db;  // declared before the statements: finalized first, closed last
    statement begin, commit, rollback;
    statement upsert_session, delete_tokens, insert_token, upsert_kill, insert_event;
    statement select_kill, select_sessions, select_tokens, select_last_event, select_events;
    statement prune_sessions, prune_events;
    statement upsert_kill_timing, select_kill_timings;

    std::string fail(std::string_view what, int rc) const {
        return "state store " + path + ": " + std::string(what) + ": " + db.message(rc);
    }

    /// Runs a statement that returns no rows, then resets it.
    bool run(statement& st, std::string_view what, std::string& error) {
        const reset_on_exit reset(st);
        const int rc = st.step();
        last_rc = rc;
        if (rc != SQLITE_DONE) {
            error = fail(what, rc);
            return false;
        }
        return true;
    }

    /// Records what `path` (and its WAL) are now; called once the file is open.
    void remember_identity() {
        ::stat(path.c_str(), &identity);
        have_wal_identity = ::stat((path + "-wal").c_str(), &wal_identity) == 0;
    }

    /// False, with `error` (and `broken`) set, when `path` no longer names the file opened:
    /// compared by device and inode, never by name.
    bool check_identity(std::string& error) {
        if (!broken.empty()) {
            error = broken;
            return false;
        }
        const auto same = [](const struct stat& a, const struct stat& b) {
            return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
        };
        struct stat now {};
        std::string what;
        if (::stat(path.c_str(), &now) != 0) {
            what = path + " is gone (" + errno_text(errno) + ")";
        } else if (!same(now, identity)) {
            what = path + " was replaced by another file (inode " +
                   std::to_string(identity.st_ino) + ", now " + std::to_string(now.st_ino) + ")";
        } else if (!have_wal_identity) {
            // The WAL is made by the first write; from then on it must stay the same file.
            have_wal_identity = ::stat((path + "-wal").c_str(), &wal_identity) == 0;
        } else {
            const std::string wal = path + "-wal";
            if (::stat(wal.c_str(), &now) != 0) {
                what = wal + " is gone (" + errno_text(errno) + ")";
            } else if (!same(now, wal_identity)) {
                what = wal + " was replaced by another file";
            }
        }
        if (what.empty()) {
            return true;
        }
        broken = "state store " + what + ": what cordon writes now reaches no file a "
                 "restart reads, so nothing is persisted; restart cordon to open the store "
                 "at " + path + " again";
        error = broken;
        return false;
    }

    /// Deletes the reserve file: true if there was one (space was freed).
    bool release_reserve() {
        if (::unlink(reserve_path.c_str()) != 0) {
            return false;
        }
        reserve_used = true;
        return true;
    }

    /// Makes the reserve file if it is missing and there is room; best effort.
    void make_reserve() {
        const int fd = ::open(reserve_path.c_str(),
                              O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            if (errno == EEXIST) {
                reserve_used = false;
            }
            return;
        }
        const bool ok = ::posix_fallocate(fd, 0, reserve_bytes) == 0 && ::fsync(fd) == 0;
        ::close(fd);
        if (!ok) {
            ::unlink(reserve_path.c_str());  // no room yet: try again later
            return;
        }
        reserve_used = false;
    }

    /// One write transaction: `body` runs between BEGIN IMMEDIATE and COMMIT. A failure for
    /// want of space is tried once more after the reserve is released. True only when the
    /// commit succeeded and the file is still the one opened (check_identity).
    template <class Body>
    bool write(std::string& error, Body&& body);

    bool prepare_all(std::string& error);
    bool validate_and_configure(std::string& error);

    class transaction;
};

/// One write transaction (BEGIN IMMEDIATE); rolled back unless committed.
class state_store::impl::transaction {
public:
    explicit transaction(impl& s) : s_(s) {}
    ~transaction() {
        if (begun_ && !committed_ && s_.db.in_transaction()) {
            const reset_on_exit reset(s_.rollback);
            s_.rollback.step();  // nothing better to do if even the rollback fails
        }
    }
    transaction(const transaction&) = delete;
    transaction& operator=(const transaction&) = delete;

    bool begin(std::string& error) { return begun_ = s_.run(s_.begin, "begin", error); }
    bool commit(std::string& error) { return committed_ = s_.run(s_.commit, "commit", error); }

private:
    impl& s_;
    bool begun_ = false;
    bool committed_ = false;
};

template <class Body>
bool state_store::impl::write(std::string& error, Body&& body) {
    if (!broken.empty()) {
        error = broken;
        return false;  // never write into a file no restart reads
    }
    for (int attempt = 0;; ++attempt) {
        last_rc = SQLITE_OK;
        bool ok = false;
        {
            transaction txn(*this);
            ok = txn.begin(error) && body(error) && txn.commit(error);
        }
        if (ok) {
            break;
        }
        if (attempt == 0 && (last_rc & 0xff) == SQLITE_FULL && release_reserve()) {
            continue;  // the disk is full: the reserve makes room for this write
        }
        last_error = error;
        return false;
    }
    if (!check_identity(error)) {
        last_error = error;
        return false;
    }
    last_error.clear();
    return true;
}

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
                std::to_string(schema_version) + "); the file was left untouched: run that "
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
        {&select_events,
         "SELECT id, ts_ms, type, session, json FROM events WHERE id > ?1 "
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
            error = "state store " + path + " does not have the expected schema: " +
                    db.message(rc) + std::string(untouched);
            return false;
        }
    }
    return true;
}

state_store::state_store(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
state_store::~state_store() = default;

const std::string& state_store::path() const noexcept { return impl_->path; }

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

bool state_store::save_session(const stored_session& s, std::string& error) {
    if (s.seq > static_cast<std::uint64_t>(int64_max)) {
        error = "state store " + impl_->path + ": session seq out of range";
        return false;
    }
    std::lock_guard lock(impl_->mutex);
    impl& d = *impl_;
    return d.write(error, [&](std::string& err) { return save_session_rows(d, s, err); });
}

bool state_store::save_session_rows(impl& d, const stored_session& s, std::string& error) {
    statement& up = d.upsert_session;
    up.bind(1, s.id);
    up.bind(2, s.job);
    up.bind(3, to_ms(s.created));
    up.bind(4, to_ms(s.expires_at));
    up.bind(5, to_string(s.state));
    up.bind(6, s.end_reason);
    up.bind(7, to_ms(s.ended_at));
    up.bind(8, static_cast<std::int64_t>(s.seq));
    if (!d.run(up, "save session", error)) {
        return false;
    }
    d.delete_tokens.bind(1, s.id);
    if (!d.run(d.delete_tokens, "save session tokens", error)) {
        return false;
    }
    std::int64_t ord = 0;
    for (const auto& t : s.tokens) {
        statement& ins = d.insert_token;
        ins.bind(1, s.id);
        ins.bind(2, t.id);
        ins.bind(3, ord++);
        ins.bind_blob(4, t.hash.data(), t.hash.size());
        ins.bind(5, to_ms(t.created));
        ins.bind(6, to_ms(t.expires_at));
        ins.bind(7, std::int64_t{t.revoked ? 1 : 0});
        ins.bind(8, t.revoked_reason);
        ins.bind(9, std::int64_t{t.expiry_reported ? 1 : 0});
        if (!d.run(ins, "save token", error)) {
            return false;
        }
    }
    return true;
}

bool state_store::save_kill(const kill_state& k, std::string& error) {
    std::lock_guard lock(impl_->mutex);
    impl& d = *impl_;
    return d.write(error, [&](std::string& err) {
        d.upsert_kill.bind(1, std::int64_t{k.engaged ? 1 : 0});
        d.upsert_kill.bind(2, k.reason);
        d.upsert_kill.bind(3, k.by);
        d.upsert_kill.bind(4, to_ms(k.at));
        return d.run(d.upsert_kill, "save kill state", err);
    });
}

bool state_store::save_kill_timing(const kill_timing& t, std::string& error) {
    if (t.scope != "network" && t.scope != "session") {
        error = "state store: kill timing scope must be network or session";
        return false;
    }
    std::lock_guard lock(impl_->mutex);
    impl& d = *impl_;
    const double us = t.elapsed_ms > 0 ? t.elapsed_ms * 1000 : 0;
    return d.write(error, [&](std::string& err) {
        d.upsert_kill_timing.bind(1, t.scope);
        d.upsert_kill_timing.bind(2, us < 9.2e18 ? static_cast<std::int64_t>(us) : int64_max);
        d.upsert_kill_timing.bind(
            3, static_cast<std::int64_t>(std::min<std::uint64_t>(
                   t.connections_closed, static_cast<std::uint64_t>(int64_max))));
        d.upsert_kill_timing.bind(4, to_ms(t.at));
        return d.run(d.upsert_kill_timing, "save kill timing", err);
    });
}

bool state_store::kill_timings(std::vector<kill_timing>& out, std::string& error) {
    std::lock_guard lock(impl_->mutex);
    statement& st = impl_->select_kill_timings;
    const reset_on_exit reset(st);
    std::vector<kill_timing> result;
    int rc = SQLITE_OK;
    while ((rc = st.step()) == SQLITE_ROW) {
        kill_timing t;
        t.scope = st.text(0);
        t.elapsed_ms = static_cast<double>(st.integer(1)) / 1000;
        t.connections_closed = static_cast<std::uint64_t>(std::max<std::int64_t>(st.integer(2), 0));
        if (!from_ms(st.integer(3), t.at)) {
            error = "state store " + impl_->path + " has an invalid row (corrupt?): "
                    "kill_timings.at_ms out of range";
            return false;
        }
        result.push_back(std::move(t));
    }
    if (rc != SQLITE_DONE) {
        error = impl_->fail("read kill timings", rc);
        return false;
    }
    out = std::move(result);
    return true;
}

bool state_store::append_event(stored_event& e, std::string& error) {
    std::lock_guard lock(impl_->mutex);
    impl& d = *impl_;
    std::int64_t id = 0;
    const bool ok = d.write(error, [&](std::string& err) {
        d.insert_event.bind(1, to_ms(e.ts));
        d.insert_event.bind(2, e.type);
        d.insert_event.bind(3, e.session);
        d.insert_event.bind(4, e.json);
        if (!d.run(d.insert_event, "append event", err)) {
            return false;
        }
        id = d.db.last_insert_rowid();
        return true;
    });
    if (!ok) {
        return false;
    }
    e.id = static_cast<std::uint64_t>(id);
    return true;
}

bool state_store::load(loaded& out, std::string& error) {
    std::lock_guard lock(impl_->mutex);
    impl& d = *impl_;
    const std::string where = "state store " + d.path;
    const auto invalid = [&](const std::string& what) {
        error = where + " has an invalid row (corrupt?): " + what;
        return false;
    };
    loaded result;
    impl::transaction txn(d);  // one consistent view
    if (!txn.begin(error)) {
        return false;
    }
    int rc = SQLITE_OK;
    {
        statement& st = d.select_kill;
        const reset_on_exit reset(st);
        while ((rc = st.step()) == SQLITE_ROW) {
            result.kill.engaged = st.integer(0) != 0;
            result.kill.reason = st.text(1);
            result.kill.by = st.text(2);
            if (!from_ms(st.integer(3), result.kill.at)) {
                return invalid("kill_switch.at_ms out of range");
            }
        }
        if (rc != SQLITE_DONE) {
            error = d.fail("load kill state", rc);
            return false;
        }
    }
    std::unordered_map<std::string, std::size_t> index;
    {
        statement& st = d.select_sessions;
        const reset_on_exit reset(st);
        while ((rc = st.step()) == SQLITE_ROW) {
            stored_session s;
            s.id = st.text(0);
            s.job = st.text(1);
            const std::string state = st.text(4);
            if (state == to_string(session_state::active)) {
                s.state = session_state::active;
            } else if (state == to_string(session_state::ended)) {
                s.state = session_state::ended;
            } else if (state == to_string(session_state::killed)) {
                s.state = session_state::killed;
            } else {
                return invalid("session " + s.id + " has state '" + state + "'");
            }
            s.end_reason = st.text(5);
            if (!from_ms(st.integer(2), s.created) || !from_ms(st.integer(3), s.expires_at) ||
                !from_ms(st.integer(6), s.ended_at)) {
                return invalid("session " + s.id + " has a time out of range");
            }
            if (st.integer(7) < 0) {
                return invalid("session " + s.id + " has a negative seq");
            }
            s.seq = static_cast<std::uint64_t>(st.integer(7));
            index.emplace(s.id, result.sessions.size());
            result.sessions.push_back(std::move(s));
        }
        if (rc != SQLITE_DONE) {
            error = d.fail("load sessions", rc);
            return false;
        }
    }
    {
        statement& st = d.select_tokens;
        const reset_on_exit reset(st);
        while ((rc = st.step()) == SQLITE_ROW) {
            const auto it = index.find(st.text(0));
            if (it == index.end()) {
                continue;  // a token of no session can authenticate nothing
            }
            stored_token t;
            t.id = st.text(1);
            if (!st.hash(2, t.hash)) {
                return invalid("token " + t.id + " has a hash that is not 32 bytes");
            }
            if (!from_ms(st.integer(3), t.created) || !from_ms(st.integer(4), t.expires_at)) {
                return invalid("token " + t.id + " has a time out of range");
            }
            t.revoked = st.integer(5) != 0;
            t.revoked_reason = st.text(6);
            t.expiry_reported = st.integer(7) != 0;
            result.sessions[it->second].tokens.push_back(std::move(t));
        }
        if (rc != SQLITE_DONE) {
            error = d.fail("load tokens", rc);
            return false;
        }
    }
    {
        statement& st = d.select_last_event;
        const reset_on_exit reset(st);
        rc = st.step();
        if (rc != SQLITE_ROW) {
            error = d.fail("load last event id", rc);
            return false;
        }
        result.last_event_id = static_cast<std::uint64_t>(std::max<std::int64_t>(st.integer(0), 0));
    }
    if (!txn.commit(error)) {
        return false;
    }
    out = std::move(result);
    return true;
}

std::vector<stored_event> state_store::events_after(std::uint64_t after, std::string_view session,
                                                    std::size_t limit) {
    std::vector<stored_event> out;
    if (limit == 0 || after >= static_cast<std::uint64_t>(int64_max)) {
        return out;
    }
    std::lock_guard lock(impl_->mutex);
    statement& st = impl_->select_events;
    const reset_on_exit reset(st);
    st.bind(1, static_cast<std::int64_t>(after));
    st.bind(2, session);
    st.bind(3, static_cast<std::int64_t>(
                   std::min<std::uint64_t>(limit, static_cast<std::uint64_t>(int64_max))));
    int rc = SQLITE_OK;
    while ((rc = st.step()) == SQLITE_ROW) {
        stored_event e;
        e.id = static_cast<std::uint64_t>(st.integer(0));
        if (!from_ms(st.integer(1), e.ts)) {
            e.ts = common::wall_clock::time_point{};
        }
        e.type = st.text(2);
        e.session = st.text(3);
        e.json = st.text(4);
        out.push_back(std::move(e));
    }
    if (rc != SQLITE_DONE) {
        out.clear();  // documented: empty on a read error, the caller polls again
    }
    return out;
}

bool state_store::prune(common::wall_clock::time_point before, std::string& error) {
    std::lock_guard lock(impl_->mutex);
    impl& d = *impl_;
    return d.write(error, [&](std::string& err) {
        d.prune_sessions.bind(1, to_ms(before));  // their tokens go by ON DELETE CASCADE
        if (!d.run(d.prune_sessions, "prune sessions", err)) {
            return false;
        }
        d.prune_events.bind(1, to_ms(before));
        return d.run(d.prune_events, "prune events", err);
    });
}

bool state_store::check(std::string& error) {
    std::lock_guard lock(impl_->mutex);
    impl& d = *impl_;
    if (!d.check_identity(error)) {
        return false;
    }
    if (d.reserve_used) {
        d.make_reserve();
    }
    if (!d.last_error.empty()) {
        error = d.last_error;
        return false;
    }
    return true;
}

bool state_store::reserve_used() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->reserve_used;
}

}  // namespace cordon::proxy::control
