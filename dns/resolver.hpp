#pragma once
// The upstream name resolver the proxy uses: the hosts file first, then DNS through c-ares
// driven by Asio. Never the blocking getaddrinfo. Asio and c-ares stay out of this header.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/ip.hpp"
#include "config/policy.hpp"
#include "dns/hosts.hpp"

namespace boost::asio {
class io_context;
}

namespace cordon::dns {

/// What one lookup found.
struct raw_result {
    std::vector<std::uint8_t> answer;  ///< the upstream's DNS message, when error is empty
    std::string error;
};

struct resolve_result {
    std::vector<config::ip_address> addresses;  ///< A and AAAA answers, IPv4 first, deduplicated
    /// Empty on success (then `addresses` is not empty). Otherwise one of: "NXDOMAIN",
    /// "no addresses" (the name exists but has no A/AAAA), "timeout", "upstream failed"
    /// (servers unreachable or answering SERVFAIL/REFUSED), "bad response", "bad name",
    /// "no upstream", "too many queries", "cancelled", or c-ares' own message if rarer.
    std::string error;
    bool from_hosts = false;  ///< answered by the hosts file
    std::chrono::milliseconds elapsed{0};
};

struct resolver_options {
    /// Servers asked, in order. {system=true} stands for the servers of /etc/resolv.conf
    /// (read by c-ares); an empty list means hosts file only (every other name: "no upstream").
    std::vector<config::dns_upstream> upstream{config::dns_upstream{true, {}}};
    /// Consulted first; read once, when the resolver is made. "" disables it.
    std::string hosts_file = "/etc/hosts";
    std::chrono::milliseconds timeout{3000};  ///< per try (c-ares doubles it on each round)
    int tries = 2;
    /// Lookups in flight at once; more fail at once with "too many queries" (stops a flood of
    /// distinct names from growing memory and sockets without bound).
    std::size_t max_queries = 4096;
    /// Of those, at most this many async_query lookups (the DNS listener's clients): the rest
    /// stays for async_resolve (the proxy's own lookups), whatever the listener's clients ask.
    std::size_t max_relayed = 2048;
    /// Asked before every lookup starts, before c-ares gets to run (socket ready, timer) and
    /// at least every 100 ms while lookups are pending: while it answers false, new lookups
    /// fail with "cancelled" and the ones in flight are cancelled (within 100 ms) before
    /// c-ares can send a retry or hand over an answer (the network kill). Called on the
    /// resolver's thread; empty: always open.
    std::function<bool()> upstream_allowed;
};

/// Resolves names asynchronously: hosts file first, then upstream DNS via c-ares
/// (ares_getaddrinfo, AF_UNSPEC, DNS only; the name is sent fully qualified, never expanded
/// with resolv.conf search domains). IP literals are answered as themselves; "localhost" and
/// names below ".localhost" not in the hosts file get the loopback addresses and are never
/// sent upstream (RFC 6761).
///
/// Threading: one instance per io_context, used only from the one thread that runs it (not
/// thread-safe, no strand inside). Destroy it before the io_context.
///
/// Callbacks: `done` is invoked exactly once, always from a handler run by the io_context,
/// never inline from async_resolve() or cancel_all() - except that a resolver destroyed
/// first invokes no more callbacks at all: pending ones (and results already queued) are
/// dropped unrun, so a callback never runs after the resolver is gone. Call cancel_all() and
/// let the io_context run if every caller must hear back.
class resolver {
public:
    virtual ~resolver() = default;
    /// Looks up `name` (any case, optional trailing dot). Names that are not valid host
    /// names fail with "bad name".
    virtual void async_resolve(std::string name, std::function<void(resolve_result)> done) = 0;
    /// Sends a whole DNS query message upstream as it is (c-ares' ares_send: retries, TCP on
    /// truncation) and hands back the upstream's whole answer message. The hosts file is
    /// not consulted here. Errors as for async_resolve, except that an NXDOMAIN or other
    /// rcode answer is a success: it comes back as the answer.
    virtual void async_query(std::vector<std::uint8_t> message,
                             std::function<void(raw_result)> done) = 0;
    /// The hosts file this resolver reads first, for the DNS server's own answers.
    virtual const hosts_table& hosts() const = 0;
    /// Fails every outstanding query with error "cancelled" (on shutdown). The resolver
    /// stays usable afterwards.
    virtual void cancel_all() = 0;
};

/// Creates the resolver: reads the hosts file and sets up a c-ares channel with `opts`.
/// Throws std::runtime_error when c-ares cannot be set up (a startup error).
std::unique_ptr<resolver> make_resolver(boost::asio::io_context& ioc, const resolver_options& opts);

/// ares_library_init once per process (call from main before threads); returns false and
/// sets `error` on failure. Safe to call more than once.
bool init_library(std::string& error);

}  // namespace cordon::dns
