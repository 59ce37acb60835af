// The fleet's state in etcd: writes committed by etcd, a local copy kept current by a watch,
// the instance registry, and kills confirmed by every instance (docs/fleet.md).

#include "proxy/control/etcd_store.hpp"

#include <unistd.h>

#include <boost/json.hpp>

#include <iostream>

#include "common/time.hpp"
#include "proxy/control/runtime.hpp"
#include "proxy/control/tokens.hpp"

namespace cordon::proxy::control {
namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
namespace json = boost::json;

double ms_since(steady::time_point t0) {
    return std::chrono::duration<double, std::milli>(steady::now() - t0).count();
}

std::int64_t wall_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               common::wall_clock::now().time_since_epoch())
        .count();
}

constexpr auto keepalive_every = 1s;
// Kill records and confirmations are kept a week (as the SQLite store keeps its events).
constexpr std::int64_t records_ttl_s = 7 * 24 * 3600;
// After a session's last token expires its facts stay this long (seconds), then its lease
// takes them: a little slack over the token's own expiry, counted on etcd's clock.
constexpr std::int64_t session_slack_s = 2;
// How long a write is retried while etcd is thought up (member loss, leader election). Also
// the longest the control thread waits on etcd for one write that is not the committer's.
constexpr auto write_retry_for = 2500ms;
// etcd refuses a transaction of more operations than --max-txn-ops (128 by default).
constexpr std::size_t max_txn_ops = 120;
// Writes queued for the committer at most: past it a create is refused at once (503) rather
// than queued behind an etcd that does not answer.
constexpr std::size_t max_queued_commits = 4096;
// A lease id that the committer replaces with the session's (or the records') lease.
constexpr std::int64_t lease_to_fill = -1;

}  // namespace

etcd_store::etcd_store(runtime& rt, net::io_context& control, config::cluster_spec spec,
                       std::optional<std::string> password)
    : rt_(rt),
      control_(control),
      spec_(std::move(spec)),
      writer_(etcd_client::options{spec_.endpoints, 1000ms, spec_.username, password}),
      password_(std::move(password)) {
    path_ = "etcd";
    for (const auto& e : spec_.endpoints) {
        path_ += " http://" + e.host + ":" + std::to_string(e.port);
    }
    path_ += " prefix " + spec_.prefix;
    started_ = common::wall_clock::now();
}

etcd_store::~etcd_store() {
    try {
        stop();
    } catch (const std::exception& e) {
        // Joining a thread or the last lease revoke failed: nothing left to do but say so.
        std::cerr << "cordon: cluster: stopping: " << e.what() << '\n';
    }
}

bool etcd_store::load(loaded_state& out, std::string& error) {
    std::vector<etcd::key_value> kvs;
    std::int64_t revision = 0;
    if (!writer_.range_all(spec_.prefix, kvs, revision, error)) {
        return false;
    }
    copy_.clear();
    for (auto& kv : kvs) {
        etcd::event e;
        e.kv = std::move(kv);
        copy_.apply(e, spec_.prefix);
    }
    // What is already there was confirmed by whoever was running then.
    if (!copy_.network_kill_id().empty()) {
        confirmed_.insert(copy_.network_kill_id());
    }
    out.sessions = copy_.sessions();
    for (const auto& s : out.sessions) {
        if (auto kid = copy_.session_kill_id(s.id); !kid.empty()) {
            confirmed_.insert(kid);
        }
    }
    out.kill = copy_.network();
    // Events live in memory; ids keep increasing across restarts (from the wall clock).
    next_event_id_ = static_cast<std::uint64_t>(std::max<std::int64_t>(0, wall_seconds())) *
                     1000000;
    out.last_event_id = next_event_id_;
    next_revision_.store(revision + 1);
    watch_revision_ = revision;
    loaded_ = true;
    caught_up_ = true;
    up_.store(true);
    return true;
}

bool etcd_store::name_in_use(const std::string& admin, std::string& error) {
    const auto& registry = copy_.instances();
    const auto it = registry.find(spec_.instance);
    const auto* kv = copy_.raw(fleet_keys::instance(spec_.instance));
    if (it == registry.end() || kv == nullptr) {
        return false;
    }
    const fleet_instance& other = it->second;
    // Its admin address is the one this process bound: the holder is a predecessor that died
    // without leaving (its lease not yet run out). Take its place.
    if (!admin.empty() && other.admin == admin) {
        return false;
    }
    // Otherwise: alive if its lease is being renewed (every second). Two readings of its time
    // to live, 3.5 s apart: a dead holder's has gone down by 3 s or more (or the lease is
    // gone), a live one's by 2 s at most.
    std::int64_t before = 0;
    std::int64_t after = 0;
    std::string why;
    if (!writer_.time_to_live(kv->lease, before, why)) {
        std::cerr << "cordon: cluster: the registry's lease of " << spec_.instance << ": " << why
                  << '\n';
        return false;
    }
    if (before > 0) {
        std::cerr << "cordon: cluster: instance name " << spec_.instance
                  << " is registered by another process (admin " << other.admin << ", pid "
                  << other.pid << "): checking whether it is alive (3.5 s)\n";
        std::this_thread::sleep_for(3500ms);
        if (!writer_.time_to_live(kv->lease, after, why)) {
            return false;
        }
    }
    if (before <= 0 || after <= 0 || after < before - 2) {
        return false;  // gone, or not renewed: a dead predecessor's
    }
    error = "instance name " + spec_.instance + " is in use by a live instance (admin " +
            other.admin + ", proxy " + other.proxy + ", pid " + std::to_string(other.pid) +
            ", started " + common::format_rfc3339(other.started) +
            "): give every instance its own cluster.instance (two of one name would overwrite "
            "each other's registry entry and kill confirmations)";
    return true;
}

