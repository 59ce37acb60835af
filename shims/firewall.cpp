#include "shims/firewall.hpp"

#include <algorithm>

#include "config/classify.hpp"

namespace cordon::shim {
namespace {

// ICMP (1) and ICMPv6 (58) by number: nft looks up protocol names that are not its own
// keywords (ipv6-icmp) in /etc/protocols, which minimal roots and containers lack (netbase).
constexpr std::string_view related_icmp =
    "\t\tmeta l4proto { 1, 58 } ct state related accept comment \"icmp, ipv6-icmp\"\n";

// "Loopback" and "unspecified" are config::classify's, the proxy's own definition: one table.
bool is_loopback(const config::ip_address& a) {
    return config::classify(a).cls == config::ip_class::loopback;
}

/// The wildcard listen address (0.0.0.0 or ::): classify's unspecified class, and its single
/// address only (0.0.0.0/8's other addresses are no wildcard).
bool is_unspecified(const config::ip_address& a) {
    const config::classification c = config::classify(a);
    return c.cls == config::ip_class::unspecified && c.range.prefix_len == a.bits();
}

/// Whether prefix `c` holds any loopback address: it starts in a loopback range (127.5.0.0/16,
/// ::ffff:7f00:0/104 as IPv4), or it contains one (0.0.0.0/1 holds 127.0.0.0/8, ::/8 ::1).
bool holds_loopback(const config::cidr& c) {
    if (is_loopback(c.network)) {
        return true;
    }
    const auto probe = config::parse_ip(c.network.is_v4() ? "127.0.0.1" : "::1");
    return probe && c.contains(config::classify(*probe).range);
}

bool cgroup_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '@' || c == ':' || c == '+' || c == '-';
}

bool iface_char(char c) { return c != ':' && cgroup_char(c); }

/// "ip daddr 10.0.0.1 " / "ip6 daddr fd00::1 " / "fib daddr type local meta nfproto ipv4 "
/// (a wildcard listener: any address of this host, never a forwarded packet's, so a sandbox
/// cannot reach another host's port 53 or 3128 through this rule in the forward chain).
std::string match_daddr(const config::ip_address& a) {
    if (is_unspecified(a)) {
        return a.is_v4() ? "fib daddr type local meta nfproto ipv4 "
                         : "fib daddr type local meta nfproto ipv6 ";
    }
    return (a.is_v4() ? "ip daddr " : "ip6 daddr ") + a.to_string() + " ";
}

/// The accept rules for cordon's listeners, one per line, indented.
std::string allow_listeners(const firewall_spec& s) {
    std::string out;
    const std::string proxy = match_daddr(s.proxy.address);
    out += "\t\t" + proxy + "tcp dport " + std::to_string(s.proxy.port) +
           " accept comment \"cordon proxy\"\n";
    if (s.dns) {
        const std::string dns = match_daddr(s.dns->address);
        const std::string port = std::to_string(s.dns->port);
        out += "\t\t" + dns + "udp dport " + port + " accept comment \"cordon dns\"\n";
        out += "\t\t" + dns + "tcp dport " + port + " accept comment \"cordon dns\"\n";
    }
    return out;
}

/// Replies of cordon's listeners whose address lies in a sandbox network, or any specific
/// listener address when sandboxes are named by interface (cordon beside the sandboxes on one
/// bridge, whose traffic crosses the forward hook with br_netfilter, arriving on the sandbox
/// bridge): they belong to connections the rules let in. Conntrack (reply direction) admits
/// only packets of a live flow's reply tuple (TCP: in window). On a routed link the strict
/// reverse-path check drops cordon's address as a sandbox's source; on a shared bridge it
/// cannot (the bridge is the input interface of both), so a sandbox that learns or guesses a
/// live flow of another sandbox with cordon can inject into it: docs/deploy.md, "cordon on
/// the sandbox bridge". Not fixable in this table: only a bridge-family rule sees the port.
std::string cordon_replies(const firewall_spec& s) {
    std::string out;
    const auto one = [&](const config::endpoint& e, std::string_view proto) {
        const bool inside = std::any_of(
            s.sandbox_cidrs.begin(), s.sandbox_cidrs.end(), [&](const config::cidr& c) {
                return c.network.fam() == e.address.fam() && c.contains(e.address);
            });
        const bool by_iface = !s.sandbox_ifaces.empty() && !is_unspecified(e.address);
        if (!inside && !by_iface) {
            return;
        }
        out += std::string("\t\tct direction reply ") + (e.address.is_v4() ? "ip" : "ip6") +
               " saddr " + e.address.to_string() + " " + std::string(proto) + " sport " +
               std::to_string(e.port) + " accept comment \"cordon's replies\"\n";
    };
    one(s.proxy, "tcp");
    if (s.dns) {
        one(*s.dns, "udp");
        one(*s.dns, "tcp");
    }
    return out;
}

std::string elements(const std::vector<config::cidr>& cidrs, bool v4) {
    std::string list;
    for (const auto& c : cidrs) {
        if (c.network.is_v4() == v4) {
            list += (list.empty() ? "" : ", ") + c.to_string();
        }
    }
    return list.empty() ? "" : "\t\telements = { " + list + " }\n";
}

std::string header(const firewall_spec& s) {
    std::string h = "#!/usr/sbin/nft -f\n";
    h += "# cordon firewall ruleset, generated by `cordon firewall` from " +
         (s.source.empty() ? std::string("a policy") : s.source) +
         ": regenerate it, do not edit it.\n";
    h += s.kill ? "# mode: KILL: sandboxes reach nothing, cordon included (drop).\n"
                : "# mode: sandboxes reach only cordon's proxy and DNS listeners; everything else "
                  "is refused\n#       (TCP reset, ICMP administratively prohibited).\n";
    std::string who;
    for (const auto& i : s.sandbox_ifaces) {
        who += (who.empty() ? "" : ", ") + std::string("interface ") + i;
    }
    for (const auto& c : s.sandbox_cidrs) {
        who += (who.empty() ? "" : ", ") + c.to_string();
    }
    if (s.cgroup) {
        who += (who.empty() ? "" : ", ") + std::string("cgroup ") + *s.cgroup;
    }
    h += "# sandboxes: " + who + "\n";
    if (!s.sandbox_ifaces.empty() && !s.sandbox_cidrs.empty()) {
        h += "# Packets from a sandbox interface with a source outside the prefixes are "
             "dropped.\n";
    } else if (!s.sandbox_cidrs.empty()) {
        h += "# WARNING: sandboxes matched by source address only (no --sandbox-iface).\n";
    }
    h += "# cordon: proxy tcp " + s.proxy.to_string();
    h += s.dns ? "; dns udp+tcp " + s.dns->to_string() : "; no dns listener";
    h += ". The admin listener is never reachable from a sandbox.\n";
    h += "# The three statements below are one nft transaction: the old table is replaced by the\n"
         "# new one at once, never a moment without rules.\n";
    return h;
}

/// `iifname "veth*" ` (the names are checked by add_sandbox_iface: nothing to escape).
std::string match_iif(const std::string& name) { return "iifname \"" + name + "\" "; }

/// Everything arriving on a sandbox interface, whatever its source address: IPv6 neighbour
/// discovery and router solicitations (hop limit 255: from the link itself), anti-spoof against
/// the prefixes if any, then the same rules as a sandbox prefix.
std::string iface_chain(const firewall_spec& s) {
    std::string o =
        "\t# Everything arriving on a sandbox interface, whatever its source address (IPv6\n"
        "\t# link-local, SLAAC or privacy addresses, an unlisted IPv4 address).\n"
        "\tchain sandbox_iface {\n";
    if (!s.kill) {
        // Router advertisements (134) and redirects (137) are not among them: a sandbox is
        // never this host's router, and its advertisements could change this host's routes.
        o += "\t\ticmpv6 type { nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert } "
             "ip6 hoplimit 255 accept comment \"neighbour discovery\"\n";
    }
    if (!s.sandbox_cidrs.empty()) {
        o += "\t\tip saddr != @sandbox_v4 drop comment \"source outside --sandbox-cidr\"\n"
             "\t\tip6 saddr != @sandbox_v6 drop comment \"source outside --sandbox-cidr\"\n";
    }
    o += "\t\tjump sandbox_to_cordon\n\t}\n\n";
    return o;
}

/// One `iifname "x" jump sandbox_iface` line per interface, indented.
std::string iface_jumps(const firewall_spec& s) {
    std::string o;
    for (const auto& i : s.sandbox_ifaces) {
        o += "\t\t" + match_iif(i) + "jump sandbox_iface\n";
    }
    return o;
}

}  // namespace

