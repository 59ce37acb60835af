#include "proxy/audit/audit_traffic.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "common/time.hpp"
#include "config/learn/public_suffix.hpp"
#include "config/learn/replay.hpp"
#include "config/learn/suggest.hpp"
#include "config/load.hpp"
#include "proxy/audit/audit_timeline.hpp"  // parse_time_arg

using namespace cordon;
using namespace cordon::proxy;
using namespace cordon::proxy::audit;
using namespace cordon::common;

namespace {

const std::string lines =
    // allowed CONNECT, twice (once with an upper-case host)
    R"({"ts":"2026-11-29T10:00:00.000Z","event":"conn.open","session":"s-1","job":"agent","client":"10.0.0.2:4000","target":"api.example.com:443","ip":"93.184.216.34","method":"CONNECT","rule":"api.example.com:443/tls","dns_ms":0.4,"connect_ms":1.1})"
    "\n"
    R"({"ts":"2026-11-29T10:00:01.000Z","event":"conn.open","session":"s-1","job":"agent","client":"10.0.0.2:4001","target":"API.Example.com:443","ip":"93.184.216.35","method":"CONNECT","rule":"api.example.com:443/tls","dns_ms":0.4,"connect_ms":1.1})"
    "\n"
    // report mode: let through, would be denied
    R"({"ts":"2026-11-29T10:00:02.000Z","event":"conn.open","session":"s-2","job":"agent","client":"10.0.0.2:4002","target":"new.example.com:443","ip":"93.184.216.36","method":"CONNECT","would_deny":"no_rule","dns_ms":0.4,"connect_ms":1.1})"
    "\n"
    // plain HTTP denial with its method; an older denial without one
    R"({"ts":"2026-11-29T10:00:03.000Z","event":"conn.deny","session":"s-2","job":"agent","client":"10.0.0.2:4003","reason":"method","target":"api.example.com:80","status":403,"method":"PUT"})"
    "\n"
    R"({"ts":"2026-11-29T10:00:04.000Z","event":"conn.deny","session":"s-2","job":"agent","client":"10.0.0.2:4004","reason":"no_rule","target":"[2001:db8::1]:443","status":403})"
    "\n"
    // allowed into private space by resolves_to; a tcp rule
    R"({"ts":"2026-11-29T10:00:05.000Z","event":"conn.open","session":"s-2","job":"agent","client":"10.0.0.2:4005","target":"wiki.corp.example:80","ip":"10.20.0.5","method":"GET","rule":"wiki.corp.example:80/http"})"
    "\n"
    R"({"ts":"2026-11-29T10:00:06.000Z","event":"conn.open","session":"s-2","job":"agent","client":"10.0.0.2:4006","target":"git.example.org:22","ip":"198.51.100.7","method":"CONNECT","rule":"git.example.org:22/tcp"})"
    "\n"
    // not policy: counted apart; other job; other events; a needle inside another value
    R"({"ts":"2026-11-29T10:00:07.000Z","event":"conn.deny","session":"s-2","job":"agent","client":"10.0.0.2:4007","reason":"kill_switch","target":"x.example:443","status":403})"
    "\n"
    R"({"ts":"2026-11-29T10:00:08.000Z","event":"conn.open","session":"s-9","job":"other","client":"10.0.0.9:4008","target":"other.example:443","ip":"93.184.216.37","method":"CONNECT"})"
    "\n"
    R"({"ts":"2026-11-29T10:00:09.000Z","event":"conn.close","session":"s-1","job":"agent","client":"10.0.0.2:4000","target":"api.example.com:443","bytes_up":1,"bytes_down":2,"duration_ms":3,"reason":"eof"})"
    "\n"
    R"({"ts":"2026-11-29T10:00:10.000Z","event":"tool.call","session":"s-9","job":"other","arguments":"{\"job\":\"agent\",\"target\":\"fake.example:443\"}","tool":"x"})"
    "\n"
    // DNS, with coalesced repeats
    R"({"ts":"2026-11-29T10:00:11.000Z","event":"dns.query","session":"s-1","job":"agent","client":"10.0.0.2","name":"api.example.com","type":"A","rcode":"NOERROR","cached":false})"
    "\n"
    R"({"ts":"2026-11-29T10:00:12.000Z","event":"dns.deny","session":"s-1","job":"agent","client":"10.0.0.2","name":"telemetry.example.org","type":"A","reason":"no_rule","repeats":4})"
    "\n"
    // malformed lines of the job
    R"({"ts":"2026-11-29T10:00:13.000Z","event":"conn.open","job":"agent","target":)"
    "\n"
    R"({"ts":"2026-11-29T10:00:14.000Z","event":"conn.open","session":"s-2","job":"agent","target":"not a target","method":"CONNECT"})"
    "\n"
    // a last line still being written
    R"({"ts":"2026-11-29T10:00:15.000Z","event":"conn.open","session":"s-3","job":"agent","target":"late.example.com:443")";