bool etcd_store::start(const std::string& admin, const std::string& proxy, std::string& error) {
    admin_ = admin;
    proxy_ = proxy;
    if (up_.load() && name_in_use(admin, error)) {
        return false;
    }
    rt_.stats.enable_cluster();
    // The registry: this instance, under a lease that lapses when it stops renewing it;
    // written only if the name's key is still what name_in_use() saw (absent, or a dead
    // predecessor's), so two instances starting at once under one name do not both register.
    std::string why;
    const auto ttl_s = std::max<std::int64_t>(
        2, std::chrono::duration_cast<std::chrono::seconds>(spec_.instance_ttl).count());
    std::int64_t lease = 0;
    if (up_.load() && writer_.grant(ttl_s, lease, why)) {
        instance_lease_.store(lease);
        fleet_instance me{spec_.instance, admin_, proxy_, ::getpid(), started_, 0};
        const std::string k = key(fleet_keys::instance(spec_.instance));
        const auto* had = copy_.raw(fleet_keys::instance(spec_.instance));
        // The key as it is now: gone (the predecessor's lease ran out meanwhile) or still the
        // one name_in_use() judged; anything else is a new holder.
        std::vector<etcd::key_value> now;
        std::int64_t at = 0;
        std::int64_t expected = 0;
        if (writer_.range_all(k, now, at, why)) {
            for (const auto& kv : now) {
                if (kv.key == k) {
                    expected = kv.create_revision;
                }
            }
        }
        if (expected != 0 && (had == nullptr || had->create_revision != expected)) {
            expected = -1;  // registered by another instance since: the txn fails below
        }
        std::vector<etcd::txn_op> ops{etcd::txn_op{false, k, instance_value(me), lease}};
        bool took = false;
        etcd::header h;
        if (!writer_.txn({etcd::txn_compare{k, expected}}, ops, took, h, why)) {
            std::cerr << "cordon: cluster: registering " << spec_.instance << ": " << why << '\n';
        } else if (!took) {
            writer_.revoke(lease, why);
            instance_lease_.store(0);
            error = "instance name " + spec_.instance +
                    " was registered by another instance just now: give every instance its "
                    "own cluster.instance";
            return false;
        } else {
            apply_written(ops, h);
        }
    } else if (up_.load()) {
        std::cerr << "cordon: cluster: the instance lease: " << why << '\n';
    }
    rt_.stats.set_cluster_instances(copy_.instances().size());
    rt_.stats.set_cluster_store_up(serving());
    watch_ = std::thread([this] { watch_thread(); });
    keepalive_ = std::thread([this] { keepalive_thread(); });
    committer_ = std::thread([this] { committer_thread(); });
    return true;
}

void etcd_store::stop() {
    if (stopping_.exchange(true)) {
        return;
    }
    { std::lock_guard lock(stop_mu_); }
    stop_cv_.notify_all();
    { std::lock_guard lock(commit_mu_); }
    commit_cv_.notify_all();
    if (committer_.joinable()) {
        committer_.join();  // what was queued fails (posted to the control thread)
    }
    net::post(watch_ioc_, [this] { drop_watch(); });
    if (watch_.joinable()) {
        watch_.join();
    }
    if (keepalive_.joinable()) {
        keepalive_.join();
    }
    // Leave the registry now rather than after the lease (a clean stop).
    if (const auto lease = instance_lease_.exchange(0); lease != 0 && up_.load()) {
        std::string error;
        writer_.revoke(lease, error);
    }
}

template <class Call>
bool etcd_store::retrying(etcd_client& client, Call&& call, std::string& error) {
    // Retried for a bounded time: a member lost mid-call, or a leader election (about a second
    // in a 3-member cluster), must not fail a kill's write. Every call is idempotent. The
    // client is capped at the deadline: a call to a member that hangs ends there too.
    const auto deadline = steady::now() + write_retry_for;
    client.cap(deadline);
    struct uncap {
        etcd_client& c;
        ~uncap() { c.cap({}); }
    } const uncapped{client};
    for (int attempt = 0;; ++attempt) {
        if (call()) {
            return true;
        }
        if (!up_.load() || steady::now() + 50ms > deadline) {
            return false;
        }
        if (attempt == 0) {
            std::cerr
                << "cordon: cluster: " << error << " (retrying for "
                << std::chrono::duration_cast<std::chrono::milliseconds>(write_retry_for).count()
                << " ms)\n";
        }
        std::this_thread::sleep_for(50ms);
    }
}

bool etcd_store::write(std::vector<etcd::txn_op> ops, std::string& error) {
    if (!up_.load()) {
        error = "etcd is unreachable (" + spec_.prefix + "); kept to be written again";
        return false;
    }
    bool ok = false;
    etcd::header h;
    if (!retrying(
            writer_, [&] { return writer_.txn({}, ops, ok, h, error); }, error)) {
        return false;
    }
    if (!ok) {
        error = "etcd: the transaction was not applied";
        return false;
    }
    apply_written(ops, h);
    return true;
}

