#include "config/learn/suggest.hpp"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "config/learn/replay.hpp"
#include "config/load.hpp"

using namespace cordon::config;
using namespace cordon::learn;

namespace {

constexpr std::string_view list = "com\norg\nuk\nco.uk\nio\ngithub.io\ns3.example.com\nnet\n";

seen_request req(std::string host, std::uint16_t port, seen_outcome o = seen_outcome::allowed,
                 std::uint64_t count = 1) {
    seen_request r;
    r.ip_literal = host.find_first_not_of("0123456789.:abcdef") == std::string::npos &&
                   (host.find(':') != std::string::npos ||
                    host.find_first_not_of("0123456789.") == std::string::npos);
    r.host = std::move(host);
    r.port = port;
    r.outcome = o;
    r.reason = o == seen_outcome::allowed ? "" : "no_rule";
    r.count = count;
    return r;
}

seen_request http(std::string host, std::uint16_t port, std::string method,
                  seen_outcome o = seen_outcome::allowed, std::uint64_t count = 1) {
    seen_request r = req(std::move(host), port, o, count);
    r.kind = request_kind::http;
    r.method = std::move(method);
    return r;
}

seen_request inspected(std::string host, std::uint16_t port, std::string method, std::string path,
                       seen_outcome o = seen_outcome::allowed, std::uint64_t count = 1) {
    seen_request r = req(std::move(host), port, o, count);
    r.kind = request_kind::inspected;
    r.method = std::move(method);
    r.path = std::move(path);
    return r;
}

seen_request refused(seen_request r) {
    r.outcome = seen_outcome::denied;
    r.reason = "http_rule";
    return r;
}

const suggested_rule* find_rule(const suggestion& s, std::string_view host_or_cidr) {
    for (const auto& r : s.rules) {
        if (r.host == host_or_cidr || r.cidr == host_or_cidr) {
            return &r;
        }
    }
    return nullptr;
}

std::vector<std::string> hosts(const suggestion& s) {
    std::vector<std::string> out;
    for (const auto& r : s.rules) {
        out.push_back(r.host.empty() ? r.cidr : r.host);
    }
    return out;
}

// The suggested section put under a job card, loaded by the real loader.
std::shared_ptr<const compiled_policy> as_policy(const suggestion& s, std::string_view job) {
    // https rules need the inspect section (the loader does not read the files).
    std::string text =
        "listen: { proxy: 127.0.0.1:3128 }\ninspect: { ca: { cert: /ca.pem, key: /ca.key } }\n"
        "secrets: { openai: { file: /openai } }\njobs:\n  " +
        std::string(job) + ":\n    task: learned\n";
    const std::string yaml = render_yaml(s);
    std::size_t at = 0;
    while (at < yaml.size()) {
        const std::size_t nl = yaml.find('\n', at);
        text += "    " + yaml.substr(at, nl - at) + "\n";
        at = nl + 1;
    }
    load_result r = load_policy(text, "suggested.yaml");
    for (const auto& e : r.errors) {
        FAIL(e.to_string() + "\n" + text);
    }
    return compile(std::move(*r.value));
}

}  // namespace

TEST_CASE("suggest: exact names and ports, one rule per name and protocol", "[suggest]") {
    seen_traffic t;
    t.job = "agent";
    t.requests = {req("api.example.com", 443, seen_outcome::allowed, 10),
                  req("api.example.com", 8443, seen_outcome::would_deny, 2),
                  http("api.example.com", 80, "GET", seen_outcome::denied, 3),
                  http("api.example.com", 80, "POST", seen_outcome::denied, 1),
                  req("pypi.org", 443, seen_outcome::would_deny, 5)};
    const auto psl = public_suffix_list::parse(list);
    const suggestion s = suggest(t, psl, {});
    REQUIRE(s.rules.size() == 3);
    const auto& tls = s.rules[0];
    CHECK(tls.host == "api.example.com");
    CHECK(tls.proto == protocol::tls);
    CHECK(tls.ports == std::vector<std::uint16_t>{443, 8443});
    CHECK(tls.counts.allowed == 10);
    CHECK(tls.counts.would_deny == 2);
    const auto& h = s.rules[1];
    CHECK(h.host == "api.example.com");
    CHECK(h.proto == protocol::http);
    CHECK(h.methods == std::vector<std::string>{"GET", "POST"});
    CHECK(h.counts.denied == 4);
    CHECK(s.rules[2].host == "pypi.org");
    CHECK(s.counts.total() == 21);
    const std::string yaml = render_yaml(s);
    CHECK(yaml.find("  - { host: api.example.com, ports: [443, 8443] }\n") != std::string::npos);
    CHECK(yaml.find("  - { host: api.example.com, ports: [80], protocol: http, methods: [GET, "
                    "POST] }\n") != std::string::npos);
    CHECK(yaml.find("# 12 requests (10 allowed, 2 would-deny)") != std::string::npos);
}

