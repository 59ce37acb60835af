#include "shims/firewall.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using cordon::shim::add_sandbox_cidr;
using cordon::shim::firewall_spec;
using cordon::shim::make_firewall;
using cordon::shim::parse_cgroup_path;

namespace {

cordon::config::endpoint ep(std::string_view text) {
    auto r = cordon::config::parse_endpoint(text);
    REQUIRE(r.value);
    return *r.value;
}

bool has(const std::string& text, std::string_view line) {
    return text.find(line) != std::string::npos;
}

/// The body of chain `name` (between its "{" line and its closing tab-brace).
std::string chain(const std::string& text, std::string_view name) {
    const std::string head = "\tchain " + std::string(name) + " {\n";
    const auto b = text.find(head);
    if (b == std::string::npos) {
        return "";
    }
    const auto e = text.find("\n\t}\n", b);
    return text.substr(b + head.size(), e - b - head.size());
}

firewall_spec base() {
    firewall_spec s;
    REQUIRE(add_sandbox_cidr("172.30.0.0/24", s.sandbox_cidrs).empty());
    REQUIRE(add_sandbox_cidr("fd00:c0::/64", s.sandbox_cidrs).empty());
    s.proxy = ep("172.30.0.2:3128");
    s.dns = ep("172.30.0.2:53");
    s.source = "policy.yaml";
    return s;
}

// The conntrack reply rules for base()'s listeners (172.30.0.2: proxy 3128, DNS 53).
const std::string base_replies =
    "\t\tct direction reply ip saddr 172.30.0.2 tcp sport 3128 accept comment \"cordon's "
    "replies\"\n"
    "\t\tct direction reply ip saddr 172.30.0.2 udp sport 53 accept comment \"cordon's "
    "replies\"\n"
    "\t\tct direction reply ip saddr 172.30.0.2 tcp sport 53 accept comment \"cordon's "
    "replies\"\n";

}  // namespace

TEST_CASE("firewall: sandbox networks reach only the proxy and DNS", "[shim][firewall]") {
    const auto r = make_firewall(base());
    REQUIRE(r.ok());
    const std::string& t = r.ruleset;
    // One transaction that replaces the table whether or not it exists.
    CHECK(has(t, "table inet cordon\ndelete table inet cordon\ntable inet cordon {\n"));
    CHECK(has(t, "type ipv4_addr\n\t\tflags interval\n\t\telements = { 172.30.0.0/24 }"));
    CHECK(has(t, "type ipv6_addr\n\t\tflags interval\n\t\telements = { fd00:c0::/64 }"));

    const std::string to_cordon = chain(t, "sandbox_to_cordon");
    CHECK(to_cordon ==
          "\t\tip daddr 172.30.0.2 tcp dport 3128 accept comment \"cordon proxy\"\n"
          "\t\tip daddr 172.30.0.2 udp dport 53 accept comment \"cordon dns\"\n"
          "\t\tip daddr 172.30.0.2 tcp dport 53 accept comment \"cordon dns\"\n"
          "\t\ticmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 "
          "accept\n"
          "\t\tmeta l4proto { 1, 58 } ct state related accept comment \"icmp, ipv6-icmp\"\n"
          "\t\tip6 saddr fe80::/10 meta l4proto tcp reject with icmpx admin-prohibited "
          "comment \"no route for a TCP reset to link-local\"\n"
          "\t\tjump refuse");
    // cordon's address is in the sandbox network: its replies (conntrack) pass, first.
    const std::string replies = base_replies;
    const std::string jumps = "\t\tip saddr @sandbox_v4 jump sandbox_to_cordon\n"
                              "\t\tip6 saddr @sandbox_v6 jump sandbox_to_cordon";
    CHECK(chain(t, "input") ==
          "\t\ttype filter hook input priority filter; policy accept;\n\t\tiif \"lo\" accept\n" +
              replies + jumps);
    // Routed or bridged (br_netfilter) packets: to cordon's listeners only, same chain.
    CHECK(chain(t, "forward") ==
          "\t\ttype filter hook forward priority filter; policy accept;\n" + replies + jumps);
    // Refused, TCP with a reset and everything else (UDP, QUIC) with ICMP.
    CHECK(chain(t, "refuse") ==
          "\t\tmeta l4proto tcp reject with tcp reset\n\t\treject with icmpx admin-prohibited");
    CHECK(has(chain(t, "antispoof"), "fib saddr . mark . iif oif missing drop"));
    CHECK(has(chain(t, "antispoof"), "priority raw"));
    CHECK_FALSE(has(t, "hook output"));
    CHECK(has(t, "# sandboxes: 172.30.0.0/24, fd00:c0::/64\n"));
    CHECK(has(t, "from policy.yaml"));
}