void etcd_store::apply_written(std::vector<etcd::txn_op>& ops, const etcd::header& h) {
    // Applied here at once, at the revision etcd gave it; the watch's echo then changes
    // nothing. Unless the watch got there first (a committer's write: its answer and the watch
    // race to the control thread): then the copy holds this and maybe newer, so it is left.
    if (watch_revision_ >= h.revision) {
        return;
    }
    for (auto& op : ops) {
        etcd::event e;
        e.deleted = op.is_delete;
        e.kv.key = std::move(op.key);
        e.kv.value = std::move(op.value);
        e.kv.lease = op.lease;
        e.kv.mod_revision = h.revision;
        if (const auto* had = copy_.raw(std::string_view(e.kv.key).substr(spec_.prefix.size()))) {
            e.kv.create_revision = had->create_revision;
        } else {
            e.kv.create_revision = h.revision;
        }
        copy_.apply(e, spec_.prefix);
    }
}

struct etcd_store::commit {
    explicit commit(const net::any_io_executor& ex) : done(ex) {}
    std::vector<etcd::txn_op> ops;
    lease_kind lease = lease_kind::none;
    std::int64_t expiry_s = 0;  // lease_kind::session: the expiry second
    // Set by the committer thread; read on the control thread once `finished`.
    bool ok = false;
    std::string error;
    etcd::header h;
    bool finished = false;   // control thread
    net::steady_timer done;  // control thread: cancelled when finished
};

awaitable<bool> etcd_store::commit_async(std::vector<etcd::txn_op> ops, lease_kind lease,
                                         std::int64_t expiry_s, std::string& error) {
    if (!up_.load() || !committer_.joinable()) {
        error = "etcd is unreachable (" + spec_.prefix + ")";
        co_return false;
    }
    auto c = std::make_shared<commit>(co_await net::this_coro::executor);
    c->ops = std::move(ops);
    c->lease = lease;
    c->expiry_s = expiry_s;
    c->done.expires_at(steady::time_point::max());
    {
        std::lock_guard lock(commit_mu_);
        if (commits_.size() >= max_queued_commits || stopping_.load()) {
            error = "etcd: " + std::to_string(commits_.size()) +
                    " writes already queued (etcd is slow or hangs)";
            co_return false;
        }
        commits_.push_back(c);
    }
    commit_cv_.notify_one();
    // The committer's answer is posted to this (the control) thread, so it cannot come between
    // the push above and this wait.
    while (!c->finished) {
        auto [ec] = co_await c->done.async_wait(use_nothrow);
        (void)ec;
    }
    if (!c->ok) {
        error = c->error;
        co_return false;
    }
    co_return true;
}

void etcd_store::committer_thread() {
    etcd_client client(writer_.settings());
    std::map<std::int64_t, std::int64_t> session_leases;  // expiry second -> lease id
    std::int64_t records = 0;
    auto records_at = steady::now();
    for (;;) {
        std::vector<std::shared_ptr<commit>> batch;
        {
            std::unique_lock lock(commit_mu_);
            commit_cv_.wait(lock, [this] { return stopping_.load() || !commits_.empty(); });
            if (stopping_.load()) {
                batch.assign(commits_.begin(), commits_.end());
                commits_.clear();
            }
            // Every write that queued while the last transaction was in flight, up to what
            // one transaction may carry.
            std::size_t n = 0;
            while (!commits_.empty() &&
                   (batch.empty() || n + commits_.front()->ops.size() <= max_txn_ops)) {
                n += commits_.front()->ops.size();
                batch.push_back(std::move(commits_.front()));
                commits_.pop_front();
            }
        }
        if (batch.empty()) {
            return;  // stopping, nothing left
        }
        bool ok = !stopping_.load() && up_.load();
        std::string error = stopping_.load() ? "cordon is stopping"
                                             : "etcd is unreachable (" + spec_.prefix + ")";
        // The leases the batch needs: one per expiry second (shared by the sessions created
        // together), the records' one renewed daily.
        const std::int64_t now_s = wall_seconds();
        session_leases.erase(session_leases.begin(), session_leases.lower_bound(now_s));
        std::vector<etcd::txn_op> ops;
        for (const auto& c : batch) {
            if (!ok) {
                break;
            }
            std::int64_t lease = 0;
            if (c->lease == lease_kind::session) {
                if (const auto it = session_leases.find(c->expiry_s); it != session_leases.end()) {
                    lease = it->second;
                } else {
                    const std::int64_t ttl = std::max<std::int64_t>(1, c->expiry_s - now_s) +
                                             session_slack_s;
                    ok = retrying(
                        client, [&] { return client.grant(ttl, lease, error); }, error);
                    session_leases[c->expiry_s] = lease;
                }
            } else if (c->lease == lease_kind::records) {
                if (records == 0 || steady::now() - records_at > 24h) {
                    ok = retrying(
                        client, [&] { return client.grant(records_ttl_s, records, error); }, error);
                    records_at = steady::now();
                }
                lease = records;
            }
            for (auto& op : c->ops) {
                if (op.lease == lease_to_fill) {
                    op.lease = lease;
                }
                ops.push_back(op);
            }
        }
        if (!ok) {
            session_leases.clear();  // a failed grant leaves nothing to reuse
            records = 0;
        }
        etcd::header h;
        if (ok) {
            bool applied = false;
            ok = retrying(
                client, [&] { return client.txn({}, ops, applied, h, error); }, error);
            if (ok && !applied) {
                ok = false;
                error = "etcd: the transaction was not applied";
            }
        }
        // Each write's outcome, on the control thread (the copy is its own).
        net::post(control_, [this, batch = std::move(batch), ok, error, h]() mutable {
            for (auto& c : batch) {
                c->ok = ok;
                c->error = error;
                c->h = h;
                if (ok) {
                    apply_written(c->ops, h);
                }
                c->finished = true;
                c->done.cancel();
            }
        });
    }
}