TEST_CASE("suggest: wildcards only above the sibling threshold", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    for (const char* n : {"a", "b", "c"}) {
        t.requests.push_back(req(std::string(n) + ".cdn.example.org", 443));
    }
    SECTION("three names, threshold 3: exact") {
        const suggestion s = suggest(t, psl, {3});
        CHECK(hosts(s) == std::vector<std::string>{"a.cdn.example.org", "b.cdn.example.org",
                                                   "c.cdn.example.org"});
    }
    SECTION("four names, threshold 3: one wildcard with the union of ports") {
        t.requests.push_back(req("d.cdn.example.org", 8443, seen_outcome::would_deny, 7));
        const suggestion s = suggest(t, psl, {3});
        REQUIRE(hosts(s) == std::vector<std::string>{"*.cdn.example.org"});
        CHECK(s.rules[0].ports == std::vector<std::uint16_t>{443, 8443});
        CHECK(s.rules[0].names.size() == 4);
        CHECK(s.rules[0].names[0] == std::pair<std::string, std::uint64_t>{"d.cdn.example.org", 7});
        CHECK(render_yaml(s).find("- { host: \"*.cdn.example.org\", ports: [443, 8443] }") !=
              std::string::npos);
    }
    SECTION("the parent itself keeps its exact rule; deeper names are covered") {
        t.requests.push_back(req("d.cdn.example.org", 443));
        t.requests.push_back(req("cdn.example.org", 443));
        t.requests.push_back(req("x.y.cdn.example.org", 443));
        const suggestion s = suggest(t, psl, {3});
        CHECK(hosts(s) == std::vector<std::string>{"cdn.example.org", "*.cdn.example.org"});
    }
    SECTION("a wildcard counts as one child of its parent; collapse climbs to the domain") {
        t.requests.push_back(req("d.cdn.example.org", 443));
        t.requests.push_back(req("www.example.org", 443));
        t.requests.push_back(req("api.example.org", 443));
        t.requests.push_back(req("docs.example.org", 443));
        SECTION("4 children of example.org (cdn, www, api, docs) > 3") {
            const suggestion s = suggest(t, psl, {3});
            CHECK(hosts(s) == std::vector<std::string>{"*.example.org"});
        }
        SECTION("threshold 4: 4 children are not more than 4; all stay exact") {
            const suggestion s = suggest(t, psl, {4});
            CHECK(s.rules.size() == 7);
            CHECK(std::none_of(s.rules.begin(), s.rules.end(),
                               [](const auto& r) { return r.host.front() == '*'; }));
        }
    }
    SECTION("protocols collapse separately") {
        t.requests.push_back(http("d.cdn.example.org", 80, "GET"));
        const suggestion s = suggest(t, psl, {3});
        CHECK(find_rule(s, "*.cdn.example.org") == nullptr);
        CHECK(s.rules.size() == 4);
    }
}

TEST_CASE("suggest: a name's non-public addresses are never lent to a wildcard", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    for (const char* n : {"a", "b", "c", "d", "e"}) {
        t.requests.push_back(req(std::string(n) + ".corp.example.org", 443));
    }
    t.requests[0].address = "10.20.0.5";  // a.corp.example.org reached private space
    const suggestion s = suggest(t, psl, {3});
    REQUIRE(hosts(s) == std::vector<std::string>{"*.corp.example.org", "a.corp.example.org"});
    CHECK(find_rule(s, "a.corp.example.org")->resolves_to ==
          std::vector<std::string>{"10.20.0.5/32"});
    CHECK(find_rule(s, "*.corp.example.org")->resolves_to.empty());
    CHECK(find_rule(s, "*.corp.example.org")->names.size() == 4);
}

