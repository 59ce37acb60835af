#include "config/learn/suggest.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "common/json_string.hpp"
#include "config/classify.hpp"
#include "config/host.hpp"
#include "config/ip.hpp"
#include "config/load.hpp"

namespace cordon::learn {
namespace {

// tool_event.hpp's reserved_events_host; config/ cannot include proxy/.
constexpr std::string_view reserved_name = "cordon.events";

constexpr std::string_view why_private_name =
    "resolved to a non-public address; learning never opens non-public space (add "
    "resolves_to to a rule by hand if this is meant)";
constexpr std::string_view why_private_ip =
    "a non-public address; learning never opens non-public space (add a cidr rule by hand "
    "if this is meant)";
constexpr std::string_view why_reserved =
    "cordon's own reserved name: cordon answers it and never forwards it";
constexpr std::string_view why_refused_only =
    "every request seen on it with a path was refused by the policy's request rules "
    "(http_rule); nothing to learn that would not let them through";

// A request by method, path and whether the path was cut (learn.hpp).
using path_key = std::tuple<std::string, std::string, bool>;

// Everything learned about one name or address in one protocol.
struct acc {
    std::set<std::uint16_t> ports;
    std::set<std::string> methods;
    std::set<std::string> addresses;  // non-public addresses the enforced policy let it reach
    seen_counts counts;
    // http and https: requests with their paths, to learn; refused by request rules, never to
    // let through; learned without a path (count); the secrets injected.
    std::map<path_key, std::uint64_t> paths;
    std::map<path_key, std::uint64_t> refused;
    std::uint64_t path_unknown = 0;
    std::set<std::string> credentials;
};

// Names under one registrable domain, as a tree of labels from the right.
struct node {
    std::map<std::string, node> children;
    const acc* self = nullptr;  // the node's own name was requested
};

// A method an http rule may list (config::load refuses CONNECT there).
bool valid_method(std::string_view m) { return m != "CONNECT" && config::valid_http_method(m); }

std::string host_cidr(const config::ip_address& a) {
    return config::cidr{a, a.is_v4() ? 32 : 128}.to_string();
}

// "api.example.com" -> "com.example.api": rules of one domain sort together.
std::string reversed_labels(std::string_view name) {
    std::string out;
    out.reserve(name.size());
    while (!name.empty()) {
        const std::size_t dot = name.rfind('.');
        if (!out.empty()) {
            out.push_back('.');
        }
        if (dot == std::string_view::npos) {
            out.append(name);
            break;
        }
        out.append(name.substr(dot + 1));
        name = name.substr(0, dot);
    }
    return out;
}

void merge(acc& into, const acc& from) {
    into.ports.insert(from.ports.begin(), from.ports.end());
    into.methods.insert(from.methods.begin(), from.methods.end());
    into.addresses.insert(from.addresses.begin(), from.addresses.end());
    into.counts.allowed += from.counts.allowed;
    into.counts.would_deny += from.counts.would_deny;
    into.counts.denied += from.counts.denied;
    for (const auto& [k, n] : from.paths) {
        into.paths[k] += n;
    }
    for (const auto& [k, n] : from.refused) {
        into.refused[k] += n;
    }
    into.path_unknown += from.path_unknown;
    into.credentials.insert(from.credentials.begin(), from.credentials.end());
}

std::vector<path_request> path_requests(const std::map<path_key, std::uint64_t>& m) {
    std::vector<path_request> out;
    out.reserve(m.size());
    for (const auto& [k, n] : m) {
        out.push_back(path_request{std::get<0>(k), std::get<1>(k), std::get<2>(k), n});
    }
    return out;
}

suggested_rule make_rule(config::protocol p, const acc& a, const suggest_options& opts) {
    suggested_rule r;
    r.proto = p;
    r.ports.assign(a.ports.begin(), a.ports.end());
    if (p == config::protocol::http) {
        r.methods.assign(a.methods.begin(), a.methods.end());
    }
    r.resolves_to.assign(a.addresses.begin(), a.addresses.end());
    r.counts = a.counts;
    r.credentials.assign(a.credentials.begin(), a.credentials.end());
    std::vector<path_request> refused = path_requests(a.refused);
    for (const path_request& q : refused) {
        r.refused += q.count;
    }
    // Request rules when paths were seen: for plain HTTP only when every request's path was
    // recorded (it is only where request rules judged it), or when some request was refused
    // by the policy's own (a rule without them would let those through); inside inspected
    // TLS every path is recorded, and one that could not be read is only counted.
    if (!a.paths.empty() &&
        (a.path_unknown == 0 || !refused.empty() || p == config::protocol::https)) {
        path_options po;
        po.siblings = opts.path_siblings;
        po.max_paths = opts.max_paths;
        learned_request_rules l = learn_request_rules(path_requests(a.paths), refused, po);
        r.http = std::move(l.entries);
        r.paths_not_learned = l.not_learned;
        r.paths_not_learned_examples = std::move(l.not_learned_examples);
        r.paths_unknown = a.path_unknown;
        if (!r.http.empty()) {
            r.methods.clear();  // the loader takes methods or request rules, not both
        }
    }
    std::stable_sort(refused.begin(), refused.end(),
                     [](const auto& x, const auto& y) { return x.count > y.count; });
    refused.resize(std::min<std::size_t>(refused.size(), 3));
    r.refused_examples = std::move(refused);
    return r;
}

// A rule that would let through what the policy's request rules refused, and nothing else
// learned on it: left out.
bool refused_only(const suggested_rule& r) { return r.refused > 0 && r.http.empty(); }

class collapser {
public:
    collapser(config::protocol p, const suggest_options& opts, const public_suffix_list& psl,
              std::vector<suggested_rule>& out)
        : proto_(p), opts_(opts), siblings_(opts.siblings), psl_(psl), out_(out) {}