TEST_CASE("firewall: kill drops everything, cordon included", "[shim][firewall]") {
    auto s = base();
    s.kill = true;
    const auto r = make_firewall(s);
    REQUIRE(r.ok());
    CHECK(chain(r.ruleset, "sandbox_to_cordon") == "\t\tjump refuse");
    CHECK(chain(r.ruleset, "refuse") == "\t\tdrop");
    CHECK_FALSE(has(r.ruleset, "cordon's replies"));
    CHECK_FALSE(has(r.ruleset, "accept comment"));
    CHECK_FALSE(has(r.ruleset, "reject"));
    CHECK(has(r.ruleset, "# mode: KILL"));
}

TEST_CASE("firewall: IPv6 and wildcard listeners, no DNS", "[shim][firewall]") {
    auto s = base();
    s.dns.reset();
    SECTION("v6 address") {
        s.proxy = ep("[fd00:c0::2]:3128");
        const auto r = make_firewall(s);
        REQUIRE(r.ok());
        CHECK(has(r.ruleset, "\t\tip6 daddr fd00:c0::2 tcp dport 3128 accept"));
        CHECK(has(r.ruleset, "ct direction reply ip6 saddr fd00:c0::2 tcp sport 3128 accept"));
        CHECK_FALSE(has(r.ruleset, "cordon dns"));
        CHECK(has(r.ruleset, "; no dns listener"));
    }
    SECTION("wildcard: any of this host's addresses (never a forwarded packet's), that "
            "family only") {
        s.proxy = ep("0.0.0.0:3128");
        s.dns = ep("[::]:53");
        const auto r = make_firewall(s);
        REQUIRE(r.ok());
        const std::string c = chain(r.ruleset, "sandbox_to_cordon");
        CHECK(has(c, "\t\tfib daddr type local meta nfproto ipv4 tcp dport 3128 accept"));
        CHECK(has(c, "\t\tfib daddr type local meta nfproto ipv6 udp dport 53 accept"));
        CHECK(has(c, "\t\tfib daddr type local meta nfproto ipv6 tcp dport 53 accept"));
        CHECK_FALSE(has(c, "\t\tmeta nfproto"));          // no rule matching any destination
        CHECK_FALSE(has(r.ruleset, "cordon's replies"));  // a wildcard is this host's own
    }
    SECTION("only the unspecified address itself is a wildcard, not the rest of 0.0.0.0/8") {
        s.proxy = ep("0.0.0.5:3128");
        const auto r = make_firewall(s);
        REQUIRE(r.ok());
        CHECK(has(r.ruleset, "\t\tip daddr 0.0.0.5 tcp dport 3128 accept"));
        CHECK_FALSE(has(r.ruleset, "fib daddr type local"));
    }
}

TEST_CASE("firewall: cgroup sandboxes on this host", "[shim][firewall]") {
    firewall_spec s;
    s.cgroup = "cordon.slice/agents";
    s.proxy = ep("127.0.0.1:3128");
    s.dns = ep("0.0.0.0:5353");
    const auto r = make_firewall(s);
    REQUIRE(r.ok());  // loopback is fine for local processes
    CHECK(has(chain(r.ruleset, "output"),
              "socket cgroupv2 level 2 \"cordon.slice/agents\" jump cgroup_to_cordon"));
    const std::string c = chain(r.ruleset, "cgroup_to_cordon");
    CHECK(has(c, "\t\tip daddr 127.0.0.1 tcp dport 3128 accept"));
    CHECK(has(c, "\t\tfib daddr type local meta nfproto ipv4 udp dport 5353 accept"));
    CHECK(has(c, "jump refuse"));
    CHECK_FALSE(has(r.ruleset, "hook input"));
    CHECK_FALSE(has(r.ruleset, "hook forward"));
    CHECK_FALSE(has(r.ruleset, "antispoof"));
    // nft binds the cgroup's inode at load: a recreated cgroup escapes; said on stderr.
    REQUIRE(r.warnings.size() == 1);
    CHECK(has(r.warnings[0], "--cgroup cordon.slice/agents: nft binds the cgroup's inode"));
    CHECK(has(r.warnings[0], "NOT matched"));
    CHECK(has(r.ruleset, "reload after recreating it"));
}