const learn::seen_request* find(const learn::seen_traffic& t, std::string_view host,
                                std::uint16_t port) {
    for (const auto& r : t.requests) {
        if (r.host == host && r.port == port) {
            return &r;
        }
    }
    return nullptr;
}

}  // namespace

TEST_CASE("audit traffic: a job's requests counted by shape and outcome", "[audit_traffic]") {
    traffic_query q;
    q.job = "agent";
    traffic_collector c(q);
    traffic_stats stats;
    c.scan(lines, stats);
    const learn::seen_traffic t = c.finish();
    CHECK(t.job == "agent");
    CHECK(t.sessions == 2);
    CHECK(t.first_ts == "2026-11-29T10:00:00.000Z");
    CHECK(t.last_ts == "2026-11-29T10:00:12.000Z");
    CHECK(stats.malformed == 1);
    CHECK(stats.bad_target == 1);
    REQUIRE(t.requests.size() == 6);

    const auto* api = find(t, "api.example.com", 443);
    REQUIRE(api != nullptr);
    CHECK(api->count == 2);
    CHECK(api->outcome == learn::seen_outcome::allowed);
    CHECK(api->address.empty());  // public addresses are folded
    CHECK(api->kind == config::request_kind::connect);

    const auto* fresh = find(t, "new.example.com", 443);
    REQUIRE(fresh != nullptr);
    CHECK(fresh->outcome == learn::seen_outcome::would_deny);
    CHECK(fresh->reason == "no_rule");

    const auto* put = find(t, "api.example.com", 80);
    REQUIRE(put != nullptr);
    CHECK(put->kind == config::request_kind::http);
    CHECK(put->method == "PUT");
    CHECK(put->outcome == learn::seen_outcome::denied);
    CHECK(put->reason == "method");

    const auto* v6 = find(t, "2001:db8::1", 443);
    REQUIRE(v6 != nullptr);
    CHECK(v6->ip_literal);
    CHECK(v6->kind == config::request_kind::connect);

    const auto* wiki = find(t, "wiki.corp.example", 80);
    REQUIRE(wiki != nullptr);
    CHECK(wiki->address == "10.20.0.5");
    CHECK(wiki->method == "GET");

    const auto* git = find(t, "git.example.org", 22);
    REQUIRE(git != nullptr);
    CHECK(git->tcp_rule);

    CHECK(find(t, "other.example", 443) == nullptr);
    CHECK(find(t, "fake.example", 443) == nullptr);
    CHECK(find(t, "late.example.com", 443) == nullptr);
    CHECK(t.not_policy.at("kill_switch") == 1);

    REQUIRE(t.dns.size() == 2);
    CHECK(t.dns[0].name == "api.example.com");
    CHECK(t.dns[0].answered == 1);
    CHECK(t.dns[1].name == "telemetry.example.org");
    CHECK(t.dns[1].denied == 4);  // the repeats line stands for 4 queries
}

