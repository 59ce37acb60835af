// Tests of the SOCKS5 handshake messages: greeting, RFC 1929 credentials, requests, answers;
// every message cut at every byte is need_more, never good or bad early.
#include "proxy/data/socks5.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace cordon::proxy::data;
using namespace cordon::proxy::data::socks5;
using bytes = std::vector<std::uint8_t>;

bytes name_request(std::uint8_t cmd, const std::string& host, std::uint16_t port) {
    bytes b{5, cmd, 0, 3, static_cast<std::uint8_t>(host.size())};
    b.insert(b.end(), host.begin(), host.end());
    b.push_back(static_cast<std::uint8_t>(port >> 8));
    b.push_back(static_cast<std::uint8_t>(port & 0xff));
    return b;
}

bytes userpass(const std::string& u, const std::string& p) {
    bytes b{1, static_cast<std::uint8_t>(u.size())};
    b.insert(b.end(), u.begin(), u.end());
    b.push_back(static_cast<std::uint8_t>(p.size()));
    b.insert(b.end(), p.begin(), p.end());
    return b;
}

std::span<const std::uint8_t> prefix(const bytes& b, std::size_t n) { return {b.data(), n}; }

}  // namespace

TEST_CASE("socks5: greetings", "[socks5]") {
    SECTION("no-auth and username/password offered") {
        const bytes b{5, 3, 0, 1, 2};
        const greeting g = parse_greeting(b);
        CHECK(g.st == status::good);
        CHECK(g.consumed == 5);
        CHECK(g.no_auth);
        CHECK(g.userpass);
    }
    SECTION("only GSSAPI offered: good, neither method") {
        const bytes b{5, 1, 1};
        const greeting g = parse_greeting(b);
        CHECK(g.st == status::good);
        CHECK_FALSE(g.no_auth);
        CHECK_FALSE(g.userpass);
    }
    SECTION("bytes behind the greeting are not its") {
        const bytes b{5, 1, 2, 1, 5};
        CHECK(parse_greeting(b).consumed == 3);
    }
    SECTION("refused") {
        const auto b = GENERATE(bytes{4, 1, 0}, bytes{'G', 'E', 'T', ' '}, bytes{5, 0},
                                bytes{0x16, 3, 1});
        const greeting g = parse_greeting(b);
        CHECK(g.st == status::bad);
        CHECK_FALSE(g.error.empty());
    }
    SECTION("every cut is need_more") {
        const bytes b{5, 255};
        bytes full = b;
        full.resize(257, 2);
        for (std::size_t n = 0; n < full.size(); ++n) {
            CAPTURE(n);
            CHECK(parse_greeting(prefix(full, n)).st == status::need_more);
        }
        CHECK(parse_greeting(full).st == status::good);
        CHECK(parse_greeting(full).consumed == 257);
    }
}

TEST_CASE("socks5: RFC 1929 credentials", "[socks5]") {
    SECTION("session id and token") {
        const bytes b = userpass("s-abc", "tok:en with spaces");
        const credentials c = parse_credentials(b);
        CHECK(c.st == status::good);
        CHECK(c.consumed == b.size());
        CHECK(c.user == "s-abc");
        CHECK(c.password == "tok:en with spaces");
    }
    SECTION("the longest fields: 255 bytes each") {
        const bytes b = userpass(std::string(255, 'u'), std::string(255, 'p'));
        const credentials c = parse_credentials(b);
        CHECK(c.st == status::good);
        CHECK(c.consumed == 513);
        for (std::size_t n = 0; n < b.size(); ++n) {
            CAPTURE(n);
            CHECK(parse_credentials(prefix(b, n)).st == status::need_more);
        }
    }
    SECTION("refused") {
        const auto b = GENERATE(bytes{5, 1, 'a', 1, 'b'}, bytes{1, 0, 1, 'b'}, bytes{1, 1, 'a', 0},
                                bytes{0});
        const credentials c = parse_credentials(b);
        CHECK(c.st == status::bad);
        CHECK(c.user.empty());
        CHECK(c.password.empty());
    }
}

