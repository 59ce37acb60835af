// Tests of the small things of config/policy.hpp: endpoints, rule helpers, lookups.
#include "config/policy.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

namespace {

using namespace cordon::config;
using Catch::Matchers::Contains;

host_pattern host(std::string_view text) {
    host_pattern_result r = parse_host_pattern(text);
    REQUIRE(r.ok());
    return r.value;
}

cidr net(std::string_view text) {
    cidr_result r = parse_cidr(text);
    REQUIRE(r.value.has_value());
    return *r.value;
}

egress_rule host_rule(std::string_view h, std::vector<std::uint16_t> ports,
                      protocol p = protocol::tls) {
    egress_rule r;
    r.host = host(h);
    r.ports = std::move(ports);
    r.proto = p;
    return r;
}

egress_rule cidr_rule(std::string_view c, std::vector<std::uint16_t> ports, protocol p) {
    egress_rule r;
    r.net = net(c);
    r.ports = std::move(ports);
    r.proto = p;
    return r;
}

}  // namespace

TEST_CASE("policy: parse_endpoint reads IPv4 and bracketed IPv6", "[policy]") {
    struct ok_case {
        std::string text;
        std::string canonical;
        bool v6;
        std::uint16_t port;
    };
    const std::vector<ok_case> cases{
        {"127.0.0.1:3128", "127.0.0.1:3128", false, 3128},
        {"0.0.0.0:0", "0.0.0.0:0", false, 0},
        {"255.255.255.255:65535", "255.255.255.255:65535", false, 65535},
        {"10.1.2.3:1", "10.1.2.3:1", false, 1},
        {"[::1]:53", "[::1]:53", true, 53},
        {"[::]:3128", "[::]:3128", true, 3128},
        {"[2001:DB8:0:0::1]:443", "[2001:db8::1]:443", true, 443},
        {"[fe80::1]:80", "[fe80::1]:80", true, 80},
        {"[::ffff:127.0.0.1]:80", "127.0.0.1:80", false, 80},  // mapped becomes IPv4
    };
    for (const auto& c : cases) {
        INFO("text: " << c.text);
        const endpoint_result r = parse_endpoint(c.text);
        INFO("error: " << r.error);
        REQUIRE(r.value.has_value());
        CHECK(r.error.empty());
        CHECK(r.value->to_string() == c.canonical);
        CHECK(r.value->address.is_v6() == c.v6);
        CHECK(r.value->port == c.port);
        // The canonical text reads back to the same endpoint.
        const endpoint_result again = parse_endpoint(r.value->to_string());
        REQUIRE(again.value.has_value());
        CHECK(*again.value == *r.value);
    }
}

TEST_CASE("policy: parse_endpoint errors say what is wrong", "[policy]") {
    struct bad_case {
        std::string text;
        std::string what;
    };
    const std::vector<bad_case> cases{
        {"", "expected ADDRESS:PORT, e.g. 127.0.0.1:3128"},
        {"127.0.0.1", "expected ADDRESS:PORT, e.g. 127.0.0.1:3128"},
        {"3128", "expected ADDRESS:PORT"},
        {"localhost:3128", "'localhost' is not an IP address (listen on an address, not a name)"},
        {"example.com:80", "'example.com' is not an IP address"},
        {":3128", "'' is not an IP address"},
        {"01.2.3.4:80", "'01.2.3.4' is not an IP address"},
        {"1.2.3:80", "'1.2.3' is not an IP address"},
        {"256.0.0.1:80", "'256.0.0.1' is not an IP address"},
        {" 1.2.3.4:80", "' 1.2.3.4' is not an IP address"},
        {"::1:53", "write IPv6 addresses in brackets, e.g. [::1]:3128"},
        {"::1", "write IPv6 addresses in brackets"},
        {"[::1]", "expected [IPV6]:PORT"},
        {"[::1]:", "'' is not a port 0..65535"},
        {"[::1]53", "expected [IPV6]:PORT"},
        {"[::1", "expected [IPV6]:PORT"},
        {"[::1:53", "expected [IPV6]:PORT"},
        {"[]:53", "'' is not an IP address"},
        {"[fe80::1%eth0]:53", "'fe80::1%eth0' is not an IP address"},
        {"[localhost]:53", "'localhost' is not an IP address"},
        {"1.2.3.4:", "'' is not a port 0..65535"},
        {"1.2.3.4:65536", "'65536' is not a port 0..65535"},
        {"1.2.3.4:70000", "'70000' is not a port 0..65535"},
        {"1.2.3.4:99999999999", "'99999999999' is not a port"},
        {"1.2.3.4:-1", "'-1' is not a port"},
        {"1.2.3.4:+80", "'+80' is not a port"},
        {"1.2.3.4:080", "'080' is not a port"},
        {"1.2.3.4:00", "'00' is not a port"},
        {"1.2.3.4:80 ", "'80 ' is not a port"},
        {"1.2.3.4:0x50", "'0x50' is not a port"},
        {"1.2.3.4:http", "'http' is not a port"},
        {"1.2.3.4:80:80", "write IPv6 addresses in brackets"},
    };
    for (const auto& c : cases) {
        INFO("text: '" << c.text << "'");
        const endpoint_result r = parse_endpoint(c.text);
        CHECK_FALSE(r.value.has_value());
        CHECK_THAT(r.error, Contains(c.what));
    }
}

