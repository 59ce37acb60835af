#pragma once
// `cordon serve`'s listeners: the proxy port (one SO_REUSEPORT acceptor per worker), the DNS
// server and the admin listener; binding them, accepting on them and stopping. Internal to
// proxy/ (heavy: Asio); run_daemon (proxy/daemon.cpp) drives them.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/asio.hpp"
#include "config/policy.hpp"
#include "dns/resolver.hpp"
#include "dns/server.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy {

/// Where to listen and with what, taken from the policy before it is compiled.
struct listen_plan {
    config::endpoint proxy;
    std::optional<config::endpoint> socks;  ///< listen.socks: SOCKS5 only
    std::optional<config::endpoint> admin;
    std::optional<config::endpoint> dns;
    dns::server_options dns_options;   ///< when `dns` is set
    dns::resolver_options resolver;    ///< each worker's c-ares channel
    unsigned threads = 1;              ///< data-plane workers
    std::size_t pipes_per_worker = 0;  ///< capacity::pipes_per_worker
};

/// The bound listeners. Declared in run_daemon after the runtime and before the workers run.
struct listeners {
    std::vector<tcp::acceptor> proxy;               ///< one per worker, on its io_context
    std::vector<tcp::acceptor> socks;               ///< listen.socks: one per worker, or none
    std::optional<tcp::acceptor> admin;             ///< on the control thread
    std::vector<std::unique_ptr<dns::server>> dns;  ///< on the first worker's thread
};

/// Makes the workers (rt.connections.workers) and binds every listener, recording what was
/// bound in rt (proxy_endpoint, self.listeners). On failure says why on stderr ("refusing to
/// start: cannot listen on ...") and returns false. Control thread, before the workers run.
bool open_listeners(control::runtime& rt, net::io_context& control, const listen_plan& plan,
                    dns::policy_hook& hook, listeners& out);

/// Starts accepting: each worker on its own proxy acceptor, capped at
/// rt.limits.max_connections; the admin listener on the control thread, capped at
/// rt.limits.admin_connections. `admin_token` must outlive the control io_context's run.
void start_accepting(control::runtime& rt, listeners& l, net::io_context& control,
                     const std::string& admin_token);

/// Closes the admin listener now (control thread).
void stop_admin(listeners& l);

/// Stops accepting on every worker, each on its own thread (proxy acceptors, DNS servers).
awaitable<void> stop_accepting(control::runtime& rt, listeners& l);

/// The bound addresses as `cordon serve` announces them (stderr and the ready file):
/// {"proxy": ..., "admin": ... or null, "dns": ... or null, "pid": ...} and a newline; with
/// listen.socks, "socks": ... too.
std::string ready_line(const control::runtime& rt, const listeners& l);

/// This host's interface addresses (for self_addresses::local).
std::vector<config::ip_address> local_addresses();

}  // namespace cordon::proxy
