// `cordon serve`: wires the policy, sessions, audit log, resolvers, listeners and signals.
// Threads: one data-plane io_context per core (each with its own acceptor on the proxy port
// via SO_REUSEPORT, its own c-ares channel and its own live-connection table), plus the
// control thread (this one) for the admin API, signals and the token-expiry sweep. The DNS
// server runs on the first worker's thread.

#include "common/time.hpp"
#include "proxy/daemon.hpp"

#include <ifaddrs.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <limits>
#include <iostream>
#include <sstream>

#include "config/load.hpp"
#include "dns/asio_address.hpp"
#include "proxy/admin/admin_api.hpp"
#include "proxy/control/capacity.hpp"
#include "proxy/data/client_conn.hpp"
#include "proxy/dns_hook.hpp"
#include "common/error_text.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy {
namespace {

using namespace std::chrono_literals;

std::vector<config::ip_address> local_addresses() {
    std::vector<config::ip_address> out;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) {
        return out;
    }
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr == nullptr) {
            continue;
        }
        if (i->ifa_addr->sa_family == AF_INET) {
            sockaddr_in sin{};
            std::memcpy(&sin, i->ifa_addr, sizeof sin);
            out.push_back(config::ip_address::v4(ntohl(sin.sin_addr.s_addr)));
        } else if (i->ifa_addr->sa_family == AF_INET6) {
            sockaddr_in6 sin6{};
            std::memcpy(&sin6, i->ifa_addr, sizeof sin6);
            std::array<std::uint8_t, 16> b{};
            std::memcpy(b.data(), &sin6.sin6_addr, 16);
            out.push_back(config::ip_address::v6(b));
        }
    }
    freeifaddrs(list);
    return out;
}

tcp::endpoint to_endpoint(const config::endpoint& e) { return {dns::to_asio(e.address), e.port}; }

config::endpoint from_endpoint(const tcp::endpoint& e) {
    return config::endpoint{dns::to_ip(e.address()), e.port()};
}

tcp::acceptor make_acceptor(net::io_context& ioc, const tcp::endpoint& ep, bool reuse_port) {
    tcp::acceptor a(ioc);
    a.open(ep.protocol());
    a.set_option(net::socket_base::reuse_address(true));
    if (reuse_port) {
        const int one = 1;
        if (::setsockopt(a.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
            throw std::system_error(errno, std::generic_category(), "SO_REUSEPORT");
        }
    }
    if (ep.address().is_v6()) {
        a.set_option(net::ip::v6_only(true));
    }
    a.bind(ep);
    a.listen(net::socket_base::max_listen_connections);
    return a;
}

// A port on `addr` that no socket holds, TCP or UDP, for listeners configured with port 0
// (tests, benchmarks). The kernel's own choice for a SO_REUSEPORT socket may be a port that
// another process of the same user already shares that way, or one TCP cannot have; plain
// binds (no SO_REUSEPORT, no SO_REUSEADDR) fail on any holder, so what they get is free.
std::uint16_t unshared_port(const net::ip::address& addr) {
    using boost::system::error_code;
    net::io_context probe_ctx(1);
    for (int attempt = 0; attempt < 50; ++attempt) {
        tcp::socket t(probe_ctx);
        net::ip::udp::socket u(probe_ctx);
        error_code ec;
        t.open(addr.is_v6() ? tcp::v6() : tcp::v4(), ec);
        if (!ec) {
            t.bind(tcp::endpoint(addr, 0), ec);
        }
        if (ec) {
            throw std::system_error(ec, "bind");
        }
        const std::uint16_t port = t.local_endpoint().port();
        u.open(addr.is_v6() ? net::ip::udp::v6() : net::ip::udp::v4(), ec);
        if (!ec) {
            u.bind(net::ip::udp::endpoint(addr, port), ec);
        }
        if (!ec) {
            return port;  // both sockets close here; the listeners bind it next
        }
    }
    throw std::system_error(std::make_error_code(std::errc::address_in_use),
                            "no port free for both TCP and UDP");
}

// Accepts until the acceptor closes. On an accept error (EMFILE, ENFILE, ...): log, back
// off 100 ms and continue (Asio throttling_proxy), so a descriptor flood does not spin.
template <class Handler>
awaitable<void> accept_loop(tcp::acceptor& acceptor, const char* what, std::size_t max_open,
                            const std::atomic<std::int64_t>* open, Handler handler) {
    auto ex = co_await net::this_coro::executor;
    net::steady_timer backoff(ex);
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(use_nothrow);
        if (ec == net::error::operation_aborted || !acceptor.is_open()) {
            co_return;
        }
        if (ec) {
            std::cerr << "cordon: " << what << " accept: " << ec.message() << '\n';
            backoff.expires_after(100ms);
            co_await backoff.async_wait(use_nothrow);
            continue;
        }
        if (open != nullptr && open->load() >= static_cast<std::int64_t>(max_open)) {
            error_code ignored;
            socket.close(ignored);  // over proxy.max_connections: refuse at once
            continue;
        }
        handler(std::move(socket));
    }
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

}  // namespace