TEST_CASE("policy: endpoint::to_string and equality", "[policy]") {
    endpoint a{ip_address::v4(std::array<std::uint8_t, 4>{127, 0, 0, 1}), 3128};
    CHECK(a.to_string() == "127.0.0.1:3128");
    endpoint b{ip_address::v4(0x7f000001u), 3128};
    CHECK(a == b);
    b.port = 3129;
    CHECK_FALSE(a == b);
    std::array<std::uint8_t, 16> loop6{};
    loop6[15] = 1;
    const endpoint c{ip_address::v6(loop6), 53};
    CHECK(c.to_string() == "[::1]:53");
    const endpoint zero{};
    CHECK(zero.to_string() == "0.0.0.0:0");
    CHECK(endpoint{ip_address::v6({}), 0}.to_string() == "[::]:0");
}

TEST_CASE("policy: egress_rule::allows_port", "[policy]") {
    const egress_rule r = host_rule("a.example.com", {22, 80, 443, 8443});
    for (const std::uint16_t p : {22, 80, 443, 8443}) {
        INFO("port " << p);
        CHECK(r.allows_port(p));
    }
    for (const std::uint16_t p : {0, 1, 21, 23, 81, 442, 444, 8442, 8444, 65535}) {
        INFO("port " << p);
        CHECK_FALSE(r.allows_port(p));
    }
    const egress_rule edges = host_rule("a.example.com", {1, 65535});
    CHECK(edges.allows_port(1));
    CHECK(edges.allows_port(65535));
    CHECK_FALSE(edges.allows_port(0));
    CHECK_FALSE(edges.allows_port(2));
    const egress_rule none = host_rule("a.example.com", {});
    CHECK_FALSE(none.allows_port(443));
}

TEST_CASE("policy: egress_rule::allows_method", "[policy]") {
    SECTION("no methods: any method") {
        const egress_rule r = host_rule("a.example.com", {80}, protocol::http);
        for (const char* m : {"GET", "POST", "DELETE", "PATCH", "BREW", "get"}) {
            INFO(m);
            CHECK(r.allows_method(m));
        }
    }
    SECTION("listed methods only, case-sensitive") {
        egress_rule r = host_rule("a.example.com", {80}, protocol::http);
        r.methods = {"GET", "HEAD"};
        CHECK(r.allows_method("GET"));
        CHECK(r.allows_method("HEAD"));
        CHECK_FALSE(r.allows_method("POST"));
        CHECK_FALSE(r.allows_method("get"));
        CHECK_FALSE(r.allows_method("Get"));
        CHECK_FALSE(r.allows_method("GETX"));
        CHECK_FALSE(r.allows_method("GE"));
        CHECK_FALSE(r.allows_method(""));
        CHECK_FALSE(r.allows_method(std::string_view("GET\0", 4)));
    }
}

TEST_CASE("policy: egress_rule::describe", "[policy]") {
    CHECK(host_rule("api.example.com", {443}).describe() == "api.example.com:443/tls");
    CHECK(host_rule("*.example.com", {443}).describe() == "*.example.com:443/tls");
    CHECK(host_rule("wiki.corp.example", {80, 8080}, protocol::http).describe() ==
          "wiki.corp.example:80,8080/http");
    CHECK(host_rule("git.example.com", {22}, protocol::tcp).describe() == "git.example.com:22/tcp");
    CHECK(cidr_rule("203.0.113.0/24", {22}, protocol::tcp).describe() == "203.0.113.0/24:22/tcp");
    CHECK(cidr_rule("2001:db8::/32", {80, 443}, protocol::http).describe() ==
          "2001:db8::/32:80,443/http");
    const egress_rule empty;
    CHECK(empty.describe() == "?:/tls");
}

