#pragma once
// http:// and https:// URLs as a policy names them (the alert webhook). Pure.
// A webhook URL may itself be a secret (Slack's are): nothing here puts the URL, its path or
// its query into an error message; origin() is the only form fit for logs.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cordon::config {

/// A parsed absolute http(s) URL without credentials or fragment.
struct http_url {
    bool tls = false;        ///< https
    std::string host;        ///< a normalised DNS name, or an IP literal without brackets
    bool ipv6 = false;       ///< host is an IPv6 literal
    std::uint16_t port = 0;  ///< explicit, or 80 / 443
    std::string target;      ///< path and query as written, starting with '/'

    /// "https://hooks.example.com" or "http://127.0.0.1:8080": scheme, host and a port
    /// other than the scheme's default. Safe to log: no path, no query.
    std::string origin() const;
    /// The Host header value: host, brackets for IPv6, ":port" unless the default.
    std::string host_header() const;
};

struct http_url_result {
    std::optional<http_url> value;
    std::string error;  ///< never quotes the URL
};

/// Parses "http://host[:port][/path][?query]" (scheme in lower case). Refused: other
/// schemes, whitespace or control characters, non-ASCII (percent-encode it), credentials
/// ("user:pass@": put them in a header), fragments, an empty or invalid host, a bad port.
http_url_result parse_http_url(std::string_view text);

}  // namespace cordon::config
