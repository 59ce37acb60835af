#include "config/decide.hpp"

#include <algorithm>
#include <array>

#include "config/classify.hpp"
#include "config/host.hpp"
#include "config/tables.hpp"

namespace cordon::config {

std::string_view to_string(deny_reason r) noexcept {
    static constexpr std::array<std::string_view, deny_reason_count> names{
        "none",
        "no_rule",
        "port",
        "protocol",
        "method",
        "private_address",
        "bad_request",
        "unknown_job",
        "sni_mismatch",
        "kill_switch",
        "session_killed",
        "token_expired",
        "auth",
        "limit",
        "budget",
        "policy_changed",
        "token_revoked",
        "session_ended",
        "audit_unavailable",
        "http_rule",
        "upstream_tls",
        "credential_misuse",
        "credential_required",
        "secret_leak",
        "mcp_tool",
        "mcp_tool_changed",
    };
    const auto i = static_cast<std::size_t>(r);
    return i < names.size() ? names[i] : "unknown";
}

namespace {

// How far a rule got in matching a request; the furthest stage reached over all candidate
// rules names the deny reason.
enum stage : int { no_match = 0, host_ok, port_ok, protocol_ok, method_ok, all_ok };

deny_reason reason_for(int best) {
    switch (best) {
        case host_ok: return deny_reason::port;
        case port_ok: return deny_reason::protocol;
        case protocol_ok: return deny_reason::method;
        case method_ok: return deny_reason::http_rule;
        case all_ok: return deny_reason::none;
        default: return deny_reason::no_rule;
    }
}

bool protocol_fits(protocol p, request_kind k) {
    switch (k) {
        case request_kind::http: return p == protocol::http;
        case request_kind::inspected: return p == protocol::https;
        case request_kind::connect: break;
    }
    return p != protocol::http;
}

// Walks candidate rules, most specific list first, and keeps the furthest match.
class matcher {
public:
    matcher(const job& j, const decide_args& args) : job_(j), args_(args) {}

    // Returns true when a rule allowed the request (then stop looking). For an IP literal,
    // `literal` is its classification: a cidr rule takes part only when it may open the
    // address at all (see prefix_allows), so 0.0.0.0/0 never even matches 127.0.0.1.
    bool consider(rule_span rules, const classification* literal = nullptr) {
        for (const std::uint32_t i : rules) {
            const egress_rule& r = job_.egress[i];
            if (literal != nullptr && !literal->is_public() && !literal->range.contains(*r.net)) {
                continue;
            }
            int s = host_ok;
            if (r.allows_port(args_.port)) {
                s = port_ok;
                if (protocol_fits(r.proto, args_.kind)) {
                    s = protocol_ok;
                    if (args_.kind == request_kind::connect) {
                        s = all_ok;
                    } else if (r.allows_method(args_.method)) {
                        s = method_ok;
                        http_index_ = -1;
                        if (r.http.empty()) {
                            s = all_ok;
                        } else if (args_.path_refused) {
                            bad_path_ = true;  // no request rule can judge this path
                        } else {
                            http_index_ = match_http_rules(r.http, args_.method, args_.path);
                            if (http_index_ >= 0) {
                                s = all_ok;
                            }
                        }
                    }
                }
            }
            if (s > best_) {
                best_ = s;
                result_.rule = &r;
                result_.rule_index = static_cast<int>(i);
                result_.http_index = s == all_ok ? http_index_ : -1;
            }
            if (s == all_ok) {
                return true;
            }
        }
        return false;
    }