TEST_CASE("firewall: listeners sandboxes cannot use are errors", "[shim][firewall]") {
    auto s = base();
    SECTION("loopback proxy with sandbox networks") {
        s.proxy = ep("127.0.0.1:3128");
        const auto r = make_firewall(s);
        REQUIRE(r.errors.size() == 1);
        CHECK(has(r.errors[0], "listen.proxy 127.0.0.1:3128: a loopback address"));
        CHECK(r.ruleset.empty());
    }
    SECTION("port 0") {
        s.dns = ep("172.30.0.2:0");
        const auto r = make_firewall(s);
        REQUIRE(r.errors.size() == 1);
        CHECK(has(r.errors[0], "listen.dns 172.30.0.2:0: port 0"));
    }
    SECTION("no sandboxes") {
        s.sandbox_cidrs.clear();
        CHECK(has(make_firewall(s).errors.at(0), "no sandboxes"));
    }
}

TEST_CASE("firewall: --sandbox-cidr is strict", "[shim][firewall]") {
    std::vector<cordon::config::cidr> out;
    CHECK(add_sandbox_cidr("10.0.0.0/8", out).empty());
    CHECK(add_sandbox_cidr("fd00::/8", out).empty());
    const auto err = [&](std::string_view text) { return add_sandbox_cidr(text, out); };
    CHECK(has(err("10.0.0.0/8"), "given twice"));
    CHECK(has(err("10.1.0.0/16"), "overlaps 10.0.0.0/8"));
    CHECK(has(err("0.0.0.0/0"), "matches every address"));
    CHECK(has(err("::/0"), "matches every address"));
    CHECK(has(err("127.0.0.0/8"), "loopback"));
    CHECK(has(err("::1/128"), "loopback"));
    CHECK(has(err("0.0.0.0/1"), "loopback"));  // holds 127.0.0.0/8
    CHECK(has(err("::/8"), "loopback"));       // holds ::1
    // Starting inside loopback, not only holding 127.0.0.1: config::classify decides.
    CHECK(has(err("127.5.0.0/16"), "loopback"));
    CHECK(has(err("127.255.255.255/32"), "loopback"));
    CHECK(has(err("::7f00:0/104"), "loopback"));          // IPv4-compatible 127.0.0.0/8
    CHECK(add_sandbox_cidr("128.0.0.0/1", out).empty());  // beside 127/8, not holding it
    CHECK_FALSE(err("192.168.1.1/24").empty());           // host bits set
    CHECK_FALSE(err("192.168.1.0").empty());              // no length
    CHECK_FALSE(err("192.168.1.0/33").empty());
    CHECK_FALSE(err("010.0.0.0/8").empty());
    CHECK_FALSE(err("10.0.0.0/8; flush ruleset").empty());
    CHECK_FALSE(err("").empty());
    CHECK(out.size() == 3);
}

TEST_CASE("firewall: --cgroup paths", "[shim][firewall]") {
    std::string e;
    CHECK(parse_cgroup_path("/sys/fs/cgroup/cordon.slice/agents", e) == "cordon.slice/agents");
    CHECK(parse_cgroup_path("/cordon.slice/agents/", e) == "cordon.slice/agents");
    CHECK(parse_cgroup_path("user.slice/user-1000.slice/app@x:1.scope", e) ==
          "user.slice/user-1000.slice/app@x:1.scope");
    for (const std::string_view bad :
         {"", "/", "/sys/fs/cgroup", "/sys/fs/cgroup/", "a//b", "a/../b", "./a", "a b", "a\"b",
          "a;b", "a/\nb", "/sys/fs/cgroupx/../a"}) {
        CAPTURE(bad);
        e.clear();
        CHECK_FALSE(parse_cgroup_path(bad, e));
        CHECK_FALSE(e.empty());
    }
    CHECK_FALSE(parse_cgroup_path(std::string(256, 'a'), e));
    std::string deep;
    for (int i = 0; i < 33; ++i) {
        deep += "a/";
    }
    CHECK_FALSE(parse_cgroup_path(deep, e));
}

