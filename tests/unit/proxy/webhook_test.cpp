// denial_notifier without a receiver: what it says when configured (the URL's origin, never
// its path, query or header values), and that submit() is a no-op without a webhook.
#include "proxy/webhook.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>

#include <iostream>
#include <sstream>
#include <string>

namespace {

using namespace cordon::proxy;

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
    for (const char* secret : {"PATHSECRET", "QUERYSECRET", "HEADERSECRET", "OTHERSECRET",
                               "services", "token"}) {
        CHECK(said.find(secret) == std::string::npos);
    }
    std::size_t lines = 0;
    for (const char c : said) {
        lines += c == '\n' ? 1 : 0;
    }
    CHECK(lines == 3);
}

TEST_CASE("denial_notifier: submit without a webhook is a no-op", "[webhook]") {
    denial_notifier n({});
    for (int i = 0; i < 100; ++i) {
        n.submit("job", "s-1", "no_rule", "evil.example:443", "connect");
    }
    CHECK(n.dropped() == 0);
    CHECK(n.delivered() == 0);
    n.stop(std::chrono::milliseconds(0));
    n.submit("job", "s-1", "no_rule", "evil.example:443", "connect");  // after stop: still fine
}

}  // namespace
