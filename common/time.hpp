#pragma once
// Wall-clock time as cordon shows it: the clock of session and token lifetimes and the
// RFC 3339 timestamps of the audit log and the admin API. Pure, thread-safe.

#include <chrono>
#include <string>

namespace cordon::common {

/// The clock of session and token lifetimes (they are shown to users as wall-clock times).
using wall_clock = std::chrono::system_clock;

/// RFC 3339 in UTC with milliseconds, e.g. "2026-11-29T15:20:18.123Z". Sub-millisecond
/// parts are truncated towards the past (so times before the epoch print correctly).
std::string format_rfc3339(wall_clock::time_point t);
/// The same text appended to `out`, without a temporary (the audit log's hot path).
void append_rfc3339(std::string& out, wall_clock::time_point t);

}  // namespace cordon::common
