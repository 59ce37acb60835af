#pragma once
// Loading a policy: YAML text -> validated `policy`, or every error at once, each with the
// line and column it is about. `cordon check-config` and `cordon serve` both use this.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/policy.hpp"

namespace cordon::config {

/// Largest policy file read, in bytes. Anything bigger is refused unread.
inline constexpr std::size_t max_policy_bytes = 16 * 1024 * 1024;

/// One problem in a policy file.
struct diagnostic {
    std::string file;
    int line = 0;    ///< 1-based; 0 when the problem is the file as a whole
    int column = 0;  ///< 1-based
    std::string message;

    /// "FILE:LINE:COL: message", or "FILE: message" without a position.
    std::string to_string() const;
};

struct load_result {
    std::optional<policy> value;     ///< set only when `errors` is empty
    std::vector<diagnostic> errors;  ///< in file order
    /// Valid but surely not meant (a rule that can never match): the policy still loads.
    /// In file order; computed only for a policy without errors.
    std::vector<diagnostic> warnings;
    bool ok() const noexcept { return value.has_value(); }
};

/// The rules of `p` that can never match, in whole or for some ports, because an earlier
/// rule of the same job takes every request they would (first match wins: a `tls` and a
/// `tcp` rule for the same host and port, the same http rule twice). One warning per
/// shadowed rule, at its position; `file` names it.
std::vector<diagnostic> shadowed_rules(const policy& p, std::string_view file);

/// A job name as the policy allows it: 1-64 of [A-Za-z0-9._-], starting with a letter or
/// digit (so it is safe in a URL path: never "." or "..").
bool valid_job_name(std::string_view s) noexcept;

/// An HTTP method as a policy writes it and the proxy forwards it: 1-32 of [A-Z_-] (RFC 9110
/// token characters, upper case required so that "get" is caught rather than silently never
/// matching). CONNECT passes here; http rules refuse it separately.
bool valid_http_method(std::string_view s) noexcept;

/// True when `s` may carry an injected credential: a header name (1..64 token characters)
/// that is not Host, Content-Length, Transfer-Encoding, Connection, Keep-Alive, TE, Trailer,
/// Upgrade, Expect or a Proxy- field (case-insensitive).
bool valid_credential_header(std::string_view s) noexcept;

/// Loads and validates policy text. `file` names it in diagnostics.
load_result load_policy(std::string_view text, std::string_view file);

/// Reads `path` (at most max_policy_bytes) and loads it.
load_result load_policy_file(const std::string& path);

}  // namespace cordon::config
