// `cordon serve`: wires the policy, sessions, audit log, resolvers, listeners and signals.
// Threads: one data-plane io_context per core (each with its own acceptor on the proxy port
// via SO_REUSEPORT, its own c-ares channel and its own live-connection table), plus the
// control thread (this one) for the admin API, signals and the token-expiry sweep. The DNS
// server runs on the first worker's thread. The listeners are in proxy/listeners.cpp.

#include "proxy/daemon.hpp"

#include <sys/prctl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>

#include "common/error_text.hpp"
#include "common/time.hpp"
#include "config/load.hpp"
#include "proxy/control/capacity.hpp"
#include "proxy/control/etcd_store.hpp"
#include "proxy/control/lifelines.hpp"
#include "proxy/control/runtime.hpp"
#include "proxy/control/state_store.hpp"
#include "proxy/dns_hook.hpp"
#include "proxy/inspect/inspector.hpp"
#include "proxy/listeners.hpp"

namespace cordon::proxy {
namespace {

using namespace std::chrono_literals;

// Every tunnel holds two descriptors: raises the soft limit to the hard one. Returns the
// limit now in force.
std::uint64_t raise_descriptor_limit() {
    rlimit nofile{};
    std::uint64_t descriptor_limit = 1024;
    if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
        if (nofile.rlim_cur < nofile.rlim_max) {
            nofile.rlim_cur = nofile.rlim_max;
            ::setrlimit(RLIMIT_NOFILE, &nofile);
            ::getrlimit(RLIMIT_NOFILE, &nofile);
        }
        descriptor_limit = nofile.rlim_cur == RLIM_INFINITY
                               ? std::uint64_t{1} << 20
                               : static_cast<std::uint64_t>(nofile.rlim_cur);
    }
    return descriptor_limit;
}

bool read_token_file(const std::string& path, std::string& token, std::string& error) {
    std::ifstream in(path);
    if (!in) {
        error = "cannot read admin.token_file " + path + ": " + std::strerror(errno);
        return false;
    }
    std::getline(in, token);
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) {
        token.pop_back();
    }
    if (token.size() < 16) {
        error = "admin.token_file " + path + " must hold a token of at least 16 characters";
        return false;
    }
    return true;
}

void print_errors(const config::load_result& r) {
    for (const auto& e : r.errors) {
        std::cerr << e.to_string() << '\n';
    }
    std::cerr << "cordon: refusing to start: " << r.errors.size()
              << (r.errors.size() == 1 ? " error" : " errors") << " in the policy\n";
}

// The descriptor budget: what the kill needs is reserved, the listeners are capped below
// the limit (proxy/control/capacity.hpp).
control::capacity plan_descriptors(const config::policy& pol, std::uint64_t descriptor_limit,
                                   unsigned threads) {
    control::capacity_inputs cin;
    cin.descriptor_limit = descriptor_limit;
    cin.workers = threads;
    cin.dns = pol.listen.dns.has_value();
    // The DNS server's TCP cap as it will apply it: dns.tcp.max_connections, at most a
    // quarter of the descriptor limit (dns/server.cpp).
    cin.dns_tcp_connections = std::min<std::size_t>(pol.dns.tcp_max_connections,
                                                    std::max<std::size_t>(1, descriptor_limit / 4));
    cin.admin = pol.listen.admin.has_value();
    cin.configured_max_connections = pol.proxy.max_connections;
    return control::plan_capacity(cin);
}

std::unique_ptr<audit::audit_log> make_audit_log(const config::policy& pol) {
    audit::audit_options aopts;
    aopts.dir = pol.audit.path;
    aopts.retention_days = pol.audit.retention_days;
    aopts.max_file_bytes = pol.audit.max_file_bytes;
    // The writer retries about five times a second while the disk fails: say so once per
    // 10 s with how many failures there were, not on every retry.
    return std::make_unique<audit::audit_log>(aopts, [](const std::string& e) {
        static std::atomic<std::int64_t> last_said{std::numeric_limits<std::int64_t>::min() / 2};
        static std::atomic<std::uint64_t> unsaid{0};
        const auto now_s = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
        std::int64_t last = last_said.load();
        if (now_s - last < 10 || !last_said.compare_exchange_strong(last, now_s)) {
            ++unsaid;
            return;
        }
        std::cerr << "cordon: audit log: " << e << " (new connections are denied";
        if (const auto n = unsaid.exchange(0); n > 0) {
            std::cerr << "; " << n << " more failures since the last message";
        }
        std::cerr << ")\n";
    });
}

