// denial_notifier without a receiver: what it says when configured (the URL's origin, never
// its path, query or header values); that submit() is a no-op before configure(), and
// that bursts are counted without a webhook, weighted by the count of an event.
#include "proxy/alerts/webhook.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::alerts;

// Captures std::cerr while alive.
class capture_cerr {
public:
    capture_cerr() : old_(std::cerr.rdbuf(out_.rdbuf())) {}
    ~capture_cerr() { std::cerr.rdbuf(old_); }
    capture_cerr(const capture_cerr&) = delete;
    capture_cerr& operator=(const capture_cerr&) = delete;
    std::string text() const { return out_.str(); }

private:
    std::ostringstream out_;
    std::streambuf* old_;
};

TEST_CASE("denial_notifier: says where alerts go without the URL's secrets", "[webhook]") {
    cordon::config::webhook_spec spec;
    spec.url = "https://hooks.example.com:8443/services/T0/B0/PATHSECRET?token=QUERYSECRET";
    spec.headers = {{"Authorization", "Bearer HEADERSECRET"}};
    std::string said;
    {
        capture_cerr cap;
        denial_notifier n({});
        CHECK_FALSE(n.enabled());
        n.configure(spec);
        CHECK(n.enabled());
        n.configure(spec);  // a reload that changes nothing says nothing
        spec.url = "http://127.0.0.1:9/OTHERSECRET";
        n.configure(spec);
        n.configure(std::nullopt);
        CHECK_FALSE(n.enabled());
        n.stop(std::chrono::milliseconds(0));
        said = cap.text();
    }
    INFO(said);
    CHECK_THAT(said, Catch::Matchers::Contains("denial alerts go to https://hooks.example.com:8443 "
                                               "(one per session per 1m, at most 30 a minute; "
                                               "a burst is 10 denials within 1m)"));
    CHECK_THAT(said, Catch::Matchers::Contains("denial alerts go to http://127.0.0.1:9 "));
    CHECK_THAT(said, Catch::Matchers::Contains("webhook: off"));
    for (const char* secret :
         {"PATHSECRET", "QUERYSECRET", "HEADERSECRET", "OTHERSECRET", "services", "token"}) {
        CHECK(said.find(secret) == std::string::npos);
    }
    std::size_t lines = 0;
    for (const char c : said) {
        lines += c == '\n' ? 1 : 0;
    }
    CHECK(lines == 3);
}

TEST_CASE("denial_notifier: submit before configure() is a no-op", "[webhook]") {
    std::atomic<int> bursts{0};
    denial_notifier n({[&](const std::string&) { ++bursts; }, {}});
    for (int i = 0; i < 100; ++i) {
        n.submit("job", "s-1", "no_rule", "evil.example:443", "connect");
    }
    CHECK(n.dropped() == 0);
    CHECK(n.delivered() == 0);
    n.stop(std::chrono::milliseconds(0));
    n.submit("job", "s-1", "no_rule", "evil.example:443", "connect");  // after stop: still fine
    CHECK(bursts == 0);
}

TEST_CASE("denial_notifier: bursts are counted without a webhook", "[webhook]") {
    std::mutex mu;
    std::vector<std::string> jobs;  // on_burst runs on the notifier's thread
    auto burst_jobs = [&] {
        std::lock_guard lock(mu);
        return jobs;
    };
    denial_notifier n({[&](const std::string& job) {
                           std::lock_guard lock(mu);
                           jobs.push_back(job);
                       },
                       {}});
    n.configure(std::nullopt);  // what the daemon does on a policy without alerts.webhook
    CHECK_FALSE(n.enabled());
    // Defaults: 10 denials of one session within 60 s. 9 are not a burst.
    for (int i = 0; i < 9; ++i) {
        n.submit("agent", "s-1", "no_rule", "evil.example:443", "connect");
    }
    n.submit("agent", "s-2", "no_rule", "evil.example:443", "connect", 0);  // nothing
    n.submit("agent", "s-2", "no_rule", "evil.example:443", "connect", 9);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // > 5 ticks of 50 ms
    CHECK(burst_jobs().empty());
    n.submit("agent", "s-1", "no_rule", "evil.example:443", "connect");  // the 10th
    n.submit("other", "s-3", "port", "exfil.test", "dns", 25);           // 25 at once
    for (int i = 0; i < 20; ++i) {  // the burst of s-1 goes on: not counted again
        n.submit("agent", "s-1", "no_rule", "evil.example:443", "connect");
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (burst_jobs().size() < 2 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // nothing more comes
    auto got = burst_jobs();
    std::sort(got.begin(), got.end());
    CHECK(got == std::vector<std::string>{"agent", "other"});
    CHECK(n.dropped() == 0);
    CHECK(n.delivered() == 0);
    n.stop(std::chrono::milliseconds(0));
}

TEST_CASE("denial_notifier: a full queue drops the event's whole count", "[webhook]") {
    denial_notifier n({});
    n.configure(std::nullopt);
    // The thread drains every 50 ms; a queue's worth plus more in one go overflows it.
    for (std::size_t i = 0; i < 2 * denial_notifier::queue_capacity; ++i) {
        n.submit("job", "s-1", "no_rule", "evil.example:443", "connect", 3);
    }
    if (n.dropped() == 0) {
        WARN("the notifier kept up with the flood: no drop to check");
    }
    CHECK(n.dropped() % 3 == 0);  // whole events: 3 denials each
    CHECK(n.dropped() <= 3 * 2 * denial_notifier::queue_capacity);
    n.stop(std::chrono::milliseconds(0));
}

}  // namespace