std::int64_t etcd_store::lease_for(common::wall_clock::time_point expires_at, std::string& error) {
    const std::int64_t now_s = wall_seconds();
    const std::int64_t exp_s =
        std::chrono::duration_cast<std::chrono::seconds>(expires_at.time_since_epoch()).count() + 1;
    // One lease per expiry second: sessions created together share it.
    if (const auto it = leases_.find(exp_s); it != leases_.end()) {
        return it->second;
    }
    leases_.erase(leases_.begin(), leases_.lower_bound(now_s));
    std::int64_t id = 0;
    const std::int64_t ttl = std::max<std::int64_t>(1, exp_s - now_s) + session_slack_s;
    if (!up_.load() || !retrying(
                           writer_, [&] { return writer_.grant(ttl, id, error); }, error)) {
        if (!up_.load()) {
            error = "etcd is unreachable (" + spec_.prefix + ")";
        }
        return 0;
    }
    leases_[exp_s] = id;
    return id;
}

void etcd_store::kill_id_for(const std::string& session, const std::string& kill_id) {
    pending_kill_[session] = kill_id;
    confirmed_.insert(kill_id);  // given here: this instance confirms it itself (gather)
}

bool etcd_store::save_session(const stored_session& s, std::string& error) {
    std::vector<etcd::txn_op> ops;
    const auto* had = copy_.raw(fleet_keys::session(s.id));
    // The lease: the session's, unless a new token outlives it (then every fact moves to a
    // new, longer one, so no fact of the session outlives another).
    std::int64_t lease = had != nullptr ? had->lease : 0;
    bool moved = false;
    const auto view = copy_.session(s.id);
    if (had == nullptr || (view && s.expires_at > view->expires_at)) {
        lease = lease_for(s.expires_at, error);
        if (lease == 0) {
            return false;
        }
        moved = had != nullptr;
    }
    if (moved) {
        for (const auto* kv : copy_.session_keys(s.id)) {
            ops.push_back(etcd::txn_op{false, key(kv->key), kv->value, lease});
        }
    }
    if (had == nullptr) {
        ops.push_back(etcd::txn_op{false, key(fleet_keys::session(s.id)), session_value(s), lease});
    }
    for (const auto& t : s.tokens) {
        if (copy_.raw(fleet_keys::token(s.id, t.id)) == nullptr) {
            ops.push_back(
                etcd::txn_op{false, key(fleet_keys::token(s.id, t.id)), token_value(t), lease});
        }
        // A revocation of its own (not one that came with the session's end or kill).
        const bool by_session = s.state != session_state::active &&
                                t.revoked_reason == s.end_reason;
        if (t.revoked && !by_session && copy_.raw(fleet_keys::revoked(s.id, t.id)) == nullptr) {
            ops.push_back(etcd::txn_op{false, key(fleet_keys::revoked(s.id, t.id)),
                                       reason_value(t.revoked_reason, "", s.ended_at, ""), lease});
        }
    }
    if (s.state == session_state::killed && copy_.raw(fleet_keys::killed(s.id)) == nullptr) {
        std::string kid;
        if (const auto it = pending_kill_.find(s.id); it != pending_kill_.end()) {
            kid = it->second;
        }
        ops.push_back(etcd::txn_op{false, key(fleet_keys::killed(s.id)),
                                   reason_value(s.end_reason, "", s.ended_at, kid), lease});
    }
    // Expiry is judged on every instance (and by the lease); an end by expiry is not written.
    if (s.state == session_state::ended && s.end_reason != session_registry::expired_reason &&
        copy_.raw(fleet_keys::ended(s.id)) == nullptr &&
        copy_.raw(fleet_keys::killed(s.id)) == nullptr) {
        ops.push_back(etcd::txn_op{false, key(fleet_keys::ended(s.id)),
                                   reason_value(s.end_reason, "", s.ended_at, ""), lease});
    }
    if (ops.empty()) {
        return true;
    }
    if (!write(std::move(ops), error)) {
        return false;
    }
    pending_kill_.erase(s.id);
    return true;
}

awaitable<bool> etcd_store::save_new_session(const stored_session& s, std::string& error) {
    // The facts of a new session (s/ and its tokens), under the lease of its expiry second,
    // which the committer grants or reuses: no call to etcd on this thread.
    const std::string id = s.id;  // named: GCC 12
    std::vector<etcd::txn_op> ops;
    ops.push_back(
        etcd::txn_op{false, key(fleet_keys::session(id)), session_value(s), lease_to_fill});
    for (const auto& t : s.tokens) {
        ops.push_back(
            etcd::txn_op{false, key(fleet_keys::token(id, t.id)), token_value(t), lease_to_fill});
    }
    const std::int64_t exp_s =
        std::chrono::duration_cast<std::chrono::seconds>(s.expires_at.time_since_epoch()).count() +
        1;
    const bool ok = co_await commit_async(std::move(ops), lease_kind::session, exp_s, error);
    co_return ok;
}

