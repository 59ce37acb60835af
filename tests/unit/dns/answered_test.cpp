#include "dns/answered.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dns/wire.hpp"

using cordon::config::ip_address;
using cordon::config::parse_ip;
using cordon::dns::answer_addresses;
using cordon::dns::answered_names;

namespace {

using strings = std::vector<std::string>;
using clock_ = answered_names::clock;

ip_address ip(const char* text) { return *parse_ip(text); }

std::vector<std::uint8_t> answer(const char* name, std::uint16_t qtype,
                                 const std::vector<ip_address>& addrs, std::uint32_t ttl) {
    const auto q = cordon::dns::parse_query(cordon::dns::build_query(name, qtype, 7)).value;
    return cordon::dns::build_address_answer(q, addrs, ttl);
}

}  // namespace

TEST_CASE("answered: the A and AAAA records of an answer, with their TTL", "[answered]") {
    const auto a = answer_addresses(
        answer("api.example", cordon::dns::type_a, {ip("192.0.2.7"), ip("192.0.2.8")}, 42));
    REQUIRE(a.size() == 2);
    CHECK(a[0].address == ip("192.0.2.7"));
    CHECK(a[1].address == ip("192.0.2.8"));
    CHECK(a[0].ttl == 42);
    const auto six = answer_addresses(
        answer("api.example", cordon::dns::type_aaaa, {ip("2001:db8::1")}, 5));
    REQUIRE(six.size() == 1);
    CHECK(six[0].address == ip("2001:db8::1"));

    SECTION("nothing from an error, a truncated answer or bytes that do not parse") {
        const auto q = cordon::dns::parse_query(cordon::dns::build_query("x.example", 1, 7)).value;
        CHECK(answer_addresses(cordon::dns::build_error(q, cordon::dns::rcode::refused)).empty());
        const auto big = answer("api.example", cordon::dns::type_a, {ip("192.0.2.7")}, 42);
        CHECK(answer_addresses(cordon::dns::truncate_for_udp(big, 20)).empty());
        std::vector<std::uint8_t> cut(big.begin(), big.end() - 3);
        CHECK(answer_addresses(cut).empty());
        CHECK(answer_addresses({}).empty());
    }
}

TEST_CASE("answered: an address names only what was answered to that job and session",
          "[answered]") {
    answered_names t;
    const auto now = clock_::now();
    t.remember(ip("192.0.2.7"), "api.example", "web", "s1", now + std::chrono::seconds(30));
    CHECK(t.lookup(ip("192.0.2.7"), "web", "s1", now) == strings{"api.example"});
    // Another session of the job, another job, a client without a session: nothing.
    CHECK(t.lookup(ip("192.0.2.7"), "web", "s2", now).empty());
    CHECK(t.lookup(ip("192.0.2.7"), "other", "s1", now).empty());
    CHECK(t.lookup(ip("192.0.2.7"), "web", "", now).empty());
    // Another address, the same bytes as IPv6: nothing.
    CHECK(t.lookup(ip("192.0.2.8"), "web", "s1", now).empty());
    CHECK(t.lookup(ip("::c000:207"), "web", "s1", now).empty());
    // Job and session are not one string: "we" + "bs1" is not "web" + "s1".
    CHECK(t.lookup(ip("192.0.2.7"), "we", "bs1", now).empty());

    SECTION("never past its TTL") {
        CHECK(t.lookup(ip("192.0.2.7"), "web", "s1", now + std::chrono::seconds(29)).size() == 1);
        CHECK(t.lookup(ip("192.0.2.7"), "web", "s1", now + std::chrono::seconds(30)).empty());
    }
    SECTION("a later answer moves the expiry; several names, the latest first") {
        t.remember(ip("192.0.2.7"), "cdn.example", "web", "s1", now + std::chrono::seconds(10));
        t.remember(ip("192.0.2.7"), "api.example", "web", "s1", now + std::chrono::seconds(60));
        CHECK(t.lookup(ip("192.0.2.7"), "web", "s1", now) == strings{"api.example", "cdn.example"});
        CHECK(t.lookup(ip("192.0.2.7"), "web", "s1", now + std::chrono::seconds(45)) ==
              strings{"api.example"});
    }
}

TEST_CASE("answered: bounded in keys and in names per key", "[answered]") {
    answered_names t(3);
    const auto now = clock_::now();
    const auto later = now + std::chrono::seconds(30);
    for (int i = 1; i <= 5; ++i) {
        t.remember(ip(("192.0.2." + std::to_string(i)).c_str()), "n.example", "web", "", later);
    }
    CHECK(t.keys() == 3);
    CHECK(t.lookup(ip("192.0.2.1"), "web", "", now).empty());  // the oldest went first
    CHECK(t.lookup(ip("192.0.2.5"), "web", "", now) == strings{"n.example"});
    for (int i = 0; i < 20; ++i) {
        t.remember(ip("192.0.2.5"), "n" + std::to_string(i) + ".example", "web", "",
                   later + std::chrono::seconds(i));
    }
    CHECK(t.lookup(ip("192.0.2.5"), "web", "", now).size() == answered_names::names_per_key);
    CHECK(t.lookup(ip("192.0.2.5"), "web", "", now).front() == "n19.example");
}
