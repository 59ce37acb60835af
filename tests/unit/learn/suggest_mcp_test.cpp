// `cordon policy suggest` and `replay` on MCP servers: `mcp.tools` learned from the tool
// calls seen (learn.hpp's seen_tool_call), and tool calls decided again.
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

constexpr std::string_view list = "com\norg\nnet\ntest\n";

seen_request req(std::string host, std::uint16_t port, request_kind kind, std::string method = {},
                 std::string path = {}, std::uint64_t count = 1) {
    seen_request r;
    r.host = std::move(host);
    r.ip_literal = r.host.find_first_not_of("0123456789.") == std::string::npos;
    r.port = port;
    r.kind = kind;
    r.method = std::move(method);
    r.path = std::move(path);
    r.count = count;
    return r;
}

seen_tool_call call(std::string host, std::uint16_t port, std::string tool, std::uint64_t count,
                    seen_outcome o = seen_outcome::allowed, std::string reason = {}) {
    seen_tool_call c;
    c.host = std::move(host);
    c.ip_literal = c.host.find_first_not_of("0123456789.") == std::string::npos;
    c.port = port;
    c.tool = std::move(tool);
    c.count = count;
    c.outcome = o;
    c.reason = std::move(reason);
    return c;
}

const suggested_rule* find_rule(const suggestion& s, std::string_view host, std::uint16_t port) {
    for (const auto& r : s.rules) {
        if ((r.host == host || r.cidr == host) &&
            std::find(r.ports.begin(), r.ports.end(), port) != r.ports.end()) {
            return &r;
        }
    }
    return nullptr;
}

std::vector<std::string> tool_names(const suggested_rule& r) {
    std::vector<std::string> out;
    for (const auto& t : r.mcp->tools) {
        out.push_back(t.name);
    }
    return out;
}

std::string policy_text(std::string_view egress_yaml) {
    std::string text = "listen: { proxy: 127.0.0.1:3128 }\n"
                       "inspect: { ca: { cert: /ca.pem, key: /ca.key } }\njobs:\n"
                       "  agent:\n    task: learned\n";
    std::size_t at = 0;
    while (at < egress_yaml.size()) {
        const std::size_t nl = egress_yaml.find('\n', at);
        text += "    " + std::string(egress_yaml.substr(at, nl - at)) + "\n";
        at = nl + 1;
    }
    return text;
}

std::shared_ptr<const compiled_policy> load_egress(std::string_view egress_yaml) {
    load_result r = load_policy(policy_text(egress_yaml), "suggested.yaml");
    for (const auto& e : r.errors) {
        FAIL(e.to_string() + "\n" + policy_text(egress_yaml));
    }
    return compile(std::move(*r.value));
}

// An inspected MCP server (mcp.example.com:443) with two sibling names and another port of
// its own; a plain-HTTP one on an IP literal.
seen_traffic traffic() {
    seen_traffic t;
    t.job = "agent";
    seen_request tunnel = req("mcp.example.com", 443, request_kind::connect, {}, {}, 2);
    tunnel.https_rule = true;
    t.requests.push_back(tunnel);
    t.requests.push_back(req("mcp.example.com", 443, request_kind::inspected, "POST", "/mcp", 9));
    t.requests.push_back(req("mcp.example.com", 443, request_kind::inspected, "GET", "/mcp", 1));
    t.requests.push_back(req("mcp.example.com", 8443, request_kind::connect));
    for (const char* n : {"a", "b"}) {
        t.requests.push_back(req(std::string(n) + ".example.com", 443, request_kind::connect));
    }
    t.requests.push_back(req("93.184.216.34", 8080, request_kind::http, "POST", {}, 3));
    t.tool_calls = {
        call("mcp.example.com", 443, "search", 5),
        call("mcp.example.com", 443, "fetch_page", 1, seen_outcome::would_deny, "mcp_tool"),
        call("mcp.example.com", 443, "delete_repo", 2, seen_outcome::denied, "mcp_tool"),
        call("mcp.example.com", 443, "search", 1, seen_outcome::denied, "mcp_tool_changed"),
        call("mcp.example.com", 443, "bad name", 1, seen_outcome::denied, "mcp_tool"),
        call("93.184.216.34", 8080, "lookup.v2", 3),
        call("gone.example.net", 80, "search", 4),  // no request to it in the window
    };
    return t;
}

}  // namespace