bool etcd_store::save_kill(const kill_state& k, std::string& error) {
    std::string kid;
    if (const auto it = pending_kill_.find(""); it != pending_kill_.end() && k.engaged) {
        kid = it->second;
    }
    if (!write({etcd::txn_op{false, key(fleet_keys::network()), network_value(k, kid), 0}},
               error)) {
        return false;
    }
    pending_kill_.erase("");
    return true;
}

bool etcd_store::save_kill_timing(const kill_timing& t, std::string& error) {
    return write(
        {etcd::txn_op{false, key(fleet_keys::timing(spec_.instance, t.scope)), timing_value(t), 0}},
        error);
}

bool etcd_store::kill_timings(std::vector<kill_timing>& out, std::string&) {
    out.clear();
    for (const auto& scope : {"network", "session"}) {
        if (copy_.raw(fleet_keys::timing(spec_.instance, scope)) != nullptr) {
            for (const auto& t : copy_.timings()) {
                if (t.scope == scope) {
                    out.push_back(t);
                    break;
                }
            }
        }
    }
    return true;
}

bool etcd_store::append_event(stored_event& e, std::string&) {
    e.id = ++next_event_id_;
    return true;
}

bool etcd_store::check(std::string& error) {
    if (!up_.load()) {
        error = "etcd is unreachable (" + path_ + ")";
        return false;
    }
    if (!caught_up_) {
        error = "catching up with etcd";
        return false;
    }
    return true;
}

bool etcd_store::serving() const { return up_.load() && loaded_ && caught_up_; }

std::vector<fleet_instance> etcd_store::instances() const {
    std::vector<fleet_instance> out;
    for (const auto& [name, i] : copy_.instances()) {
        out.push_back(i);
    }
    return out;
}

std::string etcd_store::describe() const {
    if (!up_.load()) {
        return "unreachable";
    }
    return caught_up_ ? "up" : "catching up";
}

void etcd_store::tick() {
    const bool serve = serving();
    rt_.stats.set_cluster_store_up(serve);
    rt_.stats.set_cluster_instances(copy_.instances().size());
    const auto now = steady::now();
    if (serve) {
        if (!was_serving_) {
            std::cerr << "cordon: cluster: etcd reachable and caught up: serving new sessions\n";
        }
        down_since_ = {};
        if (rt_.kill.local_engaged()) {
            std::cerr << "cordon: cluster: lifting the local network kill (etcd is back)\n";
            rt_.kill.release_local();
        }
    } else {
        if (was_serving_) {
            std::cerr << "cordon: cluster: etcd " << describe()
                      << ": new sessions are refused (503); known sessions and kills stay\n";
        }
        if (down_since_ == steady::time_point{}) {
            down_since_ = now;
        }
        if (spec_.fail_closed && !rt_.kill.local_engaged() &&
            now - down_since_ >= spec_.store_timeout) {
            std::cerr
                << "cordon: cluster: etcd lost for "
                << std::chrono::duration_cast<std::chrono::milliseconds>(now - down_since_).count()
                << " ms: engaging the local network kill (fail_closed)\n";
            net::co_spawn(
                control_,
                [this]() -> awaitable<void> {
                    const std::string why = "cluster store lost (fail_closed)";  // named: GCC 12
                    co_await rt_.kill.engage_local(why);
                },
                net::detached);
        }
    }
    was_serving_ = serve;
    if (reload_asked_.exchange(false)) {
        reload_whole();
    }
}

awaitable<void> etcd_store::confirm(std::string kill_id, std::uint64_t closed, double elapsed_ms) {
    std::vector<etcd::txn_op> ops{etcd::txn_op{
        false, key(fleet_keys::confirm(kill_id, spec_.instance)),
        confirm_value(instance_confirmation{spec_.instance, closed, elapsed_ms}), lease_to_fill}};
    std::string error;
    const bool ok = co_await commit_async(std::move(ops), lease_kind::records, 0, error);
    if (!ok) {
        std::cerr << "cordon: cluster: confirming kill " << kill_id << ": " << error << '\n';
    }
}