    void run(const std::map<std::string, acc>& names) {
        std::map<std::string, node> trees;  // by registrable domain
        for (const auto& [name, a] : names) {
            const auto rd = psl_.registrable_domain(name);
            if (!rd || !a.addresses.empty()) {
                // A public suffix itself, or a name with non-public addresses of its own
                // (its resolves_to must not open them to every sibling): never below a
                // wildcard.
                exact(name, a);
                continue;
            }
            node* n = &trees[std::string(*rd)];
            std::string_view rest = std::string_view(name).substr(
                0, name.size() - rd->size() - (name.size() > rd->size() ? 1 : 0));
            while (!rest.empty()) {
                const std::size_t dot = rest.rfind('.');
                const std::string_view label = dot == std::string_view::npos ? rest
                                                                             : rest.substr(dot + 1);
                n = &n->children[std::string(label)];
                rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(0, dot);
            }
            n->self = &a;
        }
        for (const auto& [rd, tree] : trees) {
            emit(tree, rd);
        }
    }

private:
    void exact(const std::string& name, const acc& a) {
        suggested_rule r = make_rule(proto_, a, opts_);
        r.host = name;
        r.key = reversed_labels(name);
        out_.push_back(std::move(r));
    }

    static void gather(const node& n, const std::string& name, acc& into,
                       std::vector<std::pair<std::string, std::uint64_t>>& names) {
        for (const auto& [label, child] : n.children) {
            const std::string child_name = label + "." + name;
            if (child.self != nullptr) {
                merge(into, *child.self);
                names.emplace_back(child_name, child.self->counts.total());
            }
            gather(child, child_name, into, names);
        }
    }

    void emit(const node& n, const std::string& name) {
        if (n.self != nullptr) {
            exact(name, *n.self);
        }
        if (n.children.size() > siblings_ && !psl_.has_suffix_below(name)) {
            acc all;
            std::vector<std::pair<std::string, std::uint64_t>> names;
            gather(n, name, all, names);
            suggested_rule r = make_rule(proto_, all, opts_);
            r.host = "*." + name;
            r.key = reversed_labels(name) + ".*";
            std::stable_sort(names.begin(), names.end(),
                             [](const auto& a, const auto& b) { return a.second > b.second; });
            r.names = std::move(names);
            out_.push_back(std::move(r));
            return;
        }
        for (const auto& [label, child] : n.children) {
            emit(child, label + "." + name);
        }
    }