TEST_CASE("suggest: an MCP server's rule gets the tools called at it", "[suggest]") {
    const auto psl = public_suffix_list::parse(list);
    const seen_traffic t = traffic();
    const suggestion s = suggest(t, psl, {});

    const suggested_rule* m = find_rule(s, "mcp.example.com", 443);
    REQUIRE(m != nullptr);
    CHECK(m->proto == protocol::https);
    CHECK(m->ports == std::vector<std::uint16_t>{443});  // the MCP port only
    REQUIRE(m->mcp);
    // Every tool called: allowed, would-deny and refused (mcp_tool) alike, and the one
    // refused as changed (its name was listed); never a name no policy can list.
    CHECK(tool_names(*m) == std::vector<std::string>{"delete_repo", "fetch_page", "search"});
    CHECK(m->mcp->unlisted == 1);
    CHECK(m->mcp->tools[0].counts.denied == 2);
    CHECK(m->mcp->tools[1].counts.would_deny == 1);
    CHECK(m->mcp->tools[2].counts.allowed == 5);
    CHECK(m->mcp->tools[2].changed == 1);
    CHECK(m->counts.total() == 2 + 9 + 1);  // requests, not calls

    // Its other port keeps a rule of its own, without mcp.
    const suggested_rule* other = find_rule(s, "mcp.example.com", 8443);
    REQUIRE(other != nullptr);
    CHECK(other != m);
    CHECK(other->proto == protocol::tls);
    CHECK_FALSE(other->mcp);
    // Siblings collapse into a wildcard without the MCP rule, which stays exact (`mcp` on a
    // wildcard would make every name's traffic MCP); only the name's other port joins it.
    const suggestion wide = suggest(t, psl, {1});
    const suggested_rule* wild = find_rule(wide, "*.example.com", 443);
    REQUIRE(wild != nullptr);
    CHECK_FALSE(wild->mcp);
    CHECK(wild->ports == std::vector<std::uint16_t>{443, 8443});
    const suggested_rule* exact = find_rule(wide, "mcp.example.com", 443);
    REQUIRE(exact != nullptr);
    CHECK(exact->mcp);
    CHECK(exact->ports == std::vector<std::uint16_t>{443});

    // A plain-HTTP server on an IP literal: a cidr rule with mcp.
    const suggested_rule* lit = find_rule(s, "93.184.216.34/32", 8080);
    REQUIRE(lit != nullptr);
    CHECK(lit->proto == protocol::http);
    CHECK(lit->methods == std::vector<std::string>{"POST"});
    REQUIRE(lit->mcp);
    CHECK(tool_names(*lit) == std::vector<std::string>{"lookup.v2"});

    // Calls to a server no request reached: left out, said so.
    REQUIRE(s.left_out.size() == 1);
    CHECK(s.left_out[0].target == "gone.example.net:80");
    CHECK(s.left_out[0].tool_calls);
    CHECK(s.left_out[0].counts.allowed == 4);
    CHECK(s.tool_calls.total() == 5 + 1 + 2 + 1 + 1 + 3 + 4);

    const std::string yaml = render_yaml(s);
    INFO(yaml);
    CHECK(yaml.find("# from 18 requests (18 allowed) and 17 tool calls (12 allowed, "
                    "1 would-deny, 4 denied) of 0 sessions.") != std::string::npos);
    CHECK(yaml.find("  # MCP tools called: delete_repo 2 (2 refused), fetch_page 1 (1 "
                    "would-deny), search 6 (1 changed)\n"
                    "  # refused by the rule's mcp.tools (mcp_tool), learned as denied requests "
                    "are: delete_repo\n"
                    "  # (tools/list hid them from the agent: keep them only if it needs them)\n"
                    "  # refused as changed (mcp_tool_changed: redefined by the server within a "
                    "session): search\n"
                    "  # (check the server before keeping them)\n"
                    "  # 1 call naming a tool no policy can list") != std::string::npos);
    CHECK(yaml.find("  - host: mcp.example.com\n    ports: [443]\n    protocol: https\n"
                    "    mcp: { tools: [delete_repo, fetch_page, search] }\n    http:\n") !=
          std::string::npos);
    CHECK(yaml.find("  - { cidr: 93.184.216.34/32, ports: [8080], protocol: http, methods: [POST], "
                    "mcp: { tools: [\"lookup.v2\"] } }\n") != std::string::npos);
    CHECK(yaml.find("#   gone.example.net:80, 4 tool calls (4 allowed): MCP tool calls recorded "
                    "for it, but no request to it") != std::string::npos);

    const auto json = boost::json::parse(render_json(s));
    const auto& egress = json.at("egress").as_array();
    bool found = false;
    for (const auto& r : egress) {
        if (r.as_object().contains("mcp") && r.at("protocol") == "https") {
            found = true;
            CHECK(r.at("mcp").at("tools") ==
                  boost::json::parse(R"(["delete_repo","fetch_page","search"])"));
            CHECK(r.at("seen").at("tools").at("search") ==
                  boost::json::parse(
                      R"({"calls":6,"allowed":5,"would_deny":0,"denied":0,"changed":1})"));
            CHECK(r.at("seen").at("tools_unlisted") == 1);
        }
    }
    CHECK(found);
    CHECK(json.at("tool_calls").at("requests") == 17);
    CHECK(json.at("not_learned").at(0).at("tool_calls") == true);

    // The section loads: each MCP rule carries its tools.
    const auto p = load_egress(yaml);
    const job& j = p->source().jobs.at(0);
    int with_mcp = 0;
    for (const auto& r : j.egress) {
        if (r.mcp) {
            ++with_mcp;
            CHECK((r.proto == protocol::https || r.proto == protocol::http));
        }
    }
    CHECK(with_mcp == 2);
}

