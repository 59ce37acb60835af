#include "proxy/listeners.hpp"

#include <ifaddrs.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <sstream>
#include <system_error>

#include "common/accept_loop.hpp"
#include "common/error_text.hpp"
#include "dns/asio_address.hpp"
#include "proxy/admin/admin_api.hpp"
#include "proxy/data/client_conn.hpp"

namespace cordon::proxy {
namespace {

// The DNS server runs on the first worker's thread, with its c-ares channel. One thread
// answers well over 200,000 cached or denied queries a second here, far above what a
// sandbox fleet asks (and each client is rate-limited); a server per worker (SO_REUSEPORT,
// which dns::server supports) made every query slower on the 2-core reference machine:
// 2.7-3.0 us of CPU instead of 2.0, from smaller batches, more wake-ups and the shared
// cache and rate tables bouncing between cores (bench/dns_bench).
constexpr std::size_t dns_threads = 1;

tcp::endpoint to_endpoint(const config::endpoint& e) { return {dns::to_asio(e.address), e.port}; }

config::endpoint from_endpoint(const tcp::endpoint& e) {
    return config::endpoint{dns::to_ip(e.address()), e.port()};
}

tcp::acceptor make_acceptor(net::io_context& ioc, const tcp::endpoint& ep, bool reuse_port) {
    tcp::acceptor a(ioc);
    a.open(ep.protocol());
    a.set_option(net::socket_base::reuse_address(true));
    // Accepted sockets inherit TCP_NODELAY from the listener on Linux: one setsockopt here,
    // not one per connection (serve_client relies on it; admin sockets get it too).
    a.set_option(tcp::no_delay(true));
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

}  // namespace

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

bool open_listeners(control::runtime& rt, net::io_context& control, const listen_plan& plan,
                    dns::policy_hook& hook, listeners& out) {
    // Which listener is being set up, and where, for the error that names it.
    std::string listener = "proxy";
    std::string where = plan.proxy.to_string();
    try {
        tcp::endpoint bind_ep = to_endpoint(plan.proxy);
        if (bind_ep.port() == 0) {
            bind_ep.port(unshared_port(bind_ep.address()));
        }
        where = from_endpoint(bind_ep).to_string();
        for (unsigned i = 0; i < plan.threads; ++i) {
            auto w = std::make_unique<control::worker>(i);
            w->pipes.set_limit(plan.pipes_per_worker);
            w->resolver = dns::make_resolver(w->ioc, plan.resolver);
            out.proxy.push_back(make_acceptor(w->ioc, bind_ep, true));
            // Every worker binds the same port (port 0 was replaced by a free one above).
            bind_ep = out.proxy.back().local_endpoint();
            rt.connections.workers.push_back(std::move(w));
        }
        rt.proxy_endpoint = from_endpoint(out.proxy.front().local_endpoint());
        rt.self.listeners.push_back(rt.proxy_endpoint);
        if (plan.socks) {
            listener = "socks";
            where = plan.socks->to_string();
            tcp::endpoint socks_ep = to_endpoint(*plan.socks);
            if (socks_ep.port() == 0) {
                socks_ep.port(unshared_port(socks_ep.address()));
            }
            where = from_endpoint(socks_ep).to_string();
            for (auto& w : rt.connections.workers) {
                out.socks.push_back(make_acceptor(w->ioc, socks_ep, true));
                socks_ep = out.socks.back().local_endpoint();
            }
            rt.self.listeners.push_back(from_endpoint(out.socks.front().local_endpoint()));
        }
        if (plan.dns) {
            listener = "dns";
            where = plan.dns->to_string();
            dns::server_options dopts = plan.dns_options;
            const std::size_t n = std::min(dns_threads, rt.connections.workers.size());
            dopts.reuse_port = n > 1;
            if (dopts.listen.port == 0) {
                dopts.listen.port = unshared_port(dns::to_asio(dopts.listen.address));
            }
            where = dopts.listen.to_string();
            const auto tables = dns::server::make_tables();
            for (std::size_t i = 0; i < n; ++i) {
                control::worker& w = *rt.connections.workers[i];
                out.dns.push_back(
                    std::make_unique<dns::server>(w.ioc, *w.resolver, hook, dopts, tables));
                dopts.listen = out.dns.back()->local_endpoint();
            }
            rt.self.listeners.push_back(out.dns.front()->local_endpoint());
            for (auto& s : out.dns) {
                s->start();
            }
        }
        if (plan.admin) {
            listener = "admin";
            where = plan.admin->to_string();
            out.admin.emplace(make_acceptor(control, to_endpoint(*plan.admin), false));
            rt.self.listeners.push_back(from_endpoint(out.admin->local_endpoint()));
        }
    } catch (const dns::bind_error& e) {
        std::cerr << "cordon: refusing to start: cannot listen on " << where << " (" << listener
                  << ", " << e.transport() << "): " << e.what() << '\n';
        return false;
    } catch (const std::exception& e) {
        // The system's reason only: Boost's what() would add its own source location.
        std::cerr << "cordon: refusing to start: cannot listen on " << where << " (" << listener
                  << "): " << common::reason_of(e) << '\n';
        return false;
    }
    return true;
}

void start_accepting(control::runtime& rt, listeners& l, net::io_context& control,
                     const std::string& admin_token) {
    // proxy.max_connections, lowered to what the descriptor budget leaves (limits.note).
    const auto max_conns = static_cast<std::int64_t>(rt.limits.max_connections);
    for (std::size_t i = 0; i < rt.connections.workers.size(); ++i) {
        control::worker& w = *rt.connections.workers[i];
        const auto on_client = [&rt, &w, max_conns](tcp::socket& s, const tcp::endpoint& peer) {
            if (rt.connections.open.load() >= max_conns) {
                error_code ignored;
                s.close(ignored);  // over proxy.max_connections: refuse at once
                return common::after_accept::next;
            }
            net::co_spawn(w.ioc, data::serve_client(rt, w, std::move(s), peer), net::detached);
            return common::after_accept::next;
        };
        net::co_spawn(w.ioc, common::accept_loop(l.proxy[i], on_client, "proxy"), net::detached);
        if (i < l.socks.size()) {
            // The same connection cap: SOCKS clients are proxy clients.
            const auto on_socks = [&rt, &w, max_conns](tcp::socket& s, const tcp::endpoint& peer) {
                if (rt.connections.open.load() >= max_conns) {
                    error_code ignored;
                    s.close(ignored);
                    return common::after_accept::next;
                }
                net::co_spawn(w.ioc, data::serve_client(rt, w, std::move(s), peer, true),
                              net::detached);
                return common::after_accept::next;
            };
            net::co_spawn(w.ioc, common::accept_loop(l.socks[i], on_socks, "socks"), net::detached);
        }
    }
    if (l.admin) {
        const auto max_admin = static_cast<std::int64_t>(rt.limits.admin_connections);
        const auto on_admin = [&rt, &control, &admin_token, max_admin](tcp::socket& s) {
            if (rt.admin_connections.load() >= max_admin) {
                error_code ignored;
                s.close(ignored);  // over the admin share of the descriptor budget
                return common::after_accept::next;
            }
            net::co_spawn(control, admin::serve_admin(rt, admin_token, std::move(s)),
                          net::detached);
            return common::after_accept::next;
        };
        net::co_spawn(control, common::accept_loop(*l.admin, on_admin, "admin"), net::detached);
    }
}

void stop_admin(listeners& l) {
    error_code ignored;
    if (l.admin) {
        l.admin->close(ignored);
    }
}

awaitable<void> stop_accepting(control::runtime& rt, listeners& l) {
    const std::function<std::size_t(control::worker&)> stop = [&l](control::worker& w) {
        error_code e;
        l.proxy[w.index].close(e);
        if (w.index < l.socks.size()) {
            l.socks[w.index].close(e);
        }
        if (w.index < l.dns.size()) {
            l.dns[w.index]->stop();
        }
        return std::size_t{0};
    };
    co_await rt.connections.on_workers(stop);
}

std::string ready_line(const control::runtime& rt, const listeners& l) {
    std::ostringstream ready;
    ready << "{\"proxy\": \"" << rt.proxy_endpoint.to_string() << "\", ";
    if (!l.socks.empty()) {
        ready << "\"socks\": \"" << from_endpoint(l.socks.front().local_endpoint()).to_string()
              << "\", ";
    }
    ready << "\"admin\": "
          << (l.admin ? "\"" + from_endpoint(l.admin->local_endpoint()).to_string() + "\""
                      : std::string("null"))
          << ", \"dns\": "
          << (!l.dns.empty() ? "\"" + l.dns.front()->local_endpoint().to_string() + "\""
                             : std::string("null"))
          << ", \"pid\": " << ::getpid() << "}\n";
    return ready.str();
}

}  // namespace cordon::proxy
