// A rule's `mcp:` part (config/load_mcp.cpp, docs/mcp.md): tools and max_body, on http and
// https rules only; every error says what to write.
#include <catch2/catch.hpp>

#include <string>

#include "config/load.hpp"

using namespace cordon::config;

namespace {

std::string policy_with(std::string_view protocol, std::string_view mcp) {
    return std::string("listen: { proxy: 127.0.0.1:3128 }\n"
                       "inspect: { ca: { cert: /a.pem, key: /a.key } }\n"
                       "jobs:\n  a:\n    task: t\n    egress:\n"
                       "      - host: mcp.example.com\n        ports: [443]\n        protocol: ") +
           std::string(protocol) + "\n        mcp: " + std::string(mcp) + "\n";
}

std::string errors(std::string_view protocol, std::string_view mcp) {
    const auto r = load_policy(policy_with(protocol, mcp), "p.yaml");
    std::string all;
    for (const auto& e : r.errors) {
        all += e.to_string() + "\n";
    }
    return all;
}

}  // namespace

TEST_CASE("mcp load: tools and max_body", "[load][mcp]") {
    const auto r = load_policy(policy_with("https", "{ tools: [search, fetch_page, a.b/c-d_e] }"),
                               "p.yaml");
    for (const auto& e : r.errors) {
        FAIL(e.to_string());
    }
    const egress_rule& rule = r.value->jobs[0].egress[0];
    REQUIRE(rule.mcp);
    CHECK(rule.mcp->tools == std::vector<std::string>{"a.b/c-d_e", "fetch_page", "search"});
    CHECK(rule.mcp->max_body == 1024 * 1024);
    CHECK(rule.mcp->allows_tool("search"));
    CHECK_FALSE(rule.mcp->allows_tool("Search"));
    CHECK_FALSE(rule.mcp->allows_tool("searc"));

    const auto p = load_policy(policy_with("http", "{ tools: [], max_body: 64KiB }"), "p.yaml");
    REQUIRE(p.errors.empty());
    CHECK(p.value->jobs[0].egress[0].mcp->tools.empty());  // allows no tool at all
    CHECK(p.value->jobs[0].egress[0].mcp->max_body == 64 * 1024);
    CHECK_FALSE(p.value->jobs[0].egress[0].mcp->allows_tool(""));
}

TEST_CASE("mcp load: what is refused, and why", "[load][mcp]") {
    CHECK(errors("tls", "{ tools: [search] }").find("only to protocol: http and https") !=
          std::string::npos);
    CHECK(errors("tcp", "{ tools: [search] }").find("only to protocol: http and https") !=
          std::string::npos);
    CHECK(errors("https", "{}").find("missing 'tools'") != std::string::npos);
    CHECK(errors("https", "{ tools: search }").find("tools") != std::string::npos);
    CHECK(errors("https", "{ tools: [search, search] }").find("listed twice") != std::string::npos);
    CHECK(errors("https", "{ tools: [\"*\"] }").find("not a tool name") != std::string::npos);
    CHECK(errors("https", "{ tools: [\"a b\"] }").find("not a tool name") != std::string::npos);
    CHECK(errors("https", "{ tools: [\"\"] }").find("must not be empty") != std::string::npos);
    CHECK(errors("https", "{ tools: [" + std::string(129, 'a') + "] }").find("not a tool name") !=
          std::string::npos);
    CHECK(errors("https", "{ tools: [search], max_body: 100 }").find("1KiB to 16MiB") !=
          std::string::npos);
    CHECK(errors("https", "{ tools: [search], max_body: 17MiB }").find("1KiB to 16MiB") !=
          std::string::npos);
    CHECK(errors("https", "{ tools: [search], bogus: 1 }").find("unknown key 'bogus'") !=
          std::string::npos);
    CHECK(errors("https", "[search]").find("mcp") != std::string::npos);
}
