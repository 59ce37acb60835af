#include "config/decide.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/load.hpp"

using namespace cordon::config;

namespace {

std::shared_ptr<const compiled_policy> load_fixture(const std::string& name) {
    load_result r = load_policy_file(std::string(CORDON_TEST_DATA) + "/policies/" + name);
    for (const auto& e : r.errors) {
        FAIL(e.to_string());
    }
    return compile(std::move(*r.value));
}

struct row {
    std::string host;
    std::uint16_t port;
    request_kind kind;
    std::string method;
    deny_reason reason;
    int rule;  // allowing rule, or the closest match for a denial; -1 for none
};

constexpr auto C = request_kind::connect;
constexpr auto H = request_kind::http;
constexpr auto ok = deny_reason::none;

}  // namespace

TEST_CASE("decision table: (host, port, protocol) -> decision", "[decide]") {
    const auto p = load_fixture("decide.yaml");
    using R = deny_reason;
    const std::vector<row> table{
        // Exact names; exact wins over the wildcard that also matches.
        {"api.example.com", 443, C, "", ok, 0},
        {"API.Example.COM", 443, C, "", ok, 0},
        {"api.example.com.", 443, C, "", ok, 0},
        {"api.example.com", 8443, C, "", ok, 1},  // wildcard grants what exact does not
        {"api.example.com", 80, H, "GET", ok, 5},
        {"api.example.com", 80, H, "DELETE", ok, 5},  // rule 5 names no methods
        {"api.example.com", 80, C, "", R::protocol, 5},
        {"api.example.com", 22, C, "", R::port, 0},
        {"api.example.com", 443, H, "GET", R::protocol, 0},
        // Wildcards: strictly below, any depth; never the apex, never a look-alike.
        {"www.example.com", 443, C, "", ok, 1},
        {"a.b.c.d.example.com", 443, C, "", ok, 1},
        {"www.example.com", 8443, C, "", ok, 1},
        {"www.example.com", 444, C, "", R::port, 1},
        {"example.com", 443, C, "", R::no_rule, -1},
        {"badexample.com", 443, C, "", R::no_rule, -1},
        {"example.com.evil.net", 443, C, "", R::no_rule, -1},
        {"www.example.co", 443, C, "", R::no_rule, -1},
        {"wwwexample.com", 443, C, "", R::no_rule, -1},
        // A more specific wildcard is tried first, but rules only grant.
        {"img.cdn.example.com", 80, H, "GET", ok, 2},
        {"img.cdn.example.com", 80, H, "HEAD", ok, 2},
        {"img.cdn.example.com", 80, H, "POST", R::method, 2},
        {"img.cdn.example.com", 443, C, "", ok, 1},
        {"cdn.example.com", 443, C, "", ok, 1},
        {"cdn.example.com", 80, H, "GET", R::port, 1},
        {"x.y.cdn.example.com", 80, H, "GET", ok, 2},
        {"x.y.cdn.example.com", 81, H, "GET", R::port, 2},
        // tcp rules carry CONNECT, not plain HTTP.
        {"raw.example.org", 22, C, "", ok, 3},
        {"raw.example.org", 2222, C, "", ok, 3},
        {"raw.example.org", 23, C, "", R::port, 3},
        {"raw.example.org", 22, H, "GET", R::protocol, 3},
        {"other.example.org", 22, C, "", R::no_rule, -1},
        {"example.org", 22, C, "", R::no_rule, -1},
        // http rule with methods.
        {"wiki.corp.example", 80, H, "GET", ok, 4},
        {"wiki.corp.example", 80, H, "POST", R::method, 4},
        {"wiki.corp.example", 80, H, "get", R::method, 4},  // methods are case-sensitive
        {"wiki.corp.example", 80, C, "", R::protocol, 4},
        {"wiki.corp.example", 443, C, "", R::port, 4},
        {"WIKI.CORP.EXAMPLE.", 80, H, "GET", ok, 4},
        {"corp.example", 80, H, "GET", R::no_rule, -1},
        // Punycode names are names; a deep wildcard.
        {"xn--mnchen-3ya.de", 443, C, "", ok, 11},
        {"XN--MNCHEN-3YA.DE", 443, C, "", ok, 11},
        {"z.a.b.c.example.net", 443, C, "", ok, 12},
        {"a.b.c.example.net", 443, C, "", R::no_rule, -1},
        {"b.c.example.net", 443, C, "", R::no_rule, -1},
        {"localhost", 8080, H, "GET", ok, 13},
        {"localhost", 8081, H, "GET", R::port, 13},
        {"localhost", 8080, C, "", R::protocol, 13},
        // Malformed names are bad requests, never lookups.
        {"", 443, C, "", R::bad_request, -1},
        {".", 443, C, "", R::bad_request, -1},
        {"api..example.com", 443, C, "", R::bad_request, -1},
        {".api.example.com", 443, C, "", R::bad_request, -1},
        {"api.example.com..", 443, C, "", R::bad_request, -1},
        {"api example.com", 443, C, "", R::bad_request, -1},
        {std::string("api.example.com\0x", 17), 443, C, "", R::bad_request, -1},
        {"api%2eexample.com", 443, C, "", R::bad_request, -1},
        {"user@api.example.com", 443, C, "", R::bad_request, -1},
        {"api.example.com\\", 443, C, "", R::bad_request, -1},
        {"api.example.com/x", 443, C, "", R::bad_request, -1},
        {"api.example.com:443", 443, C, "", R::bad_request, -1},
        {"api_x.example.com", 443, C, "", R::bad_request, -1},
        {"-api.example.com", 443, C, "", R::bad_request, -1},
        {"api-.example.com", 443, C, "", R::bad_request, -1},
        {"m\xc3\xbcnchen.de", 443, C, "", R::bad_request, -1},
        {std::string(64, 'a') + ".example.com", 443, C, "", R::bad_request, -1},
        {"*.example.com", 443, C, "", R::bad_request, -1},
        {"api.example.com", 0, C, "", R::bad_request, -1},
        // IP literals match cidr rules only.
        {"203.0.113.7", 22, C, "", ok, 6},
        {"203.0.113.7", 23, C, "", R::port, 6},
        {"203.0.113.7", 22, H, "GET", R::protocol, 6},
        {"203.0.114.7", 22, C, "", R::port, 8} /* only 0/0 */,
        {"10.1.2.3", 5432, C, "", ok, 7},
        {"10.2.2.3", 5432, C, "", R::private_address, -1},
        {"10.1.2.3", 5433, C, "", R::port, 7},
        {"[2001:db8::1]", 443, C, "", ok, 9},
        {"2001:db8::1", 443, C, "", ok, 9},
        {"[2001:DB8:0:0::1]", 443, C, "", ok, 9},
        {"[2001:db9::1]", 443, C, "", R::no_rule, -1},
        // 0.0.0.0/0 opens public addresses only: never loopback, metadata or private.
        {"93.184.216.34", 8080, H, "GET", ok, 8},
        {"8.8.8.8", 8080, H, "POST", ok, 8},
        {"127.0.0.1", 8080, H, "GET", R::private_address, -1},
        {"10.9.9.9", 8080, H, "GET", R::private_address, -1},
        {"192.168.1.1", 8080, H, "GET", R::private_address, -1},
        {"100.64.0.1", 8080, H, "GET", R::private_address, -1},
        {"0.0.0.0", 8080, H, "GET", R::private_address, -1},
        {"224.0.0.1", 8080, H, "GET", R::private_address, -1},
        {"169.254.169.254", 8080, H, "GET", R::port, 10},
        // Metadata only through the /32 rule that names it.
        {"169.254.169.254", 80, H, "GET", ok, 10},
        {"169.254.169.254", 80, H, "PUT", R::method, 10},
        {"169.254.169.253", 80, H, "GET", R::private_address, -1},
        // Loopback and private literals without a rule are flagged as private_address.
        {"127.0.0.1", 22, C, "", R::private_address, -1},
        {"[::1]", 443, C, "", R::private_address, -1},
        {"[::ffff:127.0.0.1]", 22, C, "", R::private_address, -1},
        {"[::ffff:203.0.113.7]", 22, C, "", ok, 6},                 // mapped is the IPv4 address
        {"[64:ff9b::7f00:1]", 443, C, "", R::private_address, -1},  // NAT64 of loopback
        {"[2002:7f00:1::]", 443, C, "", R::private_address, -1},    // 6to4 of loopback
        {"[fe80::1]", 443, C, "", R::private_address, -1},
        {"[fc00::1]", 443, C, "", R::private_address, -1},
        {"[fd00:ec2::254]", 80, H, "GET", R::private_address, -1},
        {"[fe80::1%25eth0]", 443, C, "", R::bad_request, -1},
        // Non-canonical IPv4 forms are refused outright, never resolved as names.
        {"2130706433", 80, H, "GET", R::bad_request, -1},
        {"0177.0.0.1", 80, H, "GET", R::bad_request, -1},
        {"0x7f000001", 80, H, "GET", R::bad_request, -1},
        {"0x7f.0.0.1", 80, H, "GET", R::bad_request, -1},
        {"127.1", 80, H, "GET", R::bad_request, -1},
        {"127.0.0.1.", 80, H, "GET", R::bad_request, -1},
        {"203.0.113.07", 22, C, "", R::bad_request, -1},
        {"3405803783", 22, C, "", R::bad_request, -1},  // 203.0.113.7 as one number
        {"256.0.0.1", 22, C, "", R::bad_request, -1},
        {"1.2.3.4.5", 22, C, "", R::bad_request, -1},
        {"api.example.0x10", 443, C, "", R::bad_request, -1},
        {"[203.0.113.7]", 22, C, "", R::bad_request, -1},
        {"[api.example.com]", 443, C, "", R::bad_request, -1},
    };
    REQUIRE(table.size() >= 100);
    for (const auto& t : table) {
        INFO("host=" << t.host << " port=" << t.port
                     << " kind=" << (t.kind == C ? "connect" : "http") << " method=" << t.method);
        decide_args a;
        a.job = "web";
        a.host = t.host;
        a.port = t.port;
        a.kind = t.kind;
        a.method = t.method;
        const decision d = decide(a, *p);
        CHECK(to_string(d.reason) == to_string(t.reason));
        CHECK(d.allowed() == (t.reason == ok));
        if (t.rule >= 0) {
            CHECK(d.rule_index == t.rule);
            REQUIRE(d.rule != nullptr);
            CHECK(d.rule == &p->source().jobs[0].egress[static_cast<std::size_t>(t.rule)]);
        } else if (t.rule == -1) {
            CHECK(d.rule == nullptr);
        }
    }
}

