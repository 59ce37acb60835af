#pragma once
// JSON string escaping for everything cordon writes as JSON by hand (the audit log, policy
// suggest and replay, alert payloads): one escaper, correct for hostile bytes. Pure.

#include <string>
#include <string_view>

namespace cordon::common {

/// Appends `s` to `out` as a JSON string with its quotes. Escapes '"', '\\', every control
/// character (U+0000..U+001F and U+007F, as \n, \t, ... or \u00XX) and U+2028/U+2029; replaces
/// each maximal invalid UTF-8 subsequence (stray continuation bytes, truncated or overlong
/// sequences, surrogates, code points above U+10FFFF) by U+FFFD; keeps valid UTF-8 as is.
/// The output is always valid JSON, whatever `s` holds.
void append_json_string(std::string& out, std::string_view s);

/// The same string in printable ASCII only: every other code point as \uXXXX (a surrogate
/// pair above U+FFFF), each invalid UTF-8 subsequence as \ufffd. For answers to clients,
/// which read the same whatever the terminal or log they end up in.
void append_json_string_ascii(std::string& out, std::string_view s);

}  // namespace cordon::common
