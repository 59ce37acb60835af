#pragma once
// The traffic of one job read from the audit files, for `cordon policy suggest` and
// `cordon policy replay` (config/learn/learn.hpp). Fast on big logs: files are mapped
// (audit_files.hpp), the job's `"job":"NAME"` bytes found in one SSE2 pass (find_needles),
// and only those lines are read, by a flat, allocation-free field scanner; equal request
// shapes are counted in one hash map. No sockets.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "common/time.hpp"
#include "config/learn/learn.hpp"

namespace cordon::proxy::audit {

struct traffic_query {
    std::string job;
    std::optional<common::wall_clock::time_point> since;  ///< records at or after
    std::optional<common::wall_clock::time_point> until;  ///< records at or before
};

struct traffic_stats {
    std::uint64_t files = 0;
    std::uint64_t bytes = 0;       ///< bytes searched
    std::uint64_t lines = 0;       ///< lines of the job read
    std::uint64_t used = 0;        ///< records counted (conn.*, http.request, dns.*, tool.call)
    std::uint64_t malformed = 0;   ///< lines of the job that were not audit JSON objects
    std::uint64_t bad_target = 0;  ///< records whose target (or HTTP method) was unusable
    /// New paths folded to their first segment (or "/") past the bound on distinct paths
    /// per target.
    std::uint64_t paths_folded = 0;
};

/// Counts the records of one job, line by line: requests (conn.open, conn.deny,
/// http.request), DNS queries, and the tool calls cordon decided on MCP rules (tool.call with
/// via "mcp"). Not thread-safe.
class traffic_collector {
public:
    explicit traffic_collector(traffic_query q);

    /// One audit line (without its '\n'). Lines of other jobs, other events or outside
    /// [since, until] are ignored.
    void add_line(std::string_view line, traffic_stats& stats);

    /// Scans the bytes of one audit file: only lines holding the job's needle are read; a
    /// last line without its '\n' (being written) is skipped.
    void scan(std::string_view data, traffic_stats& stats);

    /// What was counted, in a stable order (by target).
    learn::seen_traffic finish() const;

private:
    struct entry {
        learn::seen_request request;
        bool skip = false;  // unparseable target: counted in stats.bad_target once
    };
    struct tool_entry {
        learn::seen_tool_call call;
        bool skip = false;  // unparseable target, no tool
    };
    // A tool.call record: counted when via "mcp" (false otherwise, or when unusable).
    bool add_tool_call(std::string_view target, std::string_view via, std::string_view tool,
                       std::string_view reason, std::string_view would_deny, traffic_stats& stats);
    traffic_query q_;
    std::string needle_;    // "job":"NAME" as written
    std::string job_json_;  // the job as a JSON string value, without quotes
    std::string since_;
    std::string until_;
    std::string key_;      // scratch
    std::string address_;  // scratch: the record's non-public addresses
    std::unordered_map<std::string, entry> requests_;
    std::unordered_map<std::string, std::size_t> paths_;  // distinct paths per target bucket
    std::unordered_map<std::string, learn::seen_name> dns_;
    std::unordered_map<std::string, tool_entry> tool_calls_;
    std::unordered_set<std::string> sessions_;
    std::map<std::string, std::uint64_t> not_policy_;
    std::string first_ts_;
    std::string last_ts_;
};

/// Reads the audit files of `dir` (skipping days outside [since, until]) and counts the
/// job's traffic. Sets `error` when the directory or a file cannot be read.
learn::seen_traffic read_traffic(const std::string& dir, const traffic_query& q,
                                 traffic_stats& stats, std::string& error);

}  // namespace cordon::proxy::audit
