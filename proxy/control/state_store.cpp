// The state store's operations: sessions, kills and events written one transaction each, and read.
#include "proxy/control/state_store.hpp"
#include "common/time.hpp"

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

#include "proxy/control/sqlite.hpp"
#include "proxy/control/state_store_impl.hpp"

namespace cordon::proxy::control {

using detail::errno_text;
using sqlite::reset_on_exit;
using sqlite::statement;

namespace {

using std::chrono::milliseconds;

/// DIR/cordon.db.reserve: space held for the kills of a full disk. When a write fails for
/// want of space, the reserve is deleted and the write tried once more; it is made again
/// when there is room (state_store::check).
constexpr off_t reserve_bytes = 1 << 20;
constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();

std::int64_t to_ms(common::wall_clock::time_point t) {
    return std::chrono::floor<milliseconds>(t.time_since_epoch()).count();
}

/// False if `ms` does not fit the clock (only a damaged or foreign row does that).
bool from_ms(std::int64_t ms, common::wall_clock::time_point& out) {
    constexpr auto lo = std::chrono::duration_cast<milliseconds>(
        common::wall_clock::duration::min());
    constexpr auto hi = std::chrono::duration_cast<milliseconds>(
        common::wall_clock::duration::max());
    if (ms < lo.count() || ms > hi.count()) {
        return false;
    }
    out = common::wall_clock::time_point(
        std::chrono::duration_cast<common::wall_clock::duration>(milliseconds(ms)));
    return true;
}

}  // namespace

std::string detail::errno_text(int err) {
    return std::error_code(err, std::generic_category()).message();
}

// ---- The store ----

/// Records what `path` (and its WAL) are now; called once the file is open.
void state_store::impl::remember_identity() {
    ::stat(path.c_str(), &identity);
    have_wal_identity = ::stat((path + "-wal").c_str(), &wal_identity) == 0;
}

/// False, with `error` (and `broken`) set, when `path` no longer names the file opened:
/// compared by device and inode, never by name.
bool state_store::impl::check_identity(std::string& error) {
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
        what = path + " was replaced by another file (inode " + std::to_string(identity.st_ino) +
               ", now " + std::to_string(now.st_ino) + ")";
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
    broken = "state store " + what +
             ": what cordon writes now reaches no file a "
             "restart reads, so nothing is persisted; restart cordon to open the store "
             "at " +
             path + " again";
    error = broken;
    return false;
}

/// Deletes the reserve file: true if there was one (space was freed).
bool state_store::impl::release_reserve() {
    if (::unlink(reserve_path.c_str()) != 0) {
        return false;
    }
    reserve_used = true;
    return true;
}

/// Makes the reserve file if it is missing and there is room; best effort.
void state_store::impl::make_reserve() {
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

state_store::state_store(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
state_store::~state_store() = default;

const std::string& state_store::path() const noexcept { return impl_->path; }

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
            error = "state store " + impl_->path +
                    " has an invalid row (corrupt?): "
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
