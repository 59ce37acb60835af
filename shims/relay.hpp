#pragma once
// The sandbox's only ways out: listeners created inside its network namespace (by
// shims/sandbox) and served here, on the host side, where each connection or query is
// carried to cordon's proxy or DNS resolver over the host's loopback. The DNS relay rebuilds
// every query with the cordon session option (EDNS 65001, "SESSION:TOKEN") so the resolver
// answers for this session's job; whatever option the sandbox sent is dropped.
// Asio stays in the .cpp: the caller passes its io_context.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace cordon::shim {

struct relay_target {
    std::string host;  ///< numeric address
    std::uint16_t port = 0;
};

/// Rebuilds a sandbox's DNS query for cordon: same id, name and type, RD set, with an OPT
/// carrying only the session option. A query cordon's parser refuses gets its error answer
/// instead (`answer_locally` set). Pure.
struct dns_rewrite {
    std::vector<std::uint8_t> message;
    bool answer_locally = false;
};
dns_rewrite rewrite_dns_query(std::span<const std::uint8_t> query, const std::string& option);

/// Serves the proxy listener: every connection accepted is joined to a new connection to
/// `proxy`, bytes both ways, half-close passed on. Takes ownership of `listen_fd`.
void start_proxy_relay(boost::asio::io_context& ioc, int listen_fd, const relay_target& proxy);

/// Serves the DNS listeners (UDP and TCP, either may be -1). Without a resolver (`dns`
/// unset) every query is answered REFUSED. Takes ownership of the fds.
void start_dns_relay(boost::asio::io_context& ioc, int udp_fd, int tcp_fd,
                     const std::optional<relay_target>& dns, const std::string& session_option);

}  // namespace cordon::shim
