#pragma once
// `cordon policy replay`: a proposed policy tried on recorded traffic (learn.hpp). Each
// request shape is decided again with decide() (and check_addresses() for the non-public
// address it reached, when the record has one): the exact enforcement code. Pure.
//
// Verdicts compared are enforce-mode verdicts: a request recorded as would-deny (report
// mode) counts as denied before, and a job in report mode in the new policy is judged by
// what enforcing it would do.
//
// MCP tool calls (learn.hpp's seen_tool_call) are decided too: the request that carried
// them (a POST to the server's host and port, over plain HTTP or inside an inspected tunnel,
// as recorded) by decide(), then the tool by the allowing rule's `mcp.tools`. A rule without
// `mcp` lets every call through undecided (the row says so); a call refused as changed
// (mcp_tool_changed) stays refused while the rule lists its tool (its server's change
// stands).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/decide.hpp"
#include "config/learn/learn.hpp"

namespace cordon::learn {

/// Requests of one target whose verdict changed (or could not be decided again).
struct replay_row {
    std::string target;  ///< "host:port" ("[v6]:port")
    config::request_kind kind = config::request_kind::connect;
    std::string method;  ///< http and inspected only
    /// http and inspected: the recorded path (normal form, no query), when there is one;
    /// ends in "/**" when the record's path was cut.
    std::string path;
    seen_outcome was = seen_outcome::allowed;
    std::string was_reason;  ///< deny or would-deny reason; empty when allowed
    bool now_allowed = false;
    std::string now_reason;  ///< deny reason now; empty when allowed
    std::string now_rule;    ///< the allowing rule now ("api.example.com:443/tls")
    /// Set for the calls of one MCP tool (kind: http or inspected, as they were carried);
    /// `count` is then of calls.
    std::string tool;
    std::uint64_t count = 0;
};

struct replay_result {
    std::string job;
    std::vector<replay_row> newly_denied;   ///< most requests first
    std::vector<replay_row> newly_allowed;  ///< most requests first
    /// Denied for private_address with no address recorded, now matched by a rule with
    /// resolves_to: whether the address lies inside cannot be told. Also HTTP requests whose
    /// path was not recorded (or was cut), now decided by a rule with request rules.
    std::vector<replay_row> undetermined;
    std::uint64_t same_allowed = 0;  ///< requests allowed before and now
    std::uint64_t same_denied = 0;
    std::uint64_t same_allowed_targets = 0;
    std::uint64_t same_denied_targets = 0;
    std::uint64_t requests = 0;
    std::uint64_t tool_calls = 0;          ///< MCP tool calls decided again
    std::uint64_t same_tools_allowed = 0;  ///< tool calls allowed before and now
    std::uint64_t same_tools_denied = 0;
    bool job_in_report_mode = false;  ///< the new policy's job has `mode: report`
    std::string first_ts;
    std::string last_ts;

    std::uint64_t count(const std::vector<replay_row>& rows) const noexcept {
        std::uint64_t n = 0;
        for (const auto& r : rows) {
            n += r.count;
        }
        return n;
    }
};

/// Decides every request of `seen` (job seen.job) again under `p`. The job must be in `p`
/// (callers check; otherwise every request is newly denied with unknown_job).
replay_result replay(const seen_traffic& seen, const config::compiled_policy& p);

/// A table for a person: newly denied, newly allowed, undetermined (each its most requested
/// `max_table_rows` rows, then how many more), then the unchanged totals. `source` names
/// the new policy in the heading.
std::string render_table(const replay_result& r, std::string_view source);
inline constexpr std::size_t max_table_rows = 50;

/// {"job", "policy", "newly_denied": [...], "newly_allowed": [...], "undetermined": [...],
///  "unchanged": {"allowed": {"requests", "targets"}, "denied": {...}}, "requests", ...};
/// rows of tool calls have kind "tool_call", "tool", "via" (http or inspected) and
/// "calls"; "tool_calls": {"replayed", "unchanged": {"allowed", "denied"}}.
std::string render_json(const replay_result& r, std::string_view source);

}  // namespace cordon::learn