bool iface_matches(std::string_view pattern, std::string_view name) {
    if (pattern.ends_with('*')) {
        pattern.remove_suffix(1);
        return name.starts_with(pattern);
    }
    return name == pattern;
}

std::string add_sandbox_iface(std::string_view text, std::vector<std::string>& out) {
    const std::string shown(text.substr(0, 32));
    std::string_view name = text;
    const bool wildcard = name.ends_with('*');
    if (wildcard) {
        name.remove_suffix(1);
    }
    if (text.empty() || text.size() > 15) {
        return "--sandbox-iface '" + shown + "': an interface name has 1 to 15 characters";
    }
    if (name == "." || name == ".." ||
        !std::all_of(name.begin(), name.end(), [](char c) { return iface_char(c); })) {
        return "--sandbox-iface '" + shown +
               "': not an interface name (characters [A-Za-z0-9._@+-], not '.' or '..', '*' "
               "only at the end)";
    }
    if (wildcard && name.size() < 2) {
        return "--sandbox-iface '" + shown +
               "': a wildcard needs at least two characters before '*' (it would match the "
               "host's own interfaces)";
    }
    if (iface_matches(text, "lo")) {
        return "--sandbox-iface '" + shown + "': matches lo, this host's own traffic";
    }
    for (const auto& o : out) {
        if (o == text) {
            return "--sandbox-iface " + shown + ": given twice";
        }
    }
    if (out.size() >= 64) {
        return "--sandbox-iface: at most 64 interfaces";
    }
    out.emplace_back(text);
    return "";
}

