// The loader's alerts.webhook: a URL or a mapping of settings, every error with its
// position, and no message that quotes the URL or a header value (both may be secrets).
#include "config/load.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

namespace {

using namespace cordon::config;
using namespace std::chrono_literals;

// The webhook text starts on line 3, column 1.
std::string with_alerts(const std::string& s) {
    return "listen: { proxy: 127.0.0.1:3128 }\njobs: {}\n" + s + "\n";
}

std::string dump(const load_result& r) {
    std::string out;
    for (const auto& d : r.errors) {
        out += d.to_string() + "\n";
    }
    return out;
}

TEST_CASE("webhook: a URL alone takes the defaults", "[load][webhook]") {
    const load_result r = load_policy(
        with_alerts("alerts: { webhook: \"https://hooks.example.com/x\" }"), "t.yaml");
    INFO(dump(r));
    REQUIRE(r.ok());
    REQUIRE(r.value->alerts.webhook.has_value());
    const webhook_spec& w = *r.value->alerts.webhook;
    CHECK(w.url == "https://hooks.example.com/x");
    CHECK(w.interval == 60s);
    CHECK(w.max_per_minute == 30);
    CHECK(w.timeout == 5s);
    CHECK(w.retries == 3);
    CHECK(w.burst_threshold == 10);
    CHECK(w.burst_window == 60s);
    CHECK(w.headers.empty());
}

TEST_CASE("webhook: null and absent mean none", "[load][webhook]") {
    for (const std::string s : {"alerts: { webhook: null }", "alerts: {}", ""}) {
        const load_result r = load_policy(with_alerts(s), "t.yaml");
        INFO(s << "\n" << dump(r));
        REQUIRE(r.ok());
        CHECK_FALSE(r.value->alerts.webhook.has_value());
    }
}

TEST_CASE("webhook: every setting of the mapping", "[load][webhook]") {
    const load_result r = load_policy(with_alerts(R"(alerts:
  webhook:
    url: http://127.0.0.1:9000/hook
    interval: 1s
    max_per_minute: 2
    timeout: 500ms
    retries: 0
    burst_threshold: 3
    burst_window: 10s
    headers:
      Authorization: Bearer abc
      X-Team: netops)"),
                                      "t.yaml");
    INFO(dump(r));
    REQUIRE(r.ok());
    const webhook_spec& w = *r.value->alerts.webhook;
    CHECK(w.url == "http://127.0.0.1:9000/hook");
    CHECK(w.interval == 1s);
    CHECK(w.max_per_minute == 2);
    CHECK(w.timeout == 500ms);
    CHECK(w.retries == 0);
    CHECK(w.burst_threshold == 3);
    CHECK(w.burst_window == 10s);
    REQUIRE(w.headers.size() == 2);
    CHECK(w.headers[0] == std::pair<std::string, std::string>{"Authorization", "Bearer abc"});
    CHECK(w.headers[1] == std::pair<std::string, std::string>{"X-Team", "netops"});
}

TEST_CASE("webhook: errors", "[load][webhook]") {
    struct row {
        std::string name;
        std::string yaml;
        int line;
        int column;
        std::string message;
    };
    const row rows[] = {
        {"missing url", "alerts: { webhook: { interval: 1s } }", 3, 20,
         "alerts.webhook: missing key 'url'"},
        {"unknown key", "alerts: { webhook: { url: \"http://h/\", every: 1s } }", 3, 40,
         "alerts.webhook: unknown key 'every' (expected one of: url, interval, max_per_minute, "
         "timeout, retries, burst_threshold, burst_window, headers)"},
        {"credentials in the url", "alerts: { webhook: \"https://u:SECRET@h/\" }", 3, 20,
         "alerts.webhook: URL has credentials"},
        {"url with a fragment", "alerts: { webhook: { url: \"https://h/SECRET#x\" } }", 3, 27,
         "alerts.webhook.url: URL has a fragment"},
        {"interval too short", "alerts: { webhook: { url: \"http://h/\", interval: 10ms } }", 3, 50,
         "alerts.webhook.interval: '10ms' is outside 100ms..1h"},
        {"interval not a duration", "alerts: { webhook: { url: \"http://h/\", interval: soon } }",
         3, 50, "alerts.webhook.interval: expected a duration"},
        {"timeout too long", "alerts: { webhook: { url: \"http://h/\", timeout: 2m } }", 3, 49,
         "alerts.webhook.timeout: '2m' is outside 100ms..1m"},
        {"burst_window too long", "alerts: { webhook: { url: \"http://h/\", burst_window: 2h } }",
         3, 54, "alerts.webhook.burst_window: '2h' is outside 100ms..1h"},
        {"max_per_minute 0", "alerts: { webhook: { url: \"http://h/\", max_per_minute: 0 } }", 3,
         56, "alerts.webhook.max_per_minute: 0 is out of range; expected a count 1..6000"},
        {"retries 11", "alerts: { webhook: { url: \"http://h/\", retries: 11 } }", 3, 49,
         "alerts.webhook.retries: 11 is out of range; expected a count 0..10"},
        {"burst_threshold 1001",
         "alerts: { webhook: { url: \"http://h/\", burst_threshold: 1001 } }", 3, 57,
         "alerts.webhook.burst_threshold: 1001 is out of range; expected a count 1..1000"},
        {"headers a list", "alerts: { webhook: { url: \"http://h/\", headers: [a] } }", 3, 49,
         "alerts.webhook.headers: expected a mapping, got a list"},
        {"header name", "alerts: { webhook: { url: \"http://h/\", headers: { \"a b\": x } } }", 3,
         51, "alerts.webhook.headers: 'a b' is not a header name"},
        {"reserved header",
         "alerts: { webhook: { url: \"http://h/\", headers: { Content-Length: 1 } } }", 3, 51,
         "alerts.webhook.headers.Content-Length: cordon sets this header itself"},
        {"header twice",
         "alerts: { webhook: { url: \"http://h/\", headers: { X-A: SECRET, x-a: SECRET } } }", 3,
         64, "alerts.webhook.headers.x-a: header given twice"},
        {"header value a list",
         "alerts: { webhook: { url: \"http://h/\", headers: { X-A: [SECRET] } } }", 3, 56,
         "alerts.webhook.headers.X-A: expected a string, got a list"},
        {"header value with a line break",
         "alerts: { webhook: { url: \"http://h/\", headers: { X-A: \"SECRET\\r\\nX: y\" } } }", 3,
         56, "alerts.webhook.headers.X-A: the value must be 1..8192 characters"},
    };
    for (const auto& c : rows) {
        DYNAMIC_SECTION(c.name) {
            const load_result r = load_policy(with_alerts(c.yaml), "t.yaml");
            INFO(c.yaml << "\n" << dump(r));
            CHECK_FALSE(r.ok());
            REQUIRE(r.errors.size() == 1);
            CHECK(r.errors[0].line == c.line);
            CHECK(r.errors[0].column == c.column);
            CHECK_THAT(r.errors[0].message, Catch::Matchers::StartsWith(c.message));
            CHECK(r.errors[0].message.find("SECRET") == std::string::npos);
        }
    }
}

}  // namespace
