#pragma once
// The TLS ClientHello as a CONNECT tunnel's first client bytes carry it: enough parsing to
// read the SNI host name without terminating TLS, so the tunnel can check it against the
// CONNECT host. Pure and bounded: no sockets, no allocation past max_client_hello_bytes.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace cordon::proxy::data {

/// What the bytes received so far are.
enum class hello_status : std::uint8_t {
    need_more,  ///< a valid prefix; read more bytes and call again with all bytes so far
    ok,         ///< a complete ClientHello with a server_name host_name; `sni` set
    no_sni,     ///< a complete ClientHello without a server_name extension (or no host_name entry)
    not_tls,    ///< the bytes are not a TLS handshake record (e.g. plain HTTP, SSH banner)
    bad,        ///< malformed or over the limits; `error` says why
};

/// Most bytes of record stream (headers included) that may carry one ClientHello.
inline constexpr std::size_t max_client_hello_bytes = 64 * 1024;  // all records together

/// The outcome of parse_client_hello().
struct hello_result {
    hello_status status = hello_status::need_more;
    std::string sni;           ///< as sent (not lower-cased); only with ok
    std::string error;         ///< only with bad / not_tls
    std::size_t consumed = 0;  ///< bytes of the record stream that held the ClientHello (ok/no_sni)
};

/// Parses the first bytes a client sent into a tunnel. Stateless: pass every byte read so
/// far each time. Handles a ClientHello split across TCP segments and across several TLS
/// records (handshake message fragmentation), bounded by max_client_hello_bytes.
///
/// Decisions are final: once a prefix of the stream gives anything but need_more, every
/// longer stream gives the same result, so a caller may stop reading at the first one.
/// Bytes after the record that completes the ClientHello are not looked at (`consumed`
/// says where it ended). A host name is 1..255 bytes of visible ASCII (0x21..0x7e); it is
/// returned as sent, so callers normalise it (case, trailing dot) before comparing.
hello_result parse_client_hello(std::span<const std::uint8_t> data);

/// The SNI check of a tunnel to a tls rule, on the bytes received so far.
enum class sni_verdict : std::uint8_t {
    match,      ///< a ClientHello whose SNI, normalised, is `want`
    mismatch,   ///< another name, no SNI, not TLS or malformed: refused
    need_more,  ///< a valid prefix: read more (within the handshake timeout)
};

/// Whether the ClientHello in `data` names `want` (a normalised host name: lower case, no
/// trailing dot). Stateless, as parse_client_hello.
sni_verdict check_sni(std::string_view want, std::span<const std::uint8_t> data);

}  // namespace cordon::proxy::data
