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
constexpr std::string_view why_mcp_without_rule =
    "MCP tool calls recorded for it, but no request to it through an http or https rule in "
    "the window: no rule to put them on";
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
    // An MCP server's rule: the tools called at it (mcp_spec), and calls naming none that can
    // be listed.
    bool mcp = false;
    std::map<std::string, learned_tool> tools;
    std::uint64_t tools_unlisted = 0;
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
    into.mcp = into.mcp || from.mcp;
    for (const auto& [name, t] : from.tools) {
        learned_tool& to = into.tools[name];
        to.name = name;
        to.counts.allowed += t.counts.allowed;
        to.counts.would_deny += t.counts.would_deny;
        to.counts.denied += t.counts.denied;
        to.changed += t.changed;
    }
    into.tools_unlisted += from.tools_unlisted;
}

// The tool calls of one MCP server added to its rule's accumulator.
void add_tool_call(acc& a, const seen_tool_call& c) {
    a.mcp = true;
    if (!config::valid_mcp_tool_name(c.tool)) {
        a.tools_unlisted += c.count;
        return;
    }
    learned_tool& t = a.tools[c.tool];
    t.name = c.tool;
    if (c.reason == "mcp_tool_changed") {
        t.changed += c.count;  // the policy listed it; its server redefined it
    } else {
        t.counts.add(c.outcome, c.count);
    }
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
    if (a.mcp) {
        learned_mcp m;
        for (const auto& [name, t] : a.tools) {
            m.tools.push_back(t);
        }
        m.unlisted = a.tools_unlisted;
        r.mcp = std::move(m);
    }
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
    // MCP servers: the http and https requests to a host and port that carried tool calls,
    // kept apart (exact, those ports only) to take `mcp`.
    std::array<std::map<std::string, acc>, 4> mcp_names;
    std::array<std::map<std::string, acc>, 4> mcp_nets;
    std::set<std::pair<std::string_view, std::uint16_t>> mcp_servers;
    for (const seen_tool_call& c : seen.tool_calls) {
        mcp_servers.emplace(c.host, c.port);
    }
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
        const bool mcp = (p == config::protocol::http || p == config::protocol::https) &&
                         mcp_servers.contains({r.host, r.port});
        auto& by_name = mcp ? mcp_names : names;
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
            a = &(mcp ? mcp_nets : nets)[static_cast<std::size_t>(p)][host_cidr(*ip)];
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
            a = &by_name[static_cast<std::size_t>(p)][r.host];
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

    // Each MCP server's tool calls go to its rule: the http or https one of its host whose
    // ports hold the call's.
    std::map<std::pair<std::string, std::string>, seen_counts> left_calls;
    for (const seen_tool_call& c : seen.tool_calls) {
        s.tool_calls.add(c.reason == "mcp_tool_changed" ? seen_outcome::denied : c.outcome,
                         c.count);
        std::string key = c.host;
        if (c.ip_literal) {
            const auto ip = config::parse_ip(c.host);
            key = ip ? host_cidr(*ip) : std::string();
        }
        bool placed = false;
        for (const config::protocol p : {config::protocol::https, config::protocol::http}) {
            auto& m = (c.ip_literal ? mcp_nets : mcp_names)[static_cast<std::size_t>(p)];
            const auto it = m.find(key);
            if (it != m.end() && it->second.ports.contains(c.port)) {
                add_tool_call(it->second, c);
                placed = true;
            }
        }
        if (!placed) {
            left_calls[{config::host_port(c.host, c.port), std::string(why_mcp_without_rule)}].add(
                c.outcome, c.count);
        }
    }

    for (std::size_t p = 0; p < names.size(); ++p) {
        collapser(static_cast<config::protocol>(p), opts, psl, s.rules).run(names[p]);
        for (const auto& [name, a] : mcp_names[p]) {
            suggested_rule r = make_rule(static_cast<config::protocol>(p), a, opts);
            r.host = name;  // never below a wildcard: `mcp` would apply to all its names
            r.key = reversed_labels(name);
            s.rules.push_back(std::move(r));
        }
        for (const auto* m : {&nets[p], &mcp_nets[p]}) {
            for (const auto& [net, a] : *m) {
                suggested_rule r = make_rule(static_cast<config::protocol>(p), a, opts);
                r.cidr = net;
                r.key = "~" + net;  // after the names
                s.rules.push_back(std::move(r));
            }
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
    for (auto& [k, c] : left_calls) {
        s.left_out.push_back(not_learned{k.first, k.second, c, true});
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

}  // namespace cordon::learn