TEST_CASE("a job with no egress allows nothing", "[decide]") {
    const auto p = load_fixture("decide.yaml");
    for (const char* host : {"api.example.com", "203.0.113.7", "localhost"}) {
        decide_args a;
        a.job = "empty";
        a.host = host;
        a.port = 443;
        CHECK(decide(a, *p).reason != deny_reason::none);
    }
}

TEST_CASE("an unknown job is denied", "[decide]") {
    const auto p = load_fixture("decide.yaml");
    decide_args a;
    a.job = "nobody";
    a.host = "api.example.com";
    a.port = 443;
    CHECK(decide(a, *p).reason == deny_reason::unknown_job);
}

TEST_CASE("check_addresses: resolution into non-public ranges", "[decide]") {
    const auto p = load_fixture("decide.yaml");
    decide_args a;
    a.job = "web";
    a.kind = request_kind::http;
    a.method = "GET";
    a.port = 80;
    a.host = "wiki.corp.example";
    const decision wiki = decide(a, *p);
    REQUIRE(wiki.allowed());
    a.host = "api.example.com";
    const decision api = decide(a, *p);
    REQUIRE(api.allowed());

    auto ip = [](const char* s) { return *parse_ip(s); };
    auto check = [](const decision& d, std::vector<ip_address> addrs) {
        return check_addresses(d, addrs).reason;
    };
    SECTION("public addresses pass for any rule") {
        CHECK(check(api, {ip("93.184.216.34"), ip("2606:2800:220:1::1")}) == deny_reason::none);
    }
    SECTION("resolves_to opens exactly its range") {
        CHECK(check(wiki, {ip("10.20.0.5")}) == deny_reason::none);
        CHECK(check(wiki, {ip("10.20.255.255"), ip("93.184.216.34")}) == deny_reason::none);
        CHECK(check(wiki, {ip("10.21.0.5")}) == deny_reason::private_address);
        CHECK(check(wiki, {ip("127.0.0.1")}) == deny_reason::private_address);
        CHECK(check(wiki, {ip("::ffff:10.20.0.5")}) == deny_reason::none);
    }
    SECTION("a rule without resolves_to refuses every non-public address") {
        for (const char* s :
             {"127.0.0.1", "10.0.0.1", "172.16.0.1", "192.168.0.1", "169.254.169.254", "100.64.0.1",
              "0.0.0.0", "::1", "fe80::1", "fd00::1", "64:ff9b::a00:1",
              "2002:a00:1::", "::ffff:127.0.0.1", "255.255.255.255", "224.0.0.251", "192.0.2.1"}) {
            INFO(s);
            CHECK(check(api, {ip(s)}) == deny_reason::private_address);
        }
    }
    SECTION("one refused address refuses the whole answer") {
        CHECK(check(api, {ip("93.184.216.34"), ip("127.0.0.1")}) == deny_reason::private_address);
        CHECK(check(wiki, {ip("10.20.0.1"), ip("10.30.0.1")}) == deny_reason::private_address);
    }
    SECTION("a denial passes through unchanged") {
        decision denied;
        denied.reason = deny_reason::port;
        CHECK(check(denied, {ip("127.0.0.1")}) == deny_reason::port);
    }
}