    config::protocol proto_;
    const suggest_options& opts_;
    std::size_t siblings_;
    const public_suffix_list& psl_;
    std::vector<suggested_rule>& out_;
};

std::string counts_text(const seen_counts& c) {
    std::string out = std::to_string(c.total()) + (c.total() == 1 ? " request" : " requests");
    std::string parts;
    const auto part = [&parts](std::uint64_t n, std::string_view what) {
        if (n > 0) {
            parts += (parts.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(what);
        }
    };
    part(c.allowed, "allowed");
    part(c.would_deny, "would-deny");
    part(c.denied, "denied");
    return parts.empty() ? out : out + " (" + parts + ")";
}

template <typename T>
std::string list_text(const std::vector<T>& v, bool quote) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i > 0) {
            out += ", ";
        }
        if constexpr (std::is_same_v<T, std::string>) {
            out += quote ? "\"" + v[i] + "\"" : v[i];
        } else {
            out += std::to_string(v[i]);
        }
    }
    return out + "]";
}

// A value read from outside (the job name given on the command line) in a YAML comment:
// no control character may end the comment line.
std::string comment_safe(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
            c = '?';
        }
    }
    return out;
}

bool needs_quotes(std::string_view s) { return s.find_first_of(":*") != std::string_view::npos; }

// A YAML double-quoted scalar. Learned paths hold only letters, digits, "-._~:@+,=", '/'
// and '*'; anything else is escaped all the same.
std::string yaml_quoted(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20 || u >= 0x7f) {
            static constexpr char digits[] = "0123456789ABCDEF";
            out += "\\x";
            out += digits[u >> 4];
            out += digits[u & 15];
        } else {
            out += c;
        }
    }
    return out + "\"";
}

// A recorded request in a comment: the path is the agent's, bounded and made printable.
std::string request_comment(const path_request& q) {
    constexpr std::size_t max_shown = 96;
    std::string path = comment_safe(q.path.substr(0, max_shown));
    if (q.path.size() > max_shown) {
        path += "...";
    } else if (q.cut) {
        path += "/**";
    }
    return comment_safe(q.method.substr(0, 32)) + " " + path + " " + std::to_string(q.count);
}

// A secret's name as recorded, in a comment: letters, digits, '-', '_', '.' only.
std::string secret_comment(std::string_view name) {
    std::string out(name.substr(0, 64));
    for (char& c : out) {
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.')) {
            c = '?';
        }
    }
    return out;
}

std::string requests_text(std::uint64_t n) {
    return std::to_string(n) + (n == 1 ? " request" : " requests");
}

// Comments above a rule with request rules: credentials injected, what was kept out.
void request_notes(std::string& out, const suggested_rule& r) {
    for (const std::string& c : r.credentials) {
        const std::string name = secret_comment(c);
        out += "  # cordon injected the credential of secret " + name +
               " on these requests: add\n  #   credential: { secret: " + name +
               ", header: ..., format: \"...\" }\n  # (header and format are not recorded)\n";
    }
    const auto examples = [&out](const std::vector<path_request>& v) {
        for (std::size_t i = 0; i < v.size(); ++i) {
            out += (i == 0 ? ": " : ", ") + request_comment(v[i]);
        }
        out += "\n";
    };
    if (r.refused > 0) {
        out += "  # " + requests_text(r.refused) +
               " refused by the policy's request rules (http_rule), kept out";
        examples(r.refused_examples);
    }
    if (r.paths_not_learned > 0) {
        out += "  # " + requests_text(r.paths_not_learned) +
               " not learned (no path pattern takes them without letting a refused request "
               "through, or past the bound on patterns or methods per rule)";
        examples(r.paths_not_learned_examples);
    }
    if (r.paths_unknown > 0 && !r.http.empty()) {
        out += "  # " + requests_text(r.paths_unknown) +
               " recorded without their path: not in the request rules\n";
    }
}