TEST_CASE("audit traffic: --since and --until bound the records", "[audit_traffic]") {
    traffic_query q;
    q.job = "agent";
    const auto now = wall_clock::now();
    q.since = parse_time_arg("2026-11-29T10:00:02Z", now);
    q.until = parse_time_arg("2026-11-29T10:00:04Z", now);
    traffic_collector c(q);
    traffic_stats stats;
    c.scan(lines, stats);
    const learn::seen_traffic t = c.finish();
    CHECK(t.requests.size() == 3);
    CHECK(t.first_ts == "2026-11-29T10:00:02.000Z");
    CHECK(t.last_ts == "2026-11-29T10:00:04.000Z");
}

TEST_CASE("audit traffic: job names are compared as written, escapes and all", "[audit_traffic]") {
    traffic_query q;
    q.job = "we\"ird";
    traffic_collector c(q);
    traffic_stats stats;
    c.scan(
        R"({"ts":"2026-11-29T10:00:00.000Z","event":"conn.open","job":"we\"ird","target":"a.example:443","method":"CONNECT"})"
        "\n"
        R"({"ts":"2026-11-29T10:00:00.000Z","event":"conn.open","job":"we","target":"b.example:443","method":"CONNECT"})"
        "\n",
        stats);
    const learn::seen_traffic t = c.finish();
    REQUIRE(t.requests.size() == 1);
    CHECK(t.requests[0].host == "a.example");
}