TEST_CASE("prefix_allows: a prefix opens a non-public address only from inside its range",
          "[decide]") {
    auto net = [](const char* s) { return *parse_cidr(s).value; };
    auto ip = [](const char* s) { return *parse_ip(s); };
    CHECK(prefix_allows(net("10.20.0.0/16"), ip("10.20.1.1")));
    CHECK_FALSE(prefix_allows(net("10.20.0.0/16"), ip("10.21.1.1")));
    CHECK_FALSE(prefix_allows(net("0.0.0.0/0"), ip("10.21.1.1")));
    CHECK_FALSE(prefix_allows(net("8.0.0.0/5"), ip("10.21.1.1")));  // wider than 10/8
    CHECK(prefix_allows(net("0.0.0.0/0"), ip("8.8.8.8")));
    CHECK(prefix_allows(net("127.0.0.0/8"), ip("127.0.0.1")));
    CHECK_FALSE(prefix_allows(net("169.254.0.0/16"), ip("169.254.169.254")));
    CHECK(prefix_allows(net("169.254.169.254/32"), ip("169.254.169.254")));
    CHECK_FALSE(prefix_allows(net("::/0"), ip("::1")));
    CHECK(prefix_allows(net("::/0"), ip("2606:4700::1")));
    CHECK_FALSE(prefix_allows(net("10.0.0.0/8"), ip("::1")));
}