    decision result() {
        result_.reason = reason_for(best_);
        if (best_ == method_ok && bad_path_) {
            // A path the request rules cannot judge (an encoded '/', a dot segment, ...):
            // the request is malformed, whatever the rules say.
            result_.reason = deny_reason::bad_request;
        }
        return result_;
    }

private:
    const job& job_;
    const decide_args& args_;
    int best_ = no_match;
    bool bad_path_ = false;
    int http_index_ = -1;
    decision result_;
};

decision deny(deny_reason r) {
    decision d;
    d.reason = r;
    return d;
}

decision decide_address(const job& j, const job_tables& t, const decide_args& args,
                        const ip_address& a) {
    const classification c = classify(a);
    matcher m(j, args);
    for (const prefix_level& level : a.is_v4() ? t.v4 : t.v6) {
        const auto it = level.nets.find(mask(a, level.len).bytes());
        if (it != level.nets.end() && m.consider(rule_span(it->second), &c)) {
            return m.result();
        }
    }
    decision d = m.result();
    if (!c.is_public() && d.reason == deny_reason::no_rule) {
        // An attempt at a non-public address says more than "no rule": flag it as such.
        d.reason = deny_reason::private_address;
    }
    return d;
}

decision decide_name(const job& j, const job_tables& t, const decide_args& args,
                     std::string_view host) {
    matcher m(j, args);
    if (m.consider(t.exact.find(host))) {
        return m.result();
    }
    if (t.wildcard_depths != 0) {
        // "*.example.com" is stored under "example.com"; try every proper suffix of the
        // host, longest first, so the most specific wildcard wins. Suffixes with a label
        // count no wildcard has are skipped without hashing.
        int labels = 1 + static_cast<int>(std::count(host.begin(), host.end(), '.'));
        for (std::size_t dot = host.find('.'); dot != std::string_view::npos;
             dot = host.find('.', dot + 1)) {
            --labels;
            if ((t.wildcard_depths >> std::min(labels, 63) & 1) == 0) {
                continue;
            }
            if (m.consider(t.wildcard.find(host.substr(dot + 1)))) {
                return m.result();
            }
        }
    }
    return m.result();
}

}  // namespace

decision decide(const decide_args& args, const compiled_policy& p) {
    const int ji = p.job_index(args.job);
    if (ji < 0) {
        return deny(deny_reason::unknown_job);
    }
    const job& j = p.source().jobs[static_cast<std::size_t>(ji)];
    const job_tables& t = p.index().per_job[static_cast<std::size_t>(ji)];
    if (args.port == 0) {
        return deny(deny_reason::bad_request);
    }
    const literal lit = parse_literal(args.host);
    switch (lit.kind) {
        case literal_kind::ipv4:
        case literal_kind::ipv6:
            if (!lit.zone.empty()) {
                return deny(deny_reason::bad_request);  // scoped addresses are never egress
            }
            return decide_address(j, t, args, lit.address);
        case literal_kind::non_canonical:
        case literal_kind::invalid: return deny(deny_reason::bad_request);
        case literal_kind::not_ip: break;
    }
    char buf[max_host_length + 1];
    const std::size_t n = normalise_host_into(args.host, buf);
    if (n == 0) {
        return deny(deny_reason::bad_request);
    }
    return decide_name(j, t, args, std::string_view(buf, n));
}

rule_span name_table::find(std::string_view name) const noexcept {
    if (count_ == 0) {
        return {};
    }
    const std::uint64_t h = string_hash{}(name);
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
        const slot& s = slots_[i];
        if (s.rules_count == 0) {
            return {};
        }
        if (s.hash == h && s.key_len == name.size() &&
            std::string_view(keys_).substr(s.key_offset, s.key_len) == name) {
            return rule_span(rules_).subspan(s.rules_offset, s.rules_count);
        }
    }
}

decision decide_dns(std::string_view job, std::string_view name, const compiled_policy& p) {
    const int ji = p.job_index(job);
    if (ji < 0) {
        return deny(deny_reason::unknown_job);
    }
    const config::job& j = p.source().jobs[static_cast<std::size_t>(ji)];
    const job_tables& t = p.index().per_job[static_cast<std::size_t>(ji)];
    if (parse_literal(name).kind != literal_kind::not_ip) {
        return deny(deny_reason::bad_request);
    }
    char buf[max_host_length + 1];
    const std::size_t n = normalise_host_into(name, buf);
    if (n == 0) {
        return deny(deny_reason::bad_request);
    }
    const std::string_view host(buf, n);
    auto allow = [&](rule_span rules) {
        decision d;
        d.reason = deny_reason::none;
        d.rule_index = static_cast<int>(rules.front());
        d.rule = &j.egress[rules.front()];
        return d;
    };
    if (const rule_span r = t.exact.find(host); !r.empty()) {
        return allow(r);
    }
    for (std::size_t dot = host.find('.'); dot != std::string_view::npos;
         dot = host.find('.', dot + 1)) {
        if (const rule_span r = t.wildcard.find(host.substr(dot + 1)); !r.empty()) {
            return allow(r);
        }
    }
    return deny(deny_reason::no_rule);
}

bool prefix_allows(const cidr& prefix, const ip_address& a) noexcept {
    if (!prefix.contains(a)) {
        return false;
    }
    const classification c = classify(a);
    return c.is_public() || c.range.contains(prefix);
}

decision check_addresses(const decision& allowed, std::span<const ip_address> addresses) {
    if (!allowed.allowed()) {
        return allowed;
    }
    for (const ip_address& a : addresses) {
        if (classify(a).is_public()) {
            continue;
        }
        bool covered = false;
        // No rule (report mode let the request through): no resolves_to opens anything.
        const std::vector<cidr> none;
        for (const cidr& r : allowed.rule != nullptr ? allowed.rule->resolves_to : none) {
            if (prefix_allows(r, a)) {
                covered = true;
                break;
            }
        }
        if (!covered) {
            decision d = allowed;
            d.reason = deny_reason::private_address;
            return d;
        }
    }
    return allowed;
}

}  // namespace cordon::config