namespace {

firewall_spec by_iface(std::initializer_list<std::string_view> names) {
    firewall_spec s;
    for (const auto n : names) {
        REQUIRE(cordon::shim::add_sandbox_iface(n, s.sandbox_ifaces).empty());
    }
    s.proxy = ep("172.30.0.2:3128");
    s.dns = ep("172.30.0.2:53");
    s.source = "policy.yaml";
    return s;
}

const std::string nd_rule =
    "\t\ticmpv6 type { nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert } ip6 "
    "hoplimit 255 accept comment \"neighbour discovery\"\n";

}  // namespace

TEST_CASE("firewall: interface sandboxes, whatever their source address", "[shim][firewall]") {
    const auto r = make_firewall(by_iface({"docker0", "veth*"}));
    REQUIRE(r.ok());
    CHECK(r.warnings.empty());
    const std::string& t = r.ruleset;
    // No address sets: nothing depends on the source.
    CHECK_FALSE(has(t, "set sandbox_v4"));
    CHECK_FALSE(has(t, "saddr @sandbox"));
    const std::string jumps = "\t\tiifname \"docker0\" jump sandbox_iface\n"
                              "\t\tiifname \"veth*\" jump sandbox_iface";
    // cordon's replies first (conntrack): cordon may sit on the sandbox bridge itself.
    const std::string replies = base_replies;
    CHECK(chain(t, "input") ==
          "\t\ttype filter hook input priority filter; policy accept;\n\t\tiif \"lo\" accept\n" +
              replies + jumps);
    CHECK(chain(t, "forward") ==
          "\t\ttype filter hook forward priority filter; policy accept;\n" + replies + jumps);
    // Neighbour discovery and router solicitation from the link pass (not advertisements),
    // then the rules of any sandbox: cordon's listeners, else refused.
    CHECK(chain(t, "sandbox_iface") == nd_rule + "\t\tjump sandbox_to_cordon");
    CHECK_FALSE(has(t, "nd-router-advert"));
    CHECK(has(chain(t, "sandbox_to_cordon"),
              "\t\tip daddr 172.30.0.2 tcp dport 3128 accept comment \"cordon proxy\"\n"));
    // TCP from a link-local source: ICMP (sent out of the incoming interface), not a reset
    // (which has no route to link-local), just before the refusal.
    CHECK(has(chain(t, "sandbox_to_cordon"),
              "\t\tip6 saddr fe80::/10 meta l4proto tcp reject with icmpx admin-prohibited "
              "comment \"no route for a TCP reset to link-local\"\n\t\tjump refuse"));
    CHECK(has(chain(make_firewall(base()).ruleset, "sandbox_to_cordon"), "fe80::/10"));
    // Reverse-path check on the sandbox interfaces only, not the whole host.
    const std::string rpf = chain(t, "antispoof");
    CHECK(has(rpf, "\t\tiifname \"docker0\" fib saddr . mark . iif oif missing drop\n"));
    CHECK(has(rpf, "\t\tiifname \"veth*\" fib saddr . mark . iif oif missing drop"));
    CHECK_FALSE(has(rpf, "\t\tfib saddr"));
    CHECK(has(t, "# sandboxes: interface docker0, interface veth*\n"));
    CHECK_FALSE(has(t, "WARNING"));
}

