#pragma once

// Percent-encoding (RFC 3986 section 2.1), pure: the one hex digit reader and the one decoder
// that every scan seeing through encodings uses (request rules, the credential broker, the
// audit log's redaction).

#include <string>
#include <string_view>

namespace cordon::common {

/// The value of a hex digit (either case), or -1.
constexpr int hex_value(char c) noexcept {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/// `s` with every "%XX" (two hex digits) decoded to its byte, whatever the byte; anything
/// else (a lone '%', "%G1") as it is. For scans that must see through encodings, never for
/// forwarding: config::normalise_path says what may be sent.
std::string percent_decoded(std::string_view s);

}  // namespace cordon::common
