#pragma once
// IP addresses and CIDR prefixes: parsing every literal form a client may send, and prefix
// arithmetic. Pure: no sockets, no resolver, no globals. Thread-safe.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cordon::config {

/// An IPv4 or IPv6 address. IPv4 is stored in the first 4 bytes of `bytes_`.
/// IPv4-mapped IPv6 (::ffff:a.b.c.d) is normalised to IPv4 by every parser here, so one
/// address has one representation.
class ip_address {
public:
    enum class family : std::uint8_t { v4, v6 };

    ip_address() = default;
    static ip_address v4(std::uint32_t host_order);
    static ip_address v4(std::array<std::uint8_t, 4> b);
    /// Builds an IPv6 address; an IPv4-mapped one becomes IPv4.
    static ip_address v6(const std::array<std::uint8_t, 16>& b);

    family fam() const noexcept { return family_; }
    bool is_v4() const noexcept { return family_ == family::v4; }
    bool is_v6() const noexcept { return family_ == family::v6; }
    /// Host-order value of an IPv4 address (0 for IPv6).
    std::uint32_t v4_value() const noexcept;
    const std::array<std::uint8_t, 16>& bytes() const noexcept { return bytes_; }
    /// Address width in bits: 32 or 128.
    int bits() const noexcept { return is_v4() ? 32 : 128; }
    /// Bit i (0 = most significant).
    bool bit(int i) const noexcept;

    /// Canonical text: dotted quad, or RFC 5952 IPv6 (no brackets).
    std::string to_string() const;

    friend bool operator==(const ip_address&, const ip_address&) = default;

private:
    family family_ = family::v4;
    std::array<std::uint8_t, 16> bytes_{};
};

/// A prefix: network address with host bits zero, and a length.
struct cidr {
    ip_address network;
    int prefix_len = 0;

    bool contains(const ip_address& a) const noexcept;
    /// True when every address of `inner` is in this prefix (same family).
    bool contains(const cidr& inner) const noexcept;
    std::string to_string() const;
    friend bool operator==(const cidr&, const cidr&) = default;
};

/// `a` with every bit past `prefix_len` cleared.
ip_address mask(const ip_address& a, int prefix_len) noexcept;

/// How a host string reads as an address.
enum class literal_kind {
    not_ip,         ///< a name (or garbage for the host validator to judge)
    ipv4,           ///< canonical dotted quad: four decimal parts 0..255, no leading zeros
    ipv6,           ///< an IPv6 address (bracketed or not; zone allowed)
    non_canonical,  ///< a number some resolvers accept as IPv4 (decimal, octal, hex, short
                    ///< forms, trailing dot): refused, never treated as a name
    invalid,        ///< looks numeric (ends in a numeric label) or bracketed, but is no address
};

struct literal {
    literal_kind kind = literal_kind::not_ip;
    ip_address address;  ///< set for ipv4, ipv6 and non_canonical (what a lenient resolver
                         ///< would have used)
    std::string zone;    ///< IPv6 zone id, without the '%' (or "%25" in URLs)
};

/// Classifies `host` as it appears in a CONNECT authority, a URL or a Host header, with
/// the port already removed. IPv6 may be bracketed ("[::1]") or bare ("::1"), with a zone
/// ("fe80::1%eth0", "[fe80::1%25eth0]"). Follows the WHATWG URL rule: a host whose last
/// label (after one trailing dot) is numeric (decimal digits, or 0x + hex digits) is an
/// IPv4 attempt and never a DNS name.
literal parse_literal(std::string_view host);

/// Parses a canonical address (dotted quad or IPv6 without brackets or zone).
std::optional<ip_address> parse_ip(std::string_view text);

/// Parses "addr/len" with canonical addr; host bits set is an error. The message says why.
struct cidr_result {
    std::optional<cidr> value;
    std::string error;
};
cidr_result parse_cidr(std::string_view text);

}  // namespace cordon::config