awaitable<fleet_outcome> etcd_store::gather(const fleet_kill& kill,
                                            const instance_confirmation& mine,
                                            steady::time_point t0, bool persisted) {
    // Copies, never the parameters themselves: the caller's temporaries outlive the
    // co_await, and GCC 12 mishandles writes to a coroutine's by-value aggregate parameters.
    fleet_kill k = kill;
    instance_confirmation self = mine;
    fleet_outcome out;
    self.instance = spec_.instance;
    out.instances.push_back(self);
    out.connections_closed = self.connections_closed;
    out.elapsed_ms = self.elapsed_ms;
    std::vector<std::string> waiting;
    for (const auto& [name, i] : copy_.instances()) {
        if (name != spec_.instance) {
            waiting.push_back(name);
        }
    }
    std::string error;
    k.origin = spec_.instance;
    bool written = false;
    if (persisted) {
        std::vector<etcd::txn_op> ops{etcd::txn_op{false, key(fleet_keys::kill_record(k.id)),
                                                   kill_record_value(k), lease_to_fill},
                                      etcd::txn_op{false,
                                                   key(fleet_keys::confirm(k.id, spec_.instance)),
                                                   confirm_value(self), lease_to_fill}};
        written = co_await commit_async(std::move(ops), lease_kind::records, 0, error);
    }
    if (!written) {
        if (!error.empty()) {
            std::cerr << "cordon: cluster: kill " << k.id << ": " << error << '\n';
        }
        out.missing = std::move(waiting);
        co_return out;
    }
    const auto deadline = steady::now() + spec_.kill_wait;
    net::steady_timer timer(co_await net::this_coro::executor);
    // Polled on the control thread: the watch's confirmations land in the copy between polls.
    while (!waiting.empty()) {
        const auto* got = copy_.confirms(k.id);
        for (auto it = waiting.begin(); it != waiting.end();) {
            const auto c = got != nullptr ? got->find(*it) : decltype(got->end()){};
            if (got != nullptr && c != got->end()) {
                const double seen_ms = ms_since(t0);
                rt_.stats.observe_kill_propagation(seen_ms / 1000);
                out.instances.push_back(c->second);
                out.connections_closed += c->second.connections_closed;
                out.elapsed_ms = std::max(out.elapsed_ms, seen_ms);
                it = waiting.erase(it);
            } else if (copy_.instances().count(*it) == 0) {
                it = waiting.erase(it);  // left the registry meanwhile (stopped)
            } else {
                ++it;
            }
        }
        if (waiting.empty() || steady::now() >= deadline) {
            break;
        }
        timer.expires_after(2ms);
        co_await timer.async_wait(use_nothrow);
    }
    out.missing = std::move(waiting);
    co_return out;
}

void etcd_store::on_events(const std::vector<etcd::event>& events) {
    const auto received = steady::now();
    for (const auto& e : events) {
        watch_revision_ = std::max(watch_revision_, e.kv.mod_revision);
        act(copy_.apply(e, spec_.prefix), received);
    }
    if (!caught_up_ && copy_.revision() >= catch_up_to_) {
        caught_up_ = true;
    }
}

void etcd_store::act(const fleet_state::change& c, steady::time_point received) {
    using what = fleet_state::what;
    switch (c.kind) {
        case what::session: {
            const auto s = copy_.session(c.id);
            if (!s) {
                return;
            }
            session_registry::merge_result r;
            try {
                r = rt_.sessions.merge(*s);
            } catch (const std::exception&) {
                return;  // an id or job cordon never writes: nothing to serve
            }
            const std::string kid = copy_.session_kill_id(c.id);
            if (r.killed || (!kid.empty() && confirmed_.count(kid) == 0)) {
                if (!kid.empty()) {
                    confirmed_.insert(kid);
                }
                net::co_spawn(control_,
                              close_and_confirm(c.id, "", "session_killed", kid, received),
                              net::detached);
                rt_.events->publish("kill.session", c.id,
                                    json::serialize(json::object{{"session", c.id},
                                                                 {"job", s->job},
                                                                 {"reason", s->end_reason},
                                                                 {"by", "fleet"}}));
                rt_.forget_usage(c.id);
            } else if (r.ended) {
                net::co_spawn(control_, close_and_confirm(c.id, "", "session_ended", "", received),
                              net::detached);
                rt_.events->publish("session.end", c.id,
                                    json::serialize(json::object{{"session", c.id},
                                                                 {"job", s->job},
                                                                 {"by", "fleet"},
                                                                 {"reason", s->end_reason}}));
                rt_.forget_usage(c.id);
            }
            for (const auto& tid : r.revoked) {
                net::co_spawn(control_, close_and_confirm(c.id, tid, "token_revoked", "", received),
                              net::detached);
                rt_.events->publish("token.revoke", c.id,
                                    json::serialize(json::object{
                                        {"session", c.id}, {"token_id", tid}, {"by", "fleet"}}));
            }
            return;
        }
        case what::session_gone: {
            if (!rt_.sessions.expire_now(c.id).empty()) {
                net::co_spawn(control_, close_and_confirm(c.id, "", "token_expired", "", received),
                              net::detached);
            }
            return;
        }
        case what::network: {
            const kill_state k = copy_.network();
            const std::string kid = copy_.network_kill_id();
            const bool news = k.engaged != rt_.kill.info().engaged ||
                              (k.engaged && !kid.empty() && confirmed_.count(kid) == 0);
            if (!news) {
                return;
            }
            if (!kid.empty()) {
                confirmed_.insert(kid);
            }
            net::co_spawn(control_, network_and_confirm(k, k.engaged ? kid : "", received),
                          net::detached);
            return;
        }
        case what::instance:
        case what::instance_gone: rt_.stats.set_cluster_instances(copy_.instances().size()); return;
        default: return;
    }
}

awaitable<void> etcd_store::close_and_confirm(std::string session, std::string token,
                                              std::string why, std::string kill_id,
                                              steady::time_point received) {
    const std::function<bool(const live_connection&)> match = [&session,
                                                               &token](const live_connection& c) {
        return c.session == session && (token.empty() || c.token_id == token);
    };
    const std::size_t closed = co_await rt_.connections.close_where(match, why);
    if (!kill_id.empty()) {
        const double elapsed = ms_since(received);
        co_await confirm(kill_id, closed, elapsed);
    }
}

