#include "proxy/control/runtime.hpp"  // first: the header must compile alone

#include <catch2/catch.hpp>
#include <string>

namespace cordon::proxy::control {
namespace {

config::ip_address ip(const std::string& text) {
    const auto a = config::parse_ip(text);
    INFO(text);
    REQUIRE(a.has_value());
    return *a;
}

config::endpoint ep(const std::string& addr, std::uint16_t port) {
    config::endpoint e;
    e.address = ip(addr);
    e.port = port;
    return e;
}

}  // namespace

TEST_CASE("self_addresses: cordon never connects to its own listeners", "[self]") {
    self_addresses self;
    self.listeners = {ep("127.0.0.1", 3128), ep("127.0.0.1", 9090), ep("0.0.0.0", 5353),
                      ep("10.1.2.3", 8080)};
    self.local = {ip("127.0.0.1"), ip("10.1.2.3"), ip("::1")};

    SECTION("the unspecified range reaches the loopback listeners (issue 17)") {
        // Linux connects 0.0.0.0 to 127.0.0.1: CONNECT 0.0.0.0:ADMIN_PORT was the admin API.
        for (const char* a :
             {"0.0.0.0", "0.1.2.3", "::", "::ffff:0.0.0.0", "::0.0.0.0", "64:ff9b::", "2002::"}) {
            INFO(a);
            CHECK(self.is_self(ip(a), 9090));
            CHECK(self.is_self(ip(a), 3128));
            CHECK(self.is_self(ip(a), 5353));
        }
    }
    SECTION("loopback in any form, for a listener on any address") {
        for (const char* a :
             {"127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1", "64:ff9b::7f00:1"}) {
            INFO(a);
            CHECK(self.is_self(ip(a), 9090));
            CHECK(self.is_self(ip(a), 8080));
        }
    }
    SECTION("a wildcard listener is reached through every local address") {
        CHECK(self.is_self(ip("10.1.2.3"), 5353));
        CHECK(self.is_self(ip("10.1.2.3"), 8080));
        CHECK_FALSE(self.is_self(ip("10.1.2.3"), 9090));  // bound to 127.0.0.1 only
    }
    SECTION("other addresses and ports are not cordon") {
        CHECK_FALSE(self.is_self(ip("0.0.0.0"), 443));
        CHECK_FALSE(self.is_self(ip("127.0.0.1"), 8443));
        CHECK_FALSE(self.is_self(ip("10.9.9.9"), 5353));
        CHECK_FALSE(self.is_self(ip("192.0.2.1"), 3128));
    }
}

}  // namespace cordon::proxy::control
