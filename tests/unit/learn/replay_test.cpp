#include "config/learn/replay.hpp"

#include <catch2/catch.hpp>

#include <string>

#include "config/load.hpp"

using namespace cordon::config;
using namespace cordon::learn;

namespace {

std::shared_ptr<const compiled_policy> policy_of(std::string_view egress, bool report = false,
                                                 std::string_view head = {}) {
    std::string text = "listen: { proxy: 127.0.0.1:3128 }\n" + std::string(head) +
                       "jobs:\n  agent:\n    task: t\n";
    if (report) {
        text += "    mode: report\n";
    }
    text += "    egress:\n" + std::string(egress);
    load_result r = load_policy(text, "new.yaml");
    for (const auto& e : r.errors) {
        FAIL(e.to_string());
    }
    return compile(std::move(*r.value));
}

seen_request req(std::string host, std::uint16_t port, seen_outcome o, std::uint64_t count,
                 std::string reason = {}) {
    seen_request r;
    r.host = std::move(host);
    r.port = port;
    r.outcome = o;
    r.count = count;
    r.reason = reason.empty() && o != seen_outcome::allowed ? "no_rule" : reason;
    return r;
}

}  // namespace

TEST_CASE("replay: newly denied, newly allowed, unchanged, with counts", "[replay]") {
    seen_traffic t;
    t.job = "agent";
    t.first_ts = "2026-11-29T10:00:00.000Z";
    t.last_ts = "2026-11-29T11:00:00.000Z";
    t.requests = {
        req("api.example.com", 443, seen_outcome::allowed, 10),
        req("api.example.com", 8443, seen_outcome::allowed, 2),    // port dropped: denied
        req("old.example.com", 443, seen_outcome::allowed, 5),     // host dropped: denied
        req("new.example.com", 443, seen_outcome::would_deny, 7),  // added: allowed
        req("evil.example", 443, seen_outcome::denied, 3),         // still denied
    };
    seen_request put;
    put.host = "api.example.com";
    put.port = 80;
    put.kind = request_kind::http;
    put.method = "PUT";
    put.outcome = seen_outcome::allowed;
    put.count = 4;
    t.requests.push_back(put);  // methods: [GET] now: denied (method)
    const auto p = policy_of(
        "      - { host: api.example.com, ports: [443] }\n"
        "      - { host: new.example.com, ports: [443] }\n"
        "      - { host: api.example.com, ports: [80], protocol: http, methods: [GET] }\n");
    const replay_result r = replay(t, *p);
    REQUIRE(r.newly_denied.size() == 3);
    CHECK(r.newly_denied[0].target == "old.example.com:443");
    CHECK(r.newly_denied[0].count == 5);
    CHECK(r.newly_denied[0].now_reason == "no_rule");
    CHECK(r.newly_denied[1].target == "api.example.com:80");
    CHECK(r.newly_denied[1].method == "PUT");
    CHECK(r.newly_denied[1].now_reason == "method");
    CHECK(r.newly_denied[2].target == "api.example.com:8443");
    CHECK(r.newly_denied[2].now_reason == "port");
    REQUIRE(r.newly_allowed.size() == 1);
    CHECK(r.newly_allowed[0].target == "new.example.com:443");
    CHECK(r.newly_allowed[0].was == seen_outcome::would_deny);
    CHECK(r.newly_allowed[0].now_rule == "new.example.com:443/tls");
    CHECK(r.same_allowed == 10);
    CHECK(r.same_allowed_targets == 1);
    CHECK(r.same_denied == 3);
    CHECK(r.requests == 31);

    const std::string table = render_table(r, "new.yaml");
    CHECK(table.find("newly denied: 3 targets, 11 requests") != std::string::npos);
    CHECK(table.find("PUT http api.example.com:80") != std::string::npos);
    CHECK(table.find("would-deny no_rule") != std::string::npos);
    CHECK(table.find("unchanged: 10 requests allowed (1 target), 3 denied (1 target)") !=
          std::string::npos);
    const std::string json = render_json(r, "new.yaml");
    CHECK(json.find("\"newly_allowed\":[{\"target\":\"new.example.com:443\",\"kind\":\"connect\","
                    "\"requests\":7,\"was\":\"would_deny\",\"was_reason\":\"no_rule\","
                    "\"now\":\"allowed\",\"rule\":\"new.example.com:443/tls\"}]") !=
          std::string::npos);
}

