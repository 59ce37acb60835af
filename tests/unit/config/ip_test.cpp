#include "config/ip.hpp"  // first: the header must compile alone

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

std::string kind_name(literal_kind k) {
    switch (k) {
        case literal_kind::not_ip: return "not_ip";
        case literal_kind::ipv4: return "ipv4";
        case literal_kind::ipv6: return "ipv6";
        case literal_kind::non_canonical: return "non_canonical";
        case literal_kind::invalid: return "invalid";
    }
    return "?";
}

// Printable form of a test input that may hold NULs or be very long.
std::string shown(const std::string& s) {
    std::string out;
    for (const char c : s.substr(0, 80)) {
        if (c == '\0') {
            out += "\\0";
        } else {
            out += c;
        }
    }
    if (s.size() > 80) {
        out += "...(" + std::to_string(s.size()) + " bytes)";
    }
    return out;
}

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

}  // namespace

TEST_CASE("ip_address: construction and accessors", "[ip]") {
    SECTION("default is IPv4 0.0.0.0") {
        const ip_address a;
        CHECK(a.is_v4());
        CHECK(a.v4_value() == 0);
        CHECK(a.to_string() == "0.0.0.0");
    }
    SECTION("v4 from a host-order value and from bytes agree") {
        const ip_address a = ip_address::v4(0x7f000001u);
        const ip_address b = ip_address::v4(std::array<std::uint8_t, 4>{127, 0, 0, 1});
        CHECK(a == b);
        CHECK(a.is_v4());
        CHECK_FALSE(a.is_v6());
        CHECK(a.fam() == ip_address::family::v4);
        CHECK(a.v4_value() == 0x7f000001u);
        CHECK(a.bits() == 32);
        CHECK(a.bytes()[0] == 127);
        CHECK(a.bytes()[3] == 1);
        CHECK(a.bytes()[4] == 0);
        CHECK(a.to_string() == "127.0.0.1");
    }
    SECTION("v6 keeps an ordinary address") {
        std::array<std::uint8_t, 16> b{};
        b[0] = 0x20;
        b[1] = 0x01;
        b[2] = 0x0d;
        b[3] = 0xb8;
        b[15] = 1;
        const ip_address a = ip_address::v6(b);
        CHECK(a.is_v6());
        CHECK(a.bits() == 128);
        CHECK(a.bytes() == b);
        CHECK(a.v4_value() == 0);
        CHECK(a.to_string() == "2001:db8::1");
    }
    SECTION("v6 normalises IPv4-mapped to IPv4") {
        std::array<std::uint8_t, 16> b{};
        b[10] = 0xff;
        b[11] = 0xff;
        b[12] = 10;
        b[15] = 7;
        const ip_address a = ip_address::v6(b);
        CHECK(a.is_v4());
        CHECK(a == ip_address::v4(0x0a000007u));
        CHECK(a.to_string() == "10.0.0.7");
    }
    SECTION("v6 does not normalise near-mapped forms") {
        std::array<std::uint8_t, 16> b{};
        b[10] = 0xff;  // ::ff00:0:1 is not mapped
        b[15] = 1;
        CHECK(ip_address::v6(b).is_v6());
        b[11] = 0xff;
        b[9] = 1;  // ::1:ffff:0:1 is not mapped either
        CHECK(ip_address::v6(b).is_v6());
        CHECK(ip_address::v6(b).to_string() == "::1:ffff:0:1");
    }
    SECTION("v4 and v6 with equal leading bytes differ") {
        std::array<std::uint8_t, 16> b{};
        b[0] = 1;
        CHECK(ip_address::v6(b) != ip_address::v4(0x01000000u));
    }
}

TEST_CASE("ip_address::bit counts from the most significant bit", "[ip]") {
    const ip_address a = ip("128.0.0.1");
    CHECK(a.bit(0));
    CHECK_FALSE(a.bit(1));
    CHECK_FALSE(a.bit(30));
    CHECK(a.bit(31));
    CHECK_FALSE(a.bit(32));
    CHECK_FALSE(a.bit(-1));
    const ip_address b = ip("8000::1");
    CHECK(b.bit(0));
    CHECK_FALSE(b.bit(1));
    CHECK(b.bit(127));
    CHECK_FALSE(b.bit(126));
    CHECK_FALSE(b.bit(128));
    CHECK_FALSE(ip("::").bit(64));
}

