#include "proxy/report/worksheet.hpp"

#include <yaml-cpp/yaml.h>
#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <string>

#include "common/time.hpp"
#include "config/load.hpp"
#include "proxy/report/worksheet_render.hpp"

using namespace cordon;
using namespace cordon::proxy;
using namespace cordon::proxy::control;
using namespace cordon::proxy::report;
using namespace cordon::common;

namespace {

const std::string repo = std::string(CORDON_TEST_DATA) + "/../..";

config::policy load_file(const std::string& path) {
    config::load_result r = config::load_policy_file(path);
    for (const auto& e : r.errors) {
        FAIL(e.to_string());
    }
    return std::move(*r.value);
}

config::policy load_text(std::string_view text) {
    config::load_result r = config::load_policy(text, "test.yaml");
    for (const auto& e : r.errors) {
        FAIL(e.to_string());
    }
    return std::move(*r.value);
}

const origin at{"policy.yaml", common::wall_clock::time_point(std::chrono::seconds(1'800'000'000))};

const section& find_section(const model& m, std::string_view key) {
    for (const auto& s : m.sections) {
        if (s.key == key) {
            return s;
        }
    }
    FAIL("no section " << key);
    throw std::logic_error("unreachable");
}

const check& find_check(const model& m, std::string_view sec, std::string_view key) {
    for (const auto& c : find_section(m, sec).checks) {
        if (c.key == key) {
            return c;
        }
    }
    FAIL("no check " << key);
    throw std::logic_error("unreachable");
}

const fact& find_fact(const model& m, std::string_view sec, std::string_view key) {
    for (const auto& f : find_section(m, sec).facts) {
        if (f.key == key) {
            return f;
        }
    }
    FAIL("no fact " << key);
    throw std::logic_error("unreachable");
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

constexpr std::string_view base = R"yaml(listen: { proxy: 127.0.0.1:3128, dns: 127.0.0.1:5353 }
alerts:
  webhook: { url: "https://hooks.example.com/services/T000/SECRETPATH?token=SECRETQUERY" }
kill: { stop_authority: [netops-oncall], max_stop_seconds: 60 }
jobs:
  strict:
    task: "Summarize | <script>alert(1)</script> *tickets* [x](http://evil)"
    egress:
      - { host: api.example.com, ports: [443] }
      - { cidr: 203.0.113.0/24, ports: [22], protocol: tcp }
    filesystem: { scratch: /scratch, never_write: [/etc] }
    identity: { ttl: 30m, mint: /bin/mint, revoke: /bin/revoke }
  learner:
    task: learn its allowlist
    mode: report
    egress:
      - { host: "*.example.org", ports: [443, 8443] }
)yaml";

}  // namespace

TEST_CASE("worksheet: six sections in order, for every job of the examples", "[worksheet]") {
    for (const char* file : {"agent-fleet.yaml", "quickstart.yaml"}) {
        const config::policy p = load_file(repo + "/config/examples/" + file);
        for (const auto& j : p.jobs) {
            INFO(file << " " << j.name);
            const model m = build(p, j, std::nullopt, at);
            REQUIRE(m.sections.size() == 6);
            const char* keys[] = {"job_card", "egress",      "filesystem",
                                  "identity", "kill_switch", "audit"};
            for (std::size_t i = 0; i < 6; ++i) {
                CHECK(m.sections[i].key == keys[i]);
                CHECK(m.sections[i].title.starts_with(std::to_string(i + 1) + ". "));
            }
            REQUIRE(find_section(m, "egress").rows);
            CHECK(find_section(m, "egress").rows->rows.size() == j.egress.size());
            const std::string md = to_markdown(m);
            if (j.mode == config::job_mode::report) {
                CHECK_THAT(first_line(md), Catch::Contains("NOT ENFORCED"));
                CHECK_FALSE(m.enforced);
            } else {
                CHECK(first_line(md) == "# Containment worksheet: `" + j.name + "`");
                CHECK(m.notice.empty());
            }
            const auto v = boost::json::parse(to_json(m));
            CHECK(v.at("job").as_string() == j.name);
            CHECK(v.at("sections").as_object().size() == 6);
        }
    }
}

TEST_CASE("worksheet: boxes follow the policy", "[worksheet]") {
    const config::policy p = load_text(base);
    const model strict = build(p, *p.find_job("strict"), std::nullopt, at);
    const model learner = build(p, *p.find_job("learner"), std::nullopt, at);

    CHECK(find_check(strict, "egress", "default_deny").ticked);
    CHECK(find_check(strict, "egress", "dns_limited").ticked);
    CHECK_FALSE(find_check(learner, "egress", "default_deny").ticked);
    CHECK_THAT(find_check(learner, "egress", "default_deny").why, Catch::Contains("NOT ENFORCED"));
    CHECK_FALSE(find_check(learner, "egress", "dns_limited").ticked);
    CHECK(find_check(learner, "egress", "private_addresses").ticked);  // never relaxed
    CHECK_THAT(find_check(strict, "egress", "private_addresses").why,
               Catch::Contains("this job's exceptions: 203.0.113.0/24:22/tcp (a cidr rule "
                               "inside the documentation range 203.0.113.0/24)"));
    CHECK_THAT(find_check(learner, "egress", "private_addresses").why,
               Catch::Contains("exceptions: none: this job names no resolves_to"));

    CHECK(find_check(strict, "egress", "webhook").ticked);
    CHECK_FALSE(find_check(strict, "egress", "alert_rules_loaded").ticked);  // cannot know

    CHECK(find_check(strict, "filesystem", "scratch_wiped").ticked);
    CHECK_FALSE(find_check(learner, "filesystem", "scratch_wiped").ticked);
    CHECK(find_check(strict, "filesystem", "never_write").ticked);
    CHECK_FALSE(find_check(learner, "filesystem", "never_write").ticked);

    CHECK(find_check(strict, "identity", "mint_hook").ticked);
    CHECK(find_check(strict, "identity", "revoke_hook").ticked);
    CHECK_FALSE(find_check(learner, "identity", "mint_hook").ticked);
    CHECK(find_check(strict, "identity", "long_lived_refused").ticked);

    CHECK(find_check(strict, "kill_switch", "stop_authority").ticked);
    const auto& ports = find_section(learner, "egress").rows->rows.at(0).at(1);
    CHECK(std::get<std::vector<std::string>>(ports) == std::vector<std::string>{"443", "8443"});
}

TEST_CASE("worksheet: the private-address box names this job's own exceptions", "[worksheet]") {
    const config::policy p = load_text(R"yaml(listen: { proxy: 127.0.0.1:3128 }
jobs:
  open:
    task: t
    mode: report
    egress:
      - { host: wiki.corp.example, ports: [80], protocol: http,
          resolves_to: [10.20.0.0/16, "fd00:20::/32"] }
      - { host: api.example.com, ports: [443] }
      - { cidr: 192.168.7.0/24, ports: [5432], protocol: tcp }
      - { cidr: 0.0.0.0/0, ports: [443], protocol: tcp }
      - { cidr: 198.51.0.0/16, ports: [22], protocol: tcp }
  closed:
    task: t
    egress:
      - { host: api.example.com, ports: [443] }
      - { cidr: 0.0.0.0/0, ports: [443], protocol: tcp }
)yaml");
    // Ticked either way: the refusal is unconditional (decide(), check_addresses()).
    const model open_model = build(p, *p.find_job("open"), std::nullopt, at);
    const check& open = find_check(open_model, "egress", "private_addresses");
    CHECK(open.ticked);
    CHECK_THAT(open.why, Catch::Contains("in every mode; this job's exceptions: "
                                         "wiki.corp.example:80/http may resolve into "
                                         "10.20.0.0/16, fd00:20::/32; "
                                         "192.168.7.0/24:5432/tcp (a cidr rule inside the "
                                         "private range 192.168.0.0/16) (cordon's own "
                                         "listeners are refused even there)"));
    // A cidr rule wider than one non-public range opens none of it.
    CHECK_THAT(open.why, !Catch::Contains("0.0.0.0/0"));
    CHECK_THAT(open.why, !Catch::Contains("198.51.0.0/16"));
    CHECK_THAT(open.why, !Catch::Contains("api.example.com"));

    const model closed_model = build(p, *p.find_job("closed"), std::nullopt, at);
    const check& closed = find_check(closed_model, "egress", "private_addresses");
    CHECK(closed.ticked);
    CHECK_THAT(closed.why, Catch::EndsWith("in every mode; exceptions: none: this job names "
                                           "no resolves_to (and no cidr rule in non-public "
                                           "space)"));
}

TEST_CASE("worksheet: state-dependent boxes need a running cordon", "[worksheet]") {
    const config::policy p = load_text(base);
    const config::job& j = *p.find_job("strict");

    SECTION("no running cordon: unticked, and says why") {
        const model m = build(p, j, std::nullopt, at);
        for (const auto* key : {"measured_within_promise", "kills_persist"}) {
            const check& c = find_check(m, "kill_switch", key);
            CHECK_FALSE(c.ticked);
            CHECK_THAT(c.why, Catch::Contains("no running cordon"));
        }
        CHECK_FALSE(find_check(m, "audit", "writable_now").ticked);
        CHECK(std::get<std::string>(find_fact(m, "kill_switch", "last_measured").v) ==
              "not read: no running cordon");
        CHECK(m.state_source.empty());
    }
    running_state st;
    st.source = "test cordon";
    st.audit_healthy = true;
    st.state_store_ok = true;
    SECTION("running, never killed: not yet measured") {
        const model m = build(p, j, st, at);
        CHECK(std::get<std::string>(find_fact(m, "kill_switch", "last_measured").v) ==
              "not yet measured");
        CHECK_FALSE(find_check(m, "kill_switch", "measured_within_promise").ticked);
        CHECK(find_check(m, "kill_switch", "kills_persist").ticked);
        CHECK(find_check(m, "audit", "writable_now").ticked);
        CHECK(m.state_source == "test cordon");
    }
    SECTION("measured within the promise") {
        st.kills = {proxy::control::kill_timing{"network", 61.25, 9873, at.generated},
                    proxy::control::kill_timing{"session", 3.5, 2, at.generated}};
        const model m = build(p, j, st, at);
        const check& c = find_check(m, "kill_switch", "measured_within_promise");
        CHECK(c.ticked);
        CHECK_THAT(c.why, Catch::Contains("network kill: 61.2 ms (9873 connections closed)"));
        CHECK_THAT(std::get<std::string>(find_fact(m, "kill_switch", "last_measured").v),
                   Catch::Contains("session kill: 3.5 ms"));
    }
    SECTION("a kill that closed no connection measured nothing") {
        st.kills = {proxy::control::kill_timing{"session", 0.02, 0, at.generated}};
        const model m = build(p, j, st, at);
        const check& c = find_check(m, "kill_switch", "measured_within_promise");
        CHECK_FALSE(c.ticked);
        CHECK_THAT(c.why, Catch::Contains("last session kill closed no connection: nothing "
                                          "measured"));
        CHECK_THAT(std::get<std::string>(find_fact(m, "kill_switch", "last_measured").v),
                   Catch::Contains("session kill: 0.0 ms (0 connections closed)"));
        st.kills.push_back(proxy::control::kill_timing{"network", 0.01, 0, at.generated});
        CHECK_THAT(find_check(build(p, j, st, at), "kill_switch", "measured_within_promise").why,
                   Catch::Contains("last session and network kills closed no connection: "
                                   "nothing measured"));
    }
    SECTION("an empty kill beside a measured one: the measured one decides") {
        st.kills = {proxy::control::kill_timing{"network", 0.01, 0, at.generated},
                    proxy::control::kill_timing{"session", 3.5, 2, at.generated}};
        const model m = build(p, j, st, at);
        const check& c = find_check(m, "kill_switch", "measured_within_promise");
        CHECK(c.ticked);
        CHECK_THAT(c.why, Catch::Contains("the last network kill closed no connection and "
                                          "proves nothing"));
        // An empty kill beyond the promise still says the promise was not kept.
        st.kills[0].elapsed_ms = 61'000;
        CHECK_FALSE(
            find_check(build(p, j, st, at), "kill_switch", "measured_within_promise").ticked);
    }
    SECTION("measured beyond the promise") {
        st.kills = {proxy::control::kill_timing{"network", 61'000, 1, at.generated}};
        CHECK_FALSE(
            find_check(build(p, j, st, at), "kill_switch", "measured_within_promise").ticked);
    }
    SECTION("audit log failing, store not open") {
        st.audit_healthy = false;
        st.state_store_ok = false;
        const model m = build(p, j, st, at);
        CHECK_FALSE(find_check(m, "audit", "writable_now").ticked);
        CHECK_FALSE(find_check(m, "kill_switch", "kills_persist").ticked);
    }
}

TEST_CASE("worksheet: the webhook appears as its origin only", "[worksheet]") {
    const config::policy p = load_text(base);
    const model m = build(p, *p.find_job("strict"), std::nullopt, at);
    for (const std::string& out : {to_markdown(m), to_json(m)}) {
        CHECK(out.find("SECRETPATH") == std::string::npos);
        CHECK(out.find("SECRETQUERY") == std::string::npos);
        CHECK(out.find("hooks.example.com") != std::string::npos);
    }
}

TEST_CASE("worksheet: Markdown escapes what the policy says", "[worksheet]") {
    const config::policy p = load_text(base);
    const std::string md = to_markdown(build(p, *p.find_job("strict"), std::nullopt, at));
    CHECK(md.find("<script>") == std::string::npos);
    CHECK(md.find("\\<script\\>") != std::string::npos);
    CHECK(md.find("\\*tickets\\*") != std::string::npos);
    CHECK(md.find("\\[x\\]") != std::string::npos);
    CHECK(md.find("Summarize \\| ") != std::string::npos);
    // Headings: the title, then one per section; tables with their delimiter rows.
    CHECK(md.find("\n## 1. Job card\n") != std::string::npos);
    CHECK(md.find("\n## 6. Audit log\n") != std::string::npos);
    CHECK(md.find("| Host / CIDR | Ports | Protocol | Methods | May resolve to (non-public) |\n"
                  "|---|---|---|---|---|\n| `api.example.com` | 443 | tls | - | none |\n") !=
          std::string::npos);
    CHECK(md.find("- [x] **Default: zero outbound") != std::string::npos);
    CHECK(md.find("- [ ] **Prometheus alert rules loaded**") != std::string::npos);
}

TEST_CASE("worksheet: JSON for programs", "[worksheet]") {
    const config::policy p = load_text(base);
    running_state st;
    st.source = "test cordon";
    st.kills = {proxy::control::kill_timing{"session", 3.5, 2, at.generated}};
    const auto v = boost::json::parse(to_json(build(p, *p.find_job("learner"), st, at)));
    CHECK(v.at("enforced").as_bool() == false);
    CHECK(v.at("mode").as_string() == "report");
    CHECK_THAT(std::string(v.at("notice").as_string()), Catch::StartsWith("NOT ENFORCED"));
    const auto& egress = v.at("sections").at("egress");
    CHECK(egress.at("table").as_array().size() == 1);
    CHECK(egress.at("table").at(0).at("target").as_string() == "*.example.org");
    CHECK(egress.at("table").at(0).at("ports").as_array().size() == 2);
    CHECK(egress.at("checks").at("default_deny").at("ticked").as_bool() == false);
    const auto& kill = v.at("sections").at("kill_switch");
    CHECK(kill.at("facts").at("max_stop_seconds").as_int64() == 60);
    CHECK(kill.at("checks").at("measured_within_promise").at("ticked").as_bool());
    CHECK(v.at("sections").at("audit").at("facts").at("retention_days").as_int64() == 90);
}

TEST_CASE("worksheet: the denial alert rules are those of dashboards/alerts.yaml", "[worksheet]") {
    const YAML::Node doc = YAML::LoadFile(repo + "/dashboards/alerts.yaml");
    for (const auto& want : denial_alert_rules()) {
        INFO(want.name);
        bool found = false;
        for (const auto& group : doc["groups"]) {
            for (const auto& rule : group["rules"]) {
                if (rule["alert"] && rule["alert"].as<std::string>() == want.name) {
                    found = true;
                    CHECK_THAT(rule["expr"].as<std::string>(), Catch::Contains(want.metric));
                    CHECK(rule["labels"]["severity"].as<std::string>() == want.severity);
                }
            }
        }
        CHECK(found);
    }
}

TEST_CASE("worksheet: the identity section names the brokered secrets and where they go") {
    const config::policy p = load_text(R"(listen: { proxy: 127.0.0.1:3128 }
inspect: { ca: { cert: /etc/cordon/ca/ca.pem, key: /etc/cordon/ca/ca.key } }
secrets: { openai: { file: /etc/cordon/secrets/openai } }
jobs:
  coder:
    task: t
    egress:
      - host: api.openai.com
        ports: [443]
        protocol: https
        credential: { secret: openai, header: Authorization, format: "Bearer {}" }
    credentials: { OPENAI_API_KEY: openai }
  plain:
    task: t
)");
    const model m = build(p, p.jobs[0], std::nullopt, at);
    const check& c = find_check(m, "identity", "no_key_in_sandbox");
    CHECK(c.ticked);
    CHECK_THAT(c.why, Catch::Contains("openai on api.openai.com:443/https (Authorization)"));
    const model m2 = build(p, p.jobs[1], std::nullopt, at);
    CHECK_FALSE(find_check(m2, "identity", "no_key_in_sandbox").ticked);
}

TEST_CASE("worksheet: MCP servers, their tools, and what cordon decides on them", "[worksheet]") {
    const config::policy p = load_text(R"(listen: { proxy: 127.0.0.1:3128 }
inspect: { ca: { cert: /etc/cordon/ca/ca.pem, key: /etc/cordon/ca/ca.key } }
jobs:
  tooler:
    task: t
    egress:
      - { host: api.example.com, ports: [443] }
      - host: mcp.example.com
        ports: [443]
        protocol: https
        mcp: { tools: [search, fetch_page] }
      - host: tools.internal.test
        ports: [8080, 8081]
        protocol: http
        mcp: { tools: [], max_body: 64KiB }
  watcher:
    task: t
    mode: report
    egress:
      - { host: mcp.example.com, ports: [80], protocol: http, mcp: { tools: [search] } }
  plain:
    task: t
    egress:
      - { host: api.example.com, ports: [443] }
)");
    const model m = build(p, *p.find_job("tooler"), std::nullopt, at);
    const table& t = *find_section(m, "egress").rows;
    REQUIRE(t.keys.back() == "mcp_tools");
    CHECK(t.headers.back() == "MCP tools allowed");
    REQUIRE(t.rows.size() == 3);
    CHECK(std::holds_alternative<std::monostate>(t.rows[0].back()));  // not an MCP rule
    CHECK(std::get<std::vector<std::string>>(t.rows[1].back()) ==
          std::vector<std::string>{"fetch_page", "search"});  // as the policy keeps them
    CHECK(std::get<std::vector<std::string>>(t.rows[2].back()).empty());
    const check& c = find_check(m, "egress", "mcp_tools");
    CHECK(c.ticked);
    CHECK_THAT(c.why, Catch::Contains("mcp.example.com:443/https (tools: fetch_page, search; "
                                      "messages up to 1MiB), tools.internal.test:8080,8081/http "
                                      "(tools: none; messages up to 64KiB)"));
    CHECK_THAT(c.why, Catch::Contains("a tools/call of a tool not listed is refused"));
    CHECK_THAT(c.why, Catch::Contains("tools/list answers are filtered to the listed tools"));
    CHECK_THAT(c.why, Catch::Contains("pinned per session"));
    CHECK_THAT(c.why, Catch::Contains("tool.call with via mcp"));
    CHECK_THAT(find_check(m, "egress", "denials_counted").why,
               Catch::Contains("refused tool calls: tool.call with their reason"));
    CHECK_THAT(c.why, Catch::Contains("CordonMcpToolChanged"));
    const auto& alerts = std::get<std::vector<std::string>>(
        find_fact(m, "egress", "alert_rules").v);
    CHECK(alerts.back() == "CordonMcpToolChanged (critical): an MCP server redefined a tool a "
                           "session had been shown");
    const auto& logged = std::get<std::vector<std::string>>(find_fact(m, "audit", "logged").v);
    CHECK(std::any_of(logged.begin(), logged.end(), [](const std::string& s) {
        return s.starts_with("tool.call with via mcp") && s.ends_with("mcp.tool_changed");
    }));

    // Markdown: the column, its tools as code; "none" for an MCP rule that allows none, "-"
    // for a rule that is not MCP.
    const std::string md = to_markdown(m);
    CHECK(md.find("| Host / CIDR | Ports | Protocol | Methods | May resolve to (non-public) | "
                  "MCP tools allowed |\n|---|---|---|---|---|---|\n"
                  "| `api.example.com` | 443 | tls | - | none | - |\n"
                  "| `mcp.example.com` | 443 | https | any | none | `fetch_page`, `search` |\n"
                  "| `tools.internal.test` | 8080, 8081 | http | any | none | none |\n") !=
          std::string::npos);
    CHECK(md.find("- [x] **MCP tool calls decided and recorded by cordon**: cordon reads") !=
          std::string::npos);
    // JSON: a list per MCP rule, null for the others.
    const auto v = boost::json::parse(to_json(m));
    const auto& rows = v.at("sections").at("egress").at("table").as_array();
    CHECK(rows.at(0).at("mcp_tools").is_null());
    CHECK(rows.at(1).at("mcp_tools") == boost::json::parse(R"(["fetch_page","search"])"));
    CHECK(rows.at(2).at("mcp_tools").as_array().empty());
    CHECK(v.at("sections").at("egress").at("checks").at("mcp_tools").at("ticked").as_bool());

    SECTION("report mode: not enforced, and says what is recorded") {
        const model w = build(p, *p.find_job("watcher"), std::nullopt, at);
        const check& wc = find_check(w, "egress", "mcp_tools");
        CHECK_FALSE(wc.ticked);
        CHECK_THAT(wc.why, Catch::StartsWith("NOT ENFORCED: mode report forwards every tool "
                                             "call and passes tools/list unfiltered"));
        CHECK_THAT(wc.why, Catch::Contains("mcp.example.com:80/http (tools: search;"));
        CHECK_THAT(wc.why, Catch::Contains("would_deny"));
    }
    SECTION("a job without an MCP rule: nothing new") {
        const model n = build(p, *p.find_job("plain"), std::nullopt, at);
        CHECK(find_section(n, "egress").rows->keys.size() == 5);
        for (const auto& ck : find_section(n, "egress").checks) {
            CHECK(ck.key != "mcp_tools");
        }
        const auto& nalerts = std::get<std::vector<std::string>>(
            find_fact(n, "egress", "alert_rules").v);
        CHECK(nalerts.size() == 2);  // CordonEgressDenied, CordonDenialBurst
        const std::string nmd = to_markdown(n);
        CHECK(nmd.find("MCP") == std::string::npos);
        CHECK(nmd.find("mcp") == std::string::npos);
        CHECK(to_json(n).find("mcp") == std::string::npos);
    }
}
