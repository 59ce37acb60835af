#include "proxy/control/capacity.hpp"

#include <algorithm>

namespace cordon::proxy::control {
namespace {

// The fixed part of the reserve, each with what holds it.
constexpr std::uint64_t base_descriptors = 24;         // stdio, the control io_context (epoll,
                                                       // eventfd, timerfd), signals, the ready
                                                       // file, policy/token/hosts reads, netlink
constexpr std::uint64_t per_worker_descriptors = 8;    // io_context, proxy acceptor, c-ares
                                                       // channel sockets
constexpr std::uint64_t state_descriptors = 4;         // cordon.db, -wal, the reserve, a journal
constexpr std::uint64_t audit_descriptors = 4;         // the day's file, the next part, a listing
constexpr std::uint64_t webhook_descriptors = 4;       // alert deliveries and their resolver
constexpr std::uint64_t dns_listener_descriptors = 4;  // UDP sockets and the TCP acceptor
constexpr std::uint64_t admin_listener_descriptors = 1;
constexpr std::uint64_t margin_descriptors = 16;  // what the counts above miss

}  // namespace

capacity plan_capacity(const capacity_inputs& in) {
    capacity c;
    c.descriptor_limit = in.descriptor_limit;
    const std::uint64_t limit = in.descriptor_limit;
    const std::uint64_t workers = std::max<std::size_t>(in.workers, 1);
    if (in.admin) {
        c.admin_connections = static_cast<std::size_t>(
            std::clamp<std::uint64_t>(limit / 128, 8, 4096));
    }
    c.pipes_per_worker = static_cast<std::size_t>(
        std::min<std::uint64_t>(limit / 64 / 2 / workers, 256));
    std::uint64_t reserved = base_descriptors + workers * per_worker_descriptors +
                             state_descriptors + audit_descriptors + webhook_descriptors +
                             margin_descriptors + workers * c.pipes_per_worker * 2;
    if (in.admin) {
        reserved += admin_listener_descriptors + c.admin_connections;
    }
    if (in.dns) {
        reserved += dns_listener_descriptors + in.dns_tcp_connections;
    }
    c.reserved = reserved;
    const std::uint64_t left = limit > reserved ? limit - reserved : 0;
    const std::uint64_t fits = left / capacity::descriptors_per_connection;
    if (fits < min_proxy_connections) {
        c.error = "the descriptor limit (RLIMIT_NOFILE " + std::to_string(limit) +
                  ") leaves room for " + std::to_string(fits) + " proxy connections after the " +
                  std::to_string(reserved) + " descriptors reserved for the admin API, the kill " +
                  "switch, state, audit" + (in.dns ? ", DNS over TCP" : std::string()) +
                  " and pipes; at least " + std::to_string(min_proxy_connections) +
                  " are needed: raise the limit (ulimit -n, LimitNOFILE=)";
        return c;
    }
    c.max_connections = static_cast<std::size_t>(
        std::min<std::uint64_t>(fits, in.configured_max_connections));
    if (c.max_connections < in.configured_max_connections) {
        c.note = "proxy.max_connections " + std::to_string(in.configured_max_connections) +
                 " lowered to " + std::to_string(c.max_connections) + ": RLIMIT_NOFILE " +
                 std::to_string(limit) + " less " + std::to_string(reserved) +
                 " descriptors reserved, at " +
                 std::to_string(capacity::descriptors_per_connection) + " per connection";
    }
    return c;
}

}  // namespace cordon::proxy::control