TEST_CASE("socks5: requests", "[socks5]") {
    SECTION("a name") {
        const bytes b = name_request(1, "Git.Example.com", 22);
        const request r = parse_request(b);
        REQUIRE(r.st == status::good);
        CHECK(r.consumed == b.size());
        CHECK(r.cmd == 1);
        CHECK(r.name);
        CHECK(r.host == "Git.Example.com");  // normalised by the CONNECT path, as CONNECT's
        CHECK(r.port == 22);
        CHECK(target_text(r) == "Git.Example.com:22");
    }
    SECTION("an IPv4 address") {
        const bytes b{5, 1, 0, 1, 127, 0, 0, 1, 0x1f, 0x90};
        const request r = parse_request(b);
        REQUIRE(r.st == status::good);
        CHECK_FALSE(r.name);
        CHECK(r.host == "127.0.0.1");
        CHECK(r.port == 8080);
        CHECK(target_text(r) == "127.0.0.1:8080");
    }
    SECTION("an IPv6 address, and a mapped IPv4 one as IPv4") {
        bytes b{5, 1, 0, 4};
        bytes addr(16, 0);
        addr[15] = 1;
        b.insert(b.end(), addr.begin(), addr.end());
        b.push_back(0);
        b.push_back(22);
        request r = parse_request(b);
        REQUIRE(r.st == status::good);
        CHECK(r.host == "::1");
        CHECK(target_text(r) == "[::1]:22");
        b[4 + 10] = 0xff;
        b[4 + 11] = 0xff;
        b[4 + 12] = 10;
        r = parse_request(b);
        REQUIRE(r.st == status::good);
        CHECK(r.host == "10.0.0.1");
        CHECK(target_text(r) == "10.0.0.1:22");
    }
    SECTION("BIND and UDP ASSOCIATE parse: the caller refuses them") {
        CHECK(parse_request(name_request(2, "a.test", 80)).cmd == 2);
        CHECK(parse_request(name_request(3, "a.test", 80)).cmd == 3);
        CHECK(command_name(2) == "BIND");
        CHECK(command_name(3) == "UDP_ASSOCIATE");
        CHECK(command_name(1) == "CONNECT");
        CHECK(command_name(9) == "UNKNOWN");
    }
    SECTION("every cut is need_more") {
        const bytes b = name_request(1, std::string(255, 'a'), 443);
        for (std::size_t n = 0; n < b.size(); ++n) {
            CAPTURE(n);
            CHECK(parse_request(prefix(b, n)).st == status::need_more);
        }
        CHECK(parse_request(b).consumed == 262);
    }
    SECTION("names that could be read as something else are refused") {
        const auto host = GENERATE(std::string("a.test:80"), std::string("[::1]"),
                                   std::string("a.test\r\nHost: x"), std::string("a b"),
                                   std::string("a.test\0", 7), std::string("\xc3\xa9.test"),
                                   std::string("a/b"), std::string("a@b"));
        CAPTURE(host);
        const request r = parse_request(name_request(1, host, 80));
        CHECK(r.st == status::bad);
        CHECK(r.host.empty());
        CHECK(r.refusal == reply::general_failure);
    }
    SECTION("refused with their answers") {
        CHECK(parse_request(bytes{5, 1, 0, 2, 1, 2}).refusal == reply::address_type_not_supported);
        CHECK(parse_request(bytes{5, 1, 1, 1}).st == status::bad);
        CHECK(parse_request(bytes{4, 1, 0, 1}).st == status::bad);
        CHECK(parse_request(bytes{5, 1, 0, 3, 0, 0, 80}).st == status::bad);
        CHECK(parse_request(name_request(1, "a.test", 0)).st == status::bad);
    }
}

TEST_CASE("socks5: answers", "[socks5]") {
    CHECK(method_answer(method_userpass) == std::array<std::uint8_t, 2>{5, 2});
    CHECK(method_answer(method_none) == std::array<std::uint8_t, 2>{5, 0xff});
    CHECK(credentials_answer(true) == std::array<std::uint8_t, 2>{1, 0});
    CHECK(credentials_answer(false)[1] != 0);
    const auto a = request_answer(reply::not_allowed);
    CHECK(a == std::array<std::uint8_t, 10>{5, 2, 0, 1, 0, 0, 0, 0, 0, 0});
    CHECK(reply_for(cordon::config::deny_reason::no_rule) == reply::not_allowed);
    CHECK(reply_for(cordon::config::deny_reason::private_address) == reply::not_allowed);
    CHECK(reply_for(cordon::config::deny_reason::kill_switch) == reply::not_allowed);
    CHECK(reply_for(cordon::config::deny_reason::bad_request) == reply::general_failure);
}
