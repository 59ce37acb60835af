#include "config/classify.hpp"  // first: the header must compile alone

#include <catch2/catch.hpp>
#include <string>
#include <vector>

// Readable failures: show addresses and prefixes as text.
namespace Catch {
template <>
struct StringMaker<cordon::config::ip_address> {
    static std::string convert(const cordon::config::ip_address& a) { return a.to_string(); }
};
template <>
struct StringMaker<cordon::config::cidr> {
    static std::string convert(const cordon::config::cidr& c) { return c.to_string(); }
};
}  // namespace Catch

namespace cordon::config {
namespace {

struct row {
    const char* address;
    ip_class cls;
    const char* range;  // classification.range as text
};

ip_address ip(const std::string& text) {
    const auto a = parse_ip(text);
    INFO("parse_ip(" << text << ")");
    REQUIRE(a.has_value());
    return *a;
}

cidr net(const std::string& text) {
    const auto r = parse_cidr(text);
    INFO("parse_cidr(" << text << "): " << r.error);
    REQUIRE(r.value.has_value());
    return *r.value;
}

void check_rows(const std::vector<row>& rows) {
    for (const auto& r : rows) {
        INFO(r.address);
        const ip_address a = ip(r.address);
        const classification c = classify(a);
        CHECK(to_string(c.cls) == to_string(r.cls));
        CHECK(c.range.to_string() == r.range);
        CHECK(c.is_public() == (r.cls == ip_class::global));
        // The range always holds the address, and is a clean prefix.
        CHECK(c.range.contains(a));
        CHECK(mask(c.range.network, c.range.prefix_len) == c.range.network);
    }
}

constexpr ip_class global = ip_class::global;
constexpr ip_class unspecified = ip_class::unspecified;
constexpr ip_class loopback = ip_class::loopback;
constexpr ip_class private_net = ip_class::private_net;
constexpr ip_class link_local = ip_class::link_local;
constexpr ip_class metadata = ip_class::metadata;
constexpr ip_class cgnat = ip_class::cgnat;
constexpr ip_class multicast = ip_class::multicast;
constexpr ip_class broadcast = ip_class::broadcast;
constexpr ip_class documentation = ip_class::documentation;
constexpr ip_class benchmark = ip_class::benchmark;
constexpr ip_class reserved = ip_class::reserved;

}  // namespace

TEST_CASE("to_string(ip_class)", "[classify]") {
    CHECK(to_string(global) == "global");
    CHECK(to_string(unspecified) == "unspecified");
    CHECK(to_string(loopback) == "loopback");
    CHECK(to_string(private_net) == "private");
    CHECK(to_string(link_local) == "link_local");
    CHECK(to_string(metadata) == "metadata");
    CHECK(to_string(cgnat) == "cgnat");
    CHECK(to_string(multicast) == "multicast");
    CHECK(to_string(broadcast) == "broadcast");
    CHECK(to_string(documentation) == "documentation");
    CHECK(to_string(benchmark) == "benchmark");
    CHECK(to_string(reserved) == "reserved");
}

TEST_CASE("classify IPv4: each special range, its ends and its neighbours", "[classify]") {
    SECTION("0.0.0.0/8 this network") {
        check_rows({
            {"0.0.0.0", unspecified, "0.0.0.0/32"},
            {"0.0.0.1", unspecified, "0.0.0.0/8"},
            {"0.255.255.255", unspecified, "0.0.0.0/8"},
            {"1.0.0.0", global, "1.0.0.0/32"},
        });
    }
    SECTION("10.0.0.0/8 private") {
        check_rows({
            {"9.255.255.255", global, "9.255.255.255/32"},
            {"10.0.0.0", private_net, "10.0.0.0/8"},
            {"10.1.2.3", private_net, "10.0.0.0/8"},
            {"10.255.255.255", private_net, "10.0.0.0/8"},
            {"11.0.0.0", global, "11.0.0.0/32"},
        });
    }
    SECTION("100.64.0.0/10 CGNAT") {
        check_rows({
            {"100.63.255.255", global, "100.63.255.255/32"},
            {"100.64.0.0", cgnat, "100.64.0.0/10"},
            {"100.127.255.255", cgnat, "100.64.0.0/10"},
            {"100.128.0.0", global, "100.128.0.0/32"},
        });
    }
    SECTION("127.0.0.0/8 loopback") {
        check_rows({
            {"126.255.255.255", global, "126.255.255.255/32"},
            {"127.0.0.0", loopback, "127.0.0.0/8"},
            {"127.0.0.1", loopback, "127.0.0.0/8"},
            {"127.255.255.255", loopback, "127.0.0.0/8"},
            {"128.0.0.0", global, "128.0.0.0/32"},
        });
    }
    SECTION("169.254.0.0/16 link-local, 169.254.169.254 metadata inside it") {
        check_rows({
            {"169.253.255.255", global, "169.253.255.255/32"},
            {"169.254.0.0", link_local, "169.254.0.0/16"},
            {"169.254.169.253", link_local, "169.254.0.0/16"},
            {"169.254.169.254", metadata, "169.254.169.254/32"},
            {"169.254.169.255", link_local, "169.254.0.0/16"},
            {"169.254.255.255", link_local, "169.254.0.0/16"},
            {"169.255.0.0", global, "169.255.0.0/32"},
        });
    }
    SECTION("172.16.0.0/12 private") {
        check_rows({
            {"172.15.255.255", global, "172.15.255.255/32"},
            {"172.16.0.0", private_net, "172.16.0.0/12"},
            {"172.31.255.255", private_net, "172.16.0.0/12"},
            {"172.32.0.0", global, "172.32.0.0/32"},
        });
    }
    SECTION("192.0.0.0/24 IETF protocol assignments") {
        check_rows({
            {"191.255.255.255", global, "191.255.255.255/32"},
            {"192.0.0.0", reserved, "192.0.0.0/24"},
            {"192.0.0.255", reserved, "192.0.0.0/24"},
            {"192.0.1.0", global, "192.0.1.0/32"},
        });
    }
    SECTION("192.0.2.0/24 TEST-NET-1") {
        check_rows({
            {"192.0.1.255", global, "192.0.1.255/32"},
            {"192.0.2.0", documentation, "192.0.2.0/24"},
            {"192.0.2.255", documentation, "192.0.2.0/24"},
            {"192.0.3.0", global, "192.0.3.0/32"},
        });
    }
    SECTION("192.88.99.0/24 6to4 relay anycast") {
        check_rows({
            {"192.88.98.255", global, "192.88.98.255/32"},
            {"192.88.99.0", reserved, "192.88.99.0/24"},
            {"192.88.99.255", reserved, "192.88.99.0/24"},
            {"192.88.100.0", global, "192.88.100.0/32"},
        });
    }
    SECTION("192.168.0.0/16 private") {
        check_rows({
            {"192.167.255.255", global, "192.167.255.255/32"},
            {"192.168.0.0", private_net, "192.168.0.0/16"},
            {"192.168.255.255", private_net, "192.168.0.0/16"},
            {"192.169.0.0", global, "192.169.0.0/32"},
        });
    }
    SECTION("198.18.0.0/15 benchmarking") {
        check_rows({
            {"198.17.255.255", global, "198.17.255.255/32"},
            {"198.18.0.0", benchmark, "198.18.0.0/15"},
            {"198.19.255.255", benchmark, "198.18.0.0/15"},
            {"198.20.0.0", global, "198.20.0.0/32"},
        });
    }
    SECTION("198.51.100.0/24 TEST-NET-2") {
        check_rows({
            {"198.51.99.255", global, "198.51.99.255/32"},
            {"198.51.100.0", documentation, "198.51.100.0/24"},
            {"198.51.100.255", documentation, "198.51.100.0/24"},
            {"198.51.101.0", global, "198.51.101.0/32"},
        });
    }
    SECTION("203.0.113.0/24 TEST-NET-3") {
        check_rows({
            {"203.0.112.255", global, "203.0.112.255/32"},
            {"203.0.113.0", documentation, "203.0.113.0/24"},
            {"203.0.113.255", documentation, "203.0.113.0/24"},
            {"203.0.114.0", global, "203.0.114.0/32"},
        });
    }
    SECTION("224.0.0.0/4 multicast") {
        check_rows({
            {"223.255.255.255", global, "223.255.255.255/32"},
            {"224.0.0.0", multicast, "224.0.0.0/4"},
            {"239.255.255.255", multicast, "224.0.0.0/4"},
        });
    }
    SECTION("240.0.0.0/4 reserved, 255.255.255.255 broadcast inside it") {
        check_rows({
            {"240.0.0.0", reserved, "240.0.0.0/4"},
            {"255.255.255.254", reserved, "240.0.0.0/4"},
            {"255.255.255.255", broadcast, "255.255.255.255/32"},
        });
    }
    SECTION("public unicast") {
        check_rows({
            {"8.8.8.8", global, "8.8.8.8/32"},
            {"1.1.1.1", global, "1.1.1.1/32"},
            {"93.184.216.34", global, "93.184.216.34/32"},
        });
    }
    SECTION("IPv4-mapped IPv6 is judged as the IPv4 it is") {
        check_rows({
            {"::ffff:127.0.0.1", loopback, "127.0.0.0/8"},
            {"::ffff:169.254.169.254", metadata, "169.254.169.254/32"},
            {"::ffff:8.8.8.8", global, "8.8.8.8/32"},
        });
    }
}

TEST_CASE("classify IPv6: each special range, its ends and its neighbours", "[classify]") {
    SECTION("unspecified and loopback") {
        check_rows({
            {"::", unspecified, "::/128"},
            {"::1", loopback, "::1/128"},
        });
    }
    SECTION("::/96 IPv4-compatible: the embedded class if not global, else reserved") {
        check_rows({
            {"::2", unspecified, "::/104"},
            {"::0.255.255.255", unspecified, "::/104"},
            {"::10.0.0.1", private_net, "::a00:0/104"},
            {"::127.0.0.1", loopback, "::7f00:0/104"},
            {"::169.254.169.254", metadata, "::a9fe:a9fe/128"},
            {"::169.254.1.1", link_local, "::a9fe:0/112"},
            {"::100.64.0.1", cgnat, "::6440:0/106"},
            {"::224.0.0.1", multicast, "::e000:0/100"},
            {"::255.255.255.255", broadcast, "::ffff:ffff/128"},
            {"::8.8.8.8", reserved, "::/96"},
            {"::1:0:0", reserved, "::/3"},  // just past ::/96, before the mapped block
        });
    }
    SECTION("64:ff9b::/96 NAT64: the embedded class, global included") {
        check_rows({
            {"64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", reserved, "::/3"},
            {"64:ff9b::", unspecified, "64:ff9b::/128"},
            {"64:ff9b::8.8.8.8", global, "64:ff9b::808:808/128"},
            {"64:ff9b::10.0.0.1", private_net, "64:ff9b::a00:0/104"},
            {"64:ff9b::127.0.0.1", loopback, "64:ff9b::7f00:0/104"},
            {"64:ff9b::169.254.169.254", metadata, "64:ff9b::a9fe:a9fe/128"},
            {"64:ff9b::100.64.0.1", cgnat, "64:ff9b::6440:0/106"},
            {"64:ff9b::192.168.1.1", private_net, "64:ff9b::c0a8:0/112"},
            {"64:ff9b::255.255.255.255", broadcast, "64:ff9b::ffff:ffff/128"},
            {"64:ff9b::1:0:0", reserved, "::/3"},  // just past the /96
        });
    }
    SECTION("64:ff9b:1::/48 local-use NAT64") {
        check_rows({
            {"64:ff9b:0:ffff:ffff:ffff:ffff:ffff", reserved, "::/3"},
            {"64:ff9b:1::", private_net, "64:ff9b:1::/48"},
            {"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", private_net, "64:ff9b:1::/48"},
            {"64:ff9b:2::", reserved, "::/3"},
        });
    }
    SECTION("100::/64 discard-only") {
        check_rows({
            {"ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", reserved, "::/3"},
            {"100::", reserved, "100::/64"},
            {"100::ffff:ffff:ffff:ffff", reserved, "100::/64"},
            {"100:0:0:1::", reserved, "::/3"},
        });
    }
    SECTION("2001::/23 IETF protocol assignments, Teredo and benchmarking inside") {
        check_rows({
            {"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", global,
             "2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"},
            {"2001::", reserved, "2001::/32"},
            {"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", reserved, "2001::/32"},
            {"2001:1::", reserved, "2001::/23"},
            {"2001:1:ffff:ffff:ffff:ffff:ffff:ffff", reserved, "2001::/23"},
            {"2001:2::", benchmark, "2001:2::/48"},
            {"2001:2:0:ffff:ffff:ffff:ffff:ffff", benchmark, "2001:2::/48"},
            {"2001:2:1::", reserved, "2001::/23"},
            {"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", reserved, "2001::/23"},
            {"2001:200::", global, "2001:200::/128"},
        });
    }
    SECTION("2001:db8::/32 documentation") {
        check_rows({
            {"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", global,
             "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff/128"},
            {"2001:db8::", documentation, "2001:db8::/32"},
            {"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", documentation, "2001:db8::/32"},
            {"2001:db9::", global, "2001:db9::/128"},
        });
    }
    SECTION("2002::/16 6to4: the class of the IPv4 in bits 16..47") {
        check_rows({
            {"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", global,
             "2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"},
            {"2002::", unspecified, "2002::/48"},
            {"2002:1:2::", unspecified, "2002::/24"},
            {"2002:a00:1::", private_net, "2002:a00::/24"},
            {"2002:7f00:1::1", loopback, "2002:7f00::/24"},
            {"2002:a9fe:a9fe::", metadata, "2002:a9fe:a9fe::/48"},
            {"2002:a9fe:a9fe:ffff:ffff:ffff:ffff:ffff", metadata, "2002:a9fe:a9fe::/48"},
            {"2002:c0a8:101::1", private_net, "2002:c0a8::/32"},
            {"2002:808:808::1", global, "2002:808:808::1/128"},
            {"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", broadcast, "2002:ffff:ffff::/48"},
            {"2003::", global, "2003::/128"},
        });
    }
    SECTION("3fff::/20 documentation") {
        check_rows({
            {"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", global,
             "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"},
            {"3fff::", documentation, "3fff::/20"},
            {"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", documentation, "3fff::/20"},
            {"3fff:1000::", global, "3fff:1000::/128"},
            {"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", global,
             "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"},
        });
    }
    SECTION("fc00::/7 unique local, fd00:ec2::254 metadata inside it") {
        check_rows({
            {"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", reserved, "8000::/1"},
            {"fc00::", private_net, "fc00::/7"},
            {"fd00:ec2::253", private_net, "fc00::/7"},
            {"fd00:ec2::254", metadata, "fd00:ec2::254/128"},
            {"fd00:ec2::255", private_net, "fc00::/7"},
            {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", private_net, "fc00::/7"},
            {"fe00::", reserved, "8000::/1"},
        });
    }
    SECTION("fe80::/10 link-local and fec0::/10 site-local") {
        check_rows({
            {"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", reserved, "8000::/1"},
            {"fe80::", link_local, "fe80::/10"},
            {"fe80::1", link_local, "fe80::/10"},
            {"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", link_local, "fe80::/10"},
            {"fec0::", private_net, "fec0::/10"},
            {"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", private_net, "fec0::/10"},
        });
    }
    SECTION("ff00::/8 multicast") {
        check_rows({
            {"ff00::", multicast, "ff00::/8"},
            {"ff02::1", multicast, "ff00::/8"},
            {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", multicast, "ff00::/8"},
        });
    }
    SECTION("outside 2000::/3 is reserved") {
        check_rows({
            {"::1:0:0:0", reserved, "::/3"},
            {"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", reserved, "::/3"},
            {"2000::", global, "2000::/128"},
            {"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", global,
             "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"},
            {"4000::", reserved, "4000::/2"},
            {"5000::1", reserved, "4000::/2"},
            {"7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", reserved, "4000::/2"},
            {"8000::", reserved, "8000::/1"},
            {"e000::", reserved, "8000::/1"},
        });
    }
    SECTION("public unicast") {
        check_rows({
            {"2606:4700:4700::1111", global, "2606:4700:4700::1111/128"},
            {"2a00:1450:4001::200e", global, "2a00:1450:4001::200e/128"},
        });
    }
}

TEST_CASE("classify: the range decides what a cidr rule may open", "[classify]") {
    // A rule opens a non-public address only when the rule's prefix lies inside the range.
    struct case_row {
        const char* address;
        const char* rule;
        bool opens;
    };
    const std::vector<case_row> rows{
        {"127.0.0.1", "0.0.0.0/0", false},
        {"127.0.0.1", "127.0.0.0/8", true},
        {"127.0.0.1", "127.0.0.1/32", true},
        {"169.254.169.254", "169.254.0.0/16", false},
        {"169.254.169.254", "169.254.169.254/32", true},
        {"169.254.1.1", "169.254.0.0/16", true},
        {"10.20.1.1", "10.20.0.0/16", true},
        {"10.20.1.1", "10.0.0.0/7", false},
        {"64:ff9b::10.20.1.1", "64:ff9b::/96", false},
        {"64:ff9b::10.20.1.1", "64:ff9b::a14:0/112", true},
        {"2002:7f00:1::", "2002::/16", false},
        {"fd00:ec2::254", "fc00::/7", false},
        {"fd12::1", "fd00::/8", true},
        {"fd12::1", "::/0", false},
    };
    for (const auto& r : rows) {
        INFO(r.address << " under rule " << r.rule);
        const classification c = classify(ip(r.address));
        CHECK_FALSE(c.is_public());
        CHECK(c.range.contains(net(r.rule)) == r.opens);
    }
}

TEST_CASE("classify: a sweep keeps every range holding its address", "[classify]") {
    STATIC_REQUIRE(noexcept(classify(ip_address{})));
    CHECK(classify(ip_address{}).cls == unspecified);
    // Every 2^24th-ish IPv4 address and a spread of IPv6 first words.
    for (std::uint64_t v = 0; v <= 0xffffffffu; v += 0x00fedcbau) {
        const ip_address a = ip_address::v4(static_cast<std::uint32_t>(v));
        INFO(a.to_string());
        const classification c = classify(a);
        CHECK(c.range.contains(a));
        CHECK(c.range.network.is_v4());
        if (c.is_public()) {
            CHECK(c.range == cidr{a, 32});
        }
    }
    for (unsigned w = 0; w <= 0xffff; w += 0x00ff) {
        std::array<std::uint8_t, 16> b{};
        b[0] = static_cast<std::uint8_t>(w >> 8);
        b[1] = static_cast<std::uint8_t>(w);
        b[5] = 0x5a;
        b[15] = 1;
        const ip_address a = ip_address::v6(b);
        INFO(a.to_string());
        const classification c = classify(a);
        CHECK(c.range.contains(a));
        CHECK(c.range.network.is_v6());
        CHECK(c.is_public() ==
              (w >= 0x2000 && w < 0x4000 && !(w >= 0x2001 && w <= 0x2002) && !(w == 0x3fff)));
    }
}

TEST_CASE("reaches_this_host: loopback and the unspecified range, in every form", "[classify]") {
    // Linux connects 0.0.0.0 (and :: to ::1) to this host: the self-connect guard must see
    // them, however the client writes them (issue 17: CONNECT 0.0.0.0:ADMIN_PORT).
    for (const char* s : {"0.0.0.0", "0.0.0.1", "0.255.255.255", "127.0.0.1", "127.9.8.7", "::",
                          "::1", "::ffff:0.0.0.0", "::ffff:127.0.0.1", "::0.0.0.0", "::127.0.0.1",
                          "64:ff9b::", "64:ff9b::7f00:1", "2002::", "2002:7f00:1::"}) {
        INFO(s);
        CHECK(reaches_this_host(ip(s)));
    }
    for (const char* s : {"1.0.0.0", "10.0.0.1", "169.254.169.254", "8.8.8.8", "::2:0:0:1",
                          "fe80::1", "2001:db8::1", "64:ff9b::808:808", "100.64.0.1"}) {
        INFO(s);
        CHECK_FALSE(reaches_this_host(ip(s)));
    }
}

}  // namespace cordon::config
