#pragma once
// The audit log's file names and how to list them, shared by the writer (audit_log), its
// retention pruning and the reader (`cordon audit timeline`). No sockets; only directory I/O.
//
// A UTC day's records go to cordon-YYYY-MM-DD.jsonl; when that file would outgrow
// audit.max_file_bytes the day continues in cordon-YYYY-MM-DD.p0001.jsonl, .p0002, ... up to
// .p9999 (then that last part grows). The names sort in write order both byte-wise ('j' < 'p')
// and in the usual locale collations, so `cat cordon-*.jsonl` reads them in order.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/time.hpp"

namespace cordon::proxy::audit {

/// The highest part number of a day; its file grows past the size bound.
inline constexpr unsigned max_audit_part = 9999;

/// Which file of the audit log a name denotes.
struct audit_file_id {
    std::int64_t day = 0;  ///< days since 1970-01-01 (UTC)
    unsigned part = 0;     ///< 0 for cordon-DAY.jsonl, N for cordon-DAY.pNNNN.jsonl
    friend bool operator==(const audit_file_id&, const audit_file_id&) = default;
    friend auto operator<=>(const audit_file_id&, const audit_file_id&) = default;
};

/// The UTC day of `t` (days since 1970-01-01).
std::int64_t audit_day_of(common::wall_clock::time_point t) noexcept;

/// "cordon-2026-11-29.jsonl" for part 0, "cordon-2026-11-29.p0003.jsonl" for part 3.
/// `part` must be <= max_audit_part.
std::string audit_file_name(audit_file_id id);

/// The id of an audit file name, or nullopt for any other name (other files in the
/// directory are never touched). Strict: exactly the shapes audit_file_name() makes, a valid
/// calendar date and 1 <= part <= max_audit_part ("p0000" is not a name it makes).
std::optional<audit_file_id> parse_audit_file_name(std::string_view name);

/// One audit file found in a directory.
struct audit_file {
    std::string path;
    audit_file_id id;
    std::uint64_t size = 0;
};

/// The regular files (not symlinks, not directories) directly under `dir` whose names parse,
/// ordered by (day, part): the order they were written in. Sets `error` and returns what it
/// has if the directory cannot be read.
std::vector<audit_file> list_audit_files(const std::string& dir, std::string& error);

/// Maps (read-only, MAP_POPULATE: few page faults on big files) each audit file of `dir`
/// whose day the window [since, until] touches (an unset end is open), in write order, and
/// calls `fn(file, bytes)`;
/// the bytes are valid only during the call. Empty files are not passed. Returns the
/// number of files opened; sets `error` and stops at a directory, file or map failure.
/// The readers of `cordon audit timeline` and `cordon policy suggest|replay` share it.
std::uint64_t map_audit_files(const std::string& dir,
                              const std::optional<common::wall_clock::time_point>& since,
                              const std::optional<common::wall_clock::time_point>& until,
                              const std::function<void(const audit_file&, std::string_view)>& fn,
                              std::string& error);

}  // namespace cordon::proxy::audit