TEST_CASE("suggest: never wider than the registrable domain", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    for (const char* n : {"a", "b", "c", "d", "e"}) {
        t.requests.push_back(req(std::string(n) + ".co.uk", 443));           // 5 domains
        t.requests.push_back(req(std::string(n) + ".github.io", 443));       // 5 sites
        t.requests.push_back(req(std::string(n) + ".s3.example.com", 443));  // 5 buckets
    }
    t.requests.push_back(req("api.example.com", 443));
    t.requests.push_back(req("www.example.com", 443));
    t.requests.push_back(req("docs.example.com", 443));
    t.requests.push_back(req("x.example.com", 443));
    const suggestion s = suggest(t, psl, {3});
    for (const auto& r : s.rules) {
        INFO(r.host);
        CHECK(r.host.front() != '*');  // example.com has s3.example.com below it
    }
    CHECK(s.rules.size() == 19);
    SECTION("one registrable domain with many names collapses at most to *.domain") {
        seen_traffic u;
        u.job = "agent";
        for (const char* n : {"a", "b", "c", "d"}) {
            u.requests.push_back(req(std::string(n) + ".bbc.co.uk", 443));
        }
        u.requests.push_back(req("bbc.co.uk", 443));
        const suggestion v = suggest(u, psl, {3});
        CHECK(hosts(v) == std::vector<std::string>{"bbc.co.uk", "*.bbc.co.uk"});
    }
}

TEST_CASE("suggest: IP literals, non-public space, the reserved name", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    t.requests = {req("8.8.8.8", 853, seen_outcome::would_deny, 2),
                  req("2606:4700::1111", 443, seen_outcome::denied, 1),
                  http("1.1.1.1", 80, "GET"),
                  req("10.0.0.5", 5432, seen_outcome::denied, 4),     // left out
                  req("fd00::5", 5432, seen_outcome::denied, 2),      // left out
                  req("10.1.0.9", 5432, seen_outcome::allowed, 6),    // a cidr rule opened it
                  req("cordon.events", 80, seen_outcome::denied, 1),  // left out
                  req("intranet.example.com", 443, seen_outcome::denied, 3)};
    t.requests.back().reason = "private_address";  // left out
    seen_request wiki = http("wiki.example.net", 80, "GET", seen_outcome::allowed, 9);
    wiki.address = "10.20.0.5";  // the enforced rule's resolves_to let it in
    t.requests.push_back(wiki);
    const suggestion s = suggest(t, psl, {});
    CHECK(hosts(s) == std::vector<std::string>{"wiki.example.net", "1.1.1.1/32", "10.1.0.9/32",
                                               "2606:4700::1111/128", "8.8.8.8/32"});
    CHECK(find_rule(s, "8.8.8.8/32")->proto == protocol::tcp);
    CHECK(find_rule(s, "1.1.1.1/32")->proto == protocol::http);
    CHECK(find_rule(s, "wiki.example.net")->resolves_to ==
          std::vector<std::string>{"10.20.0.5/32"});
    REQUIRE(s.left_out.size() == 4);
    CHECK(s.left_out[0].target == "10.0.0.5:5432");
    CHECK(s.left_out[0].why.find("non-public address") != std::string::npos);
    CHECK(s.left_out[1].target == "[fd00::5]:5432");  // an IPv6 literal in brackets
    CHECK(s.left_out[1].why.find("non-public address") != std::string::npos);
    CHECK(s.left_out[2].target == "cordon.events:80");
    CHECK(s.left_out[3].target == "intranet.example.com:443");
    CHECK(s.left_out[3].why.find("resolved to a non-public address") != std::string::npos);
    const std::string yaml = render_yaml(s);
    CHECK(yaml.find("cidr: \"2606:4700::1111/128\", ports: [443], protocol: tcp") !=
          std::string::npos);
    CHECK(yaml.find("#   cordon.events:80, 1 request (1 denied): cordon's own reserved name") !=
          std::string::npos);
}

TEST_CASE("suggest: DNS-only names are listed, not made rules", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    t.requests = {req("api.example.com", 443)};
    t.dns = {{"api.example.com", 3, 0}, {"telemetry.example.org", 0, 5}};
    const suggestion s = suggest(t, psl, {});
    REQUIRE(s.dns_only.size() == 1);
    CHECK(s.dns_only[0].name == "telemetry.example.org");
    CHECK(render_yaml(s).find("#   telemetry.example.org: 5 queries (5 denied)") !=
          std::string::npos);
    const std::string json = render_json(s);
    CHECK(json.find("\"dns_only\":[{\"name\":\"telemetry.example.org\",\"answered\":0,"
                    "\"denied\":5}]") != std::string::npos);
}

