#pragma once
// Events the `cordon run` shim posts into a session's timeline with the admin token
// (POST /v1/sessions/ID/events): `file.write` (a file written in the scratch dir) and
// `identity.mint` / `identity.revoke` (the job's identity hooks ran; never their output).
// Pure: parsing, bounds and the audit record. Boost.JSON stays in the .cpp.

#include <optional>
#include <string>
#include <string_view>

#include "common/time.hpp"
#include "proxy/audit/audit.hpp"

namespace cordon::proxy::audit {

/// True when the body's "event" is one of the shim's events (so the admin API parses it
/// with parse_shim_event, not as a tool.call). False for anything unparsable.
bool is_shim_event(std::string_view body);

/// Parses a shim event and builds its audit record for `session` and `job`:
///   {"event":"file.write","path":"/scratch/out.md","size":123}
///   {"event":"identity.mint","ok":true,"exit_code":0,"duration_ms":12,"bytes":40,
///    "to":"env:CORDON_IDENTITY"}
///   {"event":"identity.revoke","ok":true,"exit_code":0,"duration_ms":5,"when":"end"}
/// Unknown keys, wrong types, a path that is not absolute or above 4096 bytes, `to`/`when`
/// above 256 bytes are refused: nullopt and `error` set. The record says `by: cordon-run`.
std::optional<audit_record> parse_shim_event(std::string_view body, std::string_view session,
                                             std::string_view job,
                                             common::wall_clock::time_point ts, std::string& error);

}  // namespace cordon::proxy::audit