TEST_CASE("deny reasons have stable names", "[decide]") {
    CHECK(to_string(deny_reason::none) == "none");
    CHECK(to_string(deny_reason::no_rule) == "no_rule");
    CHECK(to_string(deny_reason::port) == "port");
    CHECK(to_string(deny_reason::private_address) == "private_address");
    CHECK(to_string(deny_reason::bad_request) == "bad_request");
    CHECK(to_string(deny_reason::sni_mismatch) == "sni_mismatch");
    CHECK(to_string(deny_reason::kill_switch) == "kill_switch");
    CHECK(to_string(deny_reason::policy_changed) == "policy_changed");
    CHECK(to_string(deny_reason::token_revoked) == "token_revoked");
    CHECK(to_string(deny_reason::session_ended) == "session_ended");
    CHECK(to_string(deny_reason::audit_unavailable) == "audit_unavailable");
    // Appended, never moved: the values are stable (metric label tables are indexed by them).
    CHECK(to_string(static_cast<deny_reason>(19)) == "http_rule");
    CHECK(to_string(static_cast<deny_reason>(20)) == "upstream_tls");
    CHECK(to_string(static_cast<deny_reason>(23)) == "secret_leak");
    CHECK(to_string(deny_reason::mcp_tool) == "mcp_tool");
    CHECK(to_string(deny_reason::mcp_tool_changed) == "mcp_tool_changed");
    CHECK(to_string(static_cast<deny_reason>(deny_reason_count - 1)) == "mcp_tool_changed");
    CHECK(to_string(static_cast<deny_reason>(deny_reason_count)) == "unknown");
}

