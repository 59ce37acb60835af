#include "config/mode.hpp"

namespace cordon::config {
namespace {

bool in_report_mode(std::string_view job, const compiled_policy& p) {
    const int ji = p.job_index(job);
    return ji >= 0 && p.source().jobs[static_cast<std::size_t>(ji)].mode == job_mode::report;
}

// Let through, flagged. The rule naming the host keeps governing its addresses only where
// it opened exactly this host and port (a protocol, method or http_rule denial): non-public
// addresses a rule lends one port are not lent to the others, nor to hosts no rule names, so a
// relaxed request to anything else must resolve to public addresses only.
moded_decision relax(const decision& d) {
    moded_decision m;
    m.effective = d;
    m.effective.reason = deny_reason::none;
    if (d.reason == deny_reason::no_rule || d.reason == deny_reason::port) {
        m.effective.rule = nullptr;
        m.effective.rule_index = -1;
    }
    m.would_deny = d.reason;
    return m;
}

}  // namespace

bool report_relaxes(deny_reason r) noexcept {
    switch (r) {
        case deny_reason::no_rule:
        case deny_reason::port:
        case deny_reason::protocol:
        case deny_reason::method:
        case deny_reason::http_rule: return true;
        default: return false;
    }
}

moded_decision decide_with_mode(const decide_args& args, const compiled_policy& p) {
    const decision d = decide(args, p);
    if (d.allowed() || !report_relaxes(d.reason) || !in_report_mode(args.job, p)) {
        return moded_decision{d, deny_reason::none};
    }
    moded_decision m = relax(d);
    // A non-public IP literal gets here only with a cidr rule that opens its range on other
    // ports or protocols: refused now when that rule no longer governs. A name's addresses
    // are checked the same way once it resolves.
    if (const auto ip = parse_ip(args.host)) {
        const ip_address one[] = {*ip};
        const decision checked = check_addresses(m.effective, one);
        if (!checked.allowed()) {
            return moded_decision{checked, deny_reason::none};
        }
    }
    return m;
}

moded_decision decide_dns_with_mode(std::string_view job, std::string_view name,
                                    const compiled_policy& p) {
    const decision d = decide_dns(job, name, p);
    if (d.allowed() || !report_relaxes(d.reason) || !in_report_mode(job, p)) {
        return moded_decision{d, deny_reason::none};
    }
    return relax(d);
}

}  // namespace cordon::config