awaitable<void> etcd_store::network_and_confirm(kill_state k, std::string kill_id,
                                                steady::time_point received) {
    const std::size_t closed = co_await rt_.kill.apply_fleet_network(k);
    if (!kill_id.empty()) {
        const double elapsed = ms_since(received);
        co_await confirm(kill_id, closed, elapsed);
    }
}

bool etcd_store::fetch_session(const std::string& id) {
    if (!up_.load()) {
        return false;
    }
    const auto received = steady::now();
    // Its facts: s/ID, t/ID/..., r/ID/..., e/ID, k/ID (ids are of one length: no other session
    // shares these prefixes).
    for (const std::string& rel : {fleet_keys::session(id), "t/" + id + "/", "r/" + id + "/",
                                   fleet_keys::ended(id), fleet_keys::killed(id)}) {
        std::vector<etcd::key_value> kvs;
        std::int64_t revision = 0;
        std::string error;
        if (!writer_.range_all(key(rel), kvs, revision, error)) {
            std::cerr << "cordon: cluster: reading session " << id << ": " << error << '\n';
            return false;
        }
        for (auto& kv : kvs) {
            etcd::event e;
            e.kv = std::move(kv);
            act(copy_.apply(e, spec_.prefix), received);
        }
    }
    return rt_.sessions.get(id).has_value();
}

void etcd_store::reload_whole() {
    std::vector<etcd::key_value> kvs;
    std::int64_t revision = 0;
    std::string error;
    if (!writer_.range_all(spec_.prefix, kvs, revision, error)) {
        std::cerr << "cordon: cluster: reloading: " << error << '\n';
        reload_asked_.store(true);  // the next tick tries again
        return;
    }
    const auto received = steady::now();
    std::set<std::string> present;
    for (const auto& kv : kvs) {
        present.insert(kv.key.substr(std::min(kv.key.size(), spec_.prefix.size())));
    }
    // What went while the watch was away, then what is there now.
    for (const auto& k : copy_.keys()) {
        if (present.count(k) == 0) {
            etcd::event e;
            e.deleted = true;
            e.kv.key = spec_.prefix + k;
            e.kv.mod_revision = revision;
            act(copy_.apply(e, spec_.prefix), received);
        }
    }
    for (auto& kv : kvs) {
        etcd::event e;
        e.kv = std::move(kv);
        act(copy_.apply(e, spec_.prefix), received);
    }
    loaded_ = true;
    caught_up_ = true;
    watch_revision_ = std::max(watch_revision_, revision);
    next_revision_.store(revision + 1);
    std::cerr << "cordon: cluster: reloaded whole at revision " << revision << '\n';
}

void etcd_store::drop_watch() {
    if (watch_conn_ != nullptr) {
        error_code ignored;
        watch_conn_->socket().shutdown(tcp::socket::shutdown_both, ignored);
        watch_conn_->socket().close(ignored);
    }
}

void etcd_store::keepalive_thread() {
    etcd_client client(writer_.settings());
    const auto ttl_s = std::max<std::int64_t>(
        2, std::chrono::duration_cast<std::chrono::seconds>(spec_.instance_ttl).count());
    const auto every = std::min<std::chrono::milliseconds>(keepalive_every, spec_.instance_ttl / 3);
    bool said = false;
    while (!stopping_.load()) {
        std::string error;
        bool ok = false;
        std::int64_t lease = instance_lease_.load();
        std::int64_t ttl = 0;
        if (lease != 0 && client.keepalive(lease, ttl, error)) {
            ok = ttl > 0;
            if (!ok) {
                lease = 0;  // lapsed (a partition longer than its TTL): register again
            }
        }
        if (!ok && lease == 0) {
            // (Re)register: a new lease and the registry key under it.
            std::int64_t id = 0;
            etcd::header h;
            fleet_instance me{spec_.instance, admin_, proxy_, ::getpid(), started_, 0};
            if (client.grant(ttl_s, id, error) &&
                client.put(spec_.prefix + fleet_keys::instance(spec_.instance), instance_value(me),
                           id, h, error)) {
                instance_lease_.store(id);
                ok = true;
            }
        }
        const bool was = up_.exchange(ok);
        if (ok && !was) {
            // Back: the watch resumes (or reloads), and the copy is not current until it has.
            net::post(control_, [this] {
                caught_up_ = false;
                catch_up_to_ = std::numeric_limits<std::int64_t>::max();
            });
            said = false;
        }
        if (!ok && !said) {
            std::cerr << "cordon: cluster: etcd: " << error << '\n';
            said = true;
        }
        if (!ok && was) {
            // A partition: the watch's connection may hang silently; drop it.
            net::post(watch_ioc_, [this] { drop_watch(); });
        }
        std::unique_lock lock(stop_mu_);
        stop_cv_.wait_for(lock, every, [this] { return stopping_.load(); });
    }
}

