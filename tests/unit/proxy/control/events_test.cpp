#include "proxy/control/events.hpp"

#include <catch2/catch.hpp>

#include <map>

using namespace cordon::proxy;
using namespace cordon::proxy::control;
namespace net = boost::asio;
using cordon::awaitable;
using cordon::error_code;

TEST_CASE("event_bus: ids increase; since() filters by session and id", "[events]") {
    std::map<std::uint64_t, event> stored;
    std::uint64_t next = 41;
    event_bus bus(
        [&](const event& e) {
            stored[++next] = e;
            return next;
        },
        41);
    CHECK(bus.last_id() == 41);
    const auto a = bus.publish("kill.session", "s-1", "{}");
    const auto b = bus.publish("kill.network", "", "{}");
    const auto c = bus.publish("token.revoke", "s-2", "{}");
    CHECK(a == 42);
    CHECK(b == 43);
    CHECK(c == 44);
    CHECK(stored.size() == 3);

    bool complete = false;
    auto all = bus.since(41, "", complete);
    CHECK(complete);
    REQUIRE(all.size() == 3);
    CHECK(all[0].type == "kill.session");

    auto s1 = bus.since(41, "s-1", complete);
    REQUIRE(s1.size() == 2);  // its own, and the network kill that concerns everyone
    CHECK(s1[0].id == 42);
    CHECK(s1[1].id == 43);

    CHECK(bus.since(44, "", complete).empty());
    CHECK(complete);
}

TEST_CASE("event_bus: older events than memory holds are reported incomplete", "[events]") {
    event_bus bus({}, 100);  // restarted: events up to 100 are only in the store
    bool complete = true;
    CHECK(bus.since(90, "", complete).empty());
    CHECK_FALSE(complete);
    CHECK(bus.since(100, "", complete).empty());
    CHECK(complete);
    CHECK(bus.publish("revive", "", "{}") == 101);  // without a store ids still increase
    auto after = bus.since(100, "", complete);
    CHECK(complete);
    REQUIRE(after.size() == 1);
    CHECK(after[0].id == 101);
}

TEST_CASE("event_bus: a failed persist still gives a strictly increasing id", "[events]") {
    event_bus bus([](const event&) { return std::uint64_t{0}; }, 7);
    CHECK(bus.publish("a", "", "{}") == 8);
    CHECK(bus.publish("b", "", "{}") == 9);
}

TEST_CASE("event_bus: wait() wakes on publish and times out otherwise", "[events]") {
    net::io_context ioc;
    event_bus bus({}, 0);
    bool woke = false;
    net::co_spawn(
        ioc,
        [&]() -> awaitable<void> {
            co_await bus.wait(0, std::chrono::seconds(30));
            woke = bus.last_id() == 1;
        },
        net::detached);
    net::steady_timer t(ioc, std::chrono::milliseconds(10));
    t.async_wait([&](error_code) { bus.publish("kill.network", "", "{}"); });
    const auto t0 = std::chrono::steady_clock::now();
    ioc.run();
    CHECK(woke);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));

    ioc.restart();
    bool returned = false;
    net::co_spawn(
        ioc,
        [&]() -> awaitable<void> {
            co_await bus.wait(1, std::chrono::milliseconds(20));
            returned = true;
        },
        net::detached);
    ioc.run();
    CHECK(returned);
}

TEST_CASE("parse_event_id: decimal digits that fit, nothing else", "[events]") {
    CHECK(parse_event_id("0") == 0u);
    CHECK(parse_event_id("42") == 42u);
    CHECK(parse_event_id("18446744073709551615") == UINT64_MAX);
    // std::stoull read "-1" as 2^64 - 1: a stream deaf for good (issue 18).
    for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1x", "0x10", "18446744073709551616",
                            "99999999999999999999", "1.0"}) {
        INFO(bad);
        CHECK_FALSE(parse_event_id(bad));
    }
}

TEST_CASE("resume_lost: ids a stream cannot resume from", "[events]") {
    event_bus bus({}, 100);  // a store that held 100 events before a restart
    for (int i = 0; i < 5000; ++i) {
        bus.publish("token.revoke", "s", "{}");  // memory keeps the last 4096: 1005..5100
    }
    REQUIRE(bus.last_id() == 5100);
    std::uint64_t asked = 0;
    const std::function<std::uint64_t(std::uint64_t)> store_holds_all =
        [&asked](std::uint64_t after) {
            asked = after;
            return after + 1;
        };
    const std::function<std::uint64_t(std::uint64_t)> store_pruned = [](std::uint64_t) {
        return std::uint64_t{3000};
    };
    CHECK(resume_lost(std::nullopt, bus, store_holds_all) == "malformed");
    CHECK(resume_lost(5101, bus, store_holds_all) == "ahead");  // the store was reset
    CHECK(resume_lost(UINT64_MAX, bus, store_holds_all) == "ahead");
    CHECK(resume_lost(5100, bus, store_holds_all).empty());
    CHECK(resume_lost(1004, bus, store_holds_all).empty());  // memory reaches back to it
    CHECK(asked == 0);                                       // without asking the store
    CHECK(resume_lost(10, bus, store_holds_all).empty());    // the store has 11 on
    CHECK(asked == 10);
    CHECK(resume_lost(10, bus, store_pruned) == "gone");
    CHECK(resume_lost(10, bus, {}) == "gone");  // no store
}
