#include "proxy/alerts/denial_table.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <thread>

#include "config/decide.hpp"

using namespace cordon::proxy;
using namespace cordon::proxy::alerts;
using namespace std::chrono_literals;

namespace {

const denial_table::time_point t0{std::chrono::seconds(1'800'000'000)};

const denial_table::entry* find(const denial_table::job_denials& j, std::string_view target) {
    for (const auto& e : j.top) {
        if (e.target == target) {
            return &e;
        }
    }
    return nullptr;
}

}  // namespace

TEST_CASE("deny reason labels: the enum's names, the resolver's, and other", "[denial_table]") {
    const auto labels = deny_reason_labels();
    CHECK(labels.size() == cordon::config::deny_reason_count - 1 + 3);
    std::set<std::string_view> unique(labels.begin(), labels.end());
    CHECK(unique.size() == labels.size());
    CHECK(unique.count("none") == 0);
    for (const auto* name :
         {"no_rule", "port", "private_address", "sni_mismatch", "kill_switch", "session_killed",
          "token_expired", "bad_request", "no_session", "qtype", "audit_unavailable"}) {
        INFO(name);
        CHECK(labels[deny_reason_label(name)] == name);
    }
    CHECK(labels[deny_reason_label("made-up")] == "other");
    CHECK(labels[deny_reason_label("")] == "other");
}

TEST_CASE("denial_table: counts per job and target, with reasons, kinds and times",
          "[denial_table]") {
    denial_table t;
    t.record("web", "evil.example:443", "no_rule", "connect", t0);
    t.record("web", "evil.example:443", "port", "http", t0 + 5s);
    t.record("web", "other.example", "no_rule", "dns", t0 + 1s);
    t.record("", "x.example:80", "auth", "http", t0 + 2s);
    t.record("ci", "a.example:22", "private_address", "connect", t0 + 3s);

    const auto all = t.snapshot();
    REQUIRE(all.size() == 3);
    CHECK(all[0].job == "(none)");  // sorted by name; '(' sorts first
    CHECK(all[1].job == "ci");
    CHECK(all[2].job == "web");
    const auto& web = all[2];
    CHECK(web.total == 3);
    REQUIRE(web.top.size() == 2);
    CHECK(web.top[0].target == "evil.example:443");  // highest count first
    CHECK(web.top[0].count == 2);
    CHECK(web.top[0].error == 0);
    CHECK(web.top[0].first_seen == t0);
    CHECK(web.top[0].last_seen == t0 + 5s);
    const auto labels = deny_reason_labels();
    CHECK(labels[web.top[0].last_reason] == "port");
    CHECK(web.top[0].reasons ==
          ((1U << deny_reason_label("no_rule")) | (1U << deny_reason_label("port"))));
    CHECK(web.top[0].kinds == 0b011);  // connect and http
    CHECK(web.top[1].kinds == 0b100);  // dns

    const auto only = t.snapshot(std::string_view("ci"));
    REQUIRE(only.size() == 1);
    CHECK(only[0].job == "ci");
    CHECK(only[0].top.at(0).target == "a.example:22");
    CHECK(t.snapshot(std::string_view("nobody")).empty());
    CHECK(t.snapshot(std::nullopt, 1)[2].top.size() == 1);
}

TEST_CASE("denial_table: bounded per job, Space-Saving keeps the heavy hitters", "[denial_table]") {
    denial_table::limits l;
    l.per_job = 4;
    denial_table t(l);
    // Two heavy targets (a third of the denials each, above total/per_job) among 1000
    // distinct one-off ones.
    for (int i = 0; i < 1000; ++i) {
        t.record("web", "heavy-a:443", "no_rule", "connect", t0 + std::chrono::seconds(i));
        t.record("web", "heavy-b:443", "port", "connect", t0 + std::chrono::seconds(i));
        t.record("web", "once-" + std::to_string(i) + ":443", "no_rule", "connect",
                 t0 + std::chrono::seconds(i));
    }
    const auto s = t.snapshot();
    REQUIRE(s.size() == 1);
    CHECK(s[0].total == 3000);
    REQUIRE(s[0].top.size() == 4);  // never more than per_job
    CHECK(s[0].top[0].target == "heavy-a:443");
    CHECK(s[0].top[0].count == 1000);
    CHECK(s[0].top[0].error == 0);
    CHECK(s[0].top[1].target == "heavy-b:443");
    CHECK(s[0].top[1].count == 1000);
    CHECK(s[0].top[1].error == 0);
    // Evicted counters: the newcomer inherits the count it replaced as its error bound.
    std::uint64_t sum = 0;
    for (const auto& e : s[0].top) {
        CHECK(e.count >= e.error);
        sum += e.count;
    }
    CHECK(sum == 3000);  // Space-Saving: the counters always add up to every denial
    const auto* last = find(s[0], "once-999:443");
    REQUIRE(last != nullptr);  // the newest target holds the evicted counter
    CHECK(last->error + 1 == last->count);
    CHECK(last->first_seen == t0 + 999s);
}

TEST_CASE("denial_table: bounded jobs and target length, printable targets", "[denial_table]") {
    denial_table::limits l;
    l.max_jobs = 3;
    l.max_target = 16;
    denial_table t(l);
    for (int j = 0; j < 10; ++j) {
        t.record("job" + std::to_string(j), "t:1", "no_rule", "connect", t0);
    }
    CHECK(t.snapshot().size() == 3);
    CHECK(t.dropped() == 7);
    t.record("job0", std::string(1000, 'a'), "no_rule", "http", t0);
    t.record("job1", "evil\x1b[2J\r\n\x7f\xff:443", "bad_request", "http", t0);
    const auto s = t.snapshot();
    CHECK(find(s[0], std::string(16, 'a')) != nullptr);
    CHECK(find(s[1], "evil?[2J????:443") != nullptr);
    CHECK(t.snapshot(std::nullopt, 0)[0].top.empty());
}

TEST_CASE("denial_table: concurrent records lose nothing", "[denial_table]") {
    denial_table::limits l;
    l.per_job = 8;
    denial_table t(l);
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&t, i] {
            for (int n = 0; n < 5000; ++n) {
                t.record(i % 2 == 0 ? "a" : "b", "h" + std::to_string(n % 20), "no_rule", "connect",
                         t0);
                if (n % 500 == 0) {
                    static_cast<void>(t.snapshot());
                }
            }
        });
    }
    for (auto& th : threads) {
        th.join();
    }
    const auto s = t.snapshot();
    REQUIRE(s.size() == 2);
    for (const auto& j : s) {
        CHECK(j.total == 10000);
        CHECK(j.top.size() == 8);
        std::uint64_t sum = 0;
        for (const auto& e : j.top) {
            sum += e.count;
        }
        CHECK(sum == 10000);
    }
}

TEST_CASE("denial_table: weighted records count as that many denials", "[denial_table]") {
    denial_table t;
    t.record("web", "evil.example", "no_rule", "dns", t0);
    t.record("web", "evil.example", "no_rule", "dns", t0 + 1s, 99);  // a second of repeats
    t.record("web", "other.example", "no_rule", "dns", t0 + 1s, 5);
    const auto all = t.snapshot("web");
    REQUIRE(all.size() == 1);
    CHECK(all[0].total == 105);
    REQUIRE(all[0].top.size() == 2);
    CHECK(all[0].top[0].target == "evil.example");
    CHECK(all[0].top[0].count == 100);
    CHECK(all[0].top[1].count == 5);
}