TEST_CASE("audit traffic: hostile lines (cut anywhere, bytes flipped) are survived",
          "[audit_traffic]") {
    traffic_query q;
    q.job = "agent";
    traffic_collector c(q);
    traffic_stats stats;
    std::size_t at = 0;
    std::vector<std::string> samples;
    while (at < lines.size()) {
        const std::size_t nl = lines.find('\n', at);
        samples.push_back(lines.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
        at = nl == std::string::npos ? lines.size() : nl + 1;
    }
    std::uint32_t seed = 12345;
    const auto next = [&seed] {
        seed = seed * 1664525u + 1013904223u;
        return seed >> 8;
    };
    for (const std::string& s : samples) {
        for (std::size_t cut = 0; cut <= s.size(); ++cut) {
            c.add_line(std::string_view(s).substr(0, cut), stats);
        }
        for (int k = 0; k < 200; ++k) {
            std::string m = s;
            for (int f = 0; f < 3 && !m.empty(); ++f) {
                m[next() % m.size()] = "\"\\{}[],: \x01\xff"[next() % 12];
            }
            c.add_line(m, stats);
            c.scan(m, stats);
        }
    }
    const learn::seen_traffic t = c.finish();
    for (const auto& r : t.requests) {
        CHECK(r.port != 0);
        CHECK_FALSE(r.host.empty());
    }
}

// The property the verbs promise, on hostile input: whatever a (damaged) audit file holds,
// the suggested section loads as a job card and replaying it denies nothing it was learned
// from.
TEST_CASE("audit traffic -> suggest -> replay on damaged fixture files", "[audit_traffic]") {
    const auto slurp = [](const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    };
    const std::string fixture = slurp(std::string(CORDON_TEST_DATA) +
                                      "/../fixtures/policy_learn/audit/cordon-2026-11-29.jsonl");
    REQUIRE(fixture.size() > 1000);
    const std::string list = slurp(std::string(learn::default_public_suffix_path));
    REQUIRE_FALSE(list.empty());
    const auto psl = learn::public_suffix_list::parse(list);
    static const char pool[] = "\"\\{}[],: \x01\xff\nab.0:";
    std::uint32_t seed = 7;
    const auto next = [&seed] {
        seed = seed * 1664525u + 1013904223u;
        return seed >> 8;
    };
    for (int round = 0; round < 300; ++round) {
        std::string m = fixture;
        for (int f = 0; f < round % 40; ++f) {
            m[next() % m.size()] = pool[next() % (sizeof pool)];  // NUL included
        }
        m.resize(next() % (m.size() + 1));
        traffic_query q;
        q.job = "research";
        traffic_collector c(q);
        traffic_stats stats;
        c.scan(m, stats);
        const learn::seen_traffic t = c.finish();
        const learn::suggestion s = learn::suggest(t, psl, {std::size_t(round % 5)});
        std::string text = "listen: { proxy: 127.0.0.1:3128 }\njobs:\n  research:\n    task: t\n";
        const std::string yaml = learn::render_yaml(s);
        for (std::size_t at = 0; at < yaml.size();) {
            const std::size_t nl = yaml.find('\n', at);
            text += "    " + yaml.substr(at, nl - at) + "\n";
            at = nl + 1;
        }
        config::load_result lr = config::load_policy(text, "suggested.yaml");
        INFO(text);
        REQUIRE(lr.ok());
        const auto p = config::compile(std::move(*lr.value));
        const learn::replay_result r = learn::replay(t, *p);
        CHECK(r.newly_denied.empty());
    }
}

// Issue 19: a name with several addresses (Debian's localhost: 127.0.0.1 and ::1). serve
// checks every address the name resolved to and refuses them all when one is not covered;
// suggest must learn each (`resolved`), and replay must check each, as serve does.
TEST_CASE("audit traffic -> suggest -> replay: every address a name resolved to",
          "[audit_traffic][suggest][replay]") {
    const std::string log =
        R"({"ts":"2026-11-29T10:00:00.000Z","event":"conn.open","session":"s-1","job":"agent","client":"127.0.0.1:4000","target":"localhost:8080","ip":"127.0.0.1","resolved":"::1 127.0.0.1 93.184.216.34","method":"GET","rule":"localhost:8080/http","dns_ms":0.1,"connect_ms":0.1})"
        "\n"
        R"({"ts":"2026-11-29T10:00:01.000Z","event":"conn.deny","session":"s-1","job":"agent","client":"127.0.0.1:4001","reason":"private_address","target":"db.test:5432","status":403,"method":"CONNECT","resolved":"10.1.2.3 fd00::7"})"
        "\n"
        // An older record, before `resolved`: its `ip` stands for what was checked.
        R"({"ts":"2026-11-29T10:00:02.000Z","event":"conn.open","session":"s-1","job":"agent","client":"127.0.0.1:4002","target":"old.test:80","ip":"10.9.0.1","method":"GET","rule":"old.test:80/http","dns_ms":0.1,"connect_ms":0.1})"
        "\n";
    traffic_query q;
    q.job = "agent";
    traffic_collector c(q);
    traffic_stats stats;
    c.scan(log, stats);
    const learn::seen_traffic t = c.finish();
    REQUIRE(t.requests.size() == 3);
    const auto* local = find(t, "localhost", 8080);
    REQUIRE(local != nullptr);
    CHECK(local->address == "::1 127.0.0.1");  // the public one folded away
    const auto* db = find(t, "db.test", 5432);
    REQUIRE(db != nullptr);
    CHECK(db->address == "10.1.2.3 fd00::7");
    const auto* old = find(t, "old.test", 80);
    REQUIRE(old != nullptr);
    CHECK(old->address == "10.9.0.1");

    const auto psl = learn::public_suffix_list::parse("");
    const learn::suggestion s = learn::suggest(t, psl, {});
    const learn::suggested_rule* learned = nullptr;
    for (const auto& r : s.rules) {
        if (r.host == "localhost") {
            learned = &r;
        }
    }
    REQUIRE(learned != nullptr);
    CHECK(learned->resolves_to == std::vector<std::string>{"127.0.0.1/32", "::1/128"});

    const auto policy = [](std::string_view egress) {
        std::string text = "listen: { proxy: 127.0.0.1:3128 }\njobs:\n  agent:\n    task: t\n"
                           "    egress:\n" +
                           std::string(egress);
        config::load_result lr = config::load_policy(text, "p.yaml");
        REQUIRE(lr.ok());
        return config::compile(std::move(*lr.value));
    };
    SECTION("the card learned from it: nothing newly denied") {
        const auto p = policy(
            "      - { host: localhost, ports: [8080], protocol: http, methods: [GET],\n"
            "          resolves_to: [127.0.0.1/32, \"::1/128\"] }\n"
            "      - { host: old.test, ports: [80], protocol: http,\n"
            "          resolves_to: [10.9.0.1/32] }\n");
        const learn::replay_result r = learn::replay(t, *p);
        CHECK(r.newly_denied.empty());
        CHECK(r.same_allowed == 2);
        CHECK(r.same_denied == 1);  // db.test: still no resolves_to
        CHECK(r.undetermined.empty());
    }
    SECTION("a card covering only the address connected to: newly denied, as serve does") {
        const auto p = policy(
            "      - { host: localhost, ports: [8080], protocol: http, methods: [GET],\n"
            "          resolves_to: [127.0.0.1/32] }\n"
            "      - { host: old.test, ports: [80], protocol: http, resolves_to: [10.9.0.1/32] }\n"
            "      - { host: db.test, ports: [5432], protocol: tcp, resolves_to: [10.0.0.0/8] }\n");
        const learn::replay_result r = learn::replay(t, *p);
        REQUIRE(r.newly_denied.size() == 1);
        CHECK(r.newly_denied[0].target == "localhost:8080");
        CHECK(r.newly_denied[0].now_reason == "private_address");
        // db.test's recorded addresses decide it: fd00::7 is still not covered (no longer
        // "undetermined", as a denial without `resolved` is).
        CHECK(r.undetermined.empty());
        CHECK(r.newly_allowed.empty());
        CHECK(r.same_denied == 1);
    }
    SECTION("every recorded address covered: a denial becomes newly allowed") {
        const auto p = policy("      - { host: db.test, ports: [5432], protocol: tcp,\n"
                              "          resolves_to: [10.0.0.0/8, \"fd00::/8\"] }\n");
        const learn::replay_result r = learn::replay(t, *p);
        REQUIRE(r.newly_allowed.size() == 1);
        CHECK(r.newly_allowed[0].target == "db.test:5432");
        CHECK(r.undetermined.empty());
    }
}

TEST_CASE("audit traffic: http.request records are inspected requests with their paths",
          "[audit_traffic]") {
    const std::string head =
        R"({"ts":"2026-11-29T10:00:00.000Z","event":"http.request","session":"s-1","job":"agent","client":"10.0.0.2:4000","target":"api.example.com:443",)";
    const std::string text =
        R"({"ts":"2026-11-29T10:00:00.000Z","event":"conn.open","session":"s-1","job":"agent","client":"10.0.0.2:4000","target":"api.example.com:443","ip":"93.184.216.34","method":"CONNECT","rule":"api.example.com:443/https","dns_ms":0.4,"connect_ms":1.1})"
        "\n" +
        head +
        R"("method":"GET","path":"/v1/models/x?key=REDACTED&x=REDACTED","status":200,"credential":"openai","bytes_up":10,"bytes_down":20})"
        "\n" +
        head +
        R"("method":"GET","path":"/v1/models/x?y=REDACTED","status":200,"credential":"openai","bytes_up":10,"bytes_down":20})"
        "\n" +
        head +
        R"("method":"DELETE","path":"/v1/models/x","status":403,"reason":"http_rule","bytes_up":0,"bytes_down":0})"
        "\n" +
        head +
        R"("method":"GET","path":"/other","status":200,"would_deny":"http_rule","bytes_up":0,"bytes_down":0})"
        "\n" +
        head +
        R"("method":"GET","path":"/q/a\"b","status":200,"bytes_up":0,"bytes_down":0})"
        "\n" +
        head + R"("method":"GET","path":"/long/)" + std::string(2000, 'a') +
        R"(","status":200,"bytes_up":0,"bytes_down":0})"
        "\n" +
        head +
        R"("method":"GET","path":"/x","status":403,"reason":"credential_misuse","bytes_up":0,"bytes_down":0})"
        "\n" +
        head +
        R"("status":502,"reason":"upstream_tls","bytes_up":0,"bytes_down":0})"
        "\n";
    traffic_query q;
    q.job = "agent";
    traffic_collector c(q);
    traffic_stats stats;
    c.scan(text, stats);
    const learn::seen_traffic t = c.finish();
    CHECK(stats.bad_target == 0);
    CHECK(t.not_policy.at("credential_misuse") == 1);
    CHECK(t.not_policy.at("upstream_tls") == 1);
    const auto of = [&t](std::string_view method, std::string_view path) {
        for (const auto& r : t.requests) {
            if (r.kind == config::request_kind::inspected && r.method == method && r.path == path) {
                return &r;
            }
        }
        return static_cast<const learn::seen_request*>(nullptr);
    };
    const auto* models = of("GET", "/v1/models/x");  // both queries: one shape
    REQUIRE(models != nullptr);
    CHECK(models->count == 2);
    CHECK(models->credential == "openai");
    CHECK(models->outcome == learn::seen_outcome::allowed);
    const auto* del = of("DELETE", "/v1/models/x");
    REQUIRE(del != nullptr);
    CHECK(del->outcome == learn::seen_outcome::denied);
    CHECK(del->reason == "http_rule");
    const auto* other = of("GET", "/other");
    REQUIRE(other != nullptr);
    CHECK(other->outcome == learn::seen_outcome::would_deny);
    CHECK(of("GET", "/q/a\"b") != nullptr);  // the JSON escape decoded
    const auto* longp = of("GET", "/long");  // cut back to its last whole segment
    REQUIRE(longp != nullptr);
    CHECK(longp->path_cut);
    const auto* tunnel = find(t, "api.example.com", 443);
    REQUIRE(tunnel != nullptr);
    CHECK(tunnel->kind == config::request_kind::connect);
    CHECK(tunnel->https_rule);
}

