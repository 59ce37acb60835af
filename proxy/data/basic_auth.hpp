#pragma once
// Proxy-Authorization: Basic credentials. Pure and bounded.

#include <optional>
#include <string>
#include <string_view>

namespace cordon::proxy::data {

struct basic_credentials {
    std::string user;      ///< the session id
    std::string password;  ///< the token secret
};

/// Parses a `Proxy-Authorization` value "Basic <base64(user:password)>". The scheme is
/// case-insensitive; the base64 must be canonical (padding required, no whitespace inside).
/// nullopt for anything else. Values over 1 KiB are refused unread.
std::optional<basic_credentials> parse_basic_auth(std::string_view header_value);

/// Standard base64 without line breaks; nullopt on any invalid input.
std::optional<std::string> base64_decode(std::string_view in);
std::string base64_encode(std::string_view in);

}  // namespace cordon::proxy::data