TEST_CASE("suggest then replay: MCP tool calls decided again", "[suggest][replay]") {
    const auto psl = public_suffix_list::parse(list);
    seen_traffic t = traffic();
    t.tool_calls.pop_back();  // gone.example.net: no request, no rule
    const auto learned = load_egress(render_yaml(suggest(t, psl, {})));

    SECTION("the suggestion: refused and would-deny calls newly allowed, nothing newly denied") {
        const replay_result r = replay(t, *learned);
        CHECK(r.newly_denied.empty());
        CHECK(r.undetermined.empty());
        CHECK(r.tool_calls == 13);
        std::vector<std::pair<std::string, std::uint64_t>> allowed;
        for (const auto& row : r.newly_allowed) {
            if (!row.tool.empty()) {
                allowed.emplace_back(row.tool, row.count);
                CHECK(row.kind == request_kind::inspected);
                CHECK(row.now_rule == "mcp.example.com:443/https");
            }
        }
        std::sort(allowed.begin(), allowed.end());
        CHECK(allowed == std::vector<std::pair<std::string, std::uint64_t>>{{"delete_repo", 2},
                                                                            {"fetch_page", 1}});
        CHECK(r.same_tools_allowed == 5 + 3);
        // refused as changed (listed: the server's change stands) and the unlistable name
        CHECK(r.same_tools_denied == 1 + 1);
        const std::string table = render_table(r, "learned.yaml");
        CHECK(table.find(" and 13 tool calls") != std::string::npos);
        CHECK(table.find("tools/call delete_repo (https mcp.example.com:443)") !=
              std::string::npos);
        CHECK(table.find("tool calls: 8 allowed, 2 denied") != std::string::npos);
        const auto json = boost::json::parse(render_json(r, "learned.yaml"));
        CHECK(json.at("tool_calls").at("replayed") == 13);
        bool row_found = false;
        for (const auto& row : json.at("newly_allowed").as_array()) {
            if (row.at("kind") == "tool_call" && row.at("tool") == "delete_repo") {
                row_found = true;
                CHECK(row.at("via") == "inspected");
                CHECK(row.at("calls") == 2);
                CHECK(row.at("was") == "denied");
                CHECK(row.at("was_reason") == "mcp_tool");
            }
        }
        CHECK(row_found);
    }
    SECTION("fewer tools: the calls of the others newly denied (mcp_tool)") {
        const auto tight = load_egress(R"(egress:
  - { host: mcp.example.com, ports: [443], protocol: https, mcp: { tools: [fetch_page] } }
  - { host: mcp.example.com, ports: [8443] }
  - { host: "*.example.com", ports: [443] }
  - { cidr: 93.184.216.34/32, ports: [8080], protocol: http, mcp: { tools: [lookup.v2] } }
)");
        const replay_result r = replay(t, *tight);
        std::vector<std::string> denied;
        for (const auto& row : r.newly_denied) {
            if (!row.tool.empty()) {
                denied.push_back(row.tool + " " + row.now_reason + " " + std::to_string(row.count));
            }
        }
        CHECK(denied == std::vector<std::string>{"search mcp_tool 5"});
        CHECK(render_table(r, "tight.yaml")
                  .find("newly denied: 0 targets, 0 requests, 5 tool calls (1 tool)\n") !=
              std::string::npos);
    }
    SECTION("a rule without mcp lets every call through, undecided, and says so") {
        const auto loose = load_egress(R"(egress:
  - { host: mcp.example.com, ports: [443], protocol: https }
  - { cidr: 93.184.216.34/32, ports: [8080], protocol: http, methods: [POST] }
)");
        const replay_result r = replay(t, *loose);
        bool said = false;
        for (const auto& row : r.newly_allowed) {
            if (row.tool == "delete_repo") {
                said = row.now_rule == "mcp.example.com:443/https (no mcp: calls not decided)";
            }
        }
        CHECK(said);
    }
    SECTION("no rule for the server: its calls newly denied with the request's reason") {
        const auto none = load_egress("egress:\n  - { host: a.example.com, ports: [443] }\n");
        const replay_result r = replay(t, *none);
        std::vector<std::string> denied;
        for (const auto& row : r.newly_denied) {
            if (!row.tool.empty()) {
                denied.push_back(row.tool + " " + row.now_reason);
            }
        }
        std::sort(denied.begin(), denied.end());
        CHECK(denied == std::vector<std::string>{"lookup.v2 no_rule", "search no_rule"});
    }
}
