// denial_bursts: coalescing windows, burst detection, the per-minute rate limit and the
// bounds on memory, driven by a fake clock (milliseconds passed in).
#include "proxy/alerts/denial_bursts.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>

#include <string>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::alerts;
using namespace std::chrono_literals;

denial_event ev(std::int64_t t, std::string session, std::string target = "evil.example:443",
                std::string reason = "no_rule", std::string job = "ticket-summarizer") {
    denial_event e;
    e.job = std::move(job);
    e.session = std::move(session);
    e.reason = std::move(reason);
    e.target = std::move(target);
    e.kind = "connect";
    e.mono_ms = t;
    e.wall_ms = 1'800'000'000'000 + t;
    return e;
}

burst_settings settings(std::int64_t interval_ms = 1000, std::uint32_t per_minute = 30,
                        std::uint32_t threshold = 3, std::int64_t window_ms = 10'000) {
    burst_settings s;
    s.interval = std::chrono::milliseconds(interval_ms);
    s.max_per_minute = per_minute;
    s.burst_threshold = threshold;
    s.burst_window = std::chrono::milliseconds(window_ms);
    return s;
}

TEST_CASE("denial_bursts: one alert per session per interval", "[denial_bursts]") {
    denial_bursts b(settings(1000, 30, 100));
    b.add(ev(0, "s-1"));
    b.add(ev(100, "s-1", "other.example:443", "port"));
    b.add(ev(200, "s-1"));
    b.add(ev(300, "s-2"));
    CHECK(b.open_windows() == 2);
    CHECK(b.next_due() == 1000);
    CHECK(b.take_due(999, 10).empty());  // not yet

    auto due = b.take_due(1000, 10);
    REQUIRE(due.size() == 1);  // s-2 opened at 300: due at 1300
    const denial_alert& a = due[0];
    CHECK(a.session == "s-1");
    CHECK(a.job == "ticket-summarizer");
    CHECK(a.denials == 3);
    REQUIRE(a.reasons.size() == 2);
    CHECK(a.reasons[0] == std::pair<std::string, std::uint64_t>{"no_rule", 2});
    CHECK(a.reasons[1] == std::pair<std::string, std::uint64_t>{"port", 1});
    REQUIRE(a.top_targets.size() == 2);
    CHECK(a.top_targets[0].target == "evil.example:443");
    CHECK(a.top_targets[0].count == 2);
    CHECK(a.first_wall_ms == 1'800'000'000'000);
    CHECK(a.last_wall_ms == 1'800'000'000'200);
    CHECK(a.window_ms == 1000);
    CHECK_FALSE(a.burst);

    due = b.take_due(1300, 10);
    REQUIRE(due.size() == 1);
    CHECK(due[0].session == "s-2");
    CHECK(due[0].denials == 1);
    CHECK(b.open_windows() == 0);
    CHECK(b.next_due() == -1);

    // A denial after the window closed opens a new one.
    b.add(ev(1500, "s-1"));
    CHECK(b.take_due(2499, 10).empty());
    due = b.take_due(2500, 10);
    REQUIRE(due.size() == 1);
    CHECK(due[0].denials == 1);
}

TEST_CASE("denial_bursts: unattributed denials coalesce per job", "[denial_bursts]") {
    denial_bursts b(settings());
    b.add(ev(0, "", "a:443", "no_rule", "lab"));
    b.add(ev(1, "", "b:443", "no_rule", "lab"));
    b.add(ev(2, "", "c:443", "no_rule", ""));
    const auto due = b.take_due(2000, 10);
    REQUIRE(due.size() == 2);
    CHECK(due[0].job == "lab");
    CHECK(due[0].denials == 2);
    CHECK(due[1].job.empty());
    CHECK(due[1].denials == 1);
}