std::string add_sandbox_cidr(std::string_view text, std::vector<config::cidr>& out) {
    const std::string shown(text.substr(0, 64));
    const auto r = config::parse_cidr(text);
    if (!r.value) {
        return "--sandbox-cidr '" + shown + "': " + r.error;
    }
    const config::cidr c = *r.value;
    if (c.prefix_len == 0) {
        return "--sandbox-cidr " + c.to_string() +
               ": matches every address, the host's administrators too; name the sandbox "
               "networks";
    }
    // Any overlap: starting in loopback (127.5.0.0/16) or containing it (0.0.0.0/1, ::/8).
    if (holds_loopback(c)) {
        return "--sandbox-cidr " + c.to_string() +
               ": loopback is this host, not a sandbox network (use --cgroup for local "
               "processes)";
    }
    for (const auto& o : out) {
        if (o.network.fam() != c.network.fam()) {
            continue;
        }
        if (o == c) {
            return "--sandbox-cidr " + c.to_string() + ": given twice";
        }
        if (o.contains(c) || c.contains(o)) {
            return "--sandbox-cidr " + c.to_string() + ": overlaps " + o.to_string() +
                   "; give the larger prefix only";
        }
    }
    if (out.size() >= 256) {
        return "--sandbox-cidr: at most 256 prefixes";
    }
    out.push_back(c);
    return "";
}

std::optional<std::string> parse_cgroup_path(std::string_view text, std::string& error) {
    constexpr std::string_view mount = "/sys/fs/cgroup";
    std::string_view p = text;
    if (p.starts_with(mount) && (p.size() == mount.size() || p[mount.size()] == '/')) {
        p.remove_prefix(mount.size());
    }
    if (p.starts_with('/')) {
        p.remove_prefix(1);
    }
    if (p.ends_with('/')) {
        p.remove_suffix(1);
    }
    const std::string shown(text.substr(0, 64));
    if (p.empty()) {
        error = "--cgroup '" + shown +
                "': the root cgroup holds the whole host; name the "
                "sandboxes' cgroup";
        return std::nullopt;
    }
    int depth = 0;
    std::size_t start = 0;
    while (start <= p.size()) {
        const std::size_t slash = std::min(p.find('/', start), p.size());
        const std::string_view comp = p.substr(start, slash - start);
        ++depth;
        if (comp.empty() || comp == "." || comp == "..") {
            error = "--cgroup '" + shown + "': empty, '.' or '..' path component";
            return std::nullopt;
        }
        if (comp.size() > 255 ||
            !std::all_of(comp.begin(), comp.end(), [](char c) { return cgroup_char(c); })) {
            error = "--cgroup '" + shown +
                    "': a component has a character outside [A-Za-z0-9._@:+-] or is over 255 "
                    "long";
            return std::nullopt;
        }
        if (depth > 32) {
            error = "--cgroup '" + shown + "': more than 32 levels";
            return std::nullopt;
        }
        start = slash + 1;
    }
    return std::string(p);
}