// Where and how to listen, from the policy before it is compiled.
listen_plan plan_listeners(const config::policy& pol, unsigned threads,
                           const control::capacity& limits) {
    listen_plan plan;
    plan.proxy = pol.listen.proxy;
    plan.socks = pol.listen.socks;
    plan.admin = pol.listen.admin;
    plan.dns = pol.listen.dns;
    plan.threads = threads;
    plan.pipes_per_worker = limits.pipes_per_worker;
    plan.resolver.upstream = pol.dns.upstream;
    plan.resolver.max_relayed = pol.dns.inflight_total;
    if (plan.dns) {
        dns::server_options& dopts = plan.dns_options;
        dopts.listen = *plan.dns;
        dopts.deny = pol.dns.deny;
        dopts.cache_entries = pol.dns.cache_entries;
        dopts.query_types = pol.dns.query_types;
        dopts.rate_qps = pol.dns.rate_qps;
        dopts.rate_burst = pol.dns.rate_burst;
        dopts.max_inflight_per_client = pol.dns.inflight_per_client;
        dopts.tcp_max_connections = pol.dns.tcp_max_connections;
        dopts.tcp_max_per_client = pol.dns.tcp_max_per_client;
        dopts.tcp_timeout = pol.dns.tcp_timeout;
    }
    return plan;
}

// Durable state: kills, sessions, token hashes, revocations. If it cannot be read, start
// with the network kill engaged and say why (fail closed); never reset the file. Returns
// the last event id stored (0 when none).
std::uint64_t restore_state(control::runtime& rt, const std::string& state_dir) {
    std::uint64_t last_event = 0;
    rt.store = control::state_store::open(state_dir, rt.store_error);
    if (rt.store) {
        control::loaded_state loaded_state;
        if (rt.store->load(loaded_state, rt.store_error)) {
            rt.sessions.restore(std::move(loaded_state.sessions));
            rt.kill.restore(loaded_state.kill);
            last_event = loaded_state.last_event_id;
        } else {
            rt.store.reset();
        }
    }
    if (!rt.store) {
        rt.kill.restore(control::kill_state{true, "state store unreadable: " + rt.store_error,
                                            "cordon", rt.now()});
        std::cerr << "cordon: state " << state_dir << ": " << rt.store_error
                  << "\ncordon: starting with the network kill ENGAGED (fail closed); the "
                     "file was left as it is\n";
    } else if (rt.kill.engaged()) {
        std::cerr << "cordon: the network kill is engaged (since "
                  << common::format_rfc3339(rt.kill.info().at) << ", by " << rt.kill.info().by
                  << ": " << rt.kill.info().reason << ")\n";
    }
    return last_event;
}

// A fleet's state (the policy's `cluster`): etcd, loaded whole before anything is served.
// etcd unreachable: refuse to start, or with cluster.start_without_store start with the network
// kill engaged until the store is loaded (never open). Returns false to refuse.
bool restore_fleet(control::runtime& rt, net::io_context& control, const config::cluster_spec& spec,
                   std::uint64_t& last_event) {
    std::optional<std::string> password;
    if (spec.password_file) {
        std::ifstream in(*spec.password_file);
        std::string p;
        if (!in || !std::getline(in, p)) {
            std::cerr << "cordon: refusing to start: cannot read cluster.etcd.password_file "
                      << *spec.password_file << '\n';
            return false;
        }
        while (!p.empty() && (p.back() == '\r' || p.back() == ' ')) {
            p.pop_back();
        }
        password = std::move(p);
    }
    auto store = std::make_unique<control::etcd_store>(rt, control, spec, std::move(password));
    control::loaded_state loaded_state;
    std::string error;
    if (store->load(loaded_state, error)) {
        rt.sessions.restore(std::move(loaded_state.sessions));
        rt.kill.restore(loaded_state.kill);
        last_event = loaded_state.last_event_id;
        if (rt.kill.engaged()) {
            std::cerr << "cordon: the fleet's network kill is engaged (by " << rt.kill.info().by
                      << ": " << rt.kill.info().reason << ")\n";
        }
    } else if (spec.start_without_store) {
        rt.kill.restore(
            control::kill_state{true, "etcd unreachable at start: " + error, "cordon", rt.now()});
        std::cerr << "cordon: cluster: " << error
                  << "\ncordon: starting with the network kill ENGAGED "
                     "(cluster.start_without_store) until etcd is reached and loaded\n";
    } else {
        std::cerr << "cordon: refusing to start: cluster: " << error
                  << " (set cluster.start_without_store: true to start with the network kill "
                     "engaged instead)\n";
        return false;
    }
    rt.cluster = store.get();
    rt.store = std::move(store);
    return true;
}

