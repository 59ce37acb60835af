#pragma once
// The descriptor budget: how much of RLIMIT_NOFILE the data plane may use, so that what the
// kill needs (the admin listener and its connections, the state store, the audit files, the
// control thread) is always left. Pure: no I/O.

#include <cstddef>
#include <cstdint>
#include <string>

namespace cordon::proxy::control {

/// What the daemon runs, as far as descriptors go.
struct capacity_inputs {
    std::uint64_t descriptor_limit = 0;            ///< RLIMIT_NOFILE (soft, after raising it)
    std::size_t workers = 1;                       ///< data-plane threads
    bool dns = false;                              ///< a DNS listener (UDP and TCP)
    std::size_t dns_tcp_connections = 0;           ///< its TCP connection cap (counted when dns)
    bool admin = false;                            ///< an admin listener
    std::uint32_t configured_max_connections = 0;  ///< proxy.max_connections
};

/// The budget. Every client connection may hold two descriptors (its socket and its
/// upstream's); splice pipes are budgeted apart (per worker; a tunnel without one copies
/// through memory instead). reserved + max_connections * descriptors_per_connection never
/// exceeds the limit.
struct capacity {
    static constexpr std::size_t descriptors_per_connection = 2;
    std::uint64_t descriptor_limit = 0;
    std::uint64_t reserved = 0;         ///< descriptors the data plane's clients never reach
    std::size_t admin_connections = 0;  ///< admin API connections at once (reserved)
    std::size_t pipes_per_worker = 0;   ///< splice pipes in use at once per worker (reserved)
    std::size_t max_connections = 0;    ///< proxy client connections at once
    /// Why max_connections is below proxy.max_connections (empty when it is not).
    std::string note;
    /// Set when the limit cannot hold the reserve and a minimum of client connections:
    /// the daemon refuses to start with this message.
    std::string error;
};

/// At least this many proxy client connections, or the daemon refuses to start.
inline constexpr std::size_t min_proxy_connections = 16;

/// The budget for `in`: the fixed reserve (control thread, listeners, resolvers, state store,
/// audit files, webhook, a margin), the admin connections (limit/128, 8 to 4096), the DNS TCP
/// connections, the pipes (limit/64 descriptors in all, at most 256 per worker); then what is left,
/// in client connections, capped by proxy.max_connections.
capacity plan_capacity(const capacity_inputs& in);

}  // namespace cordon::proxy::control