TEST_CASE("suggest: an empty job gives an empty section", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "quiet";
    const suggestion s = suggest(t, psl, {});
    CHECK(s.rules.empty());
    CHECK(render_yaml(s).find("egress: []\n") != std::string::npos);
    as_policy(s, "quiet");
}

TEST_CASE("suggest then replay: the suggestion loads and denies nothing seen", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    for (const char* n : {"a", "b", "c", "d", "e"}) {
        t.requests.push_back(
            req(std::string(n) + ".cdn.example.org", 443, seen_outcome::would_deny, 2));
    }
    t.requests.push_back(req("api.example.com", 443, seen_outcome::allowed, 4));
    t.requests.push_back(http("api.example.com", 80, "PUT", seen_outcome::denied, 1));
    t.requests.back().reason = "method";
    t.requests.push_back(req("8.8.4.4", 53, seen_outcome::would_deny, 1));
    t.requests.push_back(req("2001:4860:4860::8888", 443, seen_outcome::would_deny, 1));
    t.requests.push_back(req("intranet.example.com", 443, seen_outcome::denied, 3));
    t.requests.back().reason = "private_address";
    seen_request wiki = http("wiki.example.net", 80, "GET", seen_outcome::allowed, 9);
    wiki.address = "10.20.0.5";
    t.requests.push_back(wiki);
    const suggestion s = suggest(t, psl, {3});
    const auto p = as_policy(s, "agent");
    const replay_result r = replay(t, *p);
    CHECK(r.newly_denied.empty());
    CHECK(r.undetermined.empty());
    // Everything that was denied or would-deny is now allowed, but the private one.
    CHECK(r.count(r.newly_allowed) == 10 + 1 + 1 + 1);
    CHECK(r.same_allowed == 13);
    CHECK(r.same_denied == 3);
}

TEST_CASE("suggest: report mode let a name's own rule reach non-public space on another port",
          "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    seen_request a = http("wiki.example.net", 80, "GET", seen_outcome::allowed, 2);
    a.address = "10.20.0.5";
    seen_request b = http("wiki.example.net", 8080, "POST", seen_outcome::would_deny, 1);
    b.reason = "port";
    b.address = "10.20.0.6";
    t.requests = {a, b};
    const suggestion s = suggest(t, psl, {});
    REQUIRE(s.rules.size() == 1);
    CHECK(s.rules[0].ports == std::vector<std::uint16_t>{80, 8080});
    CHECK(s.rules[0].methods == std::vector<std::string>{"GET", "POST"});
    CHECK(s.rules[0].resolves_to == std::vector<std::string>{"10.20.0.5/32", "10.20.0.6/32"});
    const auto p = as_policy(s, "agent");
    const replay_result r = replay(t, *p);
    CHECK(r.newly_denied.empty());
    CHECK(r.count(r.newly_allowed) == 1);
}

TEST_CASE("suggest: the JSON stays valid whatever bytes the audit log held", "[suggest]") {
    // Names and reasons come from recorded traffic: invalid UTF-8 (a stray byte, a truncated
    // sequence, an overlong '/', a surrogate) and control characters must not reach the
    // output as they are.
    suggestion s;
    s.job = "agent\x01";
    suggested_rule r;
    r.host = "bad\xff\xfe.example.com";
    r.ports = {443};
    r.methods = {"GE\x7fT"};
    r.names = {{"a\xe2\x82.example.com", 2}};
    s.rules.push_back(r);
    s.left_out.push_back({"evil\"\\\n\x1f\xc0\xaf.example:443", "why \xed\xa0\x80", {}});
    s.dns_only.push_back({"t\xe2\x80\xa8x\xf0\x9f", 0, 1});
    s.first_ts = "2026-\xf8\x88\x80\x80\x80";
    const std::string out = render_json(s);
    REQUIRE(out.back() == '\n');
    for (const char c : std::string_view(out).substr(0, out.size() - 1)) {
        CHECK(static_cast<unsigned char>(c) >= 0x20);  // no raw control character
    }
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(out, ec);  // rejects invalid UTF-8
    REQUIRE_FALSE(ec);
    const std::string fffd = "\xef\xbf\xbd";
    CHECK(v.at("job").as_string() == "agent\x01");
    const auto& rule = v.at("egress").as_array().at(0);
    CHECK(rule.at("host").as_string() == "bad" + fffd + fffd + ".example.com");
    CHECK(rule.at("methods").as_array().at(0).as_string() == "GE\x7fT");
    CHECK(v.at("not_learned").as_array().at(0).at("target").as_string() ==
          "evil\"\\\n\x1f" + fffd + fffd + ".example:443");
    CHECK(v.at("dns_only").as_array().at(0).at("name").as_string() == "t\xe2\x80\xa8x" + fffd);
    CHECK(out.find("\\u0001") != std::string::npos);
    CHECK(out.find("\\u001f") != std::string::npos);
}