// The event stream (numbered on from `last_event`, kept in the state store), the kill
// gauge, and the denial bursts and alert webhook.
void wire_control(control::runtime& rt, std::uint64_t last_event) {
    control::state_backend* store_ptr = rt.store.get();
    rt.events = std::make_unique<control::event_bus>(
        [store_ptr](const control::event& e) -> std::uint64_t {
            if (store_ptr == nullptr) {
                return 0;
            }
            control::stored_event s{0, common::wall_clock::now(), e.type, e.session, e.json};
            std::string append_error;
            if (!store_ptr->append_event(s, append_error)) {
                std::cerr << "cordon: state store: " << append_error << '\n';
                return 0;
            }
            return s.id;
        },
        last_event);
    rt.stats.set_kill_switch_engaged(rt.kill.engaged());
    // Denial bursts and the alert webhook: its own thread, started by configure() webhook or
    // not (bursts are counted either way); denials reach it through runtime::denied().
    // Delivery failures (after the last retry) are audited as alert.error, without the URL.
    rt.notifier = std::make_unique<alerts::denial_notifier>(alerts::denial_notifier::callbacks{
        [&rt](const std::string& job) { rt.stats.count_denial_burst(job); },
        [&rt](const alerts::delivery_failure& f) {
            auto rec = rt.record("alert.error");
            rec.add("webhook", f.webhook)
                .add("job", f.job)
                .add("session", f.session)
                .add("denials", f.denials)
                .add("attempts", f.attempts)
                .add("error", f.error);
            rt.audit(std::move(rec));
        }});
    rt.notifier->configure(rt.policy()->source().alerts.webhook);
}

// The control thread's sweep, once a second: what a failing store could not take is
// written once it can; tokens that expire close the tunnels opened with them (within a
// second); ended sessions and old events are pruned.
class sweeps {
public:
    sweeps(control::runtime& rt, net::io_context& control)
        : rt_(rt), control_(control), timer_(control), state_was_durable_(rt.store != nullptr) {}

    void start() { arm(); }
    void stop() { timer_.cancel(); }

private:
    void arm() {
        timer_.expires_after(1s);
        timer_.async_wait([this](error_code ec) {
            if (ec) {
                return;
            }
            check_durability();
            if (rt_.cluster != nullptr) {
                rt_.cluster->tick();
            }
            expire_tokens();
            prune();
            arm();
        });
    }

    // Durability: what a failing store could not take is written once it can, and a store
    // that stops taking writes (or vanished) is said once, not per second.
    void check_durability() {
        rt_.kill.retry_unsaved();
        std::string state_why;
        const bool durable = rt_.kill.state_durable(state_why);
        if (durable != state_was_durable_) {
            std::cerr << "cordon: state store: "
                      << (durable ? std::string("writes are durable again")
                                  : state_why + " (kills are kept in memory; they answer "
                                                "persisted: false)")
                      << '\n';
            state_was_durable_ = durable;
        }
    }

    void expire_tokens() {
        std::vector<std::string> ended;
        auto expired = rt_.sessions.sweep_expired(&ended);
        for (const auto& [sid, tid] : expired) {
            rt_.kill.persist_session(sid);
        }
        for (const std::string& sid : ended) {
            rt_.forget_usage(sid);  // its budget and MCP pins: nothing can use them again
        }
        if (!expired.empty()) {
            net::co_spawn(control_, close_expired(rt_, std::move(expired)), net::detached);
        }
    }