TEST_CASE("to_string: canonical dotted quad and RFC 5952", "[ip]") {
    struct row {
        const char* in;
        const char* out;
    };
    const std::vector<row> rows{
        {"0.0.0.0", "0.0.0.0"},
        {"255.255.255.255", "255.255.255.255"},
        {"1.20.255.0", "1.20.255.0"},
        {"::", "::"},
        {"::1", "::1"},
        {"1::", "1::"},
        {"0:0:0:0:0:0:0:1", "::1"},
        {"2001:DB8::A", "2001:db8::a"},                              // lower case
        {"2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"},  // leading zeros go
        {"2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"},               // first run on a tie
        {"2001:0:0:1:0:0:0:1", "2001:0:0:1::1"},                     // longest run wins
        {"2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"},            // one zero: no "::"
        {"1:0:1:0:1:0:1:0", "1:0:1:0:1:0:1:0"},
        {"0:1:0:1:0:1:0:1", "0:1:0:1:0:1:0:1"},
        {"1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"},
        {"1:0:0:4:5:6:7:8", "1::4:5:6:7:8"},
        {"1:2:3:4:5:6:0:0", "1:2:3:4:5:6::"},
        {"FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
        {"fe80::0001", "fe80::1"},
        {"::1.2.3.4", "::102:304"},       // IPv4-compatible: plain hex, no dotted quad
        {"::ffff:1.2.3.4", "1.2.3.4"},    // mapped: IPv4
        {"::FFFF:0102:0304", "1.2.3.4"},  // mapped written in hex
        {"64:ff9b::192.0.2.33", "64:ff9b::c000:221"},
    };
    for (const auto& r : rows) {
        INFO(r.in);
        const ip_address a = ip(r.in);
        CHECK(a.to_string() == r.out);
        // And the canonical text reads back to the same address, as itself.
        const auto again = parse_ip(a.to_string());
        REQUIRE(again.has_value());
        CHECK(*again == a);
        CHECK(again->to_string() == r.out);
    }
}

TEST_CASE("parse_ip: canonical forms only", "[ip]") {
    SECTION("accepted") {
        struct row {
            const char* in;
            const char* canonical;
            bool v4;
        };
        const std::vector<row> rows{
            {"1.2.3.4", "1.2.3.4", true},
            {"0.0.0.0", "0.0.0.0", true},
            {"255.255.255.255", "255.255.255.255", true},
            {"10.0.0.1", "10.0.0.1", true},
            {"::", "::", false},
            {"::1", "::1", false},
            {"2001:DB8::1", "2001:db8::1", false},
            {"1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8", false},
            {"1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:6:102:304", false},
            {"::ffff:1.2.3.4", "1.2.3.4", true},
            {"::ffff:7f00:1", "127.0.0.1", true},
            {"::127.0.0.1", "::7f00:1", false},
        };
        for (const auto& r : rows) {
            INFO(r.in);
            const auto a = parse_ip(r.in);
            REQUIRE(a.has_value());
            CHECK(a->to_string() == r.canonical);
            CHECK(a->is_v4() == r.v4);
        }
    }
    SECTION("refused") {
        const std::vector<std::string> rows{
            "",
            "1.2.3",
            "1.2.3.4.5",
            "1.2.3.4.",
            ".1.2.3.4",
            "01.2.3.4",
            "1.2.3.04",
            "1.2.3.00",
            "256.1.1.1",
            "1.2.3.256",
            "1.2.3.1000",
            "127.1",
            "2130706433",
            "0x7f.0.0.1",
            "0x7f000001",
            "+1.2.3.4",
            "-1.2.3.4",
            " 1.2.3.4",
            "1.2.3.4 ",
            "1.2.3.4\n",
            "1..2.3",
            "[::1]",
            "fe80::1%eth0",
            "fe80::1%25eth0",
            "::1 ",
            " ::1",
            "1::2::3",
            ":1::",
            "1::2:",
            ":::",
            "12345::",
            "g::1",
            "1:2:3:4:5:6:7:8:9",
            "1:2:3:4:5:6:7",
            "::ffff:01.2.3.4",
            "::ffff:1.2.3",
            "::1.2.3.4:1",
            "example.com",
            std::string("1.2.3.4\0", 8),
            std::string("1.2.3\0.4", 8),
            std::string("::1\0", 4),
            std::string("\0", 1),
            std::string(100000, '1'),
            std::string(100000, ':'),
            "1:2:3:4:5:6:7:" + std::string(50, '0') + "8",
        };
        for (const auto& r : rows) {
            INFO(shown(r));
            CHECK_FALSE(parse_ip(r).has_value());
        }
    }
}

TEST_CASE("parse_literal: every host form", "[ip][literal]") {
    struct row {
        std::string in;
        literal_kind kind;
        const char* address;  // canonical text, for ipv4 / ipv6 / non_canonical
        const char* zone;
    };
    const literal_kind v4 = literal_kind::ipv4;
    const literal_kind v6 = literal_kind::ipv6;
    const literal_kind nc = literal_kind::non_canonical;
    const literal_kind bad = literal_kind::invalid;
    const literal_kind name = literal_kind::not_ip;
    const std::vector<row> rows{
        // canonical IPv4
        {"127.0.0.1", v4, "127.0.0.1", ""},
        {"0.0.0.0", v4, "0.0.0.0", ""},
        {"255.255.255.255", v4, "255.255.255.255", ""},
        {"10.0.0.1", v4, "10.0.0.1", ""},
        // what a lenient resolver reads as 127.0.0.1
        {"2130706433", nc, "127.0.0.1", ""},
        {"0177.0.0.1", nc, "127.0.0.1", ""},
        {"0x7f000001", nc, "127.0.0.1", ""},
        {"0X7F000001", nc, "127.0.0.1", ""},
        {"0x7F000001", nc, "127.0.0.1", ""},
        {"127.1", nc, "127.0.0.1", ""},
        {"127.0.1", nc, "127.0.0.1", ""},
        {"127.0.0.1.", nc, "127.0.0.1", ""},
        {"0x7f.1", nc, "127.0.0.1", ""},
        {"0X7F.0.0.1", nc, "127.0.0.1", ""},
        {"0x7f.0x0.0x0.0x1", nc, "127.0.0.1", ""},
        {"017700000001", nc, "127.0.0.1", ""},
        {"0177.0.0.01", nc, "127.0.0.1", ""},
        {"127.000.000.001", nc, "127.0.0.1", ""},
        {"127.0.0.01", nc, "127.0.0.1", ""},
        {"2130706433.", nc, "127.0.0.1", ""},
        // other lenient forms and their limits
        {"0", nc, "0.0.0.0", ""},
        {"0x", nc, "0.0.0.0", ""},
        {"0X", nc, "0.0.0.0", ""},
        {"0x.", nc, "0.0.0.0", ""},
        {"0x.0x.0x.0x", nc, "0.0.0.0", ""},
        {"00", nc, "0.0.0.0", ""},
        {"4294967295", nc, "255.255.255.255", ""},
        {"0xffffffff", nc, "255.255.255.255", ""},
        {"037777777777", nc, "255.255.255.255", ""},
        {"1.16777215", nc, "1.255.255.255", ""},
        {"1.0xffffff", nc, "1.255.255.255", ""},
        {"1.2.65535", nc, "1.2.255.255", ""},
        {"01.02.03.04", nc, "1.2.3.4", ""},
        {"1.2.3.4.", nc, "1.2.3.4", ""},
        {"0xff.0377.255.0xFF", nc, "255.255.255.255", ""},
        {std::string(1000, '0') + "1.2.3.4", nc, "1.2.3.4", ""},
        {"0x" + std::string(1000, '0') + "1", nc, "0.0.0.1", ""},
        // numeric last label, but no address
        {"1.2.3.4.5", bad, "", ""},
        {"1.2.3.4.5.", bad, "", ""},
        {"256.1.1.1", bad, "", ""},
        {"1.256.1.1", bad, "", ""},
        {"1.2.3.256", bad, "", ""},
        {"1.2.256", nc, "1.2.1.0", ""},  // the last of three parts holds 16 bits
        {"1.2.65536", bad, "", ""},
        {"1.16777216", bad, "", ""},
        {"4294967296", bad, "", ""},
        {"0x100000000", bad, "", ""},
        {"040000000000", bad, "", ""},
        {"999999999999", bad, "", ""},
        {"08.1.1.1", bad, "", ""},
        {"1.1.1.08", bad, "", ""},
        {"09", bad, "", ""},
        {"1..2.3", bad, "", ""},
        {".1.2.3", bad, "", ""},
        {"..1", bad, "", ""},
        {"0x1g.1", bad, "", ""},
        {"0xx1.1", bad, "", ""},
        {"example.0x10", bad, "", ""},
        {"example.com.1", bad, "", ""},
        {"a.1", bad, "", ""},
        {"+1.2.3.4", bad, "", ""},
        {"-1.2.3.4", bad, "", ""},
        {"1.+2.3.4", bad, "", ""},
        {" 1.2.3.4", bad, "", ""},
        {"1 .2.3.4", bad, "", ""},
        {"1:2.3", bad, "", ""},
        {"::1.2.3.4.5", bad, "", ""},
        {std::string("127.0\0.0.1", 10), bad, "", ""},
        {std::string("\0.1", 3), bad, "", ""},
        {std::string(100000, '9'), bad, "", ""},
        {std::string(100000, '0') + "8", bad, "", ""},
        {"0x" + std::string(100000, 'f'), bad, "", ""},
        {std::string(20, '9') + ".1.1.1", bad, "", ""},
        {"1." + std::string(40, '9'), bad, "", ""},
        {[] {
             std::string s;
             for (int i = 0; i < 10000; ++i) {
                 s += "1.";
             }
             return s + "1";
         }(),
         bad, "", ""},
        // names and garbage: the last label is not numeric
        {"", name, "", ""},
        {".", name, "", ""},
        {"example.com", name, "", ""},
        {"example.com.", name, "", ""},
        {"localhost", name, "", ""},
        {"1.2.3.4.example", name, "", ""},
        {"1.2.3.4..", name, "", ""},
        {"0xg", name, "", ""},
        {"0x7f000001x", name, "", ""},
        {"1e3", name, "", ""},
        {"-1", name, "", ""},
        {"+1", name, "", ""},
        {"1.2.3.-4", name, "", ""},
        {"1.2.3.4 ", name, "", ""},
        {"1.2.3. 4", name, "", ""},
        {"1.2.3.4%eth0", name, "", ""},
        {"fe80::1%", name, "", ""},  // bare, not IPv6: left to the host validator
        {"a:b", name, "", ""},
        {"::1]", name, "", ""},
        {std::string("127.0.0.1\0", 10), name, "", ""},
        {std::string("\0", 1), name, "", ""},
        {std::string(100000, 'a'), name, "", ""},
        // IPv6, bracketed and bare
        {"[::1]", v6, "::1", ""},
        {"::1", v6, "::1", ""},
        {"[::]", v6, "::", ""},
        {"[2001:DB8::A]", v6, "2001:db8::a", ""},
        {"2001:db8::a", v6, "2001:db8::a", ""},
        {"[fe80::1%25eth0]", v6, "fe80::1", "eth0"},
        {"[fe80::1%eth0]", v6, "fe80::1", "eth0"},
        {"fe80::1%eth0", v6, "fe80::1", "eth0"},
        {"fe80::1%25eth0", v6, "fe80::1", "eth0"},
        {"[fe80::1%2525]", v6, "fe80::1", "25"},
        {"[fe80::1%1]", v6, "fe80::1", "1"},
        {"[fe80::1%a.b_c~d-E]", v6, "fe80::1", "a.b_c~d-E"},
        {"[fe80::1%" + std::string(64, 'z') + "]", v6, "fe80::1", nullptr},
        {"[::ffff:127.0.0.1]", v6, "127.0.0.1", ""},  // mapped: written as IPv6, IPv4 inside
        {"::ffff:7f00:1", v6, "127.0.0.1", ""},
        {"[::127.0.0.1]", v6, "::7f00:1", ""},  // compatible: an ordinary IPv6 address
        {"[64:ff9b::10.0.0.1]", v6, "64:ff9b::a00:1", ""},
        // bracketed but not IPv6
        {"[]", bad, "", ""},
        {"[", bad, "", ""},
        {"[::1", bad, "", ""},
        {"[::1]]", bad, "", ""},
        {"[[::1]]", bad, "", ""},
        {"[::1]:443", bad, "", ""},
        {"[1.2.3.4]", bad, "", ""},
        {"[127.1]", bad, "", ""},
        {"[example.com]", bad, "", ""},
        {"[v1.fe80::1]", bad, "", ""},
        {"[ ::1]", bad, "", ""},
        {"[fe80::1%]", bad, "", ""},
        {"[fe80::1%25]", bad, "", ""},
        {"[fe80::1%eth/0]", bad, "", ""},
        {"[fe80::1%eth 0]", bad, "", ""},
        {"[fe80::1%eth%0]", bad, "", ""},
        {"[fe80::1%" + std::string(65, 'z') + "]", bad, "", ""},
        {"[%eth0]", bad, "", ""},
        {std::string("[::1\0]", 6), bad, "", ""},
        {std::string("[fe80::1%eth\0]", 14), bad, "", ""},
        {"[" + std::string(100000, ':') + "]", bad, "", ""},
    };
    for (const auto& r : rows) {
        INFO("input: " << shown(r.in));
        const literal lit = parse_literal(r.in);
        CHECK(kind_name(lit.kind) == kind_name(r.kind));
        if (r.kind == v4 || r.kind == v6 || r.kind == nc) {
            CHECK(lit.address.to_string() == r.address);
        } else {
            CHECK(lit.address == ip_address{});
        }
        if (r.zone != nullptr) {
            CHECK(lit.zone == r.zone);
        }
    }
}

TEST_CASE("parse_literal: kinds carry the right address family", "[ip][literal]") {
    CHECK(parse_literal("10.1.2.3").address.is_v4());
    CHECK(parse_literal("0x0a010203").address == ip("10.1.2.3"));
    // Mapped stays kind ipv6 (it was written as IPv6) but the address is IPv4.
    const literal mapped = parse_literal("[::ffff:10.1.2.3]");
    CHECK(mapped.kind == literal_kind::ipv6);
    CHECK(mapped.address.is_v4());
    CHECK(mapped.address == ip("10.1.2.3"));
    CHECK(mapped.zone.empty());
    const literal compat = parse_literal("::10.1.2.3");
    CHECK(compat.kind == literal_kind::ipv6);
    CHECK(compat.address.is_v6());
    const literal zoned = parse_literal("[fe80::abcd%25en0]");
    CHECK(zoned.address == ip("fe80::abcd"));
    CHECK(zoned.zone == "en0");
    CHECK(parse_literal("[fe80::1%" + std::string(64, 'z') + "]").zone == std::string(64, 'z'));
}

TEST_CASE("mask clears host bits", "[ip][cidr]") {
    struct row {
        const char* in;
        int len;
        const char* out;
    };
    const std::vector<row> rows{
        {"10.1.2.3", 8, "10.0.0.0"},
        {"10.1.2.3", 0, "0.0.0.0"},
        {"10.1.2.3", -5, "0.0.0.0"},
        {"10.1.2.3", 32, "10.1.2.3"},
        {"10.1.2.3", 40, "10.1.2.3"},
        {"10.1.2.3", 31, "10.1.2.2"},
        {"255.255.255.255", 1, "128.0.0.0"},
        {"255.255.255.255", 17, "255.255.128.0"},
        {"2001:db8:1234:5678::1", 36, "2001:db8:1000::"},
        {"2001:db8:1234:5678::1", 64, "2001:db8:1234:5678::"},
        {"2001:db8:1234:5678::1", 127, "2001:db8:1234:5678::"},
        {"2001:db8:1234:5678::1", 128, "2001:db8:1234:5678::1"},
        {"2001:db8:1234:5678::1", 200, "2001:db8:1234:5678::1"},
        {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0, "::"},
        {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1, "8000::"},
        {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 95, "ffff:ffff:ffff:ffff:ffff:fffe::"},
        {"1:ffff:ffff::", 90, "1:ffff:ffff::"},
    };
    for (const auto& r : rows) {
        INFO(r.in << " /" << r.len);
        const ip_address m = mask(ip(r.in), r.len);
        CHECK(m.to_string() == r.out);
        CHECK(m.fam() == ip(r.in).fam());
    }
}

TEST_CASE("parse_cidr: accepted prefixes", "[ip][cidr]") {
    struct row {
        const char* in;
        const char* out;
        int len;
        bool v4;
    };
    const std::vector<row> rows{
        {"10.0.0.0/8", "10.0.0.0/8", 8, true},
        {"0.0.0.0/0", "0.0.0.0/0", 0, true},
        {"1.2.3.4/32", "1.2.3.4/32", 32, true},
        {"192.168.0.0/16", "192.168.0.0/16", 16, true},
        {"172.16.0.0/12", "172.16.0.0/12", 12, true},
        {"255.255.255.254/31", "255.255.255.254/31", 31, true},
        {"::/0", "::/0", 0, false},
        {"::1/128", "::1/128", 128, false},
        {"2001:db8::/32", "2001:db8::/32", 32, false},
        {"2001:DB8::/32", "2001:db8::/32", 32, false},
        {"2001:0db8:0000::/48", "2001:db8::/48", 48, false},
        {"fe80::/10", "fe80::/10", 10, false},
        {"::/80", "::/80", 80, false},  // covers mapped space but stays IPv6
        {"::/96", "::/96", 96, false},
        // IPv4-mapped prefixes become the IPv4 prefix (len - 96)
        {"::ffff:0:0/96", "0.0.0.0/0", 0, true},
        {"::ffff:10.0.0.0/104", "10.0.0.0/8", 8, true},
        {"::ffff:1.2.3.4/128", "1.2.3.4/32", 32, true},
        {"::FFFF:C0A8:0/112", "192.168.0.0/16", 16, true},
    };
    for (const auto& r : rows) {
        INFO(r.in);
        const cidr_result res = parse_cidr(r.in);
        REQUIRE(res.value.has_value());
        CHECK(res.error.empty());
        CHECK(res.value->to_string() == r.out);
        CHECK(res.value->prefix_len == r.len);
        CHECK(res.value->network.is_v4() == r.v4);
        // The canonical text reads back to the same prefix.
        const cidr_result again = parse_cidr(res.value->to_string());
        REQUIRE(again.value.has_value());
        CHECK(*again.value == *res.value);
    }
}

TEST_CASE("parse_cidr: errors say what is wrong", "[ip][cidr]") {
    struct row {
        std::string in;
        std::string message;  // the whole message, or a part of it when `part`
        bool part;
    };
    const std::vector<row> rows{
        {"10.0.0.1/8", "10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?", false},
        {"192.168.1.1/16", "192.168.1.1/16 has host bits set; did you mean 192.168.0.0/16?", false},
        {"0.0.0.1/0", "0.0.0.1/0 has host bits set; did you mean 0.0.0.0/0?", false},
        {"2001:db8::1/32", "2001:db8::1/32 has host bits set; did you mean 2001:db8::/32?", false},
        {"::1/0", "::1/0 has host bits set; did you mean ::/0?", false},
        {"::ffff:10.0.0.1/104", "::ffff:10.0.0.1/104 has host bits set; did you mean 10.0.0.0/8?",
         false},
        {"::ffff:10.0.0.0/88", "did you mean ::ff00:0:0/88?", true},
        {"::ffff:10.0.0.0/88", "needs a length of 96 or more", true},
        {"::ffff:0:0/0", "did you mean ::/0?", true},
        {"10.0.0.0/33", "prefix length 33 is out of range 0..32 for IPv4", false},
        {"10.0.0.0/128", "prefix length 128 is out of range 0..32 for IPv4", false},
        {"::/129", "prefix length 129 is out of range 0..128 for IPv6", false},
        {"::ffff:1.2.3.4/129", "prefix length 129 is out of range 0..128 for IPv6", false},
        {"10.0.0.0/99999999999999999999", "is out of range 0..32 for IPv4", true},
        {"10.0.0.0/" + std::string(100000, '9'), "is out of range 0..32 for IPv4", true},
        {"10.0.0.1",
         "expected ADDRESS/LENGTH, got '10.0.0.1': write 10.0.0.1/32 for a single "
         "address",
         false},
        {"::1", "write ::1/128 for a single address", true},
        {"::ffff:1.2.3.4", "write 1.2.3.4/32 for a single address", true},
        {"", "expected ADDRESS/LENGTH, got an empty string", false},
        {"example.com", "expected ADDRESS/LENGTH, got 'example.com'", false},
        {"/8", "expected ADDRESS/LENGTH", true},
        {"/", "expected ADDRESS/LENGTH", true},
        {"10.0.0.0/", "no length after '/'", true},
        {"10.0.0.0/8/8", "more than one '/'", true},
        {"10.0.0.0//8", "more than one '/'", true},
        {"10.0.0.0/+8", "prefix length '+8' is not a decimal number", false},
        {"10.0.0.0/-8", "prefix length '-8' is not a decimal number", false},
        {"10.0.0.0/ 8", "is not a decimal number", true},
        {"10.0.0.0/8 ", "is not a decimal number", true},
        {"10.0.0.0/0x8", "is not a decimal number", true},
        {"10.0.0.0/8.0", "is not a decimal number", true},
        {std::string("10.0.0.0/8\0", 11), "prefix length '8\\x00' is not a decimal number", false},
        {"10.0.0.0/08", "prefix length '08' has a leading zero", false},
        {"10.0.0.0/00", "prefix length '00' has a leading zero", false},
        {"010.0.0.0/8",
         "'010.0.0.0' is not a canonical IPv4 address; write 8.0.0.0 if that is "
         "what you mean",
         false},
        {"10/8", "'10' is not a canonical IPv4 address; write 0.0.0.10", true},
        {"10.0/8", "write 10.0.0.0 if that is what you mean", true},
        {"0x0a000000/8", "write 10.0.0.0 if that is what you mean", true},
        {"10.0.0.0./8", "not a canonical IPv4 address", true},
        {"256.0.0.0/8", "'256.0.0.0' is not an IP address", false},
        {"example.com/8", "'example.com' is not an IP address", false},
        {" 10.0.0.0/8", "is not an IP address", true},
        {"[::1]/128", "'[::1]': write IPv6 prefixes without brackets", false},
        {"fe80::%eth0/64", "'fe80::%eth0': a zone (%...) is not allowed in a prefix", false},
        {"1::2::3/64", "'1::2::3' is not an IP address", false},
        {std::string("10.0\0.0.0/8", 11), "'10.0\\x00.0.0' is not an IP address", false},
    };
    for (const auto& r : rows) {
        INFO("input: " << shown(r.in));
        const cidr_result res = parse_cidr(r.in);
        CHECK_FALSE(res.value.has_value());
        if (r.part) {
            CHECK_THAT(res.error, Catch::Matchers::Contains(r.message));
        } else {
            CHECK(res.error == r.message);
        }
    }
}

TEST_CASE("parse_cidr: messages about hostile input stay short and printable", "[ip][cidr]") {
    const std::vector<std::string> rows{
        std::string(100000, 'x'),
        std::string(100000, 'x') + "/8",
        "10.0.0.0/" + std::string(100000, 'x'),
        std::string("\0\x01\x7f\xff/8", 5),
        "'\\/8",
    };
    for (const auto& r : rows) {
        INFO("input: " << shown(r));
        const cidr_result res = parse_cidr(r);
        CHECK_FALSE(res.value.has_value());
        CHECK_FALSE(res.error.empty());
        CHECK(res.error.size() < 200);
        for (const char c : res.error) {
            CHECK((c >= 0x20 && c < 0x7f));
        }
    }
    CHECK(parse_cidr(std::string("\0\x01\x7f\xff/8", 5)).error ==
          "'\\x00\\x01\\x7f\\xff' is not an IP address");
}

TEST_CASE("cidr::contains(address)", "[ip][cidr]") {
    struct row {
        const char* prefix;
        const char* address;
        bool inside;
    };
    const std::vector<row> rows{
        {"10.0.0.0/8", "10.0.0.0", true},
        {"10.0.0.0/8", "10.255.255.255", true},
        {"10.0.0.0/8", "9.255.255.255", false},
        {"10.0.0.0/8", "11.0.0.0", false},
        {"10.0.0.0/8", "::ffff:10.1.2.3", true},  // mapped is IPv4
        {"10.0.0.0/8", "::a01:203", false},       // compatible is IPv6
        {"10.0.0.0/8", "a00::", false},
        {"0.0.0.0/0", "0.0.0.0", true},
        {"0.0.0.0/0", "255.255.255.255", true},
        {"0.0.0.0/0", "::", false},
        {"0.0.0.0/0", "::1", false},
        {"1.2.3.4/32", "1.2.3.4", true},
        {"1.2.3.4/32", "1.2.3.5", false},
        {"1.2.3.4/32", "1.2.3.3", false},
        {"192.168.0.0/23", "192.168.1.255", true},
        {"192.168.0.0/23", "192.168.2.0", false},
        {"::/0", "::", true},
        {"::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", true},
        {"::/0", "0.0.0.0", false},
        {"::/0", "::ffff:1.2.3.4", false},  // mapped is IPv4: IPv6 prefixes never hold it
        {"::/80", "::ffff:1.2.3.4", false},
        {"2001:db8::/32", "2001:db8::", true},
        {"2001:db8::/32", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", true},
        {"2001:db8::/32", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", false},
        {"2001:db8::/32", "2001:db9::", false},
        {"::1/128", "::1", true},
        {"::1/128", "::", false},
        {"::ffff:10.0.0.0/104", "10.20.30.40", true},
    };
    for (const auto& r : rows) {
        INFO(r.prefix << " contains " << r.address);
        CHECK(net(r.prefix).contains(ip(r.address)) == r.inside);
    }
    SECTION("a hand-built prefix with host bits still matches by its prefix") {
        const cidr c{ip("10.1.2.3"), 8};
        CHECK(c.contains(ip("10.200.0.1")));
        CHECK_FALSE(c.contains(ip("11.0.0.0")));
    }
    SECTION("an out-of-range length contains nothing") {
        CHECK_FALSE((cidr{ip("10.0.0.0"), 33}.contains(ip("10.0.0.0"))));
        CHECK_FALSE((cidr{ip("10.0.0.0"), -1}.contains(ip("10.0.0.0"))));
        CHECK_FALSE((cidr{ip("::"), 129}.contains(ip("::"))));
    }
}

TEST_CASE("cidr::contains(cidr)", "[ip][cidr]") {
    struct row {
        const char* outer;
        const char* inner;
        bool inside;
    };
    const std::vector<row> rows{
        {"10.0.0.0/8", "10.1.0.0/16", true},
        {"10.0.0.0/8", "10.0.0.0/8", true},
        {"10.0.0.0/8", "10.255.255.255/32", true},
        {"10.1.0.0/16", "10.0.0.0/8", false},
        {"10.0.0.0/8", "11.0.0.0/8", false},
        {"10.0.0.0/8", "0.0.0.0/0", false},
        {"0.0.0.0/0", "10.0.0.0/8", true},
        {"0.0.0.0/0", "0.0.0.0/0", true},
        {"0.0.0.0/0", "::/0", false},
        {"::/0", "0.0.0.0/0", false},
        {"::/0", "2001:db8::/32", true},
        {"::/0", "::/0", true},
        {"2001:db8::/32", "2001:db8:1::/48", true},
        {"2001:db8::/32", "2001:db9::/48", false},
        {"2001:db8::/32", "2001:db8::/31", false},
        {"2001:db8::/32", "2001:db8::1/128", true},
        {"127.0.0.0/8", "0.0.0.0/0", false},
        {"169.254.169.254/32", "169.254.0.0/16", false},
    };
    for (const auto& r : rows) {
        INFO(r.outer << " contains " << r.inner);
        CHECK(net(r.outer).contains(net(r.inner)) == r.inside);
    }
    CHECK_FALSE((net("10.0.0.0/8").contains(cidr{ip("10.0.0.0"), 33})));
}

TEST_CASE("to_string round trips", "[ip]") {
    SECTION("every IPv4 octet value") {
        for (unsigned v = 0; v < 256; ++v) {
            const ip_address a = ip_address::v4((v << 24) | (v << 16) | (255 - v) | (v << 8));
            INFO(a.to_string());
            const auto back = parse_ip(a.to_string());
            REQUIRE(back.has_value());
            CHECK(*back == a);
            CHECK(parse_literal(a.to_string()).kind == literal_kind::ipv4);
            CHECK(parse_literal(a.to_string()).address == a);
        }
    }
    SECTION("IPv6 with zero runs at every place and length") {
        for (unsigned zeros = 0; zeros < 256; ++zeros) {
            std::array<std::uint8_t, 16> b{};
            for (std::size_t w = 0; w < 8; ++w) {
                if ((zeros & (1u << w)) == 0) {
                    b[2 * w] = static_cast<std::uint8_t>(0x10 + w);
                    b[2 * w + 1] = static_cast<std::uint8_t>(w);
                }
            }
            const ip_address a = ip_address::v6(b);
            INFO(a.to_string());
            const auto back = parse_ip(a.to_string());
            REQUIRE(back.has_value());
            CHECK(*back == a);
            const literal lit = parse_literal("[" + a.to_string() + "]");
            CHECK(lit.kind == literal_kind::ipv6);
            CHECK(lit.address == a);
            // RFC 5952: never "::" for a single zero group, never two "::".
            const std::string s = a.to_string();
            const auto first = s.find("::");
            if (first != std::string::npos) {
                CHECK(s.find("::", first + 1) == std::string::npos);
            }
            CHECK(s.find(":::") == std::string::npos);
        }
    }
    SECTION("prefixes") {
        for (const char* text : {"10.0.0.0/8", "0.0.0.0/0", "1.2.3.4/32", "::/0", "2001:db8::/32",
                                 "fe80::/10", "64:ff9b::a00:0/104"}) {
            INFO(text);
            CHECK(net(text).to_string() == text);
        }
    }
}

}  // namespace cordon::config
