#pragma once
// `cordon policy suggest`: the smallest job-card `egress` section that would have allowed
// the traffic seen (learn.hpp), and its YAML and JSON forms. Pure.
//
// Rules, in order:
// - Only allowed, would-deny and policy-denied requests are learned (learn.hpp). Names are
//   learned exactly, with the ports seen; plain-HTTP requests as `protocol: http` with the
//   methods seen; a CONNECT to a name as tls (the default) unless a tcp rule allowed it.
// - IP literals stay exact: a `cidr` /32 or /128 rule (tcp for CONNECT, http for HTTP).
// - Names collapse into "*.parent" only when MORE than `siblings` distinct child labels of
//   one parent were seen (per protocol), and never above the registrable domain (the Public
//   Suffix List): no "*.co.uk", no "*.github.io". The wildcard gets the union of its names'
//   ports (and methods); a parent name seen itself keeps its own exact rule.
// - Non-public space is never opened by learning: IP literals that are not public and names
//   denied with private_address are left out, with a comment saying why. A name the policy's
//   own rule already let into non-public space (its resolves_to: allowed, or let through by
//   report mode for a port or method the rule does not list) keeps a rule whose resolves_to
//   lists the addresses seen, /32 or /128 each.
// - cordon's own reserved name (cordon.events) is left out: cordon answers it itself.
// - Requests inside TLS tunnels cordon inspected (`http.request` records) make the name's
//   rule `protocol: https` (with the CONNECTs to that host and port), and its paths an
//   `http:` list of request rules (request_rules.hpp); plain-HTTP requests recorded with
//   their paths do the same for an http rule. Requests the policy's request rules refused
//   (http_rule) are never let through by what is learned. A credential cordon injected is
//   named in a comment, never made part of the rule (its header and format are not
//   recorded).
// - MCP servers (`tool.call` records with via "mcp", learn.hpp) get `mcp: { tools: [...] }`
//   on the http or https rule of their host and port: every tool called, allowed, would-deny
//   (report mode) or refused with mcp_tool (as denied connections are learned), those
//   refused named in a comment; one refused as changed (mcp_tool_changed) is kept, with a
//   comment. Such a rule is exact (never below a wildcard) and holds only the ports that
//   carried MCP: the host's other ports get a rule of their own.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/learn/learn.hpp"
#include "config/learn/public_suffix.hpp"
#include "config/learn/request_rules.hpp"
#include "config/policy.hpp"

namespace cordon::learn {

struct suggest_options {
    std::size_t siblings = 3;  ///< collapse when more than this many names share a parent
    /// Paths: more than this many distinct segments under one prefix generalise ("*").
    std::size_t path_siblings = 8;
    std::size_t max_paths = 16;  ///< path globs per rule at most
};

/// Counts of the requests behind one rule.
struct seen_counts {
    std::uint64_t allowed = 0;
    std::uint64_t would_deny = 0;
    std::uint64_t denied = 0;
    std::uint64_t total() const noexcept { return allowed + would_deny + denied; }
    void add(seen_outcome o, std::uint64_t n) noexcept;
};

/// The calls of one tool behind a rule's `mcp.tools`.
struct learned_tool {
    std::string name;
    seen_counts counts;         ///< allowed, would-deny and refused (mcp_tool) calls
    std::uint64_t changed = 0;  ///< refused, or would be, as mcp_tool_changed
};

/// A rule's `mcp:` part, learned from the tool calls seen at its server.
struct learned_mcp {
    std::vector<learned_tool> tools;  ///< by name: `mcp.tools`
    /// Calls naming a tool no policy can list (not 1-128 letters, digits, "_-./"): left out.
    std::uint64_t unlisted = 0;
};

/// One rule of the suggested section, with what it was learned from.
struct suggested_rule {
    std::string host;                  ///< a name or "*.suffix"; empty for a cidr rule
    std::string cidr;                  ///< "203.0.113.7/32"; empty for a host rule
    std::vector<std::uint16_t> ports;  ///< sorted
    config::protocol proto = config::protocol::tls;
    std::vector<std::string> methods;  ///< http only, sorted; empty when `http` is set
    /// http and https: request rules learned from the paths seen; empty: any request.
    std::vector<learned_entry> http;
    /// Requests with paths that `http` does not take (request_rules.hpp), and examples.
    std::uint64_t paths_not_learned = 0;
    std::vector<path_request> paths_not_learned_examples;
    /// Requests whose path was not recorded, left out of `http` (it was learned anyway).
    std::uint64_t paths_unknown = 0;
    /// Requests the policy's request rules refused (http_rule): kept out of `http`.
    std::uint64_t refused = 0;
    std::vector<path_request> refused_examples;  ///< the most requested, at most 3
    /// https: the names of the secrets cordon injected on these requests (comment only).
    std::vector<std::string> credentials;
    std::vector<std::string> resolves_to;  ///< "10.20.0.5/32", sorted
    std::optional<learned_mcp> mcp;        ///< http and https: the server is MCP
    seen_counts counts;
    /// The names a wildcard covers, most requested first (empty for exact rules).
    std::vector<std::pair<std::string, std::uint64_t>> names;
    std::string key;  ///< ordering key: registrable domain, then name
};

/// Requests not learned, grouped by target and cause.
struct not_learned {
    std::string target;  ///< "host:port"
    std::string why;
    seen_counts counts;
    bool tool_calls = false;  ///< `counts` are of MCP tool calls, not requests
};

struct suggestion {
    std::string job;
    std::vector<suggested_rule> rules;
    std::vector<not_learned> left_out;
    /// Names asked of cordon's DNS but never requested through the proxy and not covered by
    /// a suggested rule: their ports are unknown, so no rule is made for them.
    std::vector<seen_name> dns_only;
    seen_counts counts;      ///< of every request read
    seen_counts tool_calls;  ///< of every MCP tool call read (changed ones as denied)
    std::uint64_t sessions = 0;
    std::map<std::string, std::uint64_t> not_policy;  ///< copied from seen_traffic
    std::string first_ts;
    std::string last_ts;
    std::size_t siblings = 0;
};

suggestion suggest(const seen_traffic& seen, const public_suffix_list& psl,
                   const suggest_options& opts);

/// The section as YAML (`egress:` and its rules in flow style), comments with the counts
/// behind each rule and the left-out requests; valid for the policy loader when put under
/// a job card.
std::string render_yaml(const suggestion& s);

/// {"job", "egress": [rules as in a job card, each with a "seen" object], "not_learned",
///  "dns_only", "requests", "sessions", "first_ts", "last_ts"}.
std::string render_json(const suggestion& s);

}  // namespace cordon::learn