// A rule with request rules, in block style: one line per entry (flow style) or, with many
// paths, one per path.
void block_rule(std::string& out, const suggested_rule& r) {
    out += "  - host: " + (needs_quotes(r.host) ? yaml_quoted(r.host) : r.host) + "\n";
    out += "    ports: " + list_text(r.ports, false) + "\n";
    out += "    protocol: " + std::string(config::to_string(r.proto)) + "\n";
    if (!r.resolves_to.empty()) {
        out += "    resolves_to: " + list_text(r.resolves_to, true) + "\n";
    }
    out += "    http:\n";
    for (const learned_entry& e : r.http) {
        out += "      # " + requests_text(e.requests) + "\n";
        if (e.paths.size() <= 3) {
            out += "      - { methods: " + list_text(e.methods, false) + ", paths: [";
            for (std::size_t i = 0; i < e.paths.size(); ++i) {
                out += (i == 0 ? "" : ", ") + yaml_quoted(e.paths[i]);
            }
            out += "] }\n";
            continue;
        }
        out += "      - methods: " + list_text(e.methods, false) + "\n        paths:\n";
        for (const std::string& p : e.paths) {
            out += "          - " + yaml_quoted(p) + "\n";
        }
    }
}

}  // namespace

void seen_counts::add(seen_outcome o, std::uint64_t n) noexcept {
    switch (o) {
        case seen_outcome::allowed: allowed += n; break;
        case seen_outcome::would_deny: would_deny += n; break;
        case seen_outcome::denied: denied += n; break;
    }
}