firewall_result make_firewall(const firewall_spec& s) {
    firewall_result r;
    const bool by_cidr = !s.sandbox_cidrs.empty();
    const bool by_iface = !s.sandbox_ifaces.empty();
    if (!by_cidr && !by_iface && !s.cgroup) {
        r.errors.push_back(
            "no sandboxes: give --sandbox-iface and/or --sandbox-cidr (repeatable), and/or "
            "--cgroup");
    }
    const auto check = [&](std::string_view what, const config::endpoint& e) {
        if (e.port == 0) {
            r.errors.push_back("listen." + std::string(what) + " " + e.to_string() +
                               ": port 0 is chosen at start; the firewall needs a fixed port");
        }
        if ((by_cidr || by_iface) && is_loopback(e.address)) {
            r.errors.push_back("listen." + std::string(what) + " " + e.to_string() +
                               ": a loopback address, which sandboxes on --sandbox-cidr "
                               "networks or --sandbox-iface interfaces cannot reach; listen "
                               "on this host's address on the sandbox network");
        }
    };
    check("proxy", s.proxy);
    if (s.dns) {
        check("dns", *s.dns);
    }
    if (!r.ok()) {
        return r;
    }
    if (by_cidr && !by_iface) {
        r.warnings.push_back(
            "--sandbox-cidr without --sandbox-iface matches sandboxes by source address only: "
            "a sandbox sending from an IPv6 link-local (fe80::/10) address, an unlisted "
            "SLAAC/privacy address or any other address outside the prefixes that routes back "
            "to it is not matched, and reaches this host's services and the networks beyond "
            "directly; add --sandbox-iface NAME for the sandboxes' interface(s)");
    }

    if (s.cgroup) {
        r.warnings.push_back(
            "--cgroup " + *s.cgroup +
            ": nft binds the cgroup's inode when the rules are loaded; a cgroup removed and "
            "created again later (a service restart that recreates its cgroup, a new "
            "container) is a new cgroup and is NOT matched: its processes are not sandboxed. "
            "Apply the rules again after the cgroup is recreated (e.g. ExecStartPost= of the "
            "sandbox's unit), or name a parent cgroup that stays and holds only sandboxes (a "
            "dedicated slice: its children are matched, recreated ones too)");
    }

    const std::string t = "inet " + std::string(firewall_table);
    std::string o = header(s);
    o += "table " + t + "\ndelete table " + t + "\ntable " + t + " {\n";

    if (by_cidr) {
        o += "\tset sandbox_v4 {\n\t\ttype ipv4_addr\n\t\tflags interval\n" +
             elements(s.sandbox_cidrs, true) + "\t}\n";
        o += "\tset sandbox_v6 {\n\t\ttype ipv6_addr\n\t\tflags interval\n" +
             elements(s.sandbox_cidrs, false) + "\t}\n\n";
    }
    if (by_cidr || by_iface) {
        const std::string replies = s.kill ? "" : cordon_replies(s);
        // By prefix: every interface (a source outside the sets must not slip past them).
        // By interface only: the sandbox interfaces (no spoofed source for cordon to answer).
        std::string rpf;
        if (by_cidr) {
            rpf = "\t\tfib saddr . mark . iif oif missing drop\n";
        } else {
            for (const auto& i : s.sandbox_ifaces) {
                rpf += "\t\t" + match_iif(i) + "fib saddr . mark . iif oif missing drop\n";
            }
        }
        const std::string by_saddr = by_cidr ? "\t\tip saddr @sandbox_v4 jump sandbox_to_cordon\n"
                                               "\t\tip6 saddr @sandbox_v6 jump sandbox_to_cordon\n"
                                             : "";
        o += std::string(by_cidr ? "\t# A sandbox could forge a source address outside the sets "
                                   "to slip past them:\n"
                                 : "\t# A sandbox could forge a source address for cordon to "
                                   "answer to:\n") +
             "\t# drop every packet whose source does not route back out of the interface it\n"
             "\t# came in on (strict reverse path, as firewalld's rpfilter). DHCP requests and\n"
             "\t# IPv6 neighbour discovery, sent from the unspecified address, pass.\n"
             "\tchain antispoof {\n"
             "\t\ttype filter hook prerouting priority raw; policy accept;\n"
             "\t\tip saddr 0.0.0.0 udp sport 68 udp dport 67 accept\n"
             "\t\tip6 saddr :: meta l4proto 58 accept\n" +  // 58: ipv6-icmp (related_icmp)
             rpf +
             "\t}\n\n";
        o += "\t# Packets from sandboxes to this host: only cordon's listeners.\n"
             "\tchain input {\n"
             "\t\ttype filter hook input priority filter; policy accept;\n"
             "\t\tiif \"lo\" accept\n" +
             replies + iface_jumps(s) + by_saddr + "\t}\n\n";
        o += "\t# Packets from sandboxes routed or bridged through this host: only to cordon's\n"
             "\t# listeners (cordon in a container or namespace of its own). Egress is cordon's.\n"
             "\tchain forward {\n"
             "\t\ttype filter hook forward priority filter; policy accept;\n" +
             replies + iface_jumps(s) + by_saddr + "\t}\n\n";
        if (by_iface) {
            o += iface_chain(s);
        }
        o += "\tchain sandbox_to_cordon {\n";
        if (!s.kill) {
            o += allow_listeners(s);
            // Hop limit 255: neighbour discovery on the link itself (RFC 4861). Forwarded
            // packets have theirs lowered before this hook, so a solicitation addressed
            // anywhere beyond this host (a raw socket's way out past cordon) is refused.
            o += "\t\ticmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 "
                 "accept\n";
            o += related_icmp;
            // The kernel routes a TCP reset without the incoming interface, and a link-local
            // address has no route without one: the reset is never sent and the client waits
            // for its timeout. An ICMPv6 error is sent out of the incoming interface, and TCP
            // aborts a connect on it (EACCES). A link-local source gets here with
            // --sandbox-iface alone (with prefixes too it is dropped as outside them) or a
            // --sandbox-cidr holding fe80::/10.
            o += "\t\tip6 saddr fe80::/10 meta l4proto tcp reject with icmpx admin-prohibited "
                 "comment \"no route for a TCP reset to link-local\"\n";
        }
        o += "\t\tjump refuse\n\t}\n\n";
    }
    if (s.cgroup) {
        const auto level = std::count(s.cgroup->begin(), s.cgroup->end(), '/') + 1;
        o += "\t# Packets from processes of cgroup " + *s.cgroup +
             " on this host: only cordon's listeners.\n"
             "\t# nft holds the cgroup's id (inode) from loading on: reload after recreating it.\n"
             "\tchain output {\n"
             "\t\ttype filter hook output priority filter; policy accept;\n"
             "\t\tsocket cgroupv2 level " +
             std::to_string(level) + " \"" + *s.cgroup + "\" jump cgroup_to_cordon\n\t}\n\n";
        o += "\tchain cgroup_to_cordon {\n";
        if (!s.kill) {
            o += allow_listeners(s);
            o += related_icmp;
        }
        o += "\t\tjump refuse\n\t}\n\n";
    }
    if (s.kill) {
        o += "\t# Kill: nothing from a sandbox passes, not even to cordon.\n"
             "\tchain refuse {\n\t\tdrop\n\t}\n";
    } else {
        o += "\t# Refused quickly rather than dropped: a client learns at once that it is not\n"
             "\t# allowed instead of waiting for a timeout (QUIC and other UDP included).\n"
             "\tchain refuse {\n"
             "\t\tmeta l4proto tcp reject with tcp reset\n"
             "\t\treject with icmpx admin-prohibited\n"
             "\t}\n";
    }
    o += "}\n";
    r.ruleset = std::move(o);
    return r;
}

}  // namespace cordon::shim
