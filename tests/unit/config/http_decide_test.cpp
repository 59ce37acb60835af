// Request rules in the policy: loading `http:` (and its errors), and decide() with a path:
// first match wins, none matches -> http_rule, a refused path -> bad_request, report mode
// relaxes http_rule only.
#include <catch2/catch.hpp>

#include <string>

#include "config/decide.hpp"
#include "config/http_rules.hpp"
#include "config/load.hpp"
#include "config/mode.hpp"

using namespace cordon::config;

namespace {

constexpr std::string_view policy_text = R"(listen: { proxy: 127.0.0.1:3128 }
jobs:
  coder:
    task: call one API
    egress:
      - host: api.example.com
        ports: [80]
        protocol: http
        http:
          - { methods: [POST], paths: [/v1/chat/completions, /v1/responses] }
          - { methods: [GET], paths: ["/v1/models/**"] }
      - { host: "*.example.com", ports: [80], protocol: http, http: [{ paths: [/public/*] }] }
      - { host: open.example.org, ports: [80], protocol: http }
  watcher:
    task: the same, reported
    mode: report
    egress:
      - { host: api.example.com, ports: [80], protocol: http,
          http: [{ methods: [GET], paths: ["/v1/**"] }] }
)";

std::shared_ptr<const compiled_policy> load() {
    load_result r = load_policy(policy_text, "http.yaml");
    for (const auto& e : r.errors) {
        FAIL(e.to_string());
    }
    return compile(std::move(*r.value));
}

decision ask(const compiled_policy& p, std::string_view job, std::string_view host,
             std::string_view method, std::string_view target) {
    const normal_path n = normalise_path(target);
    decide_args a;
    a.job = job;
    a.host = host;
    a.port = 80;
    a.kind = request_kind::http;
    a.method = method;
    a.path = n.path;
    a.path_refused = !n.ok();
    return decide(a, p);
}

std::vector<std::string> errors_of(std::string_view text) {
    std::vector<std::string> out;
    for (const auto& e : load_policy(text, "bad.yaml").errors) {
        out.push_back(e.to_string());
    }
    return out;
}

bool any_contains(const std::vector<std::string>& v, std::string_view what) {
    for (const auto& s : v) {
        if (s.find(what) != std::string::npos) {
            return true;
        }
    }
    return false;
}

}  // namespace

TEST_CASE("request rules: decide on method and path, first match wins", "[http_rules]") {
    const auto p = load();
    using R = deny_reason;
    const decision chat = ask(*p, "coder", "api.example.com", "POST", "/v1/chat/completions");
    CHECK(chat.reason == R::none);
    CHECK(chat.rule_index == 0);
    CHECK(chat.http_index == 0);
    CHECK(ask(*p, "coder", "api.example.com", "GET", "/v1/models/gpt-4").http_index == 1);
    CHECK(ask(*p, "coder", "api.example.com", "GET", "/v1/models").reason == R::none);
    CHECK(ask(*p, "coder", "api.example.com", "POST", "/v1/chat/completions?x=1").reason ==
          R::none);  // the query takes no part

    // Rules only grant: the wildcard rule's request rules open /public/* on api.example.com
    // too, and nothing else.
    CHECK(ask(*p, "coder", "api.example.com", "GET", "/public/a").rule_index == 1);
    CHECK(ask(*p, "coder", "api.example.com", "GET", "/v1/chat/completions").reason ==
          R::http_rule);
    CHECK(ask(*p, "coder", "api.example.com", "DELETE", "/v1/models/x").reason == R::http_rule);
    CHECK(ask(*p, "coder", "api.example.com", "POST", "/v1/files").reason == R::http_rule);
    CHECK(ask(*p, "coder", "api.example.com", "POST", "/v1/files").rule_index == 0);
    // The same wildcard rule, with any method, one segment below /public.
    CHECK(ask(*p, "coder", "www.example.com", "PUT", "/public/a").reason == R::none);
    CHECK(ask(*p, "coder", "www.example.com", "GET", "/public/a/b").reason == R::http_rule);
    // No request rules: any path, even one request rules would refuse.
    CHECK(ask(*p, "coder", "open.example.org", "GET", "/a/../b").reason == R::none);
}

TEST_CASE("request rules: path tricks never reach a matching rule", "[http_rules]") {
    const auto p = load();
    using R = deny_reason;
    // Each would match /v1/models/** or /v1/responses only if the server and cordon read
    // the path differently.
    for (const char* t :
         {"/v1/models/../../admin", "/v1/models/%2e%2e/%2e%2e/admin", "/v1/models%2f..%2fadmin",
          "/v1/models/%2F/admin", "/v1/models\\..\\x", "/v1/models/%00"}) {
        INFO(t);
        CHECK(ask(*p, "coder", "api.example.com", "GET", t).reason == R::bad_request);
    }
    // "//" collapses: what matches is what is sent.
    CHECK(ask(*p, "coder", "api.example.com", "POST", "//v1//responses").reason == R::none);
    CHECK(ask(*p, "coder", "api.example.com", "GET", "//admin").reason == R::http_rule);
}

TEST_CASE("request rules: report mode relaxes http_rule, never a refused path", "[http_rules]") {
    const auto p = load();
    using R = deny_reason;
    auto moded = [&](std::string_view method, std::string_view target) {
        const normal_path n = normalise_path(target);
        decide_args a;
        a.job = "watcher";
        a.host = "api.example.com";
        a.port = 80;
        a.kind = request_kind::http;
        a.method = method;
        a.path = n.path;
        a.path_refused = !n.ok();
        return decide_with_mode(a, *p);
    };
    const moded_decision post = moded("POST", "/v1/x");
    CHECK(post.effective.reason == R::none);
    CHECK(post.would_deny == R::http_rule);
    CHECK(post.effective.rule_index == 0);  // the rule's resolves_to still governs
    CHECK(moded("GET", "/v1/x").would_deny == R::none);
    CHECK(moded("GET", "/v1/%2e%2e/x").effective.reason == R::bad_request);
}

TEST_CASE("request rules: loading errors say what to write", "[http_rules]") {
    const std::string head = "listen: { proxy: 127.0.0.1:3128 }\njobs:\n  j:\n    task: t\n"
                             "    egress:\n";
    CHECK(any_contains(errors_of(head + "      - { host: a.example, ports: [443], "
                                        "http: [{ methods: [GET] }] }\n"),
                       "'http' request rules apply only to protocol: http"));
    CHECK(any_contains(errors_of(head + "      - { host: a.example, ports: [80], protocol: http, "
                                        "methods: [GET], http: [{ methods: [GET] }] }\n"),
                       "give either 'methods' or 'http'"));
    CHECK(any_contains(errors_of(head + "      - { host: a.example, ports: [80], protocol: http, "
                                        "http: [] }\n"),
                       "an empty list allows no request"));
    CHECK(any_contains(errors_of(head + "      - { host: a.example, ports: [80], protocol: http, "
                                        "http: [{}] }\n"),
                       "give 'methods', 'paths' or both"));
    CHECK(any_contains(errors_of(head + "      - { host: a.example, ports: [80], protocol: http, "
                                        "http: [{ paths: [v1] }] }\n"),
                       "http[0].paths[0]"));
    CHECK(any_contains(errors_of(head + "      - { host: a.example, ports: [80], protocol: http, "
                                        "http: [{ paths: [/a/../b] }] }\n"),
                       "'.' or '..'"));
    CHECK(any_contains(errors_of(head + "      - { host: a.example, ports: [80], protocol: http, "
                                        "http: [{ methods: [get] }] }\n"),
                       "is not an HTTP method"));
    CHECK(any_contains(errors_of(head + "      - { host: a.example, ports: [80], protocol: http, "
                                        "http: [{ methods: [GET], path: [/] }] }\n"),
                       "unknown key 'path' (expected one of: methods, paths)"));
}