TEST_CASE("denial_bursts: a burst is threshold denials within the window", "[denial_bursts]") {
    denial_bursts b(settings(60'000, 30, 3, 10'000));
    SECTION("three within 10 s start one burst, the flood that follows does not add more") {
        CHECK_FALSE(b.add(ev(0, "s-1")));
        CHECK_FALSE(b.add(ev(4000, "s-1")));
        CHECK(b.add(ev(9000, "s-1")));  // 3 within 9 s
        for (int i = 1; i <= 50; ++i) {
            CHECK_FALSE(b.add(ev(9000 + i * 10, "s-1")));
        }
        const auto due = b.take_due(60'000, 10);
        REQUIRE(due.size() == 1);
        CHECK(due[0].burst);
        CHECK(due[0].denials == 53);
    }
    SECTION("three spread over more than 10 s are no burst") {
        CHECK_FALSE(b.add(ev(0, "s-1")));
        CHECK_FALSE(b.add(ev(6000, "s-1")));
        CHECK_FALSE(b.add(ev(12'000, "s-1")));  // the window [2 s, 12 s] holds 2
        CHECK_FALSE(b.add(ev(18'001, "s-1")));
        const auto due = b.take_due(60'000, 10);
        REQUIRE(due.size() == 1);
        CHECK_FALSE(due[0].burst);
    }
    SECTION("exactly at the window's edge still counts") {
        b.add(ev(0, "s-1"));
        b.add(ev(5000, "s-1"));
        CHECK(b.add(ev(10'000, "s-1")));
    }
    SECTION("a burst ends when the rate drops; the next one counts again") {
        b.add(ev(0, "s-1"));
        b.add(ev(1, "s-1"));
        CHECK(b.add(ev(2, "s-1")));
        CHECK_FALSE(b.add(ev(3, "s-1")));
        CHECK_FALSE(b.add(ev(30'000, "s-1")));  // quiet for longer than the window
        CHECK_FALSE(b.add(ev(30'001, "s-1")));
        CHECK(b.add(ev(30'002, "s-1")));
    }
    SECTION("sessions are counted apart") {
        b.add(ev(0, "s-1"));
        b.add(ev(1, "s-2"));
        b.add(ev(2, "s-1"));
        CHECK_FALSE(b.add(ev(3, "s-2")));
        CHECK(b.add(ev(4, "s-1")));
        CHECK(b.add(ev(5, "s-2")));
    }
    SECTION("threshold 1: every quiet session's first denial is a burst") {
        b.configure(settings(60'000, 30, 1, 10'000));
        CHECK(b.add(ev(0, "s-9")));
        CHECK_FALSE(b.add(ev(1, "s-9")));
        CHECK(b.add(ev(20'000, "s-9")));
    }
}

TEST_CASE("denial_bursts: at most max_per_minute alerts in any minute", "[denial_bursts]") {
    denial_bursts b(settings(1000, 2, 100));
    for (int i = 0; i < 5; ++i) {
        b.add(ev(i, "s-" + std::to_string(i)));
    }
    auto due = b.take_due(1004, 10);
    REQUIRE(due.size() == 2);  // the two oldest windows
    CHECK(due[0].session == "s-0");
    CHECK(due[1].session == "s-1");
    CHECK(b.rate_limited() == 3);
    // The others stay open and keep counting.
    b.add(ev(20'000, "s-2"));
    CHECK(b.take_due(30'000, 10).empty());
    CHECK(b.open_windows() == 3);
    // Slots free 60 s after the first two were taken.
    due = b.take_due(61'005, 10);
    REQUIRE(due.size() == 2);
    CHECK(due[0].session == "s-2");
    CHECK(due[0].denials == 2);
    CHECK(due[1].session == "s-3");
    CHECK(b.take_due(61'006, 10).empty());
    CHECK(b.take_due(121'006, 10).size() == 1);
}

TEST_CASE("rate_limiter: a sliding minute", "[denial_bursts]") {
    rate_limiter r(3);
    CHECK(r.try_take(0));
    CHECK(r.try_take(10));
    CHECK(r.try_take(20));
    CHECK_FALSE(r.try_take(30));
    CHECK(r.next_free(30) == 60'001);
    CHECK_FALSE(r.try_take(59'999));
    CHECK(r.try_take(60'000));  // the first slot (t=0) is a minute old
    CHECK_FALSE(r.try_take(60'005));
    r.set_limit(5);
    CHECK(r.try_take(60'005));
    CHECK(r.try_take(60'006));
    CHECK_FALSE(r.try_take(60'007));
}

TEST_CASE("denial_bursts: max per call, take_all, and bounded memory", "[denial_bursts]") {
    SECTION("windows opened in the same millisecond go in the order they opened") {
        denial_bursts b(settings(1000, 3, 100));
        for (const char* s : {"s-c", "s-a", "s-e", "s-b", "s-d"}) {
            b.add(ev(0, s));
        }
        const auto due = b.take_due(1000, 10);
        REQUIRE(due.size() == 3);
        CHECK(due[0].session == "s-c");
        CHECK(due[1].session == "s-a");
        CHECK(due[2].session == "s-e");
    }
    SECTION("max limits one call; the rest stay due") {
        denial_bursts b(settings());
        for (int i = 0; i < 5; ++i) {
            b.add(ev(i, "s-" + std::to_string(i)));
        }
        CHECK(b.take_due(5000, 3).size() == 3);
        CHECK(b.take_due(5000, 3).size() == 2);
    }
    SECTION("take_all closes windows that are not due yet") {
        denial_bursts b(settings(60'000));
        b.add(ev(0, "s-1"));
        b.add(ev(10, "s-2"));
        const auto all = b.take_all(100, 10);
        REQUIRE(all.size() == 2);
        CHECK(all[0].window_ms == 100);
        CHECK(b.open_windows() == 0);
    }
    SECTION("tracked sessions are bounded; idle ones are forgotten") {
        burst_settings s = settings(1000, 6000, 3, 1000);
        s.max_keys = 4;
        denial_bursts b(s);
        for (int i = 0; i < 6; ++i) {
            b.add(ev(i, "s-" + std::to_string(i)));
        }
        CHECK(b.tracked() == 4);
        CHECK(b.untracked() == 2);
        const auto due = b.take_due(1010, 10);
        REQUIRE(due.size() == 4);
        CHECK(due[0].dropped == 2);  // the next alert says how many were not counted
        CHECK(due[1].dropped == 0);
        b.take_due(5000, 10);
        CHECK(b.tracked() == 0);  // idle longer than interval and burst_window
        b.add(ev(5001, "s-new"));
        CHECK(b.tracked() == 1);
    }
    SECTION("distinct targets and reasons per window are bounded") {
        burst_settings s = settings();
        s.max_targets = 4;
        s.max_reasons = 2;
        s.top_targets = 2;
        denial_bursts b(s);
        for (int i = 0; i < 10; ++i) {
            b.add(ev(i, "s-1", "t" + std::to_string(i % 6) + ":443",
                     i < 8 ? "no_rule" : (i == 8 ? "port" : "private_address")));
        }
        const auto due = b.take_due(2000, 10);
        REQUIRE(due.size() == 1);
        CHECK(due[0].denials == 10);
        REQUIRE(due[0].top_targets.size() == 2);
        CHECK(due[0].top_targets[0].count == 2);  // t0, t1 (t4, t5 fold into "other")
        CHECK(due[0].other_targets == 6);
        std::uint64_t sum = 0;
        for (const auto& [r, n] : due[0].reasons) {
            sum += n;
        }
        CHECK(due[0].reasons.size() == 2);
        CHECK(sum == 10);
    }
    SECTION("dropped denials are reported once") {
        denial_bursts b(settings());
        b.count_dropped(7);
        b.add(ev(0, "s-1"));
        b.add(ev(0, "s-2"));
        const auto due = b.take_due(2000, 10);
        REQUIRE(due.size() == 2);
        CHECK(due[0].dropped + due[1].dropped == 7);
    }
}

denial_event weighted(std::int64_t t, std::string session, std::uint64_t count,
                      std::string target = "evil.example:443", std::string reason = "no_rule") {
    denial_event e = ev(t, std::move(session), std::move(target), std::move(reason));
    e.count = count;
    return e;
}

TEST_CASE("denial_bursts: an event with a count stands for that many denials", "[denial_bursts]") {
    denial_bursts b(settings(60'000, 30, 3, 10'000));  // a burst: 3 within 10 s
    SECTION("count reaching the threshold at once starts a burst, once") {
        CHECK(b.add(weighted(0, "s-1", 5)));
        CHECK_FALSE(b.add(weighted(1, "s-1", 50)));  // the same burst goes on
        const auto due = b.take_due(60'000, 10);
        REQUIRE(due.size() == 1);
        CHECK(due[0].burst);
        CHECK(due[0].denials == 55);
        REQUIRE(due[0].reasons.size() == 1);
        CHECK(due[0].reasons[0] == std::pair<std::string, std::uint64_t>{"no_rule", 55});
        REQUIRE(due[0].top_targets.size() == 1);
        CHECK(due[0].top_targets[0].count == 55);
    }
    SECTION("counts add up with single denials within the window") {
        CHECK_FALSE(b.add(weighted(0, "s-1", 2)));
        CHECK(b.add(ev(9000, "s-1")));  // 2 at 0 s + 1 at 9 s
    }
    SECTION("a count's denials all happen at the event's time: they age out together") {
        CHECK(b.add(weighted(0, "s-1", 1000)));          // 3 entries of the ring at 0 s, not 1000
        CHECK_FALSE(b.add(weighted(10'001, "s-1", 2)));  // ring 0, 10.001, 10.001: 10.001 s
        CHECK(b.add(ev(10'002, "s-1")));                 // now 3 within 1 ms
    }
    SECTION("below the threshold is no burst, however the denials are spread") {
        CHECK_FALSE(b.add(weighted(0, "s-1", 2)));
        CHECK_FALSE(b.add(weighted(10'001, "s-1", 2)));  // ring 0, 10.001, 10.001
        const auto due = b.take_due(60'000, 10);
        REQUIRE(due.size() == 1);
        CHECK_FALSE(due[0].burst);
        CHECK(due[0].denials == 4);
    }
    SECTION("a full ring wrapped by a count: the oldest is still the right one") {
        CHECK_FALSE(b.add(ev(0, "s-1")));
        CHECK_FALSE(b.add(ev(5000, "s-1")));
        CHECK_FALSE(b.add(ev(20'000, "s-1")));  // ring full: 0, 5, 20
        CHECK_FALSE(b.add(ev(21'000, "s-1")));  // 21, 5, 20: 16 s apart
        // 2 at 25 s overwrite 5 and 20, past the ring's end: 21, 25, 25 within 4 s.
        CHECK(b.add(weighted(25'000, "s-1", 2)));
    }
    SECTION("count 0 is nothing") {
        CHECK_FALSE(b.add(weighted(0, "s-1", 0)));
        CHECK(b.tracked() == 0);
        CHECK(b.open_windows() == 0);
    }
    SECTION("reasons and targets beyond the bounds fold with their counts") {
        burst_settings s = settings();
        s.max_targets = 1;
        s.max_reasons = 1;
        b.configure(s);
        b.add(weighted(0, "s-1", 4, "a:443", "no_rule"));
        b.add(weighted(1, "s-1", 6, "b:443", "port"));
        b.add(weighted(2, "s-1", 3, "c:443", "sni_mismatch"));
        const auto due = b.take_due(2000, 10);
        REQUIRE(due.size() == 1);
        CHECK(due[0].denials == 13);
        REQUIRE(due[0].reasons.size() == 1);
        CHECK(due[0].reasons[0] == std::pair<std::string, std::uint64_t>{"other", 13});
        REQUIRE(due[0].top_targets.size() == 1);
        CHECK(due[0].top_targets[0].count == 4);
        CHECK(due[0].other_targets == 9);
    }
    SECTION("an untracked event counts all its denials as dropped") {
        burst_settings s = settings(1000, 30, 3, 1000);
        s.max_keys = 1;
        b.configure(s);
        b.add(ev(0, "s-1"));
        b.add(weighted(1, "s-2", 7));
        CHECK(b.untracked() == 7);
        const auto due = b.take_due(1000, 10);
        REQUIRE(due.size() == 1);
        CHECK(due[0].dropped == 7);
    }
}

TEST_CASE("denial_bursts: without windows (no webhook) only bursts are counted",
          "[denial_bursts]") {
    burst_settings s = settings(1000, 30, 3, 10'000);
    s.windows = false;
    denial_bursts b(s);
    SECTION("bursts are detected; no window opens, nothing falls due") {
        CHECK_FALSE(b.add(ev(0, "s-1")));
        CHECK_FALSE(b.add(ev(1, "s-1")));
        CHECK(b.add(ev(2, "s-1")));
        CHECK_FALSE(b.add(ev(3, "s-1")));
        CHECK(b.add(weighted(4, "s-2", 3)));
        CHECK(b.open_windows() == 0);
        CHECK(b.next_due() == -1);
        CHECK(b.take_due(100'000, 10).empty());
        CHECK(b.take_all(100'000, 10).empty());
    }
    SECTION("idle sessions are forgotten after burst_window") {
        b.add(ev(0, "s-1"));
        b.add(ev(0, "s-2"));
        b.forget_idle(10'000);
        CHECK(b.tracked() == 2);
        b.forget_idle(10'001);
        CHECK(b.tracked() == 0);
    }
    SECTION("drops are not kept for a later alert") {
        b.count_dropped(5);
        s.windows = true;
        b.configure(s);
        b.add(ev(0, "s-1"));
        const auto due = b.take_due(1000, 10);
        REQUIRE(due.size() == 1);
        CHECK(due[0].dropped == 0);
    }
    SECTION("turning windows off discards open ones and keeps the burst going") {
        s.windows = true;
        b.configure(s);
        b.add(ev(0, "s-1"));
        b.add(ev(1, "s-1"));
        b.count_dropped(4);
        CHECK(b.open_windows() == 1);
        s.windows = false;
        b.configure(s);
        CHECK(b.open_windows() == 0);
        CHECK(b.add(ev(2, "s-1")));  // the history of 0 and 1 ms is kept
        s.windows = true;
        b.configure(s);
        b.add(ev(3, "s-1"));
        const auto due = b.take_due(1003, 10);
        REQUIRE(due.size() == 1);
        CHECK(due[0].denials == 1);
        CHECK(due[0].dropped == 0);
        CHECK(due[0].burst);
    }
}

TEST_CASE("denial_event::bound cuts long fields", "[denial_bursts]") {
    denial_event e = ev(0, std::string(1000, 's'), std::string(1000, 't'));
    e.bound();
    CHECK(e.session.size() == 128);
    CHECK(e.target.size() == 256);
}

}  // namespace