suggestion suggest(const seen_traffic& seen, const public_suffix_list& psl,
                   const suggest_options& opts) {
    suggestion s;
    s.job = seen.job;
    s.sessions = seen.sessions;
    s.not_policy = seen.not_policy;
    s.first_ts = seen.first_ts;
    s.last_ts = seen.last_ts;
    s.siblings = opts.siblings;

    std::array<std::map<std::string, acc>, 4> names;  // by protocol
    std::array<std::map<std::string, acc>, 4> nets;
    // Targets whose TLS cordon terminated: their CONNECTs join the https rule.
    std::set<std::pair<std::string_view, std::uint16_t>> inspected;
    for (const seen_request& r : seen.requests) {
        if (!r.ip_literal && (r.kind == config::request_kind::inspected || r.https_rule)) {
            inspected.emplace(r.host, r.port);
        }
    }
    std::map<std::pair<std::string, std::string>, seen_counts> left;
    std::set<std::string> requested;
    const auto leave_out = [&left](const seen_request& r, std::string_view why) {
        left[{config::host_port(r.host, r.port), std::string(why)}].add(r.outcome, r.count);
    };
    for (const seen_request& r : seen.requests) {
        s.counts.add(r.outcome, r.count);
        if (r.port == 0 || r.host.empty()) {
            continue;
        }
        requested.insert(r.host);
        if (r.host == reserved_name) {
            leave_out(r, why_reserved);
            continue;
        }
        const bool allowed = r.outcome == seen_outcome::allowed;
        if (r.reason == "private_address") {
            leave_out(r, r.ip_literal ? why_private_ip : why_private_name);
            continue;
        }
        if (r.kind == config::request_kind::inspected && r.ip_literal) {
            continue;  // an https rule names a host: never recorded for a literal
        }
        const config::protocol p = r.kind == config::request_kind::http ? config::protocol::http
                                   : r.kind == config::request_kind::inspected ||
                                           inspected.contains({r.host, r.port})
                                       ? config::protocol::https
                                   : r.tcp_rule || r.ip_literal ? config::protocol::tcp
                                                                : config::protocol::tls;
        acc* a = nullptr;
        if (r.ip_literal) {
            const auto ip = config::parse_ip(r.host);
            if (!ip) {
                continue;
            }
            if (!classify(*ip).is_public() && !allowed) {
                leave_out(r, why_private_ip);
                continue;
            }
            a = &nets[static_cast<std::size_t>(p)][host_cidr(*ip)];
        } else {
            // Addresses on the record mean the policy's own rule for this name let it into
            // non-public space (resolves_to): allowed, or in report mode let through for a
            // port or method that rule does not list. A human opened that; learning keeps it,
            // every address of it that serve checks (a dual-stack localhost: 127.0.0.1 and
            // ::1), or the learned rule would be refused by serve for the one it leaves out.
            std::optional<std::vector<config::ip_address>> addrs;
            if (!r.address.empty()) {
                addrs = recorded_addresses(r.address);
                if (!addrs || r.outcome == seen_outcome::denied) {
                    leave_out(r, why_private_name);
                    continue;
                }
            }
            a = &names[static_cast<std::size_t>(p)][r.host];
            if (addrs) {
                for (const config::ip_address& ip : *addrs) {
                    a->addresses.insert(host_cidr(ip));
                }
            }
        }
        a->ports.insert(r.port);
        a->counts.add(r.outcome, r.count);
        if (r.kind == config::request_kind::connect) {
            continue;
        }
        // A request the policy's request rules refused is kept out of what is learned.
        const bool refused = r.outcome == seen_outcome::denied && r.reason == "http_rule";
        if (!refused && p == config::protocol::http && valid_method(r.method)) {
            a->methods.insert(r.method);
        }
        if (!r.credential.empty()) {
            a->credentials.insert(r.credential);
        }
        // The path as the reader keeps it (normal form, no query); anything else is unknown.
        const auto rp = r.path.empty() ? std::nullopt : parse_recorded_path(r.path);
        if (!rp) {
            if (!refused) {
                a->path_unknown += r.count;
            }
            continue;
        }
        (refused ? a->refused
                 : a->paths)[path_key{r.method, rp->path, r.path_cut || rp->cut}] += r.count;
    }

    for (std::size_t p = 0; p < names.size(); ++p) {
        collapser(static_cast<config::protocol>(p), opts, psl, s.rules).run(names[p]);
        for (const auto& [net, a] : nets[p]) {
            suggested_rule r = make_rule(static_cast<config::protocol>(p), a, opts);
            r.cidr = net;
            r.key = "~" + net;  // after the names
            s.rules.push_back(std::move(r));
        }
    }
    // A rule that would let through what request rules refused, with nothing else learned
    // on it, is left out.
    std::erase_if(s.rules, [&left](const suggested_rule& r) {
        if (!refused_only(r)) {
            return false;
        }
        const std::string who = r.host.empty() ? r.cidr : r.host;
        std::string target = r.ports.size() == 1 ? config::host_port(who, r.ports[0]) : who;
        left[{target, std::string(why_refused_only)}] = r.counts;
        return true;
    });
    std::stable_sort(s.rules.begin(), s.rules.end(),
                     [](const suggested_rule& a, const suggested_rule& b) {
                         return a.key != b.key ? a.key < b.key : a.proto < b.proto;
                     });
    for (auto& [k, c] : left) {
        s.left_out.push_back(not_learned{k.first, k.second, c});
    }

    // Each rule's host parsed once: the names (one per distinct name looked up, as many as
    // a name-per-query exfiltration makes) are matched against these.
    std::vector<config::host_pattern> patterns;
    for (const auto& r : s.rules) {
        if (!r.host.empty()) {
            if (auto pat = config::parse_host_pattern(r.host); pat.ok()) {
                patterns.push_back(std::move(pat.value));
            }
        }
    }
    for (const seen_name& n : seen.dns) {
        if (requested.contains(n.name) || n.name == reserved_name) {
            continue;
        }
        const bool covered = std::any_of(
            patterns.begin(), patterns.end(),
            [&](const config::host_pattern& p) { return p.matches(n.name); });
        if (!covered) {
            s.dns_only.push_back(n);
        }
    }
    std::stable_sort(s.dns_only.begin(), s.dns_only.end(), [](const auto& a, const auto& b) {
        return a.answered + a.denied > b.answered + b.denied;
    });
    return s;
}

