#pragma once
// Sizes ("1GiB") and durations ("30m") as written in a policy. Pure.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cordon::config {

/// Parses a byte size: a plain integer, or an integer followed by B, KB, MB, GB, TB
/// (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024). No fractions, no sign, no
/// overflow: nullopt when the text is not such a size.
std::optional<std::uint64_t> parse_size(std::string_view text);

/// Parses a duration: one or more <integer><unit> groups with units ms, s, m, h, d, as in
/// "30m", "1h30m", "90s". nullopt when the text is not such a duration.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

/// "30m", "1h30m", "1500ms": the shortest text that parse_duration reads back.
std::string format_duration(std::chrono::milliseconds d);

}  // namespace cordon::config