TEST_CASE("compiled policy: job lookup and many rules", "[decide]") {
    policy pol;
    job j;
    j.name = "many";
    j.task = "t";
    for (int i = 0; i < 5000; ++i) {
        egress_rule r;
        r.host = host_pattern{"h" + std::to_string(i) + ".example.com", false};
        r.ports = {static_cast<std::uint16_t>(1000 + i % 100)};
        j.egress.push_back(r);
    }
    pol.jobs.push_back(j);
    const auto p = compile(std::move(pol));
    CHECK(p->job_index("many") == 0);
    CHECK(p->job_index("other") == -1);
    for (int i = 0; i < 5000; i += 97) {
        decide_args a;
        a.job = "many";
        const std::string host = "h" + std::to_string(i) + ".example.com";
        a.host = host;
        a.port = static_cast<std::uint16_t>(1000 + i % 100);
        const decision d = decide(a, *p);
        CHECK(d.allowed());
        CHECK(d.rule_index == i);
        a.port = static_cast<std::uint16_t>(a.port + 1);
        CHECK(decide(a, *p).reason == deny_reason::port);
    }
}

TEST_CASE("decide_dns: a job resolves the names of its rules and nothing else", "[decide]") {
    const auto p = load_fixture("decide.yaml");
    struct row {
        std::string name;
        deny_reason reason;
        int rule;
    };
    using R = deny_reason;
    const std::vector<row> table{
        {"api.example.com", R::none, 0},   // exact wins over the wildcard
        {"API.EXAMPLE.COM.", R::none, 0},  // case and one trailing dot
        {"www.example.com", R::none, 1},   // below a wildcard, any port or protocol
        {"a.b.c.example.com", R::none, 1},
        {"img.cdn.example.com", R::none, 2},  // the longest wildcard suffix
        {"example.com", R::no_rule, -1},      // never the apex of a wildcard
        {"badexample.com", R::no_rule, -1},
        {"raw.example.org", R::none, 3},  // tcp rules name hosts too
        {"wiki.corp.example", R::none, 4},
        {"xn--mnchen-3ya.de", R::none, 11},  // IDN as its A-label
        {"localhost", R::none, 13},
        {"exfil-4f2a.attacker.example", R::no_rule, -1},
        {"203.0.113.7", R::bad_request, -1},  // addresses are not names to resolve
        {"2130706433", R::bad_request, -1},
        {"api..example.com", R::bad_request, -1},
        {"ex_ample.com", R::bad_request, -1},
        {"", R::bad_request, -1},
    };
    for (const auto& t : table) {
        INFO(t.name);
        const decision d = decide_dns("web", t.name, *p);
        CHECK(to_string(d.reason) == to_string(t.reason));
        CHECK(d.rule_index == t.rule);
    }
    CHECK(decide_dns("empty", "api.example.com", *p).reason == deny_reason::no_rule);
    CHECK(decide_dns("nobody", "api.example.com", *p).reason == deny_reason::unknown_job);
}