std::string render_yaml(const suggestion& s) {
    std::string out;
    out += "# Learned by `cordon policy suggest` for job " + comment_safe(s.job) + "\n# from " +
           counts_text(s.counts) + " of " + std::to_string(s.sessions) +
           (s.sessions == 1 ? " session" : " sessions");
    if (!s.first_ts.empty()) {
        out += ",\n# " + s.first_ts + " .. " + s.last_ts;
    }
    out += ".\n# Names collapse into a wildcard when more than " + std::to_string(s.siblings) +
           " share a parent, never above the\n# registrable domain. Review before use; check "
           "it with `cordon check-config`.\n";
    if (std::any_of(s.rules.begin(), s.rules.end(),
                    [](const auto& r) { return r.proto == config::protocol::https; })) {
        out += "# protocol: https rules need the policy's `inspect` section (docs/inspect.md).\n";
    }
    out += s.rules.empty() ? "egress: []\n" : "egress:\n";
    for (const suggested_rule& r : s.rules) {
        out += "  # " + counts_text(r.counts);
        if (!r.names.empty()) {
            out += ", " + std::to_string(r.names.size()) + " names:";
            const std::size_t shown = std::min<std::size_t>(r.names.size(), 5);
            for (std::size_t i = 0; i < shown; ++i) {
                out += (i == 0 ? " " : ", ") + r.names[i].first + " " +
                       std::to_string(r.names[i].second);
            }
            if (shown < r.names.size()) {
                out += ", and " + std::to_string(r.names.size() - shown) + " more";
            }
        }
        out += '\n';
        if (!r.resolves_to.empty()) {
            out += "  # non-public addresses seen (your current rule's resolves_to let it in); "
                   "widen to the range you mean\n";
        }
        request_notes(out, r);
        if (!r.http.empty()) {
            block_rule(out, r);
            continue;
        }
        out += "  - { ";
        if (!r.host.empty()) {
            out += "host: " + (needs_quotes(r.host) ? "\"" + r.host + "\"" : r.host);
        } else {
            out += "cidr: " + (needs_quotes(r.cidr) ? "\"" + r.cidr + "\"" : r.cidr);
        }
        out += ", ports: " + list_text(r.ports, false);
        if (r.proto != config::protocol::tls) {
            out += ", protocol: " + std::string(config::to_string(r.proto));
        }
        if (!r.methods.empty()) {
            out += ", methods: " + list_text(r.methods, false);
        }
        if (!r.resolves_to.empty()) {
            out += ", resolves_to: " + list_text(r.resolves_to, true);
        }
        out += " }\n";
    }
    if (!s.left_out.empty()) {
        out += "# Not learned:\n";
        for (const not_learned& n : s.left_out) {
            out += "#   " + n.target + ", " + counts_text(n.counts) + ": " + n.why + "\n";
        }
    }
    if (!s.not_policy.empty()) {
        out += "# Denied for reasons no rule changes (not learned):";
        bool first = true;
        for (const auto& [reason, n] : s.not_policy) {
            out += (first ? " " : ", ") + std::string(known_reason(reason)) + " " +
                   std::to_string(n);
            first = false;
        }
        out += "\n";
    }
    if (!s.dns_only.empty()) {
        out += "# Names resolved through cordon's DNS but never requested through the proxy "
               "(ports\n# unknown, so no rule):";
        const std::size_t shown = std::min<std::size_t>(s.dns_only.size(), 20);
        for (std::size_t i = 0; i < shown; ++i) {
            const seen_name& n = s.dns_only[i];
            out += "\n#   " + n.name + ": " + std::to_string(n.answered + n.denied) + " queries";
            if (n.denied > 0) {
                out += " (" + std::to_string(n.denied) + " denied)";
            }
        }
        if (shown < s.dns_only.size()) {
            out += "\n#   and " + std::to_string(s.dns_only.size() - shown) + " more";
        }
        out += "\n";
    }
    return out;
}

namespace {

void counts_json(std::string& out, const seen_counts& c) {
    out += "{\"requests\":" + std::to_string(c.total()) +
           ",\"allowed\":" + std::to_string(c.allowed) +
           ",\"would_deny\":" + std::to_string(c.would_deny) +
           ",\"denied\":" + std::to_string(c.denied) + "}";
}

void strings_json(std::string& out, const std::vector<std::string>& v) {
    out.push_back('[');
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i > 0) {
            out.push_back(',');
        }
        common::append_json_string(out, v[i]);
    }
    out.push_back(']');
}

}  // namespace