TEST_CASE("suggest: inspected requests make an https rule with request rules", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    seen_request tunnel = req("api.example.com", 443, seen_outcome::allowed, 3);
    tunnel.https_rule = true;
    t.requests = {tunnel, req("api.example.com", 8443, seen_outcome::allowed, 1)};
    for (const char* id : {"123", "456", "789"}) {
        t.requests.push_back(
            inspected("api.example.com", 443, "GET", std::string("/v1/files/") + id));
    }
    seen_request chat = inspected("api.example.com", 443, "POST", "/v1/chat/completions",
                                  seen_outcome::allowed, 20);
    chat.credential = "openai";
    t.requests.push_back(chat);
    t.requests.push_back(
        inspected("api.example.com", 443, "GET", "/v1/models", seen_outcome::would_deny, 2));
    t.requests.push_back(
        refused(inspected("api.example.com", 443, "DELETE", "/v1/files/123", {}, 4)));
    t.requests.push_back(refused(inspected("api.example.com", 443, "GET", "/admin/users", {}, 1)));
    const suggestion s = suggest(t, psl, {});
    REQUIRE(s.rules.size() == 2);
    CHECK(s.rules[0].proto == protocol::tls);  // 8443 was not inspected
    CHECK(s.rules[0].ports == std::vector<std::uint16_t>{8443});
    const suggested_rule& h = s.rules[1];
    CHECK(h.host == "api.example.com");
    CHECK(h.proto == protocol::https);
    CHECK(h.ports == std::vector<std::uint16_t>{443});  // the inspected port only
    CHECK(h.methods.empty());
    REQUIRE(h.http.size() == 2);
    CHECK(h.http[0].methods == std::vector<std::string>{"GET"});
    CHECK(h.http[0].paths == std::vector<std::string>{"/v1/files/*", "/v1/models"});
    CHECK(h.http[0].requests == 5);
    CHECK(h.http[1].methods == std::vector<std::string>{"POST"});
    CHECK(h.http[1].paths == std::vector<std::string>{"/v1/chat/completions"});
    CHECK(h.refused == 5);
    CHECK(h.credentials == std::vector<std::string>{"openai"});
    CHECK(h.counts.total() == 3 + 3 + 20 + 2 + 5);

    const std::string yaml = render_yaml(s);
    CHECK(yaml.find("  - host: api.example.com\n    ports: [443]\n    protocol: https\n"
                    "    http:\n      # 5 requests\n"
                    "      - { methods: [GET], paths: [\"/v1/files/*\", \"/v1/models\"] }\n"
                    "      # 20 requests\n"
                    "      - { methods: [POST], paths: [\"/v1/chat/completions\"] }\n") !=
          std::string::npos);
    CHECK(yaml.find("credential: { secret: openai,") != std::string::npos);
    CHECK(yaml.find("5 requests refused by the policy's request rules (http_rule), kept out: "
                    "DELETE /v1/files/123 4, GET /admin/users 1") != std::string::npos);
    CHECK(yaml.find("need the policy's `inspect` section") != std::string::npos);
    const std::string json = render_json(s);
    CHECK(json.find("\"protocol\":\"https\",\"http\":[{\"methods\":[\"GET\"],\"paths\":["
                    "\"/v1/files/*\",\"/v1/models\"],\"requests\":5},") != std::string::npos);
    CHECK(json.find("\"credentials_injected\":[\"openai\"]") != std::string::npos);

    // The section loads; replayed on its own traffic it denies nothing newly, allows the
    // refused requests nowhere, and lets the would-deny one through.
    const auto p = as_policy(s, "agent");
    const replay_result r = replay(t, *p);
    CHECK(r.newly_denied.empty());
    CHECK(r.undetermined.empty());
    CHECK(r.count(r.newly_allowed) == 2);
    CHECK(r.same_denied == 5);
}