TEST_CASE("policy: to_string of the enums", "[policy]") {
    CHECK(to_string(protocol::tls) == "tls");
    CHECK(to_string(protocol::tcp) == "tcp");
    CHECK(to_string(protocol::http) == "http");
    CHECK(to_string(job_mode::enforce) == "enforce");
    CHECK(to_string(job_mode::report) == "report");
    CHECK(to_string(deny_rcode::refused) == "REFUSED");
    CHECK(to_string(deny_rcode::nxdomain) == "NXDOMAIN");
}

TEST_CASE("policy: defaults of the plain structs", "[policy]") {
    const policy p;
    CHECK(p.jobs.empty());
    CHECK(p.rule_count() == 0);
    CHECK(p.state.path == "/var/lib/cordon");
    CHECK(p.audit.path == "/var/log/cordon");
    CHECK(p.audit.retention_days == 90);
    REQUIRE(p.dns.upstream.size() == 1);
    CHECK(p.dns.upstream[0].system);
    CHECK(p.dns.deny == deny_rcode::refused);
    CHECK(p.kill.max_stop_seconds == 60);
    const job j;
    CHECK(j.mode == job_mode::enforce);
    CHECK(j.identity.ttl == std::chrono::minutes(30));
    const egress_rule r;
    CHECK(r.proto == protocol::tls);
}

TEST_CASE("policy: find_job and rule_count", "[policy]") {
    policy p;
    CHECK(p.find_job("a") == nullptr);
    CHECK(p.find_job("") == nullptr);

    job a;
    a.name = "a";
    a.egress.push_back(host_rule("a.example.com", {443}));
    a.egress.push_back(host_rule("b.example.com", {443}));
    job b;
    b.name = "b";
    job c;
    c.name = "coding-agent";
    c.egress.push_back(cidr_rule("203.0.113.0/24", {22}, protocol::tcp));
    p.jobs = {a, b, c};

    CHECK(p.rule_count() == 3);
    REQUIRE(p.find_job("a") != nullptr);
    CHECK(p.find_job("a") == &p.jobs[0]);
    CHECK(p.find_job("b") == &p.jobs[1]);
    CHECK(p.find_job("coding-agent") == &p.jobs[2]);
    CHECK(p.find_job("coding-agent")->egress.size() == 1);
    CHECK(p.find_job("A") == nullptr);  // names are case-sensitive
    CHECK(p.find_job("coding") == nullptr);
    CHECK(p.find_job("coding-agent ") == nullptr);
    CHECK(p.find_job("") == nullptr);

    const policy& cp = p;
    CHECK(cp.find_job("b")->name == "b");
}

TEST_CASE("policy: keep_restart_only keeps what only a start applies", "[policy]") {
    policy running;
    running.listen.proxy = *parse_endpoint("127.0.0.1:3128").value;
    running.listen.dns = parse_endpoint("127.0.0.1:5353").value;
    running.admin.token_file = "/etc/cordon/admin.token";
    running.audit.path = "/var/log/cordon";
    running.proxy.header_timeout = std::chrono::seconds(10);
    SECTION("nothing changed: nothing named, nothing touched") {
        policy next = running;
        next.proxy.header_timeout = std::chrono::seconds(3);  // reloadable: stays as asked
        CHECK(keep_restart_only(running, next).empty());
        CHECK(next.proxy.header_timeout == std::chrono::seconds(3));
    }
    SECTION("listeners, token file, state and audit go back to the running values") {
        policy next = running;
        next.listen.proxy = *parse_endpoint("127.0.0.1:4000").value;
        next.listen.dns.reset();
        next.listen.admin = parse_endpoint("127.0.0.1:9999").value;
        next.admin.token_file = "/tmp/other.token";
        next.state.path = "/tmp/state";
        next.audit.path = "/tmp/audit";
        next.audit.retention_days = 7;
        next.audit.max_file_bytes = 1024;
        next.proxy.header_timeout = std::chrono::seconds(3);
        const auto named = keep_restart_only(running, next);
        CHECK(named == std::vector<std::string>{"listen.proxy", "listen.dns", "listen.admin",
                                                "admin.token_file", "state.path", "audit.path",
                                                "audit.retention_days", "audit.max_file_bytes"});
        CHECK(next.listen.proxy == running.listen.proxy);
        CHECK(next.listen.dns == running.listen.dns);
        CHECK(next.listen.admin == running.listen.admin);
        CHECK(next.admin.token_file == running.admin.token_file);
        CHECK(next.state.path == running.state.path);
        CHECK(next.audit.path == running.audit.path);
        CHECK(next.audit.retention_days == running.audit.retention_days);
        CHECK(next.audit.max_file_bytes == running.audit.max_file_bytes);
        CHECK(next.proxy.header_timeout == std::chrono::seconds(3));
    }
}