TEST_CASE("replay: non-public addresses are checked as the proxy checks them", "[replay]") {
    seen_traffic t;
    t.job = "agent";
    seen_request wiki = req("wiki.corp.example", 80, seen_outcome::allowed, 6);
    wiki.kind = request_kind::http;
    wiki.method = "GET";
    wiki.address = "10.20.0.5";
    t.requests = {wiki,
                  req("intranet.example.com", 443, seen_outcome::denied, 2, "private_address")};
    SECTION("resolves_to still covers the address: unchanged") {
        const auto p = policy_of("      - { host: wiki.corp.example, ports: [80], protocol: http,\n"
                                 "          resolves_to: [10.20.0.0/16] }\n"
                                 "      - { host: intranet.example.com, ports: [443] }\n");
        const replay_result r = replay(t, *p);
        CHECK(r.newly_denied.empty());
        CHECK(r.newly_allowed.empty());
        CHECK(r.same_allowed == 6);
        CHECK(r.same_denied == 2);  // still no resolves_to: still private_address
    }
    SECTION("resolves_to narrowed away from the address: newly denied") {
        const auto p = policy_of(
            "      - { host: wiki.corp.example, ports: [80], protocol: http,\n"
            "          resolves_to: [10.30.0.0/16] }\n"
            "      - { host: intranet.example.com, ports: [443], resolves_to: [10.0.0.0/8] }\n");
        const replay_result r = replay(t, *p);
        REQUIRE(r.newly_denied.size() == 1);
        CHECK(r.newly_denied[0].now_reason == "private_address");
        REQUIRE(r.undetermined.size() == 1);  // the denied address was not recorded
        CHECK(r.undetermined[0].target == "intranet.example.com:443");
    }
}

TEST_CASE("replay: verdicts are enforce verdicts even for a report-mode job", "[replay]") {
    seen_traffic t;
    t.job = "agent";
    t.requests = {req("api.example.com", 443, seen_outcome::would_deny, 1)};
    const auto p = policy_of("      - { host: other.example.com, ports: [443] }\n", true);
    const replay_result r = replay(t, *p);
    CHECK(r.job_in_report_mode);
    CHECK(r.same_denied == 1);
    CHECK(render_table(r, "new.yaml").find("report mode") != std::string::npos);
}

TEST_CASE("replay: a non-public IP literal its cidr rule allows stays allowed", "[replay]") {
    // The proxy checks a literal against the rules only (decide()); there is no resolution
    // and no resolves_to for a cidr rule, so its recorded address is the literal itself.
    seen_traffic t;
    t.job = "agent";
    seen_request r = req("10.1.0.9", 5432, seen_outcome::allowed, 3);
    r.ip_literal = true;
    r.address = "10.1.0.9";
    t.requests = {r};
    const auto p = policy_of("      - { cidr: 10.1.0.0/16, ports: [5432], protocol: tcp }\n");
    const replay_result res = replay(t, *p);
    CHECK(res.newly_denied.empty());
    CHECK(res.newly_allowed.empty());
    CHECK(res.same_allowed == 3);
    const auto narrower = policy_of(
        "      - { cidr: 10.2.0.0/16, ports: [5432], protocol: tcp }\n");
    const replay_result gone = replay(t, *narrower);
    REQUIRE(gone.newly_denied.size() == 1);
    CHECK(gone.newly_denied[0].count == 3);
}

TEST_CASE("replay: an IPv6 literal's target is written in brackets", "[replay]") {
    seen_traffic t;
    t.job = "agent";
    seen_request r = req("2001:db8::1", 443, seen_outcome::allowed, 2);
    r.ip_literal = true;
    t.requests = {r};
    const auto p = policy_of("      - { cidr: 2001:db8::/48, ports: [443], protocol: tcp }\n");
    const replay_result kept = replay(t, *p);
    CHECK(kept.same_allowed == 2);
    const auto other = policy_of("      - { cidr: 192.0.2.0/24, ports: [443], protocol: tcp }\n");
    const replay_result gone = replay(t, *other);
    REQUIRE(gone.newly_denied.size() == 1);
    CHECK(gone.newly_denied[0].target == "[2001:db8::1]:443");
    CHECK(render_json(gone, "new.yaml").find("\"target\":\"[2001:db8::1]:443\"") !=
          std::string::npos);
}

