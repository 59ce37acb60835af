#pragma once
// SOCKS5 (RFC 1928) with username/password (RFC 1929), the handshake only: the client's
// greeting, its credentials and its request, parsed from bytes, and the proxy's answers as
// bytes. Pure and bounded: every field has a length byte, so no message exceeds 513 bytes;
// the caller bounds the time (socks_conn.cpp). What the handshake leads to is the CONNECT
// path's (client_conn.cpp).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "config/decide.hpp"

namespace cordon::proxy::data::socks5 {

inline constexpr std::uint8_t version = 5;
/// The method octets of a greeting (RFC 1928 section 3).
inline constexpr std::uint8_t method_no_auth = 0x00;
inline constexpr std::uint8_t method_userpass = 0x02;
inline constexpr std::uint8_t method_none = 0xff;  ///< "no acceptable methods"

/// The whole handshake, greeting + credentials + request, never needs more than this:
/// 257 + 513 + 262 bytes. A client that sends more before its answer is refused.
inline constexpr std::size_t max_handshake_bytes = 257 + 513 + 262;

enum class status : std::uint8_t { good, bad, need_more };

/// VER NMETHODS METHODS...: which of the two methods cordon speaks the client offers.
struct greeting {
    status st = status::need_more;
    std::size_t consumed = 0;  ///< good: the greeting's length
    bool no_auth = false;
    bool userpass = false;
    std::string_view error;  ///< bad: why
};
greeting parse_greeting(std::span<const std::uint8_t> in);

/// RFC 1929: VER(1) ULEN UNAME PLEN PASSWD; both 1 to 255 bytes.
struct credentials {
    status st = status::need_more;
    std::size_t consumed = 0;
    std::string user;      ///< the session id
    std::string password;  ///< the token: never logged
    std::string_view error;
};
credentials parse_credentials(std::span<const std::uint8_t> in);

/// The answer codes of a request (RFC 1928 section 6).
enum class reply : std::uint8_t {
    succeeded = 0,
    general_failure = 1,
    not_allowed = 2,  ///< "connection not allowed by ruleset": every policy refusal
    network_unreachable = 3,
    host_unreachable = 4,
    connection_refused = 5,
    ttl_expired = 6,
    command_not_supported = 7,
    address_type_not_supported = 8,
};

enum class command : std::uint8_t { connect = 1, bind = 2, udp_associate = 3 };

/// VER CMD RSV ATYP DST.ADDR DST.PORT.
struct request {
    status st = status::need_more;
    std::size_t consumed = 0;
    std::uint8_t cmd = 0;    ///< as sent: only command::connect is served
    bool name = false;       ///< ATYP 3: `host` is a name (checked: letters, digits, "-._")
    std::string host;        ///< the name, or the address as an IP literal ("::1" unbracketed)
    std::uint16_t port = 0;  ///< never 0 when good
    std::string_view error;
    reply refusal = reply::general_failure;  ///< bad: the answer to send (when the version is 5)
};
request parse_request(std::span<const std::uint8_t> in);

/// "CONNECT", "BIND", "UDP_ASSOCIATE" or "UNKNOWN": the records' method (a fixed set).
std::string_view command_name(std::uint8_t cmd);

/// "host:port" as CONNECT names it ("[::1]:22" for IPv6): what the CONNECT path parses.
std::string target_text(const request& r);

/// The method selection answer: VER METHOD.
std::array<std::uint8_t, 2> method_answer(std::uint8_t method);
/// The RFC 1929 answer: 0 success, anything else failure (the client must then close).
std::array<std::uint8_t, 2> credentials_answer(bool ok);
/// A request's answer, BND.ADDR 0.0.0.0:0 (cordon's own addresses are none of the
/// client's business; clients of CONNECT ignore them).
std::array<std::uint8_t, 10> request_answer(reply r);

/// The answer to a refusal by `reason`: not_allowed for every policy and session reason.
reply reply_for(config::deny_reason reason);

}  // namespace cordon::proxy::data::socks5
