#pragma once
// IP classification: is this address on the public internet, and if not, which special
// range holds it. An ordered, table-tested pure function (after Smokescreen classifyAddr).

#include <optional>
#include <string_view>

#include "config/ip.hpp"

namespace cordon::config {

/// The kind of range an address falls in. Everything but `global` is non-public and is
/// denied by default (reason `private_address`).
enum class ip_class {
    global,         ///< public unicast
    unspecified,    ///< 0.0.0.0, ::, and 0.0.0.0/8 "this network"
    loopback,       ///< 127.0.0.0/8, ::1
    private_net,    ///< RFC 1918, ULA fc00::/7, site-local fec0::/10, local-use NAT64
    link_local,     ///< 169.254.0.0/16, fe80::/10
    metadata,       ///< cloud metadata endpoints: 169.254.169.254, fd00:ec2::254
    cgnat,          ///< 100.64.0.0/10 shared address space
    multicast,      ///< 224.0.0.0/4, ff00::/8
    broadcast,      ///< 255.255.255.255
    documentation,  ///< 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20
    benchmark,      ///< 198.18.0.0/15, 2001:2::/48
    reserved,       ///< everything else that is not routable on the internet
};

std::string_view to_string(ip_class c) noexcept;

/// The verdict on one address: its class, and the special range it was found in (for a
/// `global` address, the range is the address itself as a host prefix).
/// Addresses that embed IPv4 (NAT64 64:ff9b::/96, 6to4 2002::/16, IPv4-compatible ::/96)
/// are judged by the IPv4 address they carry; their `range` is that IPv4 range's image
/// inside the IPv6 prefix.
struct classification {
    ip_class cls = ip_class::global;
    cidr range;
    bool is_public() const noexcept { return cls == ip_class::global; }
};

classification classify(const ip_address& a) noexcept;

/// True when a connection to `a` lands on this host whatever the address says: loopback,
/// and the unspecified range, which Linux connects to loopback (0.0.0.0, ::, and all of
/// 0.0.0.0/8 "this network"), in every form classify() sees through (IPv4-mapped, NAT64,
/// 6to4, IPv4-compatible). The self-connect guard treats them all as cordon's own host.
bool reaches_this_host(const ip_address& a) noexcept;

/// The unspecified range a rule prefix would open (as a cidr rule or a resolves_to entry:
/// some address of `p` is unspecified and its classified range holds all of `p`), or
/// nullopt. The loader refuses such rules: they are a way to this host, never egress.
std::optional<cidr> opened_unspecified_range(const cidr& p) noexcept;

}  // namespace cordon::config
