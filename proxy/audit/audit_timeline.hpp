#pragma once
// `cordon audit timeline`: one session's events, read from the audit files in write order
// and put in time order. Fast on big logs: each file is mapped and searched with memmem for
// the session's `"session":"ID"` bytes; only matching lines are parsed. No sockets; the
// JSON reader (Boost.JSON) stays in the .cpp.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/time.hpp"

namespace cordon::proxy::audit {

/// A --since / --until argument: RFC 3339 ("2026-11-29T15:20:18Z", fractions and +hh:mm
/// offsets allowed, "t"/"z" in any case, a space instead of 'T'), a bare date
/// ("2026-11-29", its midnight UTC), or a duration back from `now` ("2h", "30m", "1h30m",
/// "2d", as config::parse_duration reads them). nullopt for anything else.
std::optional<common::wall_clock::time_point> parse_time_arg(std::string_view text,
                                                             common::wall_clock::time_point now);

/// The --since / --until window of a verb that reads the audit files (audit timeline,
/// policy suggest and replay).
struct time_window {
    std::optional<common::wall_clock::time_point> since;
    std::optional<common::wall_clock::time_point> until;
};

/// Reads each text given with parse_time_arg. nullopt when one is neither: `error` then names
/// the flag and the text ("--since: 'x' is neither RFC 3339 nor a duration like 2h").
std::optional<time_window> parse_time_window(std::optional<std::string_view> since_text,
                                             std::optional<std::string_view> until_text,
                                             common::wall_clock::time_point now,
                                             std::string& error);

/// What to look for.
struct timeline_query {
    std::string session;
    std::optional<common::wall_clock::time_point> since;  ///< events at or after
    std::optional<common::wall_clock::time_point> until;  ///< events at or before
};

/// One event found: its audit line (without '\n') and its ts.
struct timeline_event {
    std::string ts;
    std::string line;
    bool network = false;  ///< a kill.network or revive (no session of its own)
};

/// Counters of a scan, for the caller's summary and the benchmark.
struct timeline_stats {
    std::uint64_t files = 0;
    std::uint64_t bytes = 0;      ///< bytes searched
    std::uint64_t parsed = 0;     ///< candidate lines parsed
    std::uint64_t malformed = 0;  ///< candidate lines that were not audit JSON
};

/// The offset of every occurrence of every (non-empty) needle in `data`, in one pass over it
/// (SSE2 where available, else memmem per needle); unordered, a position once per needle.
void find_needles(std::string_view data, const std::vector<std::string>& needles,
                  std::vector<std::size_t>& hits);

/// [start, end) of the line of `data` holding offset `at`; end is npos when that line has no
/// '\n' yet (the record being written).
std::pair<std::size_t, std::size_t> line_at(std::string_view data, std::size_t at);

/// Scans `data` (the bytes of one audit file) and appends the lines of `q.session` within
/// [since, until], and every kill.network and revive (finish_timeline() keeps those that fall
/// within the session's span). A last line without its '\n' (being written) is skipped.
void scan_timeline(std::string_view data, const timeline_query& q, std::vector<timeline_event>& out,
                   timeline_stats& stats);

/// Puts the events in time order (stable: the file order breaks ties) and keeps network
/// kills and revives only between the session's first and last event.
void finish_timeline(std::vector<timeline_event>& events);

/// Reads the audit files of `dir` (audit_files.hpp: in write order, skipping days before
/// `since` and after `until`) with mmap, then scan_timeline() and finish_timeline().
/// Sets `error` when the directory or a file cannot be read.
std::vector<timeline_event> read_timeline(const std::string& dir, const timeline_query& q,
                                          timeline_stats& stats, std::string& error);

/// One line for a person: "TS  EVENT  what happened", e.g.
/// "2026-11-29T15:20:18.123Z  conn.close    api.example.com:443 up 1.2 KiB, down 3.4 MiB,
/// 1.20 s (done)". Fields it does not know are shown as key=value. Control characters in
/// values are shown escaped, so a hostile value cannot forge lines on a terminal.
/// (audit_timeline_text.cpp)
std::string format_timeline_event(std::string_view json_line);

/// The lines of a whole timeline (events in time order, as read_timeline() gives them):
/// format_timeline_event() of each, and the connections that carried MCP messages labelled
/// "conn 1", "conn 2", ... in order of their first record. A connection is a client address
/// and a target (the records' `client` and `target`; a CONNECT's conn.close ends it); its
/// label is put on each of its records: conn.open, conn.close, conn.deny, conn.error,
/// http.request, and inside the brackets of its tool.call ("[via mcp, server HOST:PORT,
/// id 7, conn 1]") and after its mcp.tool_changed. Other connections are not labelled.
std::vector<std::string> format_timeline(const std::vector<timeline_event>& events);

/// "512 B", "1.2 KiB", "3.4 MiB", "1.0 GiB".
std::string human_bytes(std::uint64_t n);

}  // namespace cordon::proxy::audit
