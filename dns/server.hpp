#pragma once
// The allowlist-only DNS server: UDP and TCP on listen.dns. A query is answered only when
// the asking client's job may resolve the name; denied names never reach the upstream.
// Decisions come from the daemon through `policy_hook` (dns/ never includes proxy/).
// Light header: Asio stays in server.cpp.

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "config/ip.hpp"
#include "config/policy.hpp"
#include "dns/wire.hpp"

namespace boost::asio {
class io_context;
}

namespace cordon::dns {

class resolver;

/// The daemon's answer for one query.
struct verdict {
    bool allow = false;
    std::string reason;   ///< the deny reason when !allow (no_rule, kill_switch, ...); when
                          ///< allow, empty, or the would-deny reason of a report-mode job
    std::string job;      ///< the job the client was attributed to, if any
    std::string session;  ///< the session, when attributed by its token
};

/// Implemented by the daemon. Called on the server's thread; implementations are
/// thread-safe with respect to the rest of the daemon.
class policy_hook {
public:
    virtual ~policy_hook() = default;
    /// Attribution (sources, the EDNS session option from loopback, dns.default_job) and
    /// the allow decision (kill switch, killed session, the job's names).
    virtual verdict decide(const config::ip_address& client, const query& q) = 0;
    /// Answered queries: count them (metrics, denial observers). `n` is 1 for a query counted
    /// as it goes out, or the number of repeats of a coalesced line (counted when the line is
    /// written, at most a window later: see dns/repeats.hpp).
    virtual void count(const config::ip_address& client, const question& q, const verdict& v,
                       std::uint64_t n) = 0;
    /// An audit line: one query, or (repeats > 0) `repeats` queries identical to one already
    /// written, asked since it was (the server coalesces floods, see dns/repeats.hpp).
    virtual void audit(const config::ip_address& client, const question& q, const verdict& v,
                       rcode rc, bool cached, std::uint64_t repeats) = 0;
    /// An allowed query's answer as it goes to the client (A or AAAA questions only): the
    /// daemon remembers its addresses for the name (answered.hpp). Default: nothing.
    virtual void answered(const config::ip_address& client, const question& q, const verdict& v,
                          std::span<const std::uint8_t> answer) {
        (void)client;
        (void)q;
        (void)v;
        (void)answer;
    }
    /// A query dropped by the rate limit (of its session, or of its address).
    virtual void rate_limited(const config::ip_address& client) = 0;
    /// A DNS-over-TCP connection closed at once because the listener or the client had as
    /// many as server_options allows.
    virtual void tcp_refused(const config::ip_address& client) = 0;
};

struct server_options {
    config::endpoint listen;
    config::deny_rcode deny = config::deny_rcode::refused;
    std::uint32_t cache_entries = 10'000;
    std::vector<std::uint16_t> query_types{type_a, type_aaaa, type_cname, type_https, type_svcb};
    /// One token bucket per session (queries carrying a valid session option), else per
    /// client address; every query takes a token, malformed ones included.
    std::uint32_t rate_qps = 100;
    std::uint32_t rate_burst = 200;
    /// Upstream lookups in flight for one session (else one address): more are answered
    /// SERVFAIL at once, so names that never resolve cannot hold every slot (each waits for
    /// the upstream timeout). The listener's total is bounded by the resolver
    /// (resolver_options::max_relayed), which keeps the rest for the proxy's own lookups.
    std::uint32_t max_inflight_per_client = 64;
    /// DNS over TCP: connections open at once (all threads; at most a quarter of the soft
    /// descriptor limit, whatever is configured), per client address (a connection moves
    /// to its session's count once a query names one), and the whole life of a connection,
    /// not restarted by traffic: a client dripping bytes cannot hold descriptors.
    std::uint32_t tcp_max_connections = 256;
    std::uint32_t tcp_max_per_client = 16;
    std::chrono::milliseconds tcp_timeout{10'000};
    /// Identical audit lines within this window are written once plus a count (0: every
    /// query gets its own line).
    std::chrono::milliseconds audit_window{1000};
    /// SO_REUSEPORT: one server per thread on the same port, the kernel spreading clients
    /// (by address and port) across them. Each has its own cache and rate buckets.
    bool reuse_port = false;
};

/// Why a server could not bind: the socket that failed ("UDP" or "TCP") and the system's
/// reason; what() is the reason alone ("Address already in use"), without Boost's source
/// location.
class bind_error : public std::runtime_error {
public:
    bind_error(std::string transport, const std::string& reason)
        : std::runtime_error(reason), transport_(std::move(transport)) {}
    const std::string& transport() const noexcept { return transport_; }

private:
    std::string transport_;
};

/// One DNS listener (a UDP socket and a TCP acceptor on the same address) on one
/// io_context, using that io_context's resolver. Not thread-safe: everything runs there.
class server {
public:
    /// The answer cache, the rate buckets and the in-flight and TCP counts, shared (under a
    /// mutex) by the servers of every thread, so a client's limits and a cached answer do
    /// not depend on which thread the kernel handed its packet to.
    struct tables;
    static std::shared_ptr<tables> make_tables();

    /// Binds both sockets; throws bind_error when it cannot.
    server(boost::asio::io_context& ioc, resolver& upstream, policy_hook& hook, server_options opts,
           std::shared_ptr<tables> shared);
    ~server();
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    /// The bound address (the real port when listen.port was 0).
    config::endpoint local_endpoint() const;
    /// Starts serving (call once, from any thread before the io_context runs).
    void start();
    /// Closes the listeners and writes the pending coalesced audit lines (from the
    /// io_context's thread).
    void stop();

    struct impl;

private:
    std::shared_ptr<impl> impl_;
};

}  // namespace cordon::dns