TEST_CASE("audit traffic: distinct paths per target are bounded", "[audit_traffic]") {
    std::string text;
    for (int i = 0; i < 3000; ++i) {
        text +=
            R"({"ts":"2026-11-29T10:00:00.000Z","event":"http.request","job":"agent","target":"api.example.com:443","method":"GET","path":"/p)" +
            std::to_string(i % 400) + "/" + std::to_string(i) +
            R"(","status":200,"bytes_up":0,"bytes_down":0})"
            "\n";
    }
    traffic_query q;
    q.job = "agent";
    traffic_collector c(q);
    traffic_stats stats;
    c.scan(text, stats);
    const learn::seen_traffic t = c.finish();
    // 1024 whole, then 256 first segments, then "/".
    CHECK(t.requests.size() <= 1024 + 256 + 1);
    CHECK(stats.paths_folded == 3000 - 1024);
    std::uint64_t total = 0;
    for (const auto& r : t.requests) {
        total += r.count;
    }
    CHECK(total == 3000);
    const auto psl = learn::public_suffix_list::parse("com\n");
    const learn::suggestion s = learn::suggest(t, psl, {});
    REQUIRE(s.rules.size() == 1);
    // Every request is still let through by what is learned.
    std::uint64_t learned = 0;
    for (const auto& e : s.rules[0].http) {
        learned += e.requests;
    }
    CHECK(learned == 3000);
}