TEST_CASE("firewall: interface and prefixes: other sources on the interface are dropped",
          "[shim][firewall]") {
    auto s = base();
    REQUIRE(cordon::shim::add_sandbox_iface("br-sbx", s.sandbox_ifaces).empty());
    const auto r = make_firewall(s);
    REQUIRE(r.ok());
    CHECK(r.warnings.empty());
    const std::string& t = r.ruleset;
    // The interface first (it ends in a verdict), the prefixes still for other routes in.
    CHECK(has(chain(t, "input"), "\t\tiifname \"br-sbx\" jump sandbox_iface\n"
                                 "\t\tip saddr @sandbox_v4 jump sandbox_to_cordon\n"
                                 "\t\tip6 saddr @sandbox_v6 jump sandbox_to_cordon"));
    CHECK(has(chain(t, "forward"), "\t\tiifname \"br-sbx\" jump sandbox_iface\n"
                                   "\t\tip saddr @sandbox_v4 jump sandbox_to_cordon\n"));
    // Neighbour discovery (link-local sources) before the anti-spoof drop.
    CHECK(chain(t, "sandbox_iface") ==
          nd_rule + "\t\tip saddr != @sandbox_v4 drop comment \"source outside --sandbox-cidr\"\n"
                    "\t\tip6 saddr != @sandbox_v6 drop comment \"source outside --sandbox-cidr\"\n"
                    "\t\tjump sandbox_to_cordon");
    // cordon's replies (conntrack) still come before any sandbox rule.
    const std::string input = chain(t, "input");
    CHECK(input.find("cordon's replies") < input.find("iifname"));
    CHECK(has(chain(t, "antispoof"), "\t\tfib saddr . mark . iif oif missing drop"));
    CHECK(has(t, "# sandboxes: interface br-sbx, 172.30.0.0/24, fd00:c0::/64\n"));
}

TEST_CASE("firewall: source-only matching is warned about", "[shim][firewall]") {
    const auto r = make_firewall(base());
    REQUIRE(r.ok());
    REQUIRE(r.warnings.size() == 1);
    CHECK(has(r.warnings[0], "link-local (fe80::/10)"));
    CHECK(has(r.warnings[0], "--sandbox-iface"));
    CHECK(has(r.ruleset, "# WARNING: sandboxes matched by source address only"));
    firewall_spec c;
    c.cgroup = "a";
    c.proxy = ep("127.0.0.1:3128");
    const auto w = make_firewall(c).warnings;
    REQUIRE(w.size() == 1);  // the cgroup's inode, not source-only matching
    CHECK_FALSE(has(w[0], "link-local"));
}

TEST_CASE("firewall: kill covers the interfaces", "[shim][firewall]") {
    SECTION("interface only") {
        auto s = by_iface({"veth*"});
        s.kill = true;
        const auto r = make_firewall(s);
        REQUIRE(r.ok());
        CHECK(has(chain(r.ruleset, "input"), "\t\tiifname \"veth*\" jump sandbox_iface"));
        CHECK(has(chain(r.ruleset, "forward"), "\t\tiifname \"veth*\" jump sandbox_iface"));
        // Not even neighbour discovery: a killed sandbox is cut off.
        CHECK(chain(r.ruleset, "sandbox_iface") == "\t\tjump sandbox_to_cordon");
        CHECK(chain(r.ruleset, "sandbox_to_cordon") == "\t\tjump refuse");
        CHECK(chain(r.ruleset, "refuse") == "\t\tdrop");
        CHECK_FALSE(has(r.ruleset, "accept comment"));
        CHECK_FALSE(has(r.ruleset, "reject"));
    }
    SECTION("interface and prefixes") {
        auto s = base();
        REQUIRE(cordon::shim::add_sandbox_iface("br-sbx", s.sandbox_ifaces).empty());
        s.kill = true;
        const auto r = make_firewall(s);
        REQUIRE(r.ok());
        CHECK_FALSE(has(r.ruleset, "nd-neighbor-solicit"));
        CHECK(has(chain(r.ruleset, "input"), "\t\tiifname \"br-sbx\" jump sandbox_iface"));
        CHECK(chain(r.ruleset, "refuse") == "\t\tdrop");
        CHECK(has(r.ruleset, "# mode: KILL"));
    }
}

TEST_CASE("firewall: interfaces with a wildcard listener: no replies rule", "[shim][firewall]") {
    auto s = by_iface({"docker0"});
    s.proxy = ep("0.0.0.0:3128");
    s.dns.reset();
    const auto r = make_firewall(s);
    REQUIRE(r.ok());
    CHECK_FALSE(has(r.ruleset, "cordon's replies"));
    CHECK(has(chain(r.ruleset, "sandbox_to_cordon"),
              "\t\tfib daddr type local meta nfproto ipv4 tcp dport 3128 accept"));
}

