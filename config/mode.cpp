#include "config/mode.hpp"

namespace cordon::config {
namespace {

bool in_report_mode(std::string_view job, const compiled_policy& p) {
    const int ji = p.job_index(job);
    return ji >= 0 &&
           p.source().jobs[static_cast<std::size_t>(ji)].mode == job_mode::report;
}

moded_decision relax(const decision& d) {
    moded_decision m;
    m.effective = d;  // the rule naming the host, if any: its resolves_to still applies
    m.effective.reason = deny_reason::none;
    if (d.reason == deny_reason::no_rule) {
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
            return true;
        default:
            return false;
    }
}

moded_decision decide_with_mode(const decide_args& args, const compiled_policy& p) {
    const decision d = decide(args, p);
    if (d.allowed() || !report_relaxes(d.reason) || !in_report_mode(args.job, p)) {
        return moded_decision{d, deny_reason::none};
    }
    // A non-public IP literal gets here only with a cidr rule that opens its range (no
    // rule: decide() said private_address); a name's addresses are checked after it
    // resolves, against the rule naming it or, with none, as public only.
    return relax(d);
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
