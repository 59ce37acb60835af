#pragma once
// The egress decision: may this job reach this host, port and protocol? A pure function
// over a compiled policy (after Smokescreen ACL.Decide). No sockets, clock or globals;
// thread-safe on a shared `const compiled_policy`.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "config/ip.hpp"
#include "config/policy.hpp"

namespace cordon::config {

/// Why a request was denied. A fixed set: metrics label by it, agents act on it.
enum class deny_reason : std::uint8_t {
    none,             ///< allowed
    no_rule,          ///< no rule of the job names this host (or address)
    port,             ///< a rule names the host, but not this port
    protocol,         ///< host and port match a rule of another protocol
    method,           ///< an http rule matches, but not this method
    private_address,  ///< the target is (or resolves to) a non-public address no rule opens
    bad_request,      ///< the target is malformed: bad name, non-canonical IP literal, ...
    unknown_job,      ///< the session's job is not in the policy
    // Reasons decided outside the policy model, by the daemon; listed here so that one enum
    // (and one metric label set) covers every denial.
    sni_mismatch,
    kill_switch,
    session_killed,
    token_expired,
    auth,
    limit,
    budget,
    policy_changed,
    token_revoked,
    session_ended,
    audit_unavailable,
    // The policy model's again (added with request rules; appended so no value moves).
    http_rule,  ///< an http rule with request rules matches, but none of them this request
    // Decided by the daemon inside an inspected tunnel.
    upstream_tls,  ///< the upstream's certificate did not verify (chain, name, expiry)
    // The credential broker's (docs/inspect.md "Credentials").
    credential_misuse,    ///< a placeholder sent where no credential is injected, or another's
    credential_required,  ///< a credentialed rule's request without the session's placeholder
    secret_leak,          ///< a real secret's bytes in what the sandbox sends
    // MCP rules' (docs/mcp.md).
    mcp_tool,          ///< a tools/call of a tool the rule's `mcp.tools` does not list
    mcp_tool_changed,  ///< a tools/call of a tool whose definition changed within the session
};
inline constexpr std::size_t deny_reason_count = 26;
std::string_view to_string(deny_reason r) noexcept;

/// What the request asks the proxy to do.
enum class request_kind : std::uint8_t {
    connect,    ///< CONNECT host:port (matched by tls, tcp and https rules)
    http,       ///< an absolute-form plain HTTP request (matched by http rules)
    inspected,  ///< an HTTP request inside a TLS tunnel cordon terminates (https rules)
};

/// The question. Fields are views: the caller keeps them alive for the call.
struct decide_args {
    std::string_view job;
    std::string_view host;  ///< as the client sent it: a name or an IP literal, no port
    std::uint16_t port = 0;
    request_kind kind = request_kind::connect;
    std::string_view method;  ///< http and inspected only
    /// http and inspected only: the request's path in normal form (config/http_rules.hpp
    /// normalise_path), matched against the request rules of a rule that has them.
    std::string_view path;
    /// http and inspected only: set when the path was refused by normalise_path (its error); a rule
    /// with request rules then denies bad_request. Rules without request rules never look.
    bool path_refused = false;
};

/// The answer. `rule` points into the compiled policy's jobs and lives as long as it.
struct decision {
    deny_reason reason = deny_reason::no_rule;
    const egress_rule* rule = nullptr;  ///< the allowing rule, or the closest match
    int rule_index = -1;                ///< index of `rule` in its job's egress list
    int http_index = -1;                ///< the request rule (rule->http) that matched, if any
    bool allowed() const noexcept { return reason == deny_reason::none; }
};

class compiled_policy;

/// Compiles a validated policy into lookup tables: exact names and wildcard suffixes in
/// hash maps, CIDRs in one hash map per prefix length. Cost: O(rules) once.
std::shared_ptr<const compiled_policy> compile(policy p);

/// Decides a request against a job's rules. Cost: a few hash lookups per label of the host
/// (and per distinct prefix length for IP literals); never a scan over the rules.
/// Rules only grant: a request is allowed when any rule allows it. Among allowing rules an
/// exact name is preferred over a wildcard and a longer suffix over a shorter one; that
/// rule's `resolves_to` then applies to the addresses the name resolves to.
/// IP literals match only `cidr` rules; a non-public address is allowed only by a rule whose
/// prefix lies inside the address's special range (so 0.0.0.0/0 opens no loopback).
decision decide(const decide_args& args, const compiled_policy& p);

/// May this job resolve `name` through cordon's DNS resolver? Allowed when any host rule of
/// the job names it (exactly, or below a wildcard), whatever the rule's port and protocol:
/// the names of its egress rules and nothing else. IP-literal-looking and malformed names
/// are `bad_request`; `rule` is the most specific naming rule.
decision decide_dns(std::string_view job, std::string_view name, const compiled_policy& p);

/// The resolution check for an allowed name: every address must be public or covered by
/// the rule's `resolves_to`; if any one is refused, none may be used (private_address).
/// Returns `allowed` unchanged when all pass. An allowed decision without a rule (report
/// mode's, config/mode.hpp) has no resolves_to: every address must be public.
decision check_addresses(const decision& allowed, std::span<const ip_address> addresses);

/// True when `prefix` (a cidr rule or a resolves_to entry) lets a connection reach `a`.
bool prefix_allows(const cidr& prefix, const ip_address& a) noexcept;

/// The compiled form of a policy, shared read-only by every thread.
class compiled_policy {
public:
    struct tables;  ///< lookup tables, private to compile.cpp and decide.cpp

    explicit compiled_policy(config::policy p);
    ~compiled_policy();
    compiled_policy(const compiled_policy&) = delete;
    compiled_policy& operator=(const compiled_policy&) = delete;

    const config::policy& source() const noexcept { return policy_; }
    /// Index of the named job in source().jobs, or -1.
    int job_index(std::string_view name) const noexcept;
    const tables& index() const noexcept { return *tables_; }
    /// True when some rule has request rules (`http:`): only then does a request's path
    /// need its normal form (decide_args::path).
    bool has_request_rules() const noexcept { return request_rules_; }

private:
    config::policy policy_;
    bool request_rules_ = false;
    std::unique_ptr<tables> tables_;
};

}  // namespace cordon::config
