#pragma once
// DNS host names as clients send them and as job cards name them: normalisation, wildcard
// patterns and matching. Pure.

#include <cstdint>
#include <string>
#include <string_view>

namespace cordon::config {

/// Longest name accepted, in characters, without the trailing dot (RFC 1035).
inline constexpr std::size_t max_host_length = 253;

/// A normalised name, or why the input is not one.
struct host_result {
    std::string value;  ///< lower case, no trailing dot
    std::string error;  ///< empty on success
    bool ok() const noexcept { return error.empty(); }
};

/// "host:port" as a CONNECT target or URL authority: a host with a ':' in it (an IPv6
/// literal, written without brackets) in brackets, "[2001:db8::1]:443"; a name or an IPv4
/// address as it is, "example.com:443". The one place cordon joins the two.
std::string host_port(std::string_view host, std::uint16_t port);

/// Normalises a DNS name: lower-cases ASCII, strips one trailing dot, and refuses empty
/// labels, labels over 63 characters or starting or ending with '-', names over 253
/// characters, and any character outside [a-z0-9-] (spaces, NUL, '%', '@', '\', '/', ':',
/// '_', non-ASCII: IDNs must arrive as punycode A-labels). Does not judge IP literals:
/// callers run parse_literal() first.
host_result normalise_host(std::string_view host);

/// Writes the normalised form of `host` into `out` (at least max_host_length + 1 bytes)
/// and returns its length, or 0 when `host` is not a valid name. Allocation-free form of
/// normalise_host for the data path.
std::size_t normalise_host_into(std::string_view host, char* out) noexcept;

/// A job card's host: an exact name, or "*.suffix" for every name strictly below suffix.
struct host_pattern {
    std::string name;  ///< normalised; for a wildcard, the suffix without "*."
    bool wildcard = false;

    /// True when `host` (already normalised) is matched.
    bool matches(std::string_view host) const noexcept;
    std::string to_string() const { return wildcard ? "*." + name : name; }
};

struct host_pattern_result {
    host_pattern value;
    std::string error;
    bool ok() const noexcept { return error.empty(); }
};

/// Parses a job card's host: '*' only as the whole leftmost label, IP literals refused
/// (they belong in `cidr` rules), otherwise as normalise_host.
host_pattern_result parse_host_pattern(std::string_view text);

}  // namespace cordon::config
