#include "config/mode.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/load.hpp"

using namespace cordon::config;

namespace {

constexpr std::string_view policy_text = R"(listen: { proxy: 127.0.0.1:3128 }
jobs:
  learner:
    task: learn an allowlist
    mode: report
    egress:
      - { host: api.example.com, ports: [443] }
      - { host: wiki.corp.example, ports: [80], protocol: http, methods: [GET],
          resolves_to: [10.20.0.0/16] }
      - { cidr: 10.9.0.0/16, ports: [22], protocol: tcp }
  strict:
    task: the same, enforced
    egress:
      - { host: api.example.com, ports: [443] }
)";

std::shared_ptr<const compiled_policy> load() {
    load_result r = load_policy(policy_text, "mode.yaml");
    for (const auto& e : r.errors) {
        FAIL(e.to_string());
    }
    return compile(std::move(*r.value));
}

struct row {
    std::string job;
    std::string host;
    std::uint16_t port;
    request_kind kind;
    std::string method;
    deny_reason effective;   // what the proxy does
    deny_reason would_deny;  // what enforce mode would have said, when relaxed
};

}  // namespace

TEST_CASE("report mode: which denials are relaxed", "[mode]") {
    const auto p = load();
    using R = deny_reason;
    constexpr auto C = request_kind::connect;
    constexpr auto H = request_kind::http;
    const std::vector<row> table{
        // Allowed requests are the same in both modes.
        {"learner", "api.example.com", 443, C, "", R::none, R::none},
        {"strict", "api.example.com", 443, C, "", R::none, R::none},
        // The allowlist's own answers are relaxed in report mode only.
        {"learner", "other.example.net", 443, C, "", R::none, R::no_rule},
        {"strict", "other.example.net", 443, C, "", R::no_rule, R::none},
        {"learner", "api.example.com", 8443, C, "", R::none, R::port},
        {"strict", "api.example.com", 8443, C, "", R::port, R::none},
        {"learner", "api.example.com", 443, H, "GET", R::none, R::protocol},
        {"learner", "wiki.corp.example", 80, H, "POST", R::none, R::method},
        {"learner", "93.184.216.34", 443, C, "", R::none, R::no_rule},
        // Never relaxed: non-public literals (whatever the reason), bad requests, unknown
        // jobs.
        {"learner", "127.0.0.1", 443, C, "", R::private_address, R::none},
        {"learner", "169.254.169.254", 80, H, "GET", R::private_address, R::none},
        // Its cidr rule opens the range on port 22 only: never lent to other ports.
        {"learner", "10.9.1.1", 443, C, "", R::private_address, R::none},
        {"learner", "10.8.1.1", 22, C, "", R::private_address, R::none},
        {"learner", "::1", 443, C, "", R::private_address, R::none},
        {"learner", "bad..name", 443, C, "", R::bad_request, R::none},
        {"learner", "api.example.com", 0, C, "", R::bad_request, R::none},
        {"nobody", "api.example.com", 443, C, "", R::unknown_job, R::none},
    };
    for (const auto& r : table) {
        INFO(r.job << " " << r.host << ":" << r.port);
        decide_args a;
        a.job = r.job;
        a.host = r.host;
        a.port = r.port;
        a.kind = r.kind;
        a.method = r.method;
        const moded_decision m = decide_with_mode(a, *p);
        CHECK(m.effective.reason == r.effective);
        CHECK(m.would_deny == r.would_deny);
        CHECK(m.reported() == (r.would_deny != R::none));
        if (m.would_deny == R::no_rule || m.would_deny == R::port) {
            CHECK(m.effective.rule == nullptr);  // no rule opened this host and port
        } else if (m.reported()) {
            CHECK(m.effective.rule != nullptr);  // the rule of this host and port governs
        }
    }
}

TEST_CASE("report mode: the address check is never relaxed", "[mode]") {
    const auto p = load();
    const std::vector<ip_address> public_only{*parse_ip("93.184.216.34")};
    const std::vector<ip_address> in_range{*parse_ip("10.20.1.1")};
    const std::vector<ip_address> other_private{*parse_ip("10.21.1.1")};
    const std::vector<ip_address> mixed{*parse_ip("93.184.216.34"), *parse_ip("127.0.0.1")};
    decide_args a;
    a.job = "learner";
    SECTION("a host no rule names: public addresses only") {
        a.host = "other.example.net";
        a.port = 443;
        const moded_decision m = decide_with_mode(a, *p);
        REQUIRE(m.would_deny == deny_reason::no_rule);
        CHECK(check_addresses(m.effective, public_only).allowed());
        CHECK(check_addresses(m.effective, in_range).reason == deny_reason::private_address);
        CHECK(check_addresses(m.effective, mixed).reason == deny_reason::private_address);
    }
    SECTION("a named host on another port: public addresses only, its resolves_to is not "
            "lent to ports its rule does not list") {
        a.host = "wiki.corp.example";
        a.port = 8080;
        const moded_decision m = decide_with_mode(a, *p);
        REQUIRE(m.would_deny == deny_reason::port);
        CHECK(check_addresses(m.effective, public_only).allowed());
        CHECK(check_addresses(m.effective, in_range).reason == deny_reason::private_address);
        CHECK(check_addresses(m.effective, mixed).reason == deny_reason::private_address);
    }
    SECTION("a named host and port with another method: its rule's resolves_to, as in "
            "enforce mode") {
        a.host = "wiki.corp.example";
        a.port = 80;
        a.kind = request_kind::http;
        a.method = "POST";
        const moded_decision m = decide_with_mode(a, *p);
        REQUIRE(m.would_deny == deny_reason::method);
        CHECK(check_addresses(m.effective, public_only).allowed());
        CHECK(check_addresses(m.effective, in_range).allowed());
        CHECK(check_addresses(m.effective, other_private).reason == deny_reason::private_address);
        CHECK(check_addresses(m.effective, mixed).reason == deny_reason::private_address);
    }
}

TEST_CASE("report mode: DNS names", "[mode]") {
    const auto p = load();
    using R = deny_reason;
    CHECK(decide_dns_with_mode("learner", "api.example.com", *p).effective.allowed());
    const moded_decision other = decide_dns_with_mode("learner", "other.example.net", *p);
    CHECK(other.effective.allowed());
    CHECK(other.would_deny == R::no_rule);
    CHECK(decide_dns_with_mode("strict", "other.example.net", *p).effective.reason == R::no_rule);
    CHECK(decide_dns_with_mode("learner", "10.0.0.1", *p).effective.reason == R::bad_request);
    CHECK(decide_dns_with_mode("learner", "bad..name", *p).effective.reason == R::bad_request);
    CHECK(decide_dns_with_mode("nobody", "api.example.com", *p).effective.reason == R::unknown_job);
}

TEST_CASE("report mode: relaxed reasons are the allowlist's only", "[mode]") {
    for (std::size_t i = 0; i < deny_reason_count; ++i) {
        const auto r = static_cast<deny_reason>(i);
        const bool expected = r == deny_reason::no_rule || r == deny_reason::port ||
                              r == deny_reason::protocol || r == deny_reason::method ||
                              r == deny_reason::http_rule;
        INFO(to_string(r));
        CHECK(report_relaxes(r) == expected);
    }
}
