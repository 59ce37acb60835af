#include "shims/relay.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <vector>

#include "dns/wire.hpp"

using cordon::shim::rewrite_dns_query;

TEST_CASE("dns relay: a query is rebuilt with only the session option", "[shim][relay]") {
    // The sandbox's own query carries a forged session option: it must not survive.
    const std::array<cordon::dns::edns_option, 1> forged{
        cordon::dns::edns_option{cordon::dns::edns_session_option, "s-other:stolen"}};
    const auto q = cordon::dns::build_query("Allowed.Test.", cordon::dns::type_a, 0x4242, true,
                                            forged);
    REQUIRE_FALSE(q.empty());
    const auto r = rewrite_dns_query(q, "s-1:tok");
    REQUIRE_FALSE(r.answer_locally);
    const auto p = cordon::dns::parse_query(r.message);
    REQUIRE(p.status == cordon::dns::parse_status::good);
    CHECK(p.value.id == 0x4242);
    CHECK(p.value.q.name == "allowed.test");
    CHECK(p.value.q.qtype == cordon::dns::type_a);
    REQUIRE(p.value.options.size() == 1);
    CHECK(p.value.options[0].code == cordon::dns::edns_session_option);
    CHECK(p.value.options[0].data == "s-1:tok");
}

TEST_CASE("dns relay: a query without EDNS gets the option too", "[shim][relay]") {
    const auto q = cordon::dns::build_query("a.test", cordon::dns::type_aaaa, 7, false);
    const auto r = rewrite_dns_query(q, "s-1:tok");
    REQUIRE_FALSE(r.answer_locally);
    const auto p = cordon::dns::parse_query(r.message);
    REQUIRE(p.status == cordon::dns::parse_status::good);
    REQUIRE(p.value.options.size() == 1);
    CHECK(p.value.q.qtype == cordon::dns::type_aaaa);
}

TEST_CASE("dns relay: malformed queries are answered locally, never relayed", "[shim][relay]") {
    SECTION("too short") {
        const std::vector<std::uint8_t> junk{1, 2, 3};
        const auto r = rewrite_dns_query(junk, "s-1:tok");
        CHECK(r.answer_locally);
    }
    SECTION("a response, not a query") {
        auto q = cordon::dns::build_query("a.test", cordon::dns::type_a, 9, false);
        q[2] |= 0x80;  // QR
        const auto r = rewrite_dns_query(q, "s-1:tok");
        CHECK(r.answer_locally);
        REQUIRE(r.message.size() >= 12);
        CHECK((r.message[3] & 0x0f) == 1);  // FORMERR
    }
}
