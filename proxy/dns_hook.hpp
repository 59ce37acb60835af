#pragma once
// The daemon's side of the DNS server: attribution, the allow decision, audit and metrics,
// sharing the proxy's policy, sessions and kill state.

#include "dns/server.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy {

/// Thread-safe: it reads the runtime's atomics, the session registry and the audit log,
/// which are.
class dns_hook final : public dns::policy_hook {
public:
    explicit dns_hook(control::runtime& rt) : rt_(rt) {}
    dns::verdict decide(const config::ip_address& client, const dns::query& q) override;
    void count(const config::ip_address& client, const dns::question& q, const dns::verdict& v,
               std::uint64_t n) override;
    void audit(const config::ip_address& client, const dns::question& q, const dns::verdict& v,
               dns::rcode rc, bool cached, std::uint64_t repeats) override;
    /// Remembers the answer's addresses for the name (runtime::answered), until their TTL.
    void answered(const config::ip_address& client, const dns::question& q, const dns::verdict& v,
                  std::span<const std::uint8_t> answer) override;
    void rate_limited(const config::ip_address& client) override;
    void tcp_refused(const config::ip_address& client) override;

private:
    control::runtime& rt_;
};

}  // namespace cordon::proxy
