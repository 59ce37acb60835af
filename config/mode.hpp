#pragma once
// Report mode (`mode: report` on a job card): what enforce mode would deny is let through
// and flagged, except what is never relaxed. Pure, over decide.hpp's decisions.

#include <string_view>

#include "config/decide.hpp"

namespace cordon::config {

/// True for the reasons report mode relaxes: the allowlist's own answers (no_rule, port,
/// protocol, method, http_rule). Never: private_address, bad_request, unknown_job, and every reason
/// decided outside the policy model (kill switch, auth, session and token states, limits,
/// budget, sni_mismatch, audit_unavailable).
bool report_relaxes(deny_reason r) noexcept;

/// A decision with the job's mode applied.
struct moded_decision {
    /// What the proxy does. When report mode relaxed a denial this is allowed, and `rule` is
    /// the rule that opened this very host and port (a protocol, method or http_rule denial), whose
    /// `resolves_to` still governs the addresses, exactly as in enforce mode; or nullptr
    /// (no_rule, port), and then every address must be public (check_addresses()): a rule's
    /// non-public addresses are never lent to ports it does not list. The address check is
    /// never relaxed.
    decision effective;
    /// The reason enforce mode would have denied it; none when it did not.
    deny_reason would_deny = deny_reason::none;
    bool reported() const noexcept { return would_deny != deny_reason::none; }
};

/// decide(), then the job's mode. In report mode a relaxable denial becomes allowed with
/// `would_deny` set. A non-public IP literal is relaxed only where a cidr rule opens its
/// range (with another port or protocol); otherwise decide() says private_address.
moded_decision decide_with_mode(const decide_args& args, const compiled_policy& p);

/// decide_dns(), then the job's mode: in report mode a name no rule names resolves, with
/// `would_deny` no_rule. Malformed and IP-literal names stay bad_request.
moded_decision decide_dns_with_mode(std::string_view job, std::string_view name,
                                    const compiled_policy& p);

}  // namespace cordon::config
