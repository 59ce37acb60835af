#pragma once
// The nftables ruleset of `cordon firewall`: sandboxes reach only cordon's proxy and DNS
// listeners, and nothing at all during a kill. Pure: builds text from a spec, no sockets,
// no files, no nft. Thread-safe.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/ip.hpp"
#include "config/policy.hpp"

namespace cordon::shim {

/// What the ruleset is made from. Sandboxes are named by the interface their packets arrive
/// on, by source prefix (containers, VMs, network namespaces routed through this host) and/or
/// by cgroup v2 (processes on this host). With interfaces and prefixes both, a packet from a
/// sandbox interface whose source is outside the prefixes is dropped (anti-spoof).
struct firewall_spec {
    std::vector<std::string> sandbox_ifaces;  ///< checked by add_sandbox_iface
    std::vector<config::cidr> sandbox_cidrs;  ///< checked by add_sandbox_cidr
    std::optional<std::string> cgroup;        ///< relative to the cgroup2 root, checked by
                                              ///< parse_cgroup_path
    config::endpoint proxy;                   ///< TCP
    std::optional<config::endpoint> dns;      ///< UDP and TCP
    bool kill = false;                        ///< drop everything from sandboxes
    std::string source;                       ///< the policy file, for the header comment
};

/// The ruleset, or why there is none.
struct firewall_result {
    std::string ruleset;  ///< an `nft -f` script that replaces table `inet cordon` atomically
    std::vector<std::string> errors;
    std::vector<std::string> warnings;  ///< for stderr; the ruleset is still made
    bool ok() const { return errors.empty(); }
};

/// The nftables table the ruleset owns (family inet: IPv4 and IPv6 in one table).
inline constexpr std::string_view firewall_table = "cordon";

/// Builds the ruleset. Errors: no sandbox named; a listener with port 0; a loopback
/// listener when sandboxes are named by prefix or interface (they cannot reach it).
/// Warning: prefixes without interfaces (matching by source address only).
firewall_result make_firewall(const firewall_spec& spec);

/// Parses one --sandbox-iface value and appends it to `out`: 1..15 characters of
/// [A-Za-z0-9._@+-] (the kernel's interface names, minus characters nft would need quoted
/// specially), not "." or "..", optionally ending in one `*` (nft's prefix wildcard, e.g.
/// "veth*") after at least two characters. Refuses names that match "lo", a name given twice,
/// and more than 64 names. Returns "" or the error.
std::string add_sandbox_iface(std::string_view text, std::vector<std::string>& out);

/// Whether interface `name` is matched by `pattern` (a --sandbox-iface value) as nft matches
/// iifname: equal, or for "abc*", starting with "abc".
bool iface_matches(std::string_view pattern, std::string_view name);

/// Parses one --sandbox-cidr value and appends it to `out`. Refuses non-canonical text,
/// host bits set, /0, loopback, a prefix given twice or overlapping one already in `out`.
/// Returns "" or the error.
std::string add_sandbox_cidr(std::string_view text, std::vector<config::cidr>& out);

/// Parses a --cgroup value: "/sys/fs/cgroup/a/b", "/a/b" (as in /proc/PID/cgroup) or "a/b".
/// Returns the path relative to the cgroup2 root ("a/b"), or nullopt and `error`. Components
/// are 1..255 of [A-Za-z0-9._@:+-], never "." or "..", at most 32 of them.
std::optional<std::string> parse_cgroup_path(std::string_view text, std::string& error);

}  // namespace cordon::shim
