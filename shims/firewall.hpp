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

/// What the ruleset is made from. Sandboxes are named by source prefix (containers, VMs,
/// network namespaces routed through this host) and/or by cgroup v2 (processes on this host).
struct firewall_spec {
    std::vector<config::cidr> sandbox_cidrs;  ///< checked by parse_sandbox_cidrs
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
    bool ok() const { return errors.empty(); }
};

/// The nftables table the ruleset owns (family inet: IPv4 and IPv6 in one table).
inline constexpr std::string_view firewall_table = "cordon";

/// Builds the ruleset. Errors: no sandbox named; a listener with port 0; a loopback
/// listener when sandboxes are named by prefix (they cannot reach it).
firewall_result make_firewall(const firewall_spec& spec);

/// Parses one --sandbox-cidr value and appends it to `out`. Refuses non-canonical text,
/// host bits set, /0, loopback, a prefix given twice or overlapping one already in `out`.
/// Returns "" or the error.
std::string add_sandbox_cidr(std::string_view text, std::vector<config::cidr>& out);

/// Parses a --cgroup value: "/sys/fs/cgroup/a/b", "/a/b" (as in /proc/PID/cgroup) or "a/b".
/// Returns the path relative to the cgroup2 root ("a/b"), or nullopt and `error`. Components
/// are 1..255 of [A-Za-z0-9._@:+-], never "." or "..", at most 32 of them.
std::optional<std::string> parse_cgroup_path(std::string_view text, std::string& error);

}  // namespace cordon::shim