int run_daemon(const daemon_options& opts) {
    // Every tunnel holds two descriptors: raise the soft limit to the hard one.
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
    const unsigned threads =
        opts.threads != 0 ? opts.threads : std::max(1u, std::thread::hardware_concurrency());
    // The descriptor budget: what the kill needs is reserved, the listeners are capped
    // below the limit (proxy/control/capacity.hpp). Too low a limit for that is refused here.
    control::capacity_inputs cin;
    cin.descriptor_limit = descriptor_limit;
    cin.workers = threads;
    cin.dns = pol.listen.dns.has_value();
    // The DNS server's TCP cap as it will apply it: dns.tcp.max_connections, at most a
    // quarter of the descriptor limit (dns/server.cpp).
    cin.dns_tcp_connections = std::min<std::size_t>(
        pol.dns.tcp_max_connections, std::max<std::size_t>(1, descriptor_limit / 4));
    cin.admin = pol.listen.admin.has_value();
    cin.configured_max_connections = pol.proxy.max_connections;
    const control::capacity limits = control::plan_capacity(cin);
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
    for (const auto& j : pol.jobs) {
        if (j.mode == config::job_mode::report) {
            std::cerr << "cordon: job " << j.name
                      << ": mode report: NOT ENFORCED, would-deny requests are let through "
                         "and audited (would_deny)\n";
        }
    }
    audit::audit_options aopts;
    aopts.dir = pol.audit.path;
    aopts.retention_days = pol.audit.retention_days;
    aopts.max_file_bytes = pol.audit.max_file_bytes;
    // The writer retries about five times a second while the disk fails: say so once per
    // 10 s with how many failures there were, not on every retry.
    auto audit = std::make_unique<audit::audit_log>(aopts, [](const std::string& e) {
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
    if (!audit->open(error)) {
        std::cerr << "cordon: refusing to start: audit log " << pol.audit.path << ": " << error
                  << '\n';
        return 1;
    }
    dns::resolver_options ropts;
    ropts.upstream = pol.dns.upstream;
    ropts.max_relayed = pol.dns.inflight_total;
    const config::endpoint proxy_ep = pol.listen.proxy;
    const std::optional<config::endpoint> admin_ep = pol.listen.admin;
    const std::optional<config::endpoint> dns_ep = pol.listen.dns;
    dns::server_options dopts;
    if (dns_ep) {
        dopts.listen = *dns_ep;
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
    const std::string source = pol.source;
    const std::string pol_audit_path = pol.audit.path;

    const std::string state_dir = pol.state.path;
    control::runtime rt(opts.config_path, config::compile(std::move(*loaded.value)));
    // A network kill closes the resolvers' gate: lookups in flight (the proxy's and the DNS
    // listener's) are cancelled before c-ares can send a retry or hand over an answer.
    ropts.upstream_allowed = [&rt] {
        return !rt.network_killed.load(std::memory_order_acquire);
    };
    rt.audit_log_ = std::move(audit);

    // Durable state: kills, sessions, token hashes, revocations. If it cannot be read, start
    // with the network kill engaged and say why (fail closed); never reset the file.
    std::uint64_t last_event = 0;
    rt.store = control::state_store::open(state_dir, rt.store_error);
    if (rt.store) {
        control::state_store::loaded loaded_state;
        if (rt.store->load(loaded_state, rt.store_error)) {
            rt.sessions.restore(std::move(loaded_state.sessions));
            rt.kill_info = loaded_state.kill;
            rt.network_killed = loaded_state.kill.engaged;
            last_event = loaded_state.last_event_id;
        } else {
            rt.store.reset();
        }
    }
    if (!rt.store) {
        rt.network_killed = true;
        rt.kill_info = control::kill_state{true, "state store unreadable: " + rt.store_error,
                                  "cordon", rt.now()};
        std::cerr << "cordon: state " << state_dir << ": " << rt.store_error
                  << "\ncordon: starting with the network kill ENGAGED (fail closed); the "
                     "file was left as it is\n";
    } else if (rt.network_killed) {
        std::cerr << "cordon: the network kill is engaged (since " << common::format_rfc3339(rt.kill_info.at)
                  << ", by " << rt.kill_info.by << ": " << rt.kill_info.reason << ")\n";
    }
    control::state_store* store_ptr = rt.store.get();
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
    rt.stats.set_kill_switch_engaged(rt.network_killed);
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
    rt.limits = limits;

    net::io_context control(1);
    std::vector<tcp::acceptor> proxy_acceptors;
    std::optional<tcp::acceptor> admin_acceptor;
    dns_hook hook(rt);
    // The DNS server runs on the first worker's thread, with its c-ares channel. One thread
    // answers well over 200,000 cached or denied queries a second here, far above what a
    // sandbox fleet asks (and each client is rate-limited); a server per worker (SO_REUSEPORT,
    // which dns::server supports) made every query slower on the 2-core reference machine:
    // 2.7-3.0 us of CPU instead of 2.0, from smaller batches, more wake-ups and the shared
    // cache and rate tables bouncing between cores (bench/dns_bench).
    constexpr std::size_t dns_threads = 1;
    std::vector<std::unique_ptr<dns::server>> dns_servers;
    // Which listener is being set up, and where, for the error that names it.
    std::string listener = "proxy";
    std::string where = proxy_ep.to_string();
    try {
        tcp::endpoint bind_ep = to_endpoint(proxy_ep);
        if (bind_ep.port() == 0) {
            bind_ep.port(unshared_port(bind_ep.address()));
        }
        where = from_endpoint(bind_ep).to_string();
        for (unsigned i = 0; i < threads; ++i) {
            auto w = std::make_unique<control::worker>(i);
            w->pipes.set_limit(limits.pipes_per_worker);
            w->resolver = dns::make_resolver(w->ioc, ropts);
            proxy_acceptors.push_back(make_acceptor(w->ioc, bind_ep, true));
            // Every worker binds the same port (port 0 was replaced by a free one above).
            bind_ep = proxy_acceptors.back().local_endpoint();
            rt.workers.push_back(std::move(w));
        }
        rt.proxy_endpoint = from_endpoint(proxy_acceptors.front().local_endpoint());
        rt.self.listeners.push_back(rt.proxy_endpoint);
        if (dns_ep) {
            listener = "dns";
            where = dns_ep->to_string();
            const std::size_t n = std::min(dns_threads, rt.workers.size());
            dopts.reuse_port = n > 1;
            if (dopts.listen.port == 0) {
                dopts.listen.port = unshared_port(dns::to_asio(dopts.listen.address));
            }
            where = dopts.listen.to_string();
            const auto tables = dns::server::make_tables();
            for (std::size_t i = 0; i < n; ++i) {
                control::worker& w = *rt.workers[i];
                dns_servers.push_back(
                    std::make_unique<dns::server>(w.ioc, *w.resolver, hook, dopts, tables));
                dopts.listen = dns_servers.back()->local_endpoint();
            }
            rt.self.listeners.push_back(dns_servers.front()->local_endpoint());
            for (auto& s : dns_servers) {
                s->start();
            }
        }
        if (admin_ep) {
            listener = "admin";
            where = admin_ep->to_string();
            admin_acceptor.emplace(make_acceptor(control, to_endpoint(*admin_ep), false));
            rt.self.listeners.push_back(from_endpoint(admin_acceptor->local_endpoint()));
        }
    } catch (const dns::bind_error& e) {
        std::cerr << "cordon: refusing to start: cannot listen on " << where << " (" << listener
                  << ", " << e.transport() << "): " << e.what() << '\n';
        return 1;
    } catch (const std::exception& e) {
        // The system's reason only: Boost's what() would add its own source location.
        std::cerr << "cordon: refusing to start: cannot listen on " << where << " (" << listener
                  << "): " << common::reason_of(e) << '\n';
        return 1;
    }
    rt.self.local = local_addresses();

    // proxy.max_connections, lowered to what the descriptor budget leaves (limits.note).
    const std::size_t max_conns = limits.max_connections;
    for (std::size_t i = 0; i < rt.workers.size(); ++i) {
        control::worker& w = *rt.workers[i];
        net::co_spawn(w.ioc,
                      accept_loop(proxy_acceptors[i], "proxy", max_conns, &rt.open_connections,
                                  [&rt, &w](tcp::socket s) {
                                      net::co_spawn(w.ioc, data::serve_client(rt, w, std::move(s)),
                                                    net::detached);
                                  }),
                      net::detached);
    }
    if (admin_acceptor) {
        net::co_spawn(control,
                      accept_loop(*admin_acceptor, "admin", limits.admin_connections,
                                  &rt.admin_connections,
                                  [&rt, &control, &admin_token](tcp::socket s) {
                                      net::co_spawn(control,
                                                    admin::serve_admin(rt, admin_token, std::move(s)),
                                                    net::detached);
                                  }),
                      net::detached);
    }

    // Tokens that expire close the tunnels opened with them, within a second.
    net::steady_timer sweep(control);
    std::uint64_t sweeps = 0;
    bool state_was_durable = rt.store != nullptr;
    std::function<void()> arm_sweep = [&] {
        sweep.expires_after(1s);
        sweep.async_wait([&](error_code ec) {
            if (ec) {
                return;
            }
            // Durability: what a failing store could not take is written once it can, and
            // a store that stops taking writes (or vanished) is said once, not per second.
            rt.retry_unsaved();
            std::string state_why;
            const bool durable = rt.state_durable(state_why);
            if (durable != state_was_durable) {
                std::cerr << "cordon: state store: "
                          << (durable ? std::string("writes are durable again")
                                      : state_why + " (kills are kept in memory; they answer "
                                                    "persisted: false)")
                          << '\n';
                state_was_durable = durable;
            }
            auto expired = rt.sessions.sweep_expired();
            for (const auto& [sid, tid] : expired) {
                rt.persist_session(sid);
            }
            if (!expired.empty()) {
                net::co_spawn(
                    control,
                    [&rt, expired = std::move(expired)]() -> awaitable<void> {
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
                        co_await rt.close_where(of_expired, why);
                    },
                    net::detached);
            }
            // Memory keeps ended and killed sessions a day; the store keeps them and the
            // event log a week (pruned hourly), so restarts and event replays reach back.
            rt.sessions.prune(std::chrono::hours(24));
            if (++sweeps % 3600 == 0 && rt.store) {
                std::string prune_error;
                if (!rt.store->prune(rt.now() - std::chrono::hours(24 * 7), prune_error)) {
                    std::cerr << "cordon: state store: " << prune_error << '\n';
                }
            }
            arm_sweep();
        });
    };
    arm_sweep();

    // Signals: SIGTERM/SIGINT stop, SIGHUP reloads.
    net::signal_set stop_signals(control, SIGTERM, SIGINT);
    net::signal_set hup(control, SIGHUP);
    bool stopping = false;
    stop_signals.async_wait([&](error_code ec, int sig) {
        if (ec) {
            return;
        }
        std::cerr << "cordon: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ", stopping\n";
        stopping = true;
        sweep.cancel();
        hup.cancel();
        error_code ignored;
        if (admin_acceptor) {
            admin_acceptor->close(ignored);
        }
        net::co_spawn(
            control,
            [&]() -> awaitable<void> {
                // Stop accepting on each worker's own thread, then close what is open.
                const std::function<std::size_t(control::worker&)> stop_accepting = [&](control::worker& w) {
                    error_code e;
                    proxy_acceptors[w.index].close(e);
                    if (w.index < dns_servers.size()) {
                        dns_servers[w.index]->stop();
                    }
                    return std::size_t{0};
                };
                co_await rt.on_workers(stop_accepting);
                const std::function<bool(const control::live_connection&)> all =
                    [](const control::live_connection&) { return true; };
                const std::string why = "shutdown";
                co_await rt.close_where(all, why);
                // Give the closed connections a moment to write their conn.close records.
                net::steady_timer t(control);
                for (int i = 0; i < 40 && rt.open_connections.load() > 0; ++i) {
                    t.expires_after(50ms);
                    co_await t.async_wait(use_nothrow);
                }
                for (auto& w : rt.workers) {
                    w->resolver->cancel_all();
                    w->ioc.stop();
                }
                control.stop();
            },
            net::detached);
    });
    std::function<void()> arm_hup = [&] {
        hup.async_wait([&](error_code ec, int) {
            if (ec || stopping) {
                return;
            }
            net::co_spawn(
                control,
                [&rt]() -> awaitable<void> {
                    const std::string by = "SIGHUP";
                    const std::string errors = co_await rt.reload(by);
                    if (errors.empty()) {
                        std::cerr << "cordon: SIGHUP: policy reloaded\n";
                    } else {
                        std::cerr << errors << "cordon: SIGHUP: policy refused; the old one "
                                               "stays in force\n";
                    }
                },
                net::detached);
            arm_hup();
        });
    };
    arm_hup();

    for (auto& w : rt.workers) {
        control::worker* wp = w.get();
        wp->thread = std::thread([wp] {
            for (;;) {
                try {
                    wp->ioc.run();
                    return;
                } catch (const std::exception& e) {
                    // A bug in one connection must not take the data plane down.
                    std::cerr << "cordon: worker " << wp->index << ": " << common::without_location(e)
                              << '\n';
                }
            }
        });
    }

    std::ostringstream ready;
    ready << "{\"proxy\": \"" << rt.proxy_endpoint.to_string() << "\", \"admin\": "
          << (admin_acceptor ? "\"" + from_endpoint(admin_acceptor->local_endpoint()).to_string() +
                                   "\""
                             : std::string("null"))
          << ", \"dns\": "
          << (!dns_servers.empty()
                  ? "\"" + dns_servers.front()->local_endpoint().to_string() + "\""
                  : std::string("null"))
          << ", \"pid\": " << ::getpid() << "}\n";
    std::cerr << "cordon: serving " << source << ": " << ready.str();
    if (!opts.ready_file.empty()) {
        const std::string tmp = opts.ready_file + ".tmp";
        {
            std::ofstream out(tmp);
            out << ready.str();
        }
        std::rename(tmp.c_str(), opts.ready_file.c_str());
    }

    for (;;) {
        try {
            control.run();
            break;
        } catch (const std::exception& e) {
            std::cerr << "cordon: control: " << common::without_location(e) << '\n';
        }
    }
    for (auto& w : rt.workers) {
        w->ioc.stop();
        if (w->thread.joinable()) {
            w->thread.join();
        }
    }
    dns_servers.clear();  // their sockets go while their io_contexts still exist
    rt.workers.clear();  // connections still suspended are destroyed while `rt` is whole
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
                  << "exit (" << pol_audit_path << "); the " << kept.size()
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

}  // namespace cordon::proxy