TEST_CASE("firewall: a loopback listener is an error with interfaces too", "[shim][firewall]") {
    auto s = by_iface({"docker0"});
    s.proxy = ep("127.0.0.1:3128");
    const auto r = make_firewall(s);
    REQUIRE(r.errors.size() == 1);
    CHECK(has(r.errors[0], "--sandbox-iface interfaces cannot reach"));
}

TEST_CASE("firewall: --sandbox-iface is strict", "[shim][firewall]") {
    std::vector<std::string> out;
    const auto err = [&](std::string_view text) {
        return cordon::shim::add_sandbox_iface(text, out);
    };
    for (const std::string_view good :
         {"docker0", "veth*", "br-1a2b3c4d5e6f", "cni0", "tap.1", "vnet_2", "wg+x", "a@b", "x"}) {
        CAPTURE(good);
        CHECK(err(good).empty());
    }
    CHECK(out.size() == 9);
    CHECK(has(err("docker0"), "given twice"));
    CHECK(has(err("veth*"), "given twice"));
    CHECK(has(err("br-1a2b3c4d5e6f0"), "1 to 15"));  // 16: over IFNAMSIZ
    CHECK(has(err(""), "1 to 15"));
    CHECK(has(err("*"), "at least two"));
    CHECK(has(err("e*"), "at least two"));
    CHECK(has(err("lo"), "matches lo"));
    CHECK(has(err("lo*"), "matches lo"));
    for (const std::string_view bad :
         {".", "..", "a/b", "a b", "a\tb", "a\nb", "a:0", "a\"b", "a\\b", "a*b", "ve**",
          "eth0;flush", "a{b}", "a$b", "caf\xc3\xa9"}) {
        CAPTURE(bad);
        CHECK(has(err(bad), "not an interface name"));
    }
    CHECK(out.size() == 9);
    for (int i = 0; out.size() < 64; ++i) {
        REQUIRE(err("if" + std::to_string(i)).empty());
    }
    CHECK(has(err("one-more"), "at most 64"));
}

TEST_CASE("firewall: interface patterns match as nft's iifname", "[shim][firewall]") {
    using cordon::shim::iface_matches;
    CHECK(iface_matches("eth0", "eth0"));
    CHECK_FALSE(iface_matches("eth0", "eth01"));
    CHECK_FALSE(iface_matches("eth0", "eth"));
    CHECK(iface_matches("veth*", "veth"));
    CHECK(iface_matches("veth*", "veth1a2b"));
    CHECK_FALSE(iface_matches("veth*", "vet"));
    CHECK_FALSE(iface_matches("veth*", "xveth0"));
}

// nft resolves a protocol name that is not one of its keywords (tcp, udp, icmp...) through
// /etc/protocols, and fails without it ("Could not resolve protocol name"): minimal roots and
// containers have no netbase. Every `meta l4proto` of every variant names tcp or numbers.
TEST_CASE("firewall: protocols by number, no /etc/protocols needed", "[shim][firewall]") {
    std::vector<firewall_spec> specs;
    specs.push_back(base());
    specs.push_back(base());
    REQUIRE(cordon::shim::add_sandbox_iface("br-sbx", specs.back().sandbox_ifaces).empty());
    specs.push_back(specs.back());
    specs.back().cgroup = "cordon.slice/agents";
    specs.push_back(specs.back());
    specs.back().kill = true;
    for (const auto& s : specs) {
        const auto r = make_firewall(s);
        REQUIRE(r.ok());
        const std::string& t = r.ruleset;
        std::size_t seen = 0;
        for (auto at = t.find("l4proto "); at != std::string::npos;
             at = t.find("l4proto ", at + 1)) {
            std::string value = t.substr(at + 8, t.find_first_of(" \n", at + 8) - at - 8);
            if (value == "{") {
                const auto close = t.find('}', at);
                value = t.substr(at + 10, close - at - 11);
            }
            INFO(value);
            CHECK((value == "tcp" || value.find_first_not_of("0123456789, ") == std::string::npos));
            ++seen;
        }
        CHECK(seen >= (s.kill ? 1u : 3u));
        CHECK_FALSE(has(t, "l4proto ipv6-icmp"));
        CHECK_FALSE(has(t, "l4proto { icmp"));
    }
}