    static awaitable<void> close_expired(control::runtime& rt,
                                         std::vector<std::pair<std::string, std::string>> expired) {
        const std::function<bool(const control::live_connection&)> of_expired =
            [&expired](const control::live_connection& c) {
                for (const auto& [sid, tid] : expired) {
                    if (c.session == sid && c.token_id == tid) {
                        return true;
                    }
                }
                return false;
            };
        const std::string why = "token_expired";
        co_await rt.connections.close_where(of_expired, why);
    }

    // Memory keeps ended and killed sessions a day; the store keeps them and the event log
    // a week (pruned hourly), so restarts and event replays reach back.
    void prune() {
        rt_.sessions.prune(std::chrono::hours(24));
        if (++count_ % 3600 == 0 && rt_.store) {
            std::string prune_error;
            if (!rt_.store->prune(rt_.now() - std::chrono::hours(24 * 7), prune_error)) {
                std::cerr << "cordon: state store: " << prune_error << '\n';
            }
        }
    }

    control::runtime& rt_;
    net::io_context& control_;
    net::steady_timer timer_;
    std::uint64_t count_ = 0;
    bool state_was_durable_;
};

// Stops accepting, closes every connection, gives them a moment to log their close, then
// stops every thread (Asio server::do_await_stop).
awaitable<void> shut_down(control::runtime& rt, listeners& l, net::io_context& control) {
    // Stop accepting on each worker's own thread, then close what is open.
    co_await stop_accepting(rt, l);
    const std::function<bool(const control::live_connection&)> all =
        [](const control::live_connection&) { return true; };
    const std::string why = "shutdown";
    co_await rt.connections.close_where(all, why);
    // Give the closed connections a moment to write their conn.close records.
    net::steady_timer t(control);
    for (int i = 0; i < 40 && rt.connections.open.load() > 0; ++i) {
        t.expires_after(50ms);
        co_await t.async_wait(use_nothrow);
    }
    for (auto& w : rt.connections.workers) {
        w->resolver->cancel_all();
        w->ioc.stop();
    }
    control.stop();
}

awaitable<void> reload_on_hup(control::runtime& rt) {
    const std::string by = "SIGHUP";
    const std::string errors = co_await rt.reload(by);
    if (errors.empty()) {
        std::cerr << "cordon: SIGHUP: policy reloaded\n";
    } else {
        std::cerr << errors << "cordon: SIGHUP: policy refused; the old one stays in force\n";
    }
}

// Signals: SIGTERM/SIGINT stop (shut_down), SIGHUP reloads the policy.
class signal_handling {
public:
    signal_handling(control::runtime& rt, net::io_context& control, listeners& l, sweeps& s)
        : rt_(rt),
          control_(control),
          listeners_(l),
          sweeps_(s),
          stop_(control, SIGTERM, SIGINT),
          hup_(control, SIGHUP) {}

    void start() {
        stop_.async_wait([this](error_code ec, int sig) {
            if (!ec) {
                on_stop(sig);
            }
        });
        arm_hup();
    }

private:
    void on_stop(int sig) {
        std::cerr << "cordon: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ", stopping\n";
        stopping_ = true;
        sweeps_.stop();
        hup_.cancel();
        stop_admin(listeners_);
        net::co_spawn(control_, shut_down(rt_, listeners_, control_), net::detached);
    }

    void arm_hup() {
        hup_.async_wait([this](error_code ec, int) {
            if (ec || stopping_) {
                return;
            }
            net::co_spawn(control_, reload_on_hup(rt_), net::detached);
            arm_hup();
        });
    }

    control::runtime& rt_;
    net::io_context& control_;
    listeners& listeners_;
    sweeps& sweeps_;
    net::signal_set stop_;
    net::signal_set hup_;
    bool stopping_ = false;
};

