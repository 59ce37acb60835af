#include "dns/repeats.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

using namespace cordon::dns;
using namespace std::chrono_literals;
using clock_type = repeat_filter::clock;

namespace {

cordon::config::ip_address addr(const char* text) { return *cordon::config::parse_ip(text); }

question q(std::string name, std::uint16_t type = type_a) {
    return question{std::move(name), type, class_in};
}

verdict deny(std::string reason = "no_rule", std::string job = "web") {
    return verdict{false, std::move(reason), std::move(job), {}};
}

struct written {
    std::string name;
    std::uint64_t repeats;
};

std::vector<written> expire(repeat_filter& f, clock_type::time_point now, bool force = false) {
    std::vector<written> out;
    f.expire(
        now,
        [&](const repeat_filter::entry& e) {
            out.push_back({e.q.name, e.repeats});
        },
        force);
    return out;
}

}  // namespace

TEST_CASE("repeats: the first of a kind is written, identical ones counted", "[repeats]") {
    repeat_filter f(1s);
    const auto t0 = clock_type::time_point{} + 100s;
    const auto c = addr("127.0.0.1");
    CHECK(f.admit(c, q("x.test"), deny(), rcode::refused, false, t0));
    for (int i = 0; i < 9; ++i) {
        CHECK_FALSE(f.admit(c, q("x.test"), deny(), rcode::refused, false, t0 + 10ms));
    }
    CHECK(expire(f, t0 + 999ms).empty());  // window not over
    const auto lines = expire(f, t0 + 1s);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].name == "x.test");
    CHECK(lines[0].repeats == 9);
    CHECK(f.size() == 0);
    // A new window: written again at once.
    CHECK(f.admit(c, q("x.test"), deny(), rcode::refused, false, t0 + 2s));
}

TEST_CASE("repeats: any difference makes another kind", "[repeats]") {
    repeat_filter f(1s);
    const auto t = clock_type::time_point{} + 5s;
    const auto c = addr("127.0.0.1");
    REQUIRE(f.admit(c, q("x.test"), deny(), rcode::refused, false, t));
    CHECK(f.admit(addr("127.0.0.2"), q("x.test"), deny(), rcode::refused, false, t));
    CHECK(f.admit(addr("::1"), q("x.test"), deny(), rcode::refused, false, t));
    CHECK(f.admit(c, q("y.test"), deny(), rcode::refused, false, t));
    CHECK(f.admit(c, q("x.test", type_aaaa), deny(), rcode::refused, false, t));
    CHECK(f.admit(c, q("x.test"), deny("qtype"), rcode::refused, false, t));
    CHECK(f.admit(c, q("x.test"), deny("no_rule", "other"), rcode::refused, false, t));
    CHECK(f.admit(c, q("x.test"), deny(), rcode::nxdomain, false, t));
    verdict with_session = deny();
    with_session.session = "s-1";
    CHECK(f.admit(c, q("x.test"), with_session, rcode::refused, false, t));
    const verdict allow{true, {}, "web", {}};
    CHECK(f.admit(c, q("x.test"), allow, rcode::noerror, false, t));
    CHECK(f.admit(c, q("x.test"), allow, rcode::noerror, true, t));  // cached differs
    CHECK(f.size() <= 11);  // a kind whose hash is taken is written, not tracked
    CHECK_FALSE(f.admit(c, q("x.test"), deny(), rcode::refused, false, t));  // still coalesced
    const auto lines = expire(f, t + 1s);
    REQUIRE(lines.size() == 1);  // only the repeated kind has a count line
    CHECK(lines[0].repeats == 1);
}

TEST_CASE("repeats: bounded; untracked kinds are written every time", "[repeats]") {
    repeat_filter f(1s, 3);
    const auto t = clock_type::time_point{} + 5s;
    const auto c = addr("127.0.0.1");
    for (const char* n : {"a.test", "b.test", "c.test"}) {
        CHECK(f.admit(c, q(n), deny(), rcode::refused, false, t));
    }
    CHECK(f.admit(c, q("d.test"), deny(), rcode::refused, false, t));
    CHECK(f.admit(c, q("d.test"), deny(), rcode::refused, false, t));  // not tracked
    CHECK_FALSE(f.admit(c, q("a.test"), deny(), rcode::refused, false, t));
    CHECK(f.size() == 3);
}

TEST_CASE("repeats: force ends the window; a zero window turns coalescing off", "[repeats]") {
    repeat_filter f(1s);
    const auto t = clock_type::time_point{} + 5s;
    const auto c = addr("127.0.0.1");
    REQUIRE(f.admit(c, q("x.test"), deny(), rcode::refused, false, t));
    REQUIRE_FALSE(f.admit(c, q("x.test"), deny(), rcode::refused, false, t));
    const auto lines = expire(f, t, true);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0].repeats == 1);

    repeat_filter off(0s);
    for (int i = 0; i < 3; ++i) {
        CHECK(off.admit(c, q("x.test"), deny(), rcode::refused, false, t));
    }
    CHECK(off.size() == 0);
}
