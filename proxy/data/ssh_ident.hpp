#pragma once
// `protocol: ssh` rules: the client's first line must be an SSH identification string
// (RFC 4253 section 4.2: "SSH-2.0-softwareversion SP comments CR LF", at most 255 bytes).
// Pure and bounded; the caller bounds the time (proxy.handshake_timeout).

#include <cstddef>
#include <cstdint>
#include <span>

namespace cordon::proxy::data {

enum class ssh_verdict : std::uint8_t {
    match,      ///< a whole identification line of SSH 2.0
    mismatch,   ///< anything else: another protocol (HTTP, TLS), SSH 1, a line over 255 bytes
    need_more,  ///< a prefix of one
};

/// Judges the first bytes a client sent into an ssh rule's tunnel, as early as they differ:
/// "GET " is a mismatch at its first byte. The line is printable US-ASCII after "SSH-2.0-"
/// and ends in CR LF (a bare LF is taken, as OpenSSH does); nothing past it is looked at.
ssh_verdict check_ssh_ident(std::span<const std::uint8_t> first);

/// The longest identification line, CR LF included.
inline constexpr std::size_t max_ssh_ident = 255;

}  // namespace cordon::proxy::data
