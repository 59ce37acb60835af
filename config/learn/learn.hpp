#pragma once
// Traffic of one job as recorded in the audit log, the input of `cordon policy suggest`
// (suggest.hpp) and `cordon policy replay` (replay.hpp): one entry per distinct request
// shape and outcome, with a count. Pure data; proxy/audit/audit_traffic.hpp fills it from the
// audit files.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/decide.hpp"  // request_kind
#include "config/ip.hpp"

namespace cordon::learn {

/// What the enforced policy did with a request when it was recorded.
enum class seen_outcome : std::uint8_t {
    allowed,     ///< conn.open (or http.request) without would_deny
    would_deny,  ///< conn.open with would_deny (report mode): enforce mode denies it
    denied,      ///< conn.deny (or http.request) with a policy reason (no_rule, port,
                 ///< protocol, method, http_rule, private_address, unknown_job)
};

/// Requests of one shape and outcome.
struct seen_request {
    std::string host;  ///< normalised name, or canonical IP text (IPv6 without brackets)
    bool ip_literal = false;
    std::uint16_t port = 0;
    /// connect, http (plain, absolute-form), or inspected (an `http.request` record: a
    /// request inside a TLS tunnel cordon terminated, `protocol: https`).
    config::request_kind kind = config::request_kind::connect;
    std::string method;  ///< http, inspected: the method (upper case); connect: empty
    /// http: the path in normal form, where request rules judged it (the record's `path`);
    /// inspected: always. Never the query (parse_recorded_path). Empty when not recorded
    /// (replay cannot then decide a rule with request rules).
    std::string path;
    /// The recorded path was cut (too long, or folded by the reader's bound on distinct
    /// paths): `path` stands for itself and every path below it.
    bool path_cut = false;
    /// inspected: the name of the secret cordon injected (the record's `credential`).
    std::string credential;
    seen_outcome outcome = seen_outcome::allowed;
    std::string reason;  ///< the deny or would-deny reason; empty when allowed
    /// The non-public addresses serve checked for it, space-separated: of a name, every one
    /// it resolved to (the record's `resolved`; older records: the one connected to, `ip`).
    /// Set on allowed and would-deny requests (a rule's resolves_to opened them) and on
    /// private_address denials; empty otherwise. See recorded_addresses().
    std::string address;
    bool tcp_rule = false;    ///< allowed by a tcp rule (CONNECT without SNI check)
    bool https_rule = false;  ///< allowed by an https rule (CONNECT, TLS cordon terminates)
    std::uint64_t count = 0;
};

/// Calls of one tool at one MCP server with one outcome: `tool.call` records with `via: "mcp"`
/// (a tools/call cordon decided on the wire, docs/mcp.md).
struct seen_tool_call {
    std::string host;  ///< the call's server, as seen_request::host
    bool ip_literal = false;
    std::uint16_t port = 0;
    std::string tool;  ///< as recorded (JSON escapes kept; suggest checks it can be listed)
    /// allowed: forwarded (or allowed in a batch another call got refused, mcp_batch);
    /// would_deny: report mode let through what enforce mode refuses; denied: refused.
    seen_outcome outcome = seen_outcome::allowed;
    std::string reason;  ///< mcp_tool or mcp_tool_changed; empty when allowed
    std::uint64_t count = 0;
};

/// A name asked of cordon's DNS resolver.
struct seen_name {
    std::string name;  ///< normalised
    std::uint64_t answered = 0;
    std::uint64_t denied = 0;
};

/// Everything read for one job.
struct seen_traffic {
    std::string job;
    std::vector<seen_request> requests;
    std::vector<seen_name> dns;
    std::vector<seen_tool_call> tool_calls;  ///< by host, port, tool
    std::uint64_t sessions = 0;              ///< distinct sessions seen
    /// conn.deny records whose reason is not the policy's (kill switch, auth, limits, SNI
    /// mismatch, ...): neither learned nor replayed, counted by reason.
    std::map<std::string, std::uint64_t> not_policy;
    std::string first_ts;  ///< of the records used; empty when none
    std::string last_ts;
};

/// The addresses of seen_request::address; nullopt when one of them is not an address.
std::optional<std::vector<config::ip_address>> recorded_addresses(std::string_view text);

/// A recorded path as suggest and replay use it, in normal form without its query.
struct recorded_path {
    std::string path;
    bool cut = false;  ///< stands for `path` and every path below it
};

/// Longest path kept whole; a longer one is cut back to its last whole segment (`cut`).
inline constexpr std::size_t max_recorded_path = 1024;

/// The record's `path` (JSON escapes already decoded): the query dropped; a value the audit
/// writer cut ("...(truncated)") or longer than max_recorded_path cut back to its last
/// whole segment and marked `cut`; nullopt when it is not a path in normal form
/// (config::normalise_path would change or refuse it).
std::optional<recorded_path> parse_recorded_path(std::string_view raw);

/// `p` reduced to its first `segments` segments, marked cut ("/" when 0).
recorded_path fold_path(const recorded_path& p, std::size_t segments);

/// True for the deny reasons decided by the policy (decide() and check_addresses()), the
/// only denials suggest learns from and replay re-decides.
bool is_policy_reason(std::string_view reason) noexcept;

/// True for the reasons an MCP rule refuses a request for its tool calls (mcp_tool,
/// mcp_tool_changed): the egress rules allowed that request; its calls are learned and
/// replayed from their tool.call records.
bool is_tool_reason(std::string_view reason) noexcept;

/// `reason` when it is one of cordon's deny reasons (to_string(deny_reason)), else "other":
/// reasons read from a file go into comments and tables only in this checked form.
std::string_view known_reason(std::string_view reason) noexcept;

}  // namespace cordon::learn