void start_workers(control::runtime& rt) {
    for (auto& w : rt.connections.workers) {
        control::worker* wp = w.get();
        wp->thread = std::thread([wp] {
            for (;;) {
                try {
                    wp->ioc.run();
                    return;
                } catch (const std::exception& e) {
                    // A bug in one connection must not take the data plane down.
                    std::cerr << "cordon: worker " << wp->index << ": "
                              << common::without_location(e) << '\n';
                }
            }
        });
    }
}

// Says where cordon listens, on stderr and in the ready file (written whole, then renamed).
void announce(const control::runtime& rt, const listeners& l, const std::string& source,
              const std::string& ready_file) {
    const std::string ready = ready_line(rt, l);
    std::cerr << "cordon: serving " << source << ": " << ready;
    if (!ready_file.empty()) {
        const std::string tmp = ready_file + ".tmp";
        {
            std::ofstream out(tmp);
            out << ready;
        }
        std::rename(tmp.c_str(), ready_file.c_str());
    }
}

void run_control(net::io_context& control) {
    for (;;) {
        try {
            control.run();
            break;
        } catch (const std::exception& e) {
            std::cerr << "cordon: control: " << common::without_location(e) << '\n';
        }
    }
}

// After the control thread stopped: joins the workers, then flushes alerts and the audit
// log. Returns the exit code.
int finish(control::runtime& rt, listeners& l, const std::string& audit_path) {
    for (auto& w : rt.connections.workers) {
        w->ioc.stop();
        if (w->thread.joinable()) {
            w->thread.join();
        }
    }
    l.dns.clear();  // their sockets go while their io_contexts still exist
    if (rt.lifelines_) {
        rt.lifelines_->stop();  // no grace timer outlives the control io_context
    }
    // Connections still suspended are destroyed while `rt` is whole.
    rt.connections.workers.clear();
    rt.notifier->stop(std::chrono::seconds(2));  // flushes open alert windows; no more denials
    // The last records are written (retried for a while if the disk fails). What still
    // cannot be is not a clean exit: the kills, revives and session records among it go to
    // stderr (the service's journal), the last place left, and the exit status says so.
    const std::uint64_t dropped_before = rt.audit_log_->dropped();
    rt.audit_log_->stop();
    const std::uint64_t lost = rt.audit_log_->dropped() - dropped_before;
    if (lost > 0) {
        const auto kept = rt.audit_log_->lost_records();
        std::cerr << "cordon: audit log: " << lost << " records could not be written before "
                  << "exit (" << audit_path << "); the " << kept.size()
                  << " kill, revive and session records among them follow:\n";
        for (const auto& line : kept) {
            std::cerr << "cordon: unwritten audit record: " << line;
        }
        std::cerr << "cordon: stopped with audit records lost\n";
        return 1;
    }
    std::cerr << "cordon: stopped\n";
    return 0;
}

}  // namespace

