#pragma once
// Request targets a client sends to the proxy: CONNECT authorities and absolute-form URIs.
// Pure and bounded; every input is hostile.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cordon::config {

/// Where a request wants to go.
struct target {
    std::string host;  ///< as sent, without brackets for IPv6 ("::1"), not normalised
    std::uint16_t port = 0;
    std::string origin_form;  ///< absolute-form only: "/path?query" for the upstream request
    std::string authority;    ///< absolute-form only: "host[:port]" as written in the URI
};

struct target_result {
    std::optional<target> value;
    std::string error;  ///< for the client: why the target was refused
};

/// Parses a CONNECT request-target "host:port" or "[v6]:port"; the port is required.
target_result parse_connect_target(std::string_view text);

/// Parses an absolute-form request-target "http://host[:port][/path][?query]". Only the
/// http scheme (case-insensitive) is proxied this way; https goes through CONNECT.
/// Userinfo and fragments are refused; an empty path becomes "/".
target_result parse_absolute_uri(std::string_view text);

/// True when a Host header value names the same authority as the URI target (host
/// compared case-insensitively, a missing port equal to `default_port`: 80 for plain HTTP,
/// 443 inside an inspected TLS tunnel).
bool host_header_matches(std::string_view host_header, const target& t,
                         std::uint16_t default_port = 80);

}  // namespace cordon::config
