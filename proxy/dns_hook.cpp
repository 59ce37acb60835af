#include "proxy/dns_hook.hpp"

#include "config/classify.hpp"
#include "config/mode.hpp"

namespace cordon::proxy {
namespace {

bool is_loopback(const config::ip_address& a) {
    return config::classify(a).cls == config::ip_class::loopback;
}

std::string type_name(std::uint16_t t) {
    switch (t) {
        case dns::type_a: return "A";
        case dns::type_aaaa: return "AAAA";
        case dns::type_cname: return "CNAME";
        case dns::type_https: return "HTTPS";
        case dns::type_svcb: return "SVCB";
        case dns::type_txt: return "TXT";
        case dns::type_mx: return "MX";
        case dns::type_ns: return "NS";
        case dns::type_ptr: return "PTR";
        case dns::type_soa: return "SOA";
        case dns::type_any: return "ANY";
        case dns::type_axfr: return "AXFR";
        default: return "TYPE" + std::to_string(t);
    }
}

std::string_view rcode_name(dns::rcode rc) {
    switch (rc) {
        case dns::rcode::noerror: return "NOERROR";
        case dns::rcode::formerr: return "FORMERR";
        case dns::rcode::servfail: return "SERVFAIL";
        case dns::rcode::nxdomain: return "NXDOMAIN";
        case dns::rcode::notimp: return "NOTIMP";
        case dns::rcode::refused: return "REFUSED";
        default: return "OTHER";
    }
}

}  // namespace

dns::verdict dns_hook::decide(const config::ip_address& client, const dns::query& q) {
    dns::verdict v;
    if (rt_.kill.engaged()) {
        v.reason = "kill_switch";
        return v;
    }
    if (!rt_.audit_healthy()) {
        v.reason = "audit_unavailable";  // fail closed: nothing is answered unaudited
        return v;
    }
    const auto policy = rt_.policy();
    // Attribution: a job's `sources`; else the session option the shim adds to the queries
    // it relays (only believed from loopback, where the shim's relay connects from); else
    // dns.default_job.
    for (const auto& j : policy->source().jobs) {
        for (const auto& net : j.sources) {
            if (net.contains(client)) {
                v.job = j.name;
            }
        }
    }
    if (v.job.empty()) {
        for (const auto& opt : q.options) {
            if (opt.code != dns::edns_session_option || !is_loopback(client)) {
                continue;
            }
            const auto colon = opt.data.find(':');
            if (colon == std::string::npos) {
                v.reason = "auth";
                return v;
            }
            const control::auth_result a = rt_.sessions.authenticate(opt.data.substr(0, colon),
                                                                     opt.data.substr(colon + 1));
            if (!a.ok()) {
                v.reason = a.status == control::auth_status::session_killed ? "session_killed"
                           : a.status == control::auth_status::bad_credentials
                               ? "auth"
                               : std::string(to_string(a.status));
                if (a.status != control::auth_status::bad_credentials) {
                    v.job = a.job;
                    v.session = opt.data.substr(0, colon);
                }
                return v;
            }
            v.job = a.job;
            v.session = opt.data.substr(0, colon);
            break;
        }
    }
    if (v.job.empty() && policy->source().dns.default_job) {
        v.job = *policy->source().dns.default_job;
    }
    if (v.job.empty()) {
        v.reason = "no_session";
        return v;
    }
    // Report mode: a name no rule names resolves, flagged with the reason (config/mode.hpp).
    const config::moded_decision d = config::decide_dns_with_mode(v.job, q.q.name, *policy);
    v.allow = d.effective.allowed();
    if (!v.allow) {
        v.reason = std::string(config::to_string(d.effective.reason));
    } else if (d.reported()) {
        v.reason = std::string(config::to_string(d.would_deny));
    }
    return v;
}

void dns_hook::count(const config::ip_address&, const dns::question& q, const dns::verdict& v,
                     std::uint64_t n) {
    if (!v.allow) {
        rt_.denied(control::denial{v.job, v.session, v.reason, q.name, "dns", n});
    }
    if (v.allow && !v.reason.empty()) {
        rt_.stats.count_dns_would_deny(v.job, n);  // report mode
    } else {
        rt_.stats.count_dns(v.job, v.allow, n);
    }
}

void dns_hook::audit(const config::ip_address& client, const dns::question& q,
                     const dns::verdict& v, dns::rcode rc, bool cached, std::uint64_t repeats) {
    auto r = rt_.record(v.allow ? "dns.query" : "dns.deny");
    if (!v.session.empty()) {
        r.add("session", v.session);
    }
    if (!v.job.empty()) {
        r.add("job", v.job);
    }
    r.add("client", client.to_string()).add("name", q.name).add("type", type_name(q.qtype));
    if (v.allow) {
        r.add("rcode", rcode_name(rc)).add("cached", cached);
        if (!v.reason.empty()) {
            r.add("would_deny", v.reason);  // report mode
        }
    } else {
        r.add("reason", v.reason);
    }
    if (repeats > 0) {
        r.add("repeats", repeats);
    }
    rt_.audit(std::move(r));
}

void dns_hook::answered(const config::ip_address&, const dns::question& q, const dns::verdict& v,
                        std::span<const std::uint8_t> answer) {
    const auto now = std::chrono::steady_clock::now();
    for (const dns::answered_address& a : dns::answer_addresses(answer)) {
        if (a.ttl > 0) {
            rt_.answered.remember(a.address, q.name, v.job, v.session,
                                  now + std::chrono::seconds(a.ttl));
        }
    }
}

void dns_hook::rate_limited(const config::ip_address&) { rt_.stats.count_dns_rate_limited(); }

void dns_hook::tcp_refused(const config::ip_address&) { rt_.stats.count_dns_tcp_refused(); }

}  // namespace cordon::proxy