TEST_CASE("suggest: plain HTTP requests recorded with paths get request rules", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    seen_request a = http("docs.example.org", 80, "GET", seen_outcome::allowed, 2);
    a.path = "/guide/intro";
    seen_request b = http("docs.example.org", 80, "HEAD", seen_outcome::allowed, 1);
    b.path = "/guide/intro";
    seen_request c = refused(http("docs.example.org", 80, "POST"));
    c.path = "/guide/intro";
    seen_request d = http("other.example.org", 80, "GET");  // no path recorded
    t.requests = {a, b, c, d};
    const suggestion s = suggest(t, psl, {});
    REQUIRE(s.rules.size() == 2);
    CHECK(s.rules[0].host == "docs.example.org");
    CHECK(s.rules[0].methods.empty());  // the loader takes methods or http, not both
    REQUIRE(s.rules[0].http.size() == 1);
    CHECK(s.rules[0].http[0].methods == std::vector<std::string>{"GET", "HEAD"});
    CHECK(s.rules[1].host == "other.example.org");
    CHECK(s.rules[1].http.empty());
    CHECK(s.rules[1].methods == std::vector<std::string>{"GET"});
    const auto p = as_policy(s, "agent");
    const replay_result r = replay(t, *p);
    CHECK(r.newly_denied.empty());
    CHECK(r.same_denied == 1);
}

TEST_CASE("suggest: a rule that would only let refused requests through is left out", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    seen_request tunnel = req("api.example.com", 443, seen_outcome::allowed, 2);
    tunnel.https_rule = true;
    t.requests = {tunnel, refused(inspected("api.example.com", 443, "GET", "/admin", {}, 2)),
                  req("pypi.org", 443)};
    const suggestion s = suggest(t, psl, {});
    CHECK(hosts(s) == std::vector<std::string>{"pypi.org"});
    REQUIRE(s.left_out.size() == 1);
    CHECK(s.left_out[0].target == "api.example.com:443");
    CHECK(s.left_out[0].why.find("refused by the policy's request rules") != std::string::npos);
    as_policy(s, "agent");
    SECTION("an https tunnel with no request seen inside: https, any request") {
        t.requests.erase(t.requests.begin() + 1);
        const suggestion v = suggest(t, psl, {});
        REQUIRE(find_rule(v, "api.example.com") != nullptr);
        CHECK(find_rule(v, "api.example.com")->proto == protocol::https);
        CHECK(find_rule(v, "api.example.com")->http.empty());
        as_policy(v, "agent");
    }
}

TEST_CASE("suggest: hostile paths and names give YAML the loader reads as meant", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t;
    t.job = "agent";
    for (const char* p : {"/q/a\"b", "/q/it's", "/q/x*y", "/q/[1]{2}", "/q/%0A", "/q/#", "/q/a: b",
                          "/q/&x", "/q/!tag", "/q/%2A"}) {
        t.requests.push_back(inspected("api.example.com", 443, "GET", p));
    }
    seen_request cred = inspected("api.example.com", 443, "GET", "/q/x");
    cred.credential = "evil\n  - { host: \"*\" }";  // a name as recorded: comment only
    t.requests.push_back(cred);
    const suggestion s = suggest(t, psl, {});
    REQUIRE(s.rules.size() == 1);
    CHECK(s.rules[0].http.size() == 1);
    const std::string yaml = render_yaml(s);
    INFO(yaml);
    CHECK(yaml.find("evil\n") == std::string::npos);
    CHECK(yaml.find("secret evil??"
                    "?-???host") != std::string::npos);
    CHECK(s.rules[0].paths_unknown == 2);  // "/q/#" and "/q/a: b" are not in normal form
    t.requests.erase(t.requests.begin() + 5, t.requests.begin() + 7);
    const auto p = as_policy(s, "agent");
    const replay_result r = replay(t, *p);
    INFO(render_table(r, "x"));
    CHECK(r.newly_denied.empty());
}