TEST_CASE("audit traffic: MCP tool calls, and requests refused for their calls",
          "[audit_traffic]") {
    const std::string head = R"({"ts":"2026-12-03T10:00:0)";
    const std::string who = R"(Z","session":"s-1","job":"agent","client":"127.0.0.1:4000",)";
    std::string data;
    int n = 0;
    const auto add = [&](const std::string& rest) {
        data += head + std::to_string(n++) + ".000" + who + rest + "}\n";
    };
    const std::string mcp = R"("event":"tool.call","via":"mcp","server":"mcp.test",)";
    add(mcp + R"("target":"mcp.test:443","tool":"search","id":"1")");
    add(mcp + R"("target":"MCP.test:443","tool":"search","id":"2")");  // the same server
    add(mcp + R"("target":"mcp.test:443","tool":"search","id":"3","reason":"mcp_batch")");
    add(mcp + R"("target":"mcp.test:443","tool":"delete_repo","id":"4","reason":"mcp_tool")");
    add(mcp + R"("target":"mcp.test:443","tool":"search","id":"5","reason":"mcp_tool_changed")");
    add(mcp + R"("target":"mcp.test:80","tool":"fetch_page","id":"6","would_deny":"mcp_tool")");
    add(mcp + R"("target":"not a target","tool":"search")");
    add(R"("event":"tool.call","via":"proxy","tool":"note")");  // posted: nothing decided
    add(R"("event":"conn.deny","reason":"mcp_tool","target":"mcp.test:80","status":200,)"
        R"("method":"POST")");
    add(R"("event":"http.request","target":"mcp.test:443","method":"POST","path":"/mcp",)"
        R"("status":200,"reason":"mcp_tool","bytes_up":10,"bytes_down":20)");

    traffic_query q;
    q.job = "agent";
    traffic_collector c(q);
    traffic_stats stats;
    c.scan(data, stats);
    const learn::seen_traffic t = c.finish();
    CHECK(stats.bad_target == 1);
    CHECK(stats.used == 8);
    CHECK(t.not_policy.empty());  // a refusal for a tool is the MCP rule's, not a kill's

    // The requests refused for their calls were allowed by the egress rules.
    const auto* plain = find(t, "mcp.test", 80);
    REQUIRE(plain != nullptr);
    CHECK(plain->kind == config::request_kind::http);
    CHECK(plain->method == "POST");
    CHECK(plain->outcome == learn::seen_outcome::allowed);
    CHECK(plain->reason.empty());
    const auto* tunnel = find(t, "mcp.test", 443);
    REQUIRE(tunnel != nullptr);
    CHECK(tunnel->kind == config::request_kind::inspected);
    CHECK(tunnel->path == "/mcp");
    CHECK(tunnel->outcome == learn::seen_outcome::allowed);

    // The calls, by server, tool and outcome.
    REQUIRE(t.tool_calls.size() == 4);
    const auto& fetch = t.tool_calls[0];
    CHECK((fetch.host == "mcp.test" && fetch.port == 80 && fetch.tool == "fetch_page"));
    CHECK(fetch.outcome == learn::seen_outcome::would_deny);
    CHECK(fetch.reason == "mcp_tool");
    const auto& del = t.tool_calls[1];
    CHECK((del.port == 443 && del.tool == "delete_repo"));
    CHECK(del.outcome == learn::seen_outcome::denied);
    CHECK(del.reason == "mcp_tool");
    CHECK(del.count == 1);
    const auto& search = t.tool_calls[2];
    CHECK((search.port == 443 && search.tool == "search"));
    CHECK(search.outcome == learn::seen_outcome::allowed);  // mcp_batch: allowed, not sent
    CHECK(search.count == 3);
    CHECK_FALSE(search.ip_literal);
    const auto& changed = t.tool_calls[3];
    CHECK(changed.tool == "search");
    CHECK(changed.outcome == learn::seen_outcome::denied);
    CHECK(changed.reason == "mcp_tool_changed");
}