TEST_CASE("replay: request rules are decided on the recorded path, or said undetermined",
          "[replay]") {
    seen_traffic t;
    t.job = "agent";
    auto http = [](std::string method, std::string path, seen_outcome o, std::uint64_t n,
                   std::string reason = {}) {
        seen_request r = req("api.example.com", 80, o, n, std::move(reason));
        r.kind = request_kind::http;
        r.method = std::move(method);
        r.path = std::move(path);
        return r;
    };
    t.requests = {
        http("POST", "/v1/chat/completions", seen_outcome::allowed, 5),   // still allowed
        http("GET", "/admin", seen_outcome::allowed, 2),                  // now http_rule
        http("GET", "/v1/models", seen_outcome::denied, 3, "http_rule"),  // now allowed
        http("GET", "", seen_outcome::allowed, 4),  // recorded without a path: cannot tell
    };
    const auto p = policy_of("      - host: api.example.com\n"
                             "        ports: [80]\n"
                             "        protocol: http\n"
                             "        http:\n"
                             "          - { methods: [POST], paths: [/v1/chat/completions] }\n"
                             "          - { methods: [GET], paths: [\"/v1/models/**\"] }\n");
    const replay_result r = replay(t, *p);
    CHECK(r.same_allowed == 5);
    REQUIRE(r.newly_denied.size() == 1);
    CHECK(r.newly_denied[0].now_reason == "http_rule");
    CHECK(r.newly_denied[0].count == 2);
    REQUIRE(r.newly_allowed.size() == 1);
    CHECK(r.newly_allowed[0].count == 3);
    CHECK(r.newly_allowed[0].was_reason == "http_rule");
    REQUIRE(r.undetermined.size() == 1);
    CHECK(r.undetermined[0].now_reason == "http_rule?");
    CHECK(r.undetermined[0].count == 4);
}

TEST_CASE("replay: inspected requests are decided by the new rule's request rules", "[replay]") {
    seen_traffic t;
    t.job = "agent";
    auto in = [](std::string method, std::string path, seen_outcome o, std::uint64_t n,
                 std::string reason = {}) {
        seen_request r = req("api.example.com", 443, o, n, std::move(reason));
        r.kind = request_kind::inspected;
        r.method = std::move(method);
        r.path = std::move(path);
        return r;
    };
    seen_request cut = in("GET", "/v1/models", seen_outcome::allowed, 1);
    cut.path_cut = true;  // "/v1/models" and something below it: cannot tell
    t.requests = {
        req("api.example.com", 443, seen_outcome::allowed, 3),  // the tunnels
        in("POST", "/v1/chat/completions", seen_outcome::allowed, 5),
        in("DELETE", "/v1/files/1", seen_outcome::allowed, 2),                 // now http_rule
        in("GET", "/v1/models/gpt-4o", seen_outcome::denied, 3, "http_rule"),  // now allowed
        cut,
    };
    const auto p = policy_of("      - host: api.example.com\n"
                             "        ports: [443]\n"
                             "        protocol: https\n"
                             "        http:\n"
                             "          - { methods: [POST], paths: [/v1/chat/completions] }\n"
                             "          - { methods: [GET], paths: [\"/v1/models/*\"] }\n",
                             false, "inspect: { ca: { cert: /ca.pem, key: /ca.key } }\n");
    const replay_result r = replay(t, *p);
    CHECK(r.same_allowed == 3 + 5);
    REQUIRE(r.newly_denied.size() == 1);
    CHECK(r.newly_denied[0].kind == request_kind::inspected);
    CHECK(r.newly_denied[0].path == "/v1/files/1");
    CHECK(r.newly_denied[0].now_reason == "http_rule");
    REQUIRE(r.newly_allowed.size() == 1);
    CHECK(r.newly_allowed[0].path == "/v1/models/gpt-4o");
    CHECK(r.newly_allowed[0].now_rule == "api.example.com:443/https");
    REQUIRE(r.undetermined.size() == 1);
    CHECK(r.undetermined[0].path == "/v1/models/**");
    CHECK(r.undetermined[0].now_reason == "http_rule?");
    const std::string table = render_table(r, "new.yaml");
    CHECK(table.find("DELETE https api.example.com:443 /v1/files/1  allowed  denied http_rule") !=
          std::string::npos);
    const std::string json = render_json(r, "new.yaml");
    CHECK(json.find("\"kind\":\"inspected\",\"method\":\"DELETE\",\"path\":\"/v1/files/1\"") !=
          std::string::npos);
}

TEST_CASE("replay: the table shows the most requested rows of a section", "[replay]") {
    seen_traffic t;
    t.job = "agent";
    for (int i = 0; i < 60; ++i) {
        t.requests.push_back(req("h" + std::to_string(i) + ".example.com", 443,
                                 seen_outcome::allowed, static_cast<std::uint64_t>(i + 1)));
    }
    const auto p = policy_of("      - { host: other.example.com, ports: [443] }\n");
    const replay_result r = replay(t, *p);
    CHECK(r.newly_denied.size() == 60);
    const std::string table = render_table(r, "new.yaml");
    CHECK(table.find("CONNECT h59.example.com:443") != std::string::npos);
    CHECK(table.find("CONNECT h0.example.com:443") == std::string::npos);
    CHECK(table.find("and 10 more rows (--format json lists them all)") != std::string::npos);
    CHECK(render_json(r, "new.yaml").find("h0.example.com") != std::string::npos);
}