void etcd_store::watch_thread() {
    etcd_client probe(writer_.settings());
    int backoff_ms = 100;
    while (!stopping_.load()) {
        watch_ioc_.restart();
        std::int64_t from = next_revision_.load();
        std::string error;
        if (from == 0 || !up_.load()) {
            if (from == 0 && up_.load()) {
                reload_asked_.store(true);  // the control thread's tick reloads whole
            }
            std::unique_lock lock(stop_mu_);
            stop_cv_.wait_for(lock, std::chrono::milliseconds(backoff_ms),
                              [this] { return stopping_.load(); });
            continue;
        }
        // What the copy must reach to be current: the newest key under the prefix now.
        std::int64_t target = 0;
        if (!probe.newest_revision(spec_.prefix, target, error)) {
            std::unique_lock lock(stop_mu_);
            stop_cv_.wait_for(lock, std::chrono::milliseconds(backoff_ms),
                              [this] { return stopping_.load(); });
            backoff_ms = std::min(backoff_ms * 2, 2000);
            continue;
        }
        net::post(control_, [this, target] {
            catch_up_to_ = target;
            if (copy_.revision() >= target) {
                caught_up_ = true;
            }
        });
        std::string token;
        probe.auth_token(token, error);
        const auto& eps = writer_.settings().endpoints;
        bool compacted = false;
        std::int64_t last = from - 1;
        for (std::size_t i = 0; i < eps.size() && !stopping_.load() && !compacted; ++i) {
            const auto& ep = eps[(static_cast<std::size_t>(backoff_ms) + i) % eps.size()];
            net::co_spawn(
                watch_ioc_,
                [&]() -> awaitable<void> {
                    tcp::resolver resolver(watch_ioc_);
                    const std::string port = std::to_string(ep.port);  // named: GCC 12
                    auto [rec, results] = co_await resolver.async_resolve(ep.host, port,
                                                                          use_nothrow);
                    if (rec) {
                        co_return;
                    }
                    beast::tcp_stream stream(watch_ioc_);
                    watch_conn_ = &stream;
                    struct forget {
                        beast::tcp_stream*& p;
                        ~forget() { p = nullptr; }
                    } forget_conn{watch_conn_};
                    if (stopping_.load()) {
                        co_return;
                    }
                    stream.expires_after(1s);
                    auto [cec, cep] = co_await stream.async_connect(results, use_nothrow);
                    if (cec) {
                        co_return;
                    }
                    http::request<http::string_body> req{http::verb::post, "/v3/watch", 11};
                    req.set(http::field::host, ep.host + ":" + std::to_string(ep.port));
                    req.set(http::field::content_type, "application/json");
                    if (!token.empty()) {
                        req.set(http::field::authorization, token);
                    }
                    req.body() = etcd::watch_create_body(
                        spec_.prefix, etcd::range_end_of(spec_.prefix), last + 1);
                    req.prepare_payload();
                    auto [wec, wn] = co_await http::async_write(stream, req, use_nothrow);
                    if (wec) {
                        co_return;
                    }
                    beast::flat_buffer buf;
                    http::response_parser<http::empty_body> parser;
                    parser.header_limit(16 * 1024);
                    parser.body_limit(boost::none);  // a stream; each message is bounded below
                    etcd::watch_stream ws;
                    bool bad = false;
                    std::vector<etcd::event> batch;
                    auto on_chunk = [&](std::uint64_t, beast::string_view chunk,
                                        error_code&) -> std::size_t {
                        const std::string_view body(chunk.data(), chunk.size());
                        std::vector<etcd::watch_message> msgs;
                        std::string why;
                        if (ws.feed(body, msgs, why) == etcd::watch_stream::status::bad) {
                            std::cerr << "cordon: cluster: watch: " << why << '\n';
                            bad = true;
                            return body.size();
                        }
                        for (auto& m : msgs) {
                            if (m.canceled) {
                                if (m.compact_revision > 0) {
                                    compacted = true;
                                }
                                bad = true;
                                continue;
                            }
                            for (auto& e : m.events) {
                                last = std::max(last, e.kv.mod_revision);
                                batch.push_back(std::move(e));
                            }
                        }
                        return body.size();
                    };
                    parser.on_chunk_body(on_chunk);
                    auto [hec, hn] = co_await http::async_read_header(stream, buf, parser,
                                                                      use_nothrow);
                    if (hec || parser.get().result() != http::status::ok || !parser.chunked()) {
                        co_return;
                    }
                    stream.expires_never();
                    backoff_ms = 100;
                    while (!bad && !parser.is_done() && !stopping_.load()) {
                        auto [rec2, n] = co_await http::async_read_some(stream, buf, parser,
                                                                        use_nothrow);
                        if (rec2) {
                            break;
                        }
                        if (!batch.empty()) {
                            net::post(control_,
                                      [this, b = std::move(batch)]() mutable { on_events(b); });
                            batch.clear();
                        }
                    }
                    if (!batch.empty()) {
                        net::post(control_,
                                  [this, b = std::move(batch)]() mutable { on_events(b); });
                    }
                    error_code ignored;
                    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
                },
                net::detached);
            watch_ioc_.run();
            watch_ioc_.restart();
        }
        if (last >= from) {
            next_revision_.store(last + 1);
        }
        if (compacted) {
            std::cerr << "cordon: cluster: watch: history compacted; reloading whole\n";
            next_revision_.store(0);
        }
        std::unique_lock lock(stop_mu_);
        stop_cv_.wait_for(lock, std::chrono::milliseconds(backoff_ms),
                          [this] { return stopping_.load(); });
        backoff_ms = std::min(backoff_ms * 2, 2000);
    }
}

}  // namespace cordon::proxy::control
