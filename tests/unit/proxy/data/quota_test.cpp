// Tests of the session quota: tunnel slots (max_tunnels) and the upload budget
// (max_bytes_up), shared by the connections of one session.
#include "proxy/data/quota.hpp"

#include <catch2/catch.hpp>

#include <memory>

namespace {

using namespace cordon;
using namespace cordon::proxy;
using namespace cordon::proxy::data;

config::job_limits limits(std::optional<std::uint32_t> tunnels,
                          std::optional<std::uint64_t> bytes) {
    config::job_limits l;
    l.max_tunnels = tunnels;
    l.max_bytes_up = bytes;
    return l;
}

}  // namespace

TEST_CASE("quota: without a session nothing is counted or refused", "[quota]") {
    session_quota q;
    const auto l = limits(0, 0);
    CHECK(q.take_tunnel(l));
    CHECK_FALSE(q.budget_left(l));
    CHECK_FALSE(q.budget_spent(l));
    CHECK(q.admit_chunk(l, 1 << 20));
    CHECK(q.admit_up(l, 4096) == 4096);
}

TEST_CASE("quota: tunnel slots are shared by the session and given back", "[quota]") {
    const auto usage = std::make_shared<control::session_usage>();
    const auto l = limits(2, std::nullopt);
    auto a = std::make_unique<session_quota>();
    auto b = std::make_unique<session_quota>();
    session_quota c;
    a->attach(usage);
    b->attach(usage);
    c.attach(usage);
    CHECK(a->take_tunnel(l));
    CHECK(b->take_tunnel(l));
    CHECK(usage->tunnels == 2);
    CHECK_FALSE(c.take_tunnel(l));  // limit
    CHECK(usage->tunnels == 2);
    a.reset();  // the connection ended: its slot is free
    CHECK(usage->tunnels == 1);
    CHECK(c.take_tunnel(l));
    b->release_tunnel();
    b->release_tunnel();  // once only
    CHECK(usage->tunnels == 1);
    SECTION("no max_tunnels: always a slot, still counted") {
        session_quota d;
        d.attach(usage);
        CHECK(d.take_tunnel(limits(std::nullopt, std::nullopt)));
        CHECK(usage->tunnels == 2);
    }
}

TEST_CASE("quota: the upload budget", "[quota]") {
    const auto usage = std::make_shared<control::session_usage>();
    session_quota q;
    q.attach(usage);
    const auto l = limits(std::nullopt, 1000);
    REQUIRE(q.budget_left(l));
    CHECK(*q.budget_left(l) == 1000);
    SECTION("forwarded chunks: one that does not fit is refused and not counted") {
        CHECK(q.admit_chunk(l, 600));
        CHECK(*q.budget_left(l) == 400);
        CHECK_FALSE(q.admit_chunk(l, 401));
        CHECK(usage->bytes_up == 600);
        CHECK(q.admit_chunk(l, 400));
        CHECK(q.budget_spent(l));
        CHECK_FALSE(q.admit_chunk(l, 1));
    }
    SECTION("tunnel bytes: what is over the budget may not pass") {
        CHECK(q.admit_up(l, 700) == 700);
        CHECK(q.admit_up(l, 700) == 300);  // the relay ends: fewer than asked
        CHECK(q.admit_up(l, 10) == 0);
        CHECK(q.budget_spent(l));
    }
    SECTION("spent by another connection of the session") {
        usage->bytes_up = 1000;
        CHECK(q.budget_spent(l));
        CHECK(q.admit_up(l, 1) == 0);
    }
    SECTION("unlimited job: counted by forwarding, never refused") {
        const auto none = limits(std::nullopt, std::nullopt);
        CHECK(q.admit_chunk(none, 5000));
        CHECK(usage->bytes_up == 5000);
        CHECK(q.admit_up(none, 5000) == 5000);
        CHECK_FALSE(q.budget_left(none));
    }
}
