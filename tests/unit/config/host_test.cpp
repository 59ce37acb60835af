#include "config/host.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace cordon::config;

TEST_CASE("normalise_host: lower case, one trailing dot stripped", "[host]") {
    const std::vector<std::pair<std::string, std::string>> good{
        {"example.com", "example.com"},
        {"EXAMPLE.Com", "example.com"},
        {"example.com.", "example.com"},
        {"a", "a"},
        {"localhost", "localhost"},
        {"a-b.c-d.example", "a-b.c-d.example"},
        {"0a.9z.example", "0a.9z.example"},
        {"xn--mnchen-3ya.de", "xn--mnchen-3ya.de"},
        {"XN--MNCHEN-3YA.DE.", "xn--mnchen-3ya.de"},
        {std::string(63, 'a') + ".com", std::string(63, 'a') + ".com"},
    };
    for (const auto& [in, out] : good) {
        INFO(in);
        const host_result r = normalise_host(in);
        CHECK(r.ok());
        CHECK(r.value == out);
        char buf[max_host_length + 1];
        const std::size_t n = normalise_host_into(in, buf);
        CHECK(std::string(buf, n) == out);
    }
}

TEST_CASE("normalise_host: a 253-character name is the longest", "[host]") {
    // 4 labels of 63 and one of 1: 63*3 + 61 + dots = 253.
    std::string name = std::string(63, 'a') + "." + std::string(63, 'b') + "." +
                       std::string(63, 'c') + "." + std::string(61, 'd');
    REQUIRE(name.size() == 253);
    CHECK(normalise_host(name).ok());
    CHECK(normalise_host(name + ".").ok());
    CHECK_FALSE(normalise_host(name + "d").ok());
    CHECK_THAT(normalise_host(name + "d").error, Catch::Contains("253"));
}

TEST_CASE("normalise_host: refusals, each with its reason", "[host]") {
    struct bad {
        std::string in;
        std::string why;
    };
    const std::vector<bad> table{
        {"", "empty host name"},
        {".", "empty host name"},
        {"..", "empty label"},
        {"example..com", "empty label"},
        {".example.com", "empty label"},
        {"example.com..", "empty label"},
        {"exa mple.com", "a space"},
        {"example.com ", "a space"},
        {"exa\tmple.com", "a tab"},
        {std::string("exa\0mple.com", 12), "a NUL byte"},
        {"exa%mple.com", "'%'"},
        {"user@example.com", "'@'"},
        {"example.com\\", "'\\'"},
        {"example.com/path", "'/'"},
        {"example.com:443", "':'"},
        {"ex_ample.com", "'_'"},
        {"ex*ample.com", "'*'"},
        {"m\xc3\xbcnchen.de", "non-ASCII"},
        {"exa\x01mple.com", "control character"},
        {"-example.com", "starts or ends with '-'"},
        {"example-.com", "starts or ends with '-'"},
        {"example.-com", "starts or ends with '-'"},
        {std::string(64, 'a') + ".com", "longer than 63"},
    };
    for (const auto& t : table) {
        INFO(t.in);
        const host_result r = normalise_host(t.in);
        CHECK_FALSE(r.ok());
        CHECK(r.value.empty());
        CHECK_THAT(r.error, Catch::Contains(t.why));
        char buf[max_host_length + 1];
        CHECK(normalise_host_into(t.in, buf) == 0);
    }
}

TEST_CASE("host patterns: wildcard only as the whole leftmost label", "[host]") {
    const auto exact = parse_host_pattern("API.Example.com.");
    REQUIRE(exact.ok());
    CHECK_FALSE(exact.value.wildcard);
    CHECK(exact.value.name == "api.example.com");
    CHECK(exact.value.to_string() == "api.example.com");

    const auto wild = parse_host_pattern("*.GitHubUserContent.com");
    REQUIRE(wild.ok());
    CHECK(wild.value.wildcard);
    CHECK(wild.value.name == "githubusercontent.com");
    CHECK(wild.value.to_string() == "*.githubusercontent.com");

    struct bad {
        std::string in;
        std::string why;
    };
    const std::vector<bad> table{
        {"*", "'*'"},
        {"*.", "empty host name"},
        {"**.example.com", "'*'"},
        {"a*.example.com", "'*'"},
        {"*a.example.com", "'*'"},
        {"a.*.example.com", "'*'"},
        {"example.*", "'*'"},
        {"*.*.example.com", "'*'"},
        {"*.com", "at least two labels"},
        {"1.2.3.4", "cidr"},
        {"0x7f.1", "cidr"},
        {"2130706433", "cidr"},
        {"::1", "cidr"},
        {"[::1]", "cidr"},
        {"*.1.2.3.4", "cidr"},
        {"ex_ample.com", "'_'"},
        {"", "empty host name"},
    };
    for (const auto& t : table) {
        INFO(t.in);
        const auto r = parse_host_pattern(t.in);
        CHECK_FALSE(r.ok());
        CHECK_THAT(r.error, Catch::Contains(t.why));
    }
}

TEST_CASE("host patterns: matching", "[host]") {
    const host_pattern wild{"example.com", true};
    CHECK(wild.matches("a.example.com"));
    CHECK(wild.matches("a.b.c.example.com"));
    CHECK_FALSE(wild.matches("example.com"));
    CHECK_FALSE(wild.matches("badexample.com"));
    CHECK_FALSE(wild.matches(".example.com"));
    CHECK_FALSE(wild.matches("example.com.evil.net"));
    CHECK_FALSE(wild.matches("a.example.co"));
    CHECK_FALSE(wild.matches(""));

    const host_pattern exact{"example.com", false};
    CHECK(exact.matches("example.com"));
    CHECK_FALSE(exact.matches("a.example.com"));
    CHECK_FALSE(exact.matches("example.co"));
}

TEST_CASE("host_port: IPv6 literals in brackets, names and IPv4 as they are", "[host]") {
    using cordon::config::host_port;
    CHECK(host_port("example.com", 443) == "example.com:443");
    CHECK(host_port("192.0.2.1", 22) == "192.0.2.1:22");
    CHECK(host_port("2001:db8::1", 443) == "[2001:db8::1]:443");
    CHECK(host_port("::1", 0) == "[::1]:0");
    CHECK(host_port("::ffff:192.0.2.1", 65535) == "[::ffff:192.0.2.1]:65535");
    CHECK(host_port("fe80::1%eth0", 80) == "[fe80::1%eth0]:80");
    CHECK(host_port("", 1) == ":1");
}