int run_daemon(const daemon_options& opts) {
    const std::uint64_t descriptor_limit = raise_descriptor_limit();
    config::load_result loaded = config::load_policy_file(opts.config_path);
    if (!loaded.ok()) {
        print_errors(loaded);
        return 1;
    }
    for (const auto& w : loaded.warnings) {
        std::cerr << "cordon: warning: " << w.to_string() << '\n';
    }
    std::string error;
    std::string admin_token;
    if (loaded.value->listen.admin &&
        !read_token_file(*loaded.value->admin.token_file, admin_token, error)) {
        std::cerr << "cordon: refusing to start: " << error << '\n';
        return 1;
    }
    if (!dns::init_library(error)) {
        std::cerr << "cordon: refusing to start: c-ares: " << error << '\n';
        return 1;
    }
    const config::policy& pol = *loaded.value;
    const unsigned threads = opts.threads != 0 ? opts.threads
                                               : std::max(1u, std::thread::hardware_concurrency());
    // Too low a descriptor limit for the budget is refused here.
    const control::capacity limits = plan_descriptors(pol, descriptor_limit, threads);
    if (!limits.error.empty()) {
        std::cerr << "cordon: refusing to start: " << limits.error << '\n';
        return 1;
    }
    if (!limits.note.empty()) {
        std::cerr << "cordon: " << limits.note << '\n';
    }
    if (pol.admin.tls) {
        // Fail closed: never serve the admin API in plain text to someone who asked for TLS.
        std::cerr << "cordon: refusing to start: admin.tls is not supported by this version; "
                     "remove it and put the admin listener on a management-only address, or "
                     "terminate TLS in front of it\n";
        return 1;
    }
    // protocol: https rules are never carried without the CA that terminates them.
    std::shared_ptr<inspect::inspector> inspection;
    if (pol.inspect) {
        inspection = inspect::inspector::load(*pol.inspect, pol.secrets, error);
        if (!inspection) {
            std::cerr << "cordon: refusing to start: " << error << '\n';
            return 1;
        }
        // The CA key and the secrets are in this process's memory: no core dump of it, and
        // no ptrace by another process of the same user.
        if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
            std::cerr << "cordon: warning: prctl(PR_SET_DUMPABLE): " << std::strerror(errno)
                      << '\n';
        }
        if (const auto* b = inspection->broker(); b != nullptr && !b->locked()) {
            std::cerr << "cordon: warning: the secrets could not be locked in memory (mlock; "
                         "raise RLIMIT_MEMLOCK): they stay out of core dumps and are wiped\n";
        }
    }
    for (const auto& j : pol.jobs) {
        if (j.mode == config::job_mode::report) {
            std::cerr << "cordon: job " << j.name
                      << ": mode report: NOT ENFORCED, would-deny requests are let through "
                         "and audited (would_deny)\n";
        }
    }
    auto audit = make_audit_log(pol);
    if (!audit->open(error)) {
        std::cerr << "cordon: refusing to start: audit log " << pol.audit.path << ": " << error
                  << '\n';
        return 1;
    }
    listen_plan plan = plan_listeners(pol, threads, limits);
    const std::string source = pol.source;
    const std::string pol_audit_path = pol.audit.path;
    const std::string state_dir = pol.state.path;
    const std::optional<config::cluster_spec> cluster = pol.cluster;

    control::runtime rt(opts.config_path, config::compile(std::move(*loaded.value)));
    rt.audit_log_ = std::move(audit);
    if (cluster) {
        rt.instance = cluster->instance;  // before the filter: every record carries it
    }
    rt.set_inspection(std::move(inspection));  // after the audit log: it gets the secret filter
    // A network kill closes the resolvers' gate: lookups in flight (the proxy's and the DNS
    // listener's) are cancelled before c-ares can send a retry or hand over an answer.
    plan.resolver.upstream_allowed = [&rt] { return !rt.kill.engaged(); };
    net::io_context control(1);
    std::uint64_t last_event = 0;
    if (cluster) {
        if (!restore_fleet(rt, control, *cluster, last_event)) {
            return 1;
        }
    } else {
        last_event = restore_state(rt, state_dir);
    }
    wire_control(rt, last_event);
    rt.limits = limits;

    dns_hook hook(rt);
    listeners l;
    if (!open_listeners(rt, control, plan, hook, l)) {
        return 1;
    }
    rt.self.local = local_addresses();
    auto* fleet_store = dynamic_cast<control::etcd_store*>(rt.store.get());
    if (fleet_store != nullptr) {
        // Where this instance is reached, as bound (a port 0 in the policy is the OS's choice).
        std::string admin_at;
        error_code ec;
        if (l.admin) {
            const auto ep = l.admin->local_endpoint(ec);
            if (!ec) {
                const std::string a = ep.address().to_string();
                admin_at = (ep.address().is_v6() ? "[" + a + "]" : a) + ":" +
                           std::to_string(ep.port());
            }
        }
        std::string why;
        if (!fleet_store->start(admin_at, rt.proxy_endpoint.to_string(), why)) {
            std::cerr << "cordon: refusing to start: cluster: " << why << '\n';
            return 1;
        }
    }
    start_accepting(rt, l, control, admin_token);
    sweeps sweep(rt, control);
    sweep.start();
    signal_handling signals(rt, control, l, sweep);
    signals.start();
    start_workers(rt);
    announce(rt, l, source, opts.ready_file);
    run_control(control);
    if (fleet_store != nullptr) {
        fleet_store->stop();  // its threads post to `control`: stopped before it goes
    }
    return finish(rt, l, pol_audit_path);
}

}  // namespace cordon::proxy