std::string render_json(const suggestion& s) {
    std::string out = "{\"job\":";
    common::append_json_string(out, s.job);
    out += ",\"egress\":[";
    for (std::size_t i = 0; i < s.rules.size(); ++i) {
        const suggested_rule& r = s.rules[i];
        out += i > 0 ? ",{" : "{";
        out += r.host.empty() ? "\"cidr\":" : "\"host\":";
        common::append_json_string(out, r.host.empty() ? r.cidr : r.host);
        out += ",\"ports\":[";
        for (std::size_t k = 0; k < r.ports.size(); ++k) {
            out += (k > 0 ? "," : "") + std::to_string(r.ports[k]);
        }
        out += "],\"protocol\":\"" + std::string(config::to_string(r.proto)) + "\"";
        if (!r.methods.empty()) {
            out += ",\"methods\":";
            strings_json(out, r.methods);
        }
        if (!r.http.empty()) {
            out += ",\"http\":[";
            for (std::size_t k = 0; k < r.http.size(); ++k) {
                out += k > 0 ? ",{\"methods\":" : "{\"methods\":";
                strings_json(out, r.http[k].methods);
                out += ",\"paths\":";
                strings_json(out, r.http[k].paths);
                out += ",\"requests\":" + std::to_string(r.http[k].requests) + "}";
            }
            out += "]";
        }
        if (!r.resolves_to.empty()) {
            out += ",\"resolves_to\":";
            strings_json(out, r.resolves_to);
        }
        if (!r.credentials.empty()) {
            out += ",\"credentials_injected\":";
            strings_json(out, r.credentials);
        }
        out += ",\"seen\":";
        counts_json(out, r.counts);
        if (r.refused > 0 || r.paths_not_learned > 0 || r.paths_unknown > 0) {
            out.pop_back();
            out += ",\"refused_by_request_rules\":" + std::to_string(r.refused) +
                   ",\"paths_not_learned\":" + std::to_string(r.paths_not_learned) +
                   ",\"paths_unknown\":" + std::to_string(r.paths_unknown) + "}";
        }
        if (!r.names.empty()) {
            out.pop_back();
            out += ",\"names\":{";
            for (std::size_t k = 0; k < r.names.size(); ++k) {
                if (k > 0) {
                    out.push_back(',');
                }
                common::append_json_string(out, r.names[k].first);
                out += ":" + std::to_string(r.names[k].second);
            }
            out += "}}";
        }
        out += "}";
    }
    out += "],\"not_learned\":[";
    for (std::size_t i = 0; i < s.left_out.size(); ++i) {
        out += i > 0 ? ",{\"target\":" : "{\"target\":";
        common::append_json_string(out, s.left_out[i].target);
        out += ",\"why\":";
        common::append_json_string(out, s.left_out[i].why);
        out += ",\"seen\":";
        counts_json(out, s.left_out[i].counts);
        out += "}";
    }
    out += "],\"not_policy\":{";
    bool first = true;
    for (const auto& [reason, n] : s.not_policy) {
        if (!first) {
            out.push_back(',');
        }
        first = false;
        common::append_json_string(out, known_reason(reason));
        out += ":" + std::to_string(n);
    }
    out += "},\"dns_only\":[";
    for (std::size_t i = 0; i < s.dns_only.size(); ++i) {
        out += i > 0 ? ",{\"name\":" : "{\"name\":";
        common::append_json_string(out, s.dns_only[i].name);
        out += ",\"answered\":" + std::to_string(s.dns_only[i].answered) +
               ",\"denied\":" + std::to_string(s.dns_only[i].denied) + "}";
    }
    out += "],\"requests\":";
    counts_json(out, s.counts);
    out += ",\"sessions\":" + std::to_string(s.sessions) + ",\"first_ts\":";
    common::append_json_string(out, s.first_ts);
    out += ",\"last_ts\":";
    common::append_json_string(out, s.last_ts);
    out += ",\"siblings\":" + std::to_string(s.siblings) + "}\n";
    return out;
}

}  // namespace cordon::learn
