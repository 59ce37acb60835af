// IP classification: two ordered tables, most specific range first, so the first match is
// the answer. The tables are constant data; classify() builds nothing but its result.
//
// Why `range` matters: a cidr rule (or a `resolves_to`) may open a non-public address only
// when the rule's prefix lies inside the range the address was classified in. So
// 0.0.0.0/0 or 10.0.0.0/7 never open loopback, metadata or all of 10/8 by accident, while
// 10.20.0.0/16 opens exactly that part of 10.0.0.0/8.
#include "config/classify.hpp"

#include <array>
#include <cstdint>

namespace cordon::config {

namespace {

using bytes16 = std::array<std::uint8_t, 16>;

struct v4_entry {
    std::uint32_t network;
    int len;
    ip_class cls;
};

constexpr std::uint32_t quad(unsigned a, unsigned b, unsigned c, unsigned d) {
    return (a << 24) | (b << 16) | (c << 8) | d;
}

// Most specific first: a /32 before the /8 or /16 around it, broadcast before 240/4.
constexpr std::array<v4_entry, 18> v4_table{{
    {quad(0, 0, 0, 0), 32, ip_class::unspecified},
    {quad(0, 0, 0, 0), 8, ip_class::unspecified},  // "this network"
    {quad(10, 0, 0, 0), 8, ip_class::private_net},
    {quad(100, 64, 0, 0), 10, ip_class::cgnat},
    {quad(127, 0, 0, 0), 8, ip_class::loopback},
    {quad(169, 254, 169, 254), 32, ip_class::metadata},
    {quad(169, 254, 0, 0), 16, ip_class::link_local},
    {quad(172, 16, 0, 0), 12, ip_class::private_net},
    {quad(192, 0, 0, 0), 24, ip_class::reserved},  // IETF protocol assignments
    {quad(192, 0, 2, 0), 24, ip_class::documentation},
    {quad(192, 88, 99, 0), 24, ip_class::reserved},  // deprecated 6to4 relay anycast
    {quad(192, 168, 0, 0), 16, ip_class::private_net},
    {quad(198, 18, 0, 0), 15, ip_class::benchmark},
    {quad(198, 51, 100, 0), 24, ip_class::documentation},
    {quad(203, 0, 113, 0), 24, ip_class::documentation},
    {quad(224, 0, 0, 0), 4, ip_class::multicast},
    {quad(255, 255, 255, 255), 32, ip_class::broadcast},
    {quad(240, 0, 0, 0), 4, ip_class::reserved},
}};

// How an IPv6 range is judged.
enum class v6_rule : std::uint8_t {
    fixed,       ///< the entry's class
    compatible,  ///< ::/96: the embedded IPv4's class if not global, else reserved
    embedded,    ///< NAT64 and 6to4: the embedded IPv4's class, global included
    mapped,      ///< ::ffff:0:0/96: the IPv4 rule (unreachable: ip_address::v6 normalises)
};

struct v6_entry {
    std::array<std::uint16_t, 8> words;
    int len;
    ip_class cls;
    v6_rule rule;
    int v4_offset;  ///< byte offset of the embedded IPv4 address, for the non-fixed rules
};

constexpr std::array<v6_entry, 22> v6_table{{
    {{0, 0, 0, 0, 0, 0, 0, 0}, 128, ip_class::unspecified, v6_rule::fixed, 0},
    {{0, 0, 0, 0, 0, 0, 0, 1}, 128, ip_class::loopback, v6_rule::fixed, 0},
    {{0, 0, 0, 0, 0, 0xffff, 0, 0}, 96, ip_class::reserved, v6_rule::mapped, 12},
    {{0, 0, 0, 0, 0, 0, 0, 0}, 96, ip_class::reserved, v6_rule::compatible, 12},
    {{0x64, 0xff9b, 0, 0, 0, 0, 0, 0}, 96, ip_class::global, v6_rule::embedded, 12},  // NAT64
    {{0x64, 0xff9b, 1, 0, 0, 0, 0, 0}, 48, ip_class::private_net, v6_rule::fixed, 0},
    {{0x100, 0, 0, 0, 0, 0, 0, 0}, 64, ip_class::reserved, v6_rule::fixed, 0},  // discard
    {{0x2001, 0xdb8, 0, 0, 0, 0, 0, 0}, 32, ip_class::documentation, v6_rule::fixed, 0},
    {{0x2001, 0x2, 0, 0, 0, 0, 0, 0}, 48, ip_class::benchmark, v6_rule::fixed, 0},
    {{0x2001, 0, 0, 0, 0, 0, 0, 0}, 32, ip_class::reserved, v6_rule::fixed, 0},   // Teredo
    {{0x2001, 0, 0, 0, 0, 0, 0, 0}, 23, ip_class::reserved, v6_rule::fixed, 0},   // IETF
    {{0x2002, 0, 0, 0, 0, 0, 0, 0}, 16, ip_class::global, v6_rule::embedded, 2},  // 6to4
    {{0x3fff, 0, 0, 0, 0, 0, 0, 0}, 20, ip_class::documentation, v6_rule::fixed, 0},
    {{0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254}, 128, ip_class::metadata, v6_rule::fixed, 0},
    {{0xfc00, 0, 0, 0, 0, 0, 0, 0}, 7, ip_class::private_net, v6_rule::fixed, 0},  // ULA
    {{0xfe80, 0, 0, 0, 0, 0, 0, 0}, 10, ip_class::link_local, v6_rule::fixed, 0},
    {{0xfec0, 0, 0, 0, 0, 0, 0, 0}, 10, ip_class::private_net, v6_rule::fixed, 0},  // site
    {{0xff00, 0, 0, 0, 0, 0, 0, 0}, 8, ip_class::multicast, v6_rule::fixed, 0},
    // Outside 2000::/3 (global unicast) nothing is routable: the largest blocks that
    // avoid it, so `range` stays a real prefix. The entries above already took their parts.
    {{0, 0, 0, 0, 0, 0, 0, 0}, 3, ip_class::reserved, v6_rule::fixed, 0},
    {{0x4000, 0, 0, 0, 0, 0, 0, 0}, 2, ip_class::reserved, v6_rule::fixed, 0},
    {{0x8000, 0, 0, 0, 0, 0, 0, 0}, 1, ip_class::reserved, v6_rule::fixed, 0},
    {{0x2000, 0, 0, 0, 0, 0, 0, 0}, 3, ip_class::global, v6_rule::fixed, 0},
}};

bytes16 to_bytes(const std::array<std::uint16_t, 8>& words) noexcept {
    bytes16 b{};
    for (std::size_t i = 0; i < words.size(); ++i) {
        b[2 * i] = static_cast<std::uint8_t>(words[i] >> 8);
        b[2 * i + 1] = static_cast<std::uint8_t>(words[i]);
    }
    return b;
}

bool prefix_matches(const bytes16& a, const bytes16& net, int len) noexcept {
    for (std::size_t i = 0; i < a.size() && len > 0; ++i, len -= 8) {
        const unsigned m = len >= 8 ? 0xffu : (0xffu << (8 - len)) & 0xffu;
        if (((a[i] ^ net[i]) & m) != 0) {
            return false;
        }
    }
    return true;
}

cidr host_prefix(const ip_address& a) { return cidr{a, a.bits()}; }

classification classify_v4(std::uint32_t v) {
    for (const auto& e : v4_table) {
        const std::uint32_t m = e.len == 0 ? 0 : ~std::uint32_t{0} << (32 - e.len);
        if ((v & m) == e.network) {
            return {e.cls, cidr{ip_address::v4(e.network), e.len}};
        }
    }
    const ip_address a = ip_address::v4(v);
    return {ip_class::global, host_prefix(a)};
}

// The IPv4 range `r` placed at `offset` inside the IPv6 prefix `base`/(offset * 8).
cidr v4_image(const bytes16& base, int offset, const cidr& r) {
    bytes16 b = base;
    const auto& v4 = r.network.bytes();
    for (std::size_t i = 0; i < 4; ++i) {
        b[static_cast<std::size_t>(offset) + i] = v4[i];
    }
    return cidr{ip_address::v6(b), offset * 8 + r.prefix_len};
}

}  // namespace

std::string_view to_string(ip_class c) noexcept {
    switch (c) {
        case ip_class::global: return "global";
        case ip_class::unspecified: return "unspecified";
        case ip_class::loopback: return "loopback";
        case ip_class::private_net: return "private";
        case ip_class::link_local: return "link_local";
        case ip_class::metadata: return "metadata";
        case ip_class::cgnat: return "cgnat";
        case ip_class::multicast: return "multicast";
        case ip_class::broadcast: return "broadcast";
        case ip_class::documentation: return "documentation";
        case ip_class::benchmark: return "benchmark";
        case ip_class::reserved: return "reserved";
    }
    return "reserved";
}

classification classify(const ip_address& a) noexcept {
    if (a.is_v4()) {
        return classify_v4(a.v4_value());
    }
    const bytes16& b = a.bytes();
    for (const auto& e : v6_table) {
        const bytes16 net = to_bytes(e.words);
        if (!prefix_matches(b, net, e.len)) {
            continue;
        }
        if (e.rule == v6_rule::fixed) {
            if (e.cls == ip_class::global) {
                return {e.cls, host_prefix(a)};
            }
            return {e.cls, cidr{ip_address::v6(net), e.len}};
        }
        const auto off = static_cast<std::size_t>(e.v4_offset);
        const std::uint32_t v4 = (std::uint32_t{b[off]} << 24) | (std::uint32_t{b[off + 1]} << 16) |
                                 (std::uint32_t{b[off + 2]} << 8) | std::uint32_t{b[off + 3]};
        const classification inner = classify_v4(v4);
        switch (e.rule) {
            case v6_rule::mapped: return inner;
            case v6_rule::compatible:
                if (inner.is_public()) {
                    return {ip_class::reserved, cidr{ip_address::v6(net), e.len}};
                }
                return {inner.cls, v4_image(net, e.v4_offset, inner.range)};
            case v6_rule::embedded:
                if (inner.is_public()) {
                    return {ip_class::global, host_prefix(a)};
                }
                return {inner.cls, v4_image(net, e.v4_offset, inner.range)};
            case v6_rule::fixed: break;
        }
    }
    return {ip_class::global, host_prefix(a)};  // not reached: 2000::/3 closes the table
}

std::optional<cidr> opened_unspecified_range(const cidr& p) noexcept {
    // Unspecified ranges nest (0.0.0.0/32 inside 0.0.0.0/8, and their IPv6 images): any
    // such range holding all of `p` holds both of its ends, and one end is classified in
    // the widest of them that does.
    bytes16 last = p.network.bytes();
    const int width = p.network.bits();
    for (int i = p.prefix_len; i < width; ++i) {
        last[static_cast<std::size_t>(i / 8)] |= static_cast<std::uint8_t>(0x80u >> (i % 8));
    }
    const ip_address ends[2] = {p.network, p.network.is_v4()
                                               ? ip_address::v4(std::array<std::uint8_t, 4>{
                                                     last[0], last[1], last[2], last[3]})
                                               : ip_address::v6(last)};
    for (const ip_address& a : ends) {
        const classification c = classify(a);
        if (c.cls == ip_class::unspecified && c.range.contains(p)) {
            return c.range;
        }
    }
    return std::nullopt;
}

bool reaches_this_host(const ip_address& a) noexcept {
    const ip_class c = classify(a).cls;
    return c == ip_class::loopback || c == ip_class::unspecified;
}

}  // namespace cordon::config
