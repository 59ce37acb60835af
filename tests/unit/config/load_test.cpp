// Tests of the policy loader: every key of the schema read into `policy`, the defaults,
// and every error the loader reports, each with its line, column and key path.
#include "config/load.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace cordon::config;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;
using std::chrono::milliseconds;

const std::string data_dir = CORDON_TEST_DATA;
const std::string policies = data_dir + "/policies/";
const std::string examples = data_dir + "/../../config/examples/";

// Snippet builders. Positions in the tables below follow from these prefixes:
//   with_top(s):  `s` starts on line 3, column 1.
//   with_job(s):  `s` starts on line 5 (write it indented by 4, as a key of job `j`).
//   with_rule(s): `s` starts on line 6, column 9 (the first rule of job `j`).
constexpr std::string_view listen_line = "listen: { proxy: 127.0.0.1:3128 }\n";

std::string with_top(std::string_view s) {
    return std::string(listen_line) + "jobs: {}\n" + std::string(s) + "\n";
}

std::string with_job(std::string_view s) {
    return std::string(listen_line) + "jobs:\n  j:\n    task: t\n" + std::string(s) + "\n";
}

std::string with_rule(std::string_view s) {
    return with_job("    egress:\n      - " + std::string(s));
}

load_result load(std::string_view text) { return load_policy(text, "test.yaml"); }

std::string dump(const load_result& r) {
    std::string out;
    for (const auto& d : r.errors) {
        out += d.to_string() + "\n";
    }
    return out.empty() ? "(no errors)" : out;
}

// Loads `text`, which must be valid, and returns the policy.
policy load_ok(std::string_view text) {
    INFO("yaml:\n" << text);
    load_result r = load(text);
    INFO("errors:\n" << dump(r));
    REQUIRE(r.errors.empty());
    REQUIRE(r.ok());
    return std::move(*r.value);
}

policy load_file_ok(const std::string& path) {
    load_result r = load_policy_file(path);
    INFO("file: " << path << "\nerrors:\n" << dump(r));
    REQUIRE(r.errors.empty());
    REQUIRE(r.ok());
    return std::move(*r.value);
}

// One expected error: where it is, the key path its message starts with ("" for messages
// about the file's top level that have none), and the part of the message that matters.
struct error_case {
    std::string name;
    std::string yaml;
    int line;
    int column;
    std::string path;
    std::string what;
};

void check_error(const diagnostic& d, const error_case& c) {
    CHECK(d.file == "test.yaml");
    CHECK(d.line == c.line);
    CHECK(d.column == c.column);
    if (!c.path.empty()) {
        CHECK_THAT(d.message, StartsWith(c.path + ": "));
    }
    CHECK_THAT(d.message, Contains(c.what));
}

// Each case must give exactly one error and no policy.
void check_cases(const std::vector<error_case>& cases) {
    for (const auto& c : cases) {
        DYNAMIC_SECTION(c.name) {
            INFO("yaml:\n" << c.yaml);
            const load_result r = load(c.yaml);
            INFO("got:\n" << dump(r));
            CHECK_FALSE(r.ok());
            CHECK_FALSE(r.value.has_value());
            REQUIRE(r.errors.size() == 1);
            check_error(r.errors[0], c);
        }
    }
}

// Each case must load.
void check_valid(const std::vector<std::pair<std::string, std::string>>& cases) {
    for (const auto& [name, yaml] : cases) {
        DYNAMIC_SECTION(name) {
            INFO("yaml:\n" << yaml);
            const load_result r = load(yaml);
            INFO("got:\n" << dump(r));
            CHECK(r.errors.empty());
            CHECK(r.ok());
        }
    }
}

std::vector<std::uint16_t> ports(std::initializer_list<std::uint16_t> p) { return p; }

std::vector<std::string> cidr_strings(const std::vector<cidr>& v) {
    std::vector<std::string> out;
    for (const auto& c : v) {
        out.push_back(c.to_string());
    }
    return out;
}

using strings = std::vector<std::string>;

// A file under the system temp dir, removed when it goes out of scope.
class temp_file {
public:
    explicit temp_file(std::string_view contents) {
        std::random_device rd;
        path_ = (std::filesystem::temp_directory_path() /
                 ("cordon_load_test_" + std::to_string(rd()) + ".yaml"))
                    .string();
        std::ofstream out(path_, std::ios::binary);
        out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
        REQUIRE(out.good());
    }
    ~temp_file() {
        std::error_code ec;
        std::filesystem::remove(path_, ec);
    }
    temp_file(const temp_file&) = delete;
    temp_file& operator=(const temp_file&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace

// --- valid policies ------------------------------------------------------------------

TEST_CASE("load: the full fixture sets every key of the schema", "[load]") {
    const policy p = load_file_ok(policies + "full.yaml");

    CHECK(p.source == policies + "full.yaml");

    SECTION("listen") {
        CHECK(p.listen.proxy.to_string() == "127.0.0.1:3128");
        CHECK(p.listen.proxy.port == 3128);
        CHECK(p.listen.proxy.address.is_v4());
        REQUIRE(p.listen.dns.has_value());
        CHECK(p.listen.dns->to_string() == "127.0.0.1:5353");
        REQUIRE(p.listen.admin.has_value());
        CHECK(p.listen.admin->to_string() == "[::1]:9090");
        CHECK(p.listen.admin->address.is_v6());
        CHECK(p.listen.admin->port == 9090);
    }
    SECTION("admin") {
        CHECK(p.admin.token_file == "/etc/cordon/admin.token");
        REQUIRE(p.admin.tls.has_value());
        CHECK(p.admin.tls->cert == "/etc/cordon/admin.crt");
        CHECK(p.admin.tls->key == "/etc/cordon/admin.key");
        CHECK(p.admin.tls->client_ca == "/etc/cordon/clients.pem");
    }
    SECTION("dns") {
        REQUIRE(p.dns.upstream.size() == 3);
        CHECK(p.dns.upstream[0].system);
        CHECK_FALSE(p.dns.upstream[1].system);
        CHECK(p.dns.upstream[1].server.to_string() == "127.0.0.1:5300");
        CHECK_FALSE(p.dns.upstream[2].system);
        CHECK(p.dns.upstream[2].server.to_string() == "[2001:db8::53]:53");
        CHECK(p.dns.deny == deny_rcode::nxdomain);
        CHECK(p.dns.default_job == "ticket-summarizer");
    }
    SECTION("state, audit, alerts, kill") {
        CHECK(p.state.path == "/srv/cordon/state");
        CHECK(p.audit.path == "/srv/cordon/audit");
        CHECK(p.audit.retention_days == 30);
        REQUIRE(p.alerts.webhook.has_value());
        CHECK(p.alerts.webhook->url == "https://hooks.example.com/cordon?team=netops");
        CHECK(p.alerts.webhook->interval == std::chrono::seconds(60));  // the defaults
        CHECK(p.alerts.webhook->max_per_minute == 30);
        CHECK(p.kill.stop_authority == strings{"netops-oncall", "security-oncall"});
        CHECK(p.kill.max_stop_seconds == 120);
    }
    SECTION("jobs, in file order") {
        REQUIRE(p.jobs.size() == 2);
        CHECK(p.jobs[0].name == "ticket-summarizer");
        CHECK(p.jobs[0].pos.line == 29);
        CHECK(p.jobs[0].pos.column == 3);
        CHECK(p.jobs[1].name == "bare-job");
        CHECK(p.jobs[1].pos.line == 49);
        CHECK(p.jobs[1].pos.column == 3);
        CHECK(p.rule_count() == 5);
        CHECK(p.find_job("ticket-summarizer") == &p.jobs[0]);
        CHECK(p.find_job("bare-job") == &p.jobs[1]);
        CHECK(p.find_job("nobody") == nullptr);
    }
    SECTION("the job card") {
        const job* j = p.find_job("ticket-summarizer");
        REQUIRE(j != nullptr);
        CHECK(j->task == "Summarize new support tickets into the weekly report");
        CHECK(j->inputs == strings{"support tickets", "last week's report"});
        CHECK(j->outputs == strings{"report.md"});
        CHECK(j->mode == job_mode::report);
        CHECK(j->limits.max_tunnels == 64u);
        CHECK(j->limits.max_bytes_up == 1024ull * 1024 * 1024);
        CHECK(cidr_strings(j->sources) == strings{"10.88.0.0/24", "fd00:88::/64"});
        CHECK(j->identity.ttl == std::chrono::minutes(90));
        CHECK(j->identity.ttl == milliseconds(5'400'000));
        CHECK(j->identity.mint == "/usr/local/bin/mint-token --ttl 90m");
        CHECK(j->identity.revoke == "/usr/local/bin/revoke-token");
        CHECK(j->filesystem.scratch == "/scratch");
        CHECK(j->filesystem.never_write == strings{"/etc", "/usr", "/home"});
        CHECK(j->env == strings{"LANG", "TZ", "_PRIVATE_1"});
    }
    SECTION("egress rules") {
        const job* j = p.find_job("ticket-summarizer");
        REQUIRE(j != nullptr);
        REQUIRE(j->egress.size() == 5);

        const egress_rule& exact = j->egress[0];
        REQUIRE(exact.host.has_value());
        CHECK_FALSE(exact.net.has_value());
        CHECK(exact.host->name == "api.zendesk.com");  // lower case, trailing dot gone
        CHECK_FALSE(exact.host->wildcard);
        CHECK(exact.ports == ports({443}));
        CHECK(exact.proto == protocol::tls);  // the default
        CHECK(exact.methods.empty());
        CHECK(exact.resolves_to.empty());
        CHECK(exact.pos.line == 35);
        CHECK(exact.pos.column == 9);
        CHECK(exact.describe() == "api.zendesk.com:443/tls");

        const egress_rule& wild = j->egress[1];
        REQUIRE(wild.host.has_value());
        CHECK(wild.host->name == "githubusercontent.com");
        CHECK(wild.host->wildcard);
        CHECK(wild.ports == ports({443, 8443}));  // sorted
        CHECK(wild.proto == protocol::tls);
        CHECK(wild.pos.line == 36);
        CHECK(wild.describe() == "*.githubusercontent.com:443,8443/tls");

        const egress_rule& http = j->egress[2];
        REQUIRE(http.host.has_value());
        CHECK(http.host->name == "wiki.corp.example");
        CHECK(http.ports == ports({80, 8080}));
        CHECK(http.proto == protocol::http);
        CHECK(http.methods == strings{"GET", "HEAD"});
        CHECK(cidr_strings(http.resolves_to) == strings{"10.20.0.0/16", "fd00:20::/32"});
        CHECK(http.pos.line == 37);

        const egress_rule& tcp = j->egress[3];
        CHECK_FALSE(tcp.host.has_value());
        REQUIRE(tcp.net.has_value());
        CHECK(tcp.net->to_string() == "203.0.113.0/24");
        CHECK(tcp.net->prefix_len == 24);
        CHECK(tcp.ports == ports({22}));
        CHECK(tcp.proto == protocol::tcp);
        CHECK(tcp.pos.line == 39);
        CHECK(tcp.describe() == "203.0.113.0/24:22/tcp");

        const egress_rule& v6 = j->egress[4];
        REQUIRE(v6.net.has_value());
        CHECK(v6.net->to_string() == "2001:db8:1::/48");
        CHECK(v6.proto == protocol::http);
        CHECK(v6.methods.empty());  // any method
    }
    SECTION("a job card with only a task takes every default") {
        const job* j = p.find_job("bare-job");
        REQUIRE(j != nullptr);
        CHECK(j->task == "Nothing but a task; every other key takes its default");
        CHECK(j->inputs.empty());
        CHECK(j->outputs.empty());
        CHECK(j->mode == job_mode::enforce);
        CHECK(j->egress.empty());
        CHECK_FALSE(j->limits.max_tunnels.has_value());
        CHECK_FALSE(j->limits.max_bytes_up.has_value());
        CHECK(j->sources.empty());
        CHECK(j->identity.ttl == std::chrono::minutes(30));
        CHECK_FALSE(j->identity.mint.has_value());
        CHECK_FALSE(j->identity.revoke.has_value());
        CHECK_FALSE(j->filesystem.scratch.has_value());
        CHECK(j->filesystem.never_write.empty());
        CHECK(j->env.empty());
    }
}

namespace {

void check_policy_defaults(const policy& p) {
    CHECK(p.listen.proxy.to_string() == "127.0.0.1:3128");
    CHECK_FALSE(p.listen.dns.has_value());
    CHECK_FALSE(p.listen.admin.has_value());
    CHECK_FALSE(p.admin.token_file.has_value());
    CHECK_FALSE(p.admin.tls.has_value());
    REQUIRE(p.dns.upstream.size() == 1);
    CHECK(p.dns.upstream[0].system);
    CHECK(p.dns.deny == deny_rcode::refused);
    CHECK_FALSE(p.dns.default_job.has_value());
    CHECK(p.state.path == "/var/lib/cordon");
    CHECK(p.audit.path == "/var/log/cordon");
    CHECK(p.audit.retention_days == 90);
    CHECK(p.audit.max_file_bytes == 256ull * 1024 * 1024);
    CHECK_FALSE(p.alerts.webhook.has_value());
    CHECK(p.kill.stop_authority.empty());
    CHECK(p.kill.max_stop_seconds == 60);
    REQUIRE(p.jobs.size() == 1);
    const job& j = p.jobs[0];
    CHECK(j.inputs.empty());
    CHECK(j.outputs.empty());
    CHECK(j.mode == job_mode::enforce);
    CHECK(j.egress.empty());
    CHECK_FALSE(j.limits.max_tunnels.has_value());
    CHECK_FALSE(j.limits.max_bytes_up.has_value());
    CHECK(j.sources.empty());
    CHECK(j.identity.ttl == std::chrono::minutes(30));
    CHECK(j.identity.ttl == milliseconds(1'800'000));
    CHECK_FALSE(j.identity.mint.has_value());
    CHECK_FALSE(j.identity.revoke.has_value());
    CHECK_FALSE(j.filesystem.scratch.has_value());
    CHECK(j.filesystem.never_write.empty());
    CHECK(j.env.empty());
    CHECK(p.rule_count() == 0);
}

}  // namespace

TEST_CASE("load: absent keys take their defaults", "[load]") {
    const policy p = load_file_ok(policies + "minimal.yaml");
    check_policy_defaults(p);
    CHECK(p.jobs[0].name == "lonely");
    CHECK(p.jobs[0].task == "Think, without the network");
}

TEST_CASE("load: keys written as null read as absent keys", "[load]") {
    const policy p = load_file_ok(policies + "nulls.yaml");
    check_policy_defaults(p);
    CHECK(p.jobs[0].name == "quiet");
}

TEST_CASE("load: `jobs: {}` is a policy that allows nothing", "[load]") {
    const policy p = load_ok("listen: { proxy: 127.0.0.1:3128 }\njobs: {}\n");
    CHECK(p.jobs.empty());
    CHECK(p.rule_count() == 0);
    CHECK(p.find_job("") == nullptr);
}

TEST_CASE("load: the shipped examples load without errors", "[load]") {
    SECTION("quickstart") {
        const policy p = load_file_ok(examples + "quickstart.yaml");
        REQUIRE(p.jobs.size() == 1);
        const job* j = p.find_job("hello-agent");
        REQUIRE(j != nullptr);
        REQUIRE(j->egress.size() == 1);
        CHECK(j->egress[0].describe() == "localhost:14180/http");
        CHECK(cidr_strings(j->egress[0].resolves_to) == strings{"127.0.0.1/32", "::1/128"});
        REQUIRE(p.listen.admin.has_value());
        CHECK(p.listen.admin->to_string() == "127.0.0.1:14190");  // not prometheus's 9090
        CHECK(p.admin.token_file.has_value());
        CHECK(p.audit.retention_days == 7);
    }
    SECTION("agent-fleet") {
        const policy p = load_file_ok(examples + "agent-fleet.yaml");
        REQUIRE(p.jobs.size() == 3);
        CHECK(p.jobs[0].name == "coding-agent");
        CHECK(p.jobs[1].name == "support-agent");
        CHECK(p.jobs[2].name == "browsing-agent");
        CHECK(p.rule_count() == 10);
        CHECK(p.jobs[2].mode == job_mode::report);
        CHECK(p.jobs[0].identity.ttl == std::chrono::hours(1));
        CHECK(p.jobs[0].limits.max_bytes_up == 256ull * 1024 * 1024);
        CHECK(cidr_strings(p.jobs[1].sources) == strings{"10.88.0.0/24"});
        CHECK(p.kill.stop_authority == strings{"netops-oncall", "security-oncall"});
    }
}

TEST_CASE("load: values at the edges of their ranges load", "[load]") {
    const std::string label63(63, 'a');
    const std::string name253 = label63 + "." + label63 + "." + label63 + "." +
                                std::string(61, 'b');  // 253 characters
    REQUIRE(name253.size() == 253);
    check_valid({
        {"ports 1 and 65535", with_rule("{ host: a.com, ports: [65535, 1] }")},
        {"port written as a string", with_rule("{ host: a.com, ports: [\"443\"] }")},
        {"label of 63 characters", with_rule("{ host: " + label63 + ".com, ports: [443] }")},
        {"name of 253 characters", with_rule("{ host: " + name253 + ", ports: [443] }")},
        {"name of 253 characters and a trailing dot",
         with_rule("{ host: " + name253 + "., ports: [443] }")},
        {"punycode name", with_rule("{ host: xn--mnchen-3ya.de, ports: [443] }")},
        {"wildcard with two labels", with_rule("{ host: \"*.example.com\", ports: [443] }")},
        {"host rule with tcp", with_rule("{ host: a.com, ports: [22], protocol: tcp }")},
        {"cidr rule with http and methods",
         with_rule("{ cidr: 203.0.113.0/24, ports: [80], protocol: http, methods: [GET] }")},
        {"cidr /0", with_rule("{ cidr: 0.0.0.0/0, ports: [22], protocol: tcp }")},
        {"cidr /32", with_rule("{ cidr: 192.0.2.1/32, ports: [22], protocol: tcp }")},
        {"method of 32 characters",
         with_rule("{ host: a.com, ports: [80], protocol: http, methods: [" + std::string(32, 'A') +
                   "] }")},
        {"methods with - and _",
         with_rule("{ host: a.com, ports: [80], protocol: http, methods: [M-SEARCH, X_Y] }")},
        {"resolves_to loopback and ULA",
         with_rule("{ host: a.com, ports: [443], resolves_to: [127.0.0.1/32, \"fd00::/8\"] }")},
        {"ttl 1m", with_job("    identity: { ttl: 1m }")},
        {"ttl 24h", with_job("    identity: { ttl: 24h }")},
        {"ttl 1440m", with_job("    identity: { ttl: 1440m }")},
        {"ttl 1d", with_job("    identity: { ttl: 1d }")},
        {"ttl 59m60s", with_job("    identity: { ttl: 59m60s }")},
        {"max_tunnels 1", with_job("    limits: { max_tunnels: 1 }")},
        {"max_tunnels 1000000", with_job("    limits: { max_tunnels: 1000000 }")},
        {"max_bytes_up 1", with_job("    limits: { max_bytes_up: 1 }")},
        {"max_bytes_up 2^64-1", with_job("    limits: { max_bytes_up: 18446744073709551615 }")},
        {"retention_days 1", with_top("audit: { retention_days: 1 }")},
        {"retention_days 3650", with_top("audit: { retention_days: 3650 }")},
        {"max_file_bytes 4KiB", with_top("audit: { max_file_bytes: 4KiB }")},
        {"max_file_bytes 1TiB", with_top("audit: { max_file_bytes: 1TiB }")},
        {"max_file_bytes 4096", with_top("audit: { max_file_bytes: 4096 }")},
        {"max_stop_seconds 1", with_top("kill: { max_stop_seconds: 1 }")},
        {"max_stop_seconds 3600", with_top("kill: { max_stop_seconds: 3600 }")},
        {"job name of 64 characters",
         std::string(listen_line) + "jobs:\n  " + std::string(64, 'a') + ": { task: t }\n"},
        {"job name with . _ -", std::string(listen_line) + "jobs:\n  0k_1.x-Y: { task: t }\n"},
        {"scratch with a trailing slash",
         with_job("    filesystem: { scratch: /scratch/, never_write: [/etc/, /.x, /x..] }")},
        {"scratch beside a never_write prefix",
         with_job("    filesystem: { scratch: /homework, never_write: [/home] }")},
        {"env names", with_job("    env: [_X, lang, A1]")},
        {"listen port 0 everywhere",
         "listen: { proxy: 127.0.0.1:0, dns: 127.0.0.1:0, admin: 127.0.0.1:0 }\n"
         "admin: { token_file: /t }\njobs: {}\n"},
        {"listen on IPv6", "listen: { proxy: \"[::1]:3128\", dns: \"[::]:53\" }\njobs: {}\n"},
        {"admin token without an admin listener", with_top("admin: { token_file: /t }")},
        {"webhook over http", with_top("alerts: { webhook: http://hooks.example.com/x }")},
        {"a byte-order mark", "\xEF\xBB\xBF" + with_top("")},
        {"CRLF line ends", "listen: { proxy: 127.0.0.1:3128 }\r\njobs: {}\r\n"},
        {"an explicit document start", "---\n" + with_top("")},
        {"an explicit document end", with_top("") + "...\n"},
        {"an alias to another job",
         std::string(listen_line) + "jobs:\n  a: &card { task: t }\n  b: *card\n"},
        {"disjoint sources", std::string(listen_line) +
                                 "jobs:\n  a: { task: t, sources: [10.0.0.0/8, \"fd00::/8\"] }\n"
                                 "  b: { task: t, sources: [11.0.0.0/8, \"fe80::/10\"] }\n"},
    });
}

TEST_CASE("load: normalised and converted values", "[load]") {
    SECTION("a host is lower-cased and loses one trailing dot") {
        const policy p = load_ok(with_rule("{ host: WWW.Example.COM., ports: [443] }"));
        REQUIRE(p.jobs.at(0).egress.size() == 1);
        CHECK(p.jobs[0].egress[0].host->name == "www.example.com");
    }
    SECTION("ports are sorted") {
        const policy p = load_ok(with_rule("{ host: a.com, ports: [8443, 22, 443, 80] }"));
        CHECK(p.jobs.at(0).egress.at(0).ports == ports({22, 80, 443, 8443}));
        CHECK(p.jobs[0].egress[0].allows_port(22));
        CHECK_FALSE(p.jobs[0].egress[0].allows_port(23));
    }
    SECTION("ttl in milliseconds") {
        CHECK(load_ok(with_job("    identity: { ttl: 90s1m }")).jobs.at(0).identity.ttl ==
              milliseconds(150'000));
        CHECK(load_ok(with_job("    identity: { ttl: 2h }")).jobs.at(0).identity.ttl ==
              milliseconds(7'200'000));
    }
    SECTION("sizes in bytes") {
        auto bytes = [](const std::string& s) {
            return load_ok(with_job("    limits: { max_bytes_up: " + s + " }"))
                .jobs.at(0)
                .limits.max_bytes_up.value_or(0);
        };
        CHECK(bytes("500") == 500u);
        CHECK(bytes("500B") == 500u);
        CHECK(bytes("500MB") == 500'000'000u);
        CHECK(bytes("2KiB") == 2048u);
        CHECK(bytes("1TB") == 1'000'000'000'000u);
        CHECK(bytes("1TiB") == 1ull << 40);
    }
    SECTION("an IPv4-mapped listen address is IPv4") {
        const policy p = load_ok("listen: { proxy: \"[::ffff:127.0.0.1]:3128\" }\njobs: {}\n");
        CHECK(p.listen.proxy.to_string() == "127.0.0.1:3128");
    }
    SECTION("deny_rcode REFUSED") {
        CHECK(load_ok(with_top("dns: { deny_rcode: REFUSED }")).dns.deny == deny_rcode::refused);
    }
    SECTION("mode enforce") {
        CHECK(load_ok(with_job("    mode: enforce")).jobs.at(0).mode == job_mode::enforce);
    }
    SECTION("default_job may be written before the jobs") {
        const policy p = load_ok("dns: { default_job: j }\n" + with_job(""));
        CHECK(p.dns.default_job == "j");
    }
    SECTION("upstream replaces the default list") {
        const policy p = load_ok(with_top("dns: { upstream: [127.0.0.1:53] }"));
        REQUIRE(p.dns.upstream.size() == 1);
        CHECK_FALSE(p.dns.upstream[0].system);
        CHECK(p.dns.upstream[0].server.to_string() == "127.0.0.1:53");
    }
}

// --- errors, key by key -----------------------------------------------------------

TEST_CASE("load: unknown keys are errors at every level", "[load]") {
    check_cases({
        {"top level", with_top("bogus: 1"), 3, 1, "policy", "unknown key 'bogus'"},
        {"listen", "listen: { proxy: 127.0.0.1:3128, bogus: 1 }\njobs: {}\n", 1, 34, "listen",
         "unknown key 'bogus' (expected one of: proxy, socks, dns, admin)"},
        {"admin", with_top("admin: { token_file: /x, bogus: 1 }"), 3, 26, "admin",
         "unknown key 'bogus' (expected one of: token_file, tls)"},
        {"admin.tls", with_top("admin: { token_file: /x, tls: { cert: /c, key: /k, bogus: 1 } }"),
         3, 52, "admin.tls", "unknown key 'bogus' (expected one of: cert, key, client_ca)"},
        {"dns", with_top("dns: { bogus: 1 }"), 3, 8, "dns",
         "unknown key 'bogus' (expected one of: upstream, deny_rcode, default_job, "
         "cache_entries, query_types, rate_limit, inflight, tcp)"},
        {"state", with_top("state: { bogus: 1 }"), 3, 10, "state",
         "unknown key 'bogus' (expected one of: path)"},
        {"audit", with_top("audit: { bogus: 1 }"), 3, 10, "audit",
         "unknown key 'bogus' (expected one of: path, retention_days, max_file_bytes)"},
        {"alerts", with_top("alerts: { bogus: 1 }"), 3, 11, "alerts",
         "unknown key 'bogus' (expected one of: webhook)"},
        {"kill", with_top("kill: { bogus: 1 }"), 3, 9, "kill",
         "unknown key 'bogus' (expected one of: stop_authority, max_stop_seconds)"},
        {"job", with_job("    bogus: 1"), 5, 5, "jobs.j",
         "unknown key 'bogus' (expected one of: task, inputs, outputs, mode, egress, limits, "
         "sources, identity, filesystem, env, credentials)"},
        {"rule", with_rule("{ host: a.com, ports: [443], bogus: 1 }"), 6, 38, "jobs.j.egress[0]",
         "unknown key 'bogus' (expected one of: host, cidr, ports, protocol, methods, http, "
         "resolves_to, credential, mcp)"},
        {"limits", with_job("    limits: { bogus: 1 }"), 5, 15, "jobs.j.limits",
         "unknown key 'bogus' (expected one of: max_tunnels, max_bytes_up)"},
        {"identity", with_job("    identity: { bogus: 1 }"), 5, 17, "jobs.j.identity",
         "unknown key 'bogus' (expected one of: ttl, mint, revoke)"},
        {"filesystem", with_job("    filesystem: { bogus: 1 }"), 5, 19, "jobs.j.filesystem",
         "unknown key 'bogus' (expected one of: scratch, never_write, landlock)"},
        {"keys are case-sensitive", with_top("Jobs: {}"), 3, 1, "policy", "unknown key 'Jobs'"},
        {"a key that is a list", with_top("? [a, b]\n: 1"), 3, 3, "",
         "keys must be plain words, got a list"},
        {"a key of a rule that is a mapping",
         with_rule("{ ? { a: 1 } : 1, host: a.com, ports: [1] }"), 6, 13, "jobs.j.egress[0]",
         "keys must be plain words, got a mapping"},
    });
}

TEST_CASE("load: the unknown-keys fixture reports one error per level", "[load]") {
    const std::string path = policies + "unknown-keys.yaml";
    const load_result r = load_policy_file(path);
    INFO(dump(r));
    CHECK_FALSE(r.value.has_value());
    struct want {
        int line;
        int column;
        std::string start;
    };
    const std::vector<want> expected{
        {2, 57, "listen: unknown key 'http3'"},
        {5, 3, "admin: unknown key 'password'"},
        {6, 37, "admin.tls: unknown key 'ciphers'"},
        {7, 28, "dns: unknown key 'dnssec'"},
        {8, 33, "state: unknown key 'backup'"},
        {9, 33, "audit: unknown key 'rotate'"},
        {10, 26, "alerts: unknown key 'email'"},
        {11, 35, "kill: unknown key 'grace'"},
        {16, 46, "jobs.j.egress[0]: unknown key 'sni'"},
        {17, 31, "jobs.j.limits: unknown key 'max_bytes_down'"},
        {18, 27, "jobs.j.identity: unknown key 'refresh'"},
        {19, 38, "jobs.j.filesystem: unknown key 'read_only'"},
        {20, 5, "jobs.j: unknown key 'priority'"},
        {21, 1, "policy: unknown key 'metrics'"},
    };
    REQUIRE(r.errors.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        INFO("error " << i);
        CHECK(r.errors[i].file == path);
        CHECK(r.errors[i].line == expected[i].line);
        CHECK(r.errors[i].column == expected[i].column);
        CHECK_THAT(r.errors[i].message, StartsWith(expected[i].start));
    }
}

TEST_CASE("load: a key given twice is an error", "[load]") {
    check_cases({
        {"top level", with_top("listen: { proxy: 127.0.0.1:3129 }"), 3, 1, "listen",
         "key given twice"},
        {"in a job", with_job("    task: u"), 5, 5, "jobs.j.task", "key given twice"},
        {"in a rule", with_rule("{ host: a.com, host: b.com, ports: [443] }"), 6, 24,
         "jobs.j.egress[0].host", "key given twice"},
        {"in listen", "listen: { proxy: 127.0.0.1:3128, proxy: 127.0.0.1:3129 }\njobs: {}\n", 1, 34,
         "listen.proxy", "key given twice"},
        {"in limits", with_job("    limits: { max_tunnels: 1, max_tunnels: 2 }"), 5, 31,
         "jobs.j.limits.max_tunnels", "key given twice"},
        {"null twice still counts", with_top("alerts: { webhook: null, webhook: null }"), 3, 26,
         "alerts.webhook", "key given twice"},
    });
}

TEST_CASE("load: values of the wrong type", "[load]") {
    check_cases({
        {"listen is a list", "listen: [a]\njobs: {}\n", 1, 9, "listen",
         "expected a mapping, got a list"},
        {"listen.proxy is a list", "listen: { proxy: [1] }\njobs: {}\n", 1, 18, "listen.proxy",
         "expected a string, got a list"},
        {"jobs is a list", std::string(listen_line) + "jobs: [a]\n", 2, 7, "jobs",
         "expected a mapping, got a list"},
        {"jobs is a string", std::string(listen_line) + "jobs: none\n", 2, 7, "jobs",
         "expected a mapping, got 'none'"},
        {"a job is a string", std::string(listen_line) + "jobs:\n  j: x\n", 3, 6, "jobs.j",
         "expected a mapping, got 'x'"},
        {"task is a list", std::string(listen_line) + "jobs:\n  j:\n    task: [a]\n", 4, 11,
         "jobs.j.task", "expected a string, got a list"},
        {"task is a mapping", std::string(listen_line) + "jobs:\n  j:\n    task: { a: 1 }\n", 4, 11,
         "jobs.j.task", "expected a string, got a mapping"},
        {"task is empty", std::string(listen_line) + "jobs:\n  j:\n    task: \"\"\n", 4, 11,
         "jobs.j.task", "must not be empty"},
        {"inputs is a string", with_job("    inputs: x"), 5, 13, "jobs.j.inputs",
         "expected a list of strings, got 'x'"},
        {"an input is a list", with_job("    inputs: [[a]]"), 5, 14, "jobs.j.inputs[0]",
         "expected a string, got a list"},
        {"an input is null", with_job("    inputs: [a, ~, b]"), 5, 17, "jobs.j.inputs[1]",
         "expected a string, got nothing"},
        {"outputs is a mapping", with_job("    outputs: { a: 1 }"), 5, 14, "jobs.j.outputs",
         "expected a list of strings, got a mapping"},
        {"mode is a list", with_job("    mode: [enforce]"), 5, 11, "jobs.j.mode",
         "expected a string, got a list"},
        {"egress is a mapping", with_job("    egress: { host: a.com }"), 5, 13, "jobs.j.egress",
         "expected a list of rules, got a mapping"},
        {"a rule is a string", with_job("    egress: [ a.com ]"), 5, 15, "jobs.j.egress[0]",
         "expected a mapping, got 'a.com'"},
        {"ports is a number", with_rule("{ host: a.com, ports: 443 }"), 6, 31,
         "jobs.j.egress[0].ports", "expected a list of ports, got '443'"},
        {"a port is a list", with_rule("{ host: a.com, ports: [[443]] }"), 6, 32,
         "jobs.j.egress[0].ports[0]", "expected a port 1..65535, got a list"},
        {"a port is null", with_rule("{ host: a.com, ports: [~] }"), 6, 32,
         "jobs.j.egress[0].ports[0]", "expected a port 1..65535, got nothing"},
        {"host is a list", with_rule("{ host: [a.com], ports: [443] }"), 6, 17,
         "jobs.j.egress[0].host", "expected a string, got a list"},
        {"cidr is a mapping", with_rule("{ cidr: { a: 1 }, ports: [443], protocol: tcp }"), 6, 17,
         "jobs.j.egress[0].cidr", "expected a string, got a mapping"},
        {"protocol is a list", with_rule("{ host: a.com, ports: [443], protocol: [tls] }"), 6, 48,
         "jobs.j.egress[0].protocol", "expected a string, got a list"},
        {"methods is a string",
         with_rule("{ host: a.com, ports: [80], protocol: http, methods: GET }"), 6, 62,
         "jobs.j.egress[0].methods", "expected a list of HTTP methods, got 'GET'"},
        {"a method is null",
         with_rule("{ host: a.com, ports: [80], protocol: http, methods: [~] }"), 6, 63,
         "jobs.j.egress[0].methods[0]", "expected a string, got nothing"},
        {"resolves_to is a string",
         with_rule("{ host: a.com, ports: [443], resolves_to: 10.0.0.0/8 }"), 6, 51,
         "jobs.j.egress[0].resolves_to", "expected a list of CIDR prefixes, got '10.0.0.0/8'"},
        {"limits is a number", with_job("    limits: 5"), 5, 13, "jobs.j.limits",
         "expected a mapping, got '5'"},
        {"max_bytes_up is a list", with_job("    limits: { max_bytes_up: [1] }"), 5, 29,
         "jobs.j.limits.max_bytes_up", "expected a string, got a list"},
        {"max_tunnels is a list", with_job("    limits: { max_tunnels: [1] }"), 5, 28,
         "jobs.j.limits.max_tunnels", "expected a count 1..1000000, got a list"},
        {"sources is a string", with_job("    sources: 10.0.0.0/8"), 5, 14, "jobs.j.sources",
         "expected a list of CIDR prefixes, got '10.0.0.0/8'"},
        {"identity is a string", with_job("    identity: 30m"), 5, 15, "jobs.j.identity",
         "expected a mapping, got '30m'"},
        {"ttl is a list", with_job("    identity: { ttl: [30m] }"), 5, 22, "jobs.j.identity.ttl",
         "expected a string, got a list"},
        {"mint is a list", with_job("    identity: { mint: [a] }"), 5, 23, "jobs.j.identity.mint",
         "expected a string, got a list"},
        {"revoke is a mapping", with_job("    identity: { revoke: { a: 1 } }"), 5, 25,
         "jobs.j.identity.revoke", "expected a string, got a mapping"},
        {"filesystem is a list", with_job("    filesystem: []"), 5, 17, "jobs.j.filesystem",
         "expected a mapping, got a list"},
        {"scratch is a list", with_job("    filesystem: { scratch: [/s] }"), 5, 28,
         "jobs.j.filesystem.scratch", "expected a string, got a list"},
        {"never_write is a string", with_job("    filesystem: { never_write: /etc }"), 5, 32,
         "jobs.j.filesystem.never_write", "expected a list of absolute paths, got '/etc'"},
        {"env is a string", with_job("    env: LANG"), 5, 10, "jobs.j.env",
         "expected a list of variable names, got 'LANG'"},
        {"an env name is a list", with_job("    env: [[LANG]]"), 5, 11, "jobs.j.env[0]",
         "expected a string, got a list"},
        {"admin is a string", with_top("admin: x"), 3, 8, "admin", "expected a mapping, got 'x'"},
        {"token_file is a list", with_top("admin: { token_file: [/t] }"), 3, 22, "admin.token_file",
         "expected a string, got a list"},
        {"admin.tls is a string", with_top("admin: { token_file: /t, tls: yes }"), 3, 31,
         "admin.tls", "expected a mapping, got 'yes'"},
        {"dns is a list", with_top("dns: []"), 3, 6, "dns", "expected a mapping, got a list"},
        {"upstream is a string", with_top("dns: { upstream: system }"), 3, 18, "dns.upstream",
         "expected a list of 'system' or ADDRESS:PORT servers, got 'system'"},
        {"an upstream is a list", with_top("dns: { upstream: [[system]] }"), 3, 19,
         "dns.upstream[0]", "expected a string, got a list"},
        {"deny_rcode is a list", with_top("dns: { deny_rcode: [REFUSED] }"), 3, 20,
         "dns.deny_rcode", "expected a string, got a list"},
        {"default_job is a list",
         std::string(listen_line) + "dns: { default_job: [j] }\n" + "jobs:\n  j: { task: t }\n", 2,
         21, "dns.default_job", "expected a string, got a list"},
        {"state is a string", with_top("state: /var"), 3, 8, "state",
         "expected a mapping, got '/var'"},
        {"state.path is a list", with_top("state: { path: [/var] }"), 3, 16, "state.path",
         "expected a string, got a list"},
        {"audit is a number", with_top("audit: 1"), 3, 8, "audit", "expected a mapping, got '1'"},
        {"retention_days is a mapping", with_top("audit: { retention_days: { a: 1 } }"), 3, 26,
         "audit.retention_days", "expected days 1..3650, got a mapping"},
        {"alerts is a list", with_top("alerts: []"), 3, 9, "alerts",
         "expected a mapping, got a list"},
        {"webhook is a list", with_top("alerts: { webhook: [x] }"), 3, 20, "alerts.webhook",
         "expected a URL or a mapping with url, interval, ..., got a list"},
        {"webhook.url is not a URL", with_top("alerts: { webhook: { url: x } }"), 3, 27,
         "alerts.webhook.url", "expected an http:// or https:// URL"},
        {"kill is a string", with_top("kill: x"), 3, 7, "kill", "expected a mapping, got 'x'"},
        {"stop_authority is a string", with_top("kill: { stop_authority: oncall }"), 3, 25,
         "kill.stop_authority", "expected a list of people or teams, got 'oncall'"},
        {"a stop_authority is a list", with_top("kill: { stop_authority: [[a]] }"), 3, 26,
         "kill.stop_authority[0]", "expected a string, got a list"},
        {"a stop_authority is empty", with_top("kill: { stop_authority: [''] }"), 3, 26,
         "kill.stop_authority[0]", "must not be empty"},
        {"max_stop_seconds is a word", with_top("kill: { max_stop_seconds: abc }"), 3, 27,
         "kill.max_stop_seconds", "expected seconds 1..3600, got 'abc'"},
    });
}

TEST_CASE("load: missing required keys", "[load]") {
    check_cases({
        {"jobs", std::string(listen_line), 1, 1, "", "missing key 'jobs'"},
        {"listen", "jobs: {}\n", 1, 1, "", "missing key 'listen'"},
        {"listen written as null", "listen: ~\njobs: {}\n", 1, 1, "", "missing key 'listen'"},
        {"listen.proxy", "listen: { dns: 127.0.0.1:53 }\njobs: {}\n", 1, 9, "listen",
         "missing key 'proxy'"},
        {"task", std::string(listen_line) + "jobs:\n  j:\n    mode: enforce\n", 4, 5, "jobs.j",
         "missing key 'task'"},
        {"ports", with_rule("{ host: a.com }"), 6, 9, "jobs.j.egress[0]", "missing 'ports'"},
        {"ports written as null", with_rule("{ host: a.com, ports: ~ }"), 6, 9, "jobs.j.egress[0]",
         "missing 'ports'"},
        {"host and cidr", with_rule("{ ports: [443] }"), 6, 9, "jobs.j.egress[0]",
         "missing 'host' (a name or \"*.domain\") or 'cidr' (addresses)"},
        {"admin.tls.cert", with_top("admin: { token_file: /t, tls: { key: /k } }"), 3, 31,
         "admin.tls", "missing key 'cert'"},
        {"admin.tls.key", with_top("admin: { token_file: /t, tls: { cert: /c } }"), 3, 31,
         "admin.tls", "missing key 'key'"},
    });
    SECTION("both jobs and listen") {
        const load_result r = load("state: { path: /x }\n");
        INFO(dump(r));
        REQUIRE(r.errors.size() == 2);
        CHECK(r.errors[0].line == 1);
        CHECK_THAT(r.errors[0].message, Contains("missing key 'jobs'"));
        CHECK(r.errors[1].line == 1);
        CHECK_THAT(r.errors[1].message, Contains("missing key 'listen'"));
    }
    SECTION("both cert and key") {
        const load_result r = load(with_top("admin: { token_file: /t, tls: {} }"));
        INFO(dump(r));
        REQUIRE(r.errors.size() == 2);
        CHECK_THAT(r.errors[0].message, Equals("admin.tls: missing key 'cert'"));
        CHECK_THAT(r.errors[1].message, Equals("admin.tls: missing key 'key'"));
    }
}

TEST_CASE("load: ports", "[load]") {
    const std::string p = "jobs.j.egress[0].ports";
    check_cases({
        {"empty list", with_rule("{ host: a.com, ports: [] }"), 6, 31, p,
         "empty: list at least one port (ports are never implied)"},
        {"0", with_rule("{ host: a.com, ports: [443, 0] }"), 6, 37, p + "[1]",
         "0 is out of range; expected a port 1..65535"},
        {"65536", with_rule("{ host: a.com, ports: [443, 65536] }"), 6, 37, p + "[1]",
         "65536 is out of range; expected a port 1..65535"},
        {"-1", with_rule("{ host: a.com, ports: [443, -1] }"), 6, 37, p + "[1]",
         "-1 is out of range"},
        {"x", with_rule("{ host: a.com, ports: [443, x] }"), 6, 37, p + "[1]",
         "expected a port 1..65535, got 'x'"},
        {"leading zero", with_rule("{ host: a.com, ports: [443, 0443] }"), 6, 37, p + "[1]",
         "expected a port 1..65535, got '0443'"},
        {"hex", with_rule("{ host: a.com, ports: [443, 0x1bb] }"), 6, 37, p + "[1]", "got '0x1bb'"},
        {"plus sign", with_rule("{ host: a.com, ports: [443, +443] }"), 6, 37, p + "[1]",
         "got '+443'"},
        {"fraction", with_rule("{ host: a.com, ports: [443, 1.5] }"), 6, 37, p + "[1]",
         "got '1.5'"},
        {"empty string", with_rule("{ host: a.com, ports: [443, ''] }"), 6, 37, p + "[1]",
         "got ''"},
        {"beyond 64 bits", with_rule("{ host: a.com, ports: [443, 99999999999999999999] }"), 6, 37,
         p + "[1]", "got '99999999999999999999'"},
        {"a range", with_rule("{ host: a.com, ports: [443, 8000-8080] }"), 6, 37, p + "[1]",
         "got '8000-8080'"},
        {"duplicate", with_rule("{ host: a.com, ports: [443, 80, 443] }"), 6, 41, p + "[2]",
         "port 443 listed twice"},
        {"duplicate written differently", with_rule("{ host: a.com, ports: [443, \"443\"] }"), 6,
         37, p + "[1]", "port 443 listed twice"},
    });
}

TEST_CASE("load: host patterns", "[load]") {
    const std::string p = "jobs.j.egress[0].host";
    const std::string label64(64, 'x');
    const std::string label63(63, 'a');
    const std::string name254 = label63 + "." + label63 + "." + label63 + "." +
                                std::string(62, 'b');
    REQUIRE(name254.size() == 254);
    check_cases({
        {"'*' inside a label", with_rule("{ host: \"a*.b.com\", ports: [443] }"), 6, 17, p,
         "'a*.b.com': '*' is allowed only as the whole leftmost label"},
        {"'*' further right", with_rule("{ host: \"*.*.b.com\", ports: [443] }"), 6, 17, p,
         "'*.*.b.com': '*' is allowed only as the whole leftmost label"},
        {"wildcard under a TLD", with_rule("{ host: \"*.com\", ports: [443] }"), 6, 17, p,
         "'*.com': a wildcard needs at least two labels"},
        {"'*' alone", with_rule("{ host: \"*\", ports: [443] }"), 6, 17, p,
         "'*': '*' is allowed only as the whole leftmost label"},
        {"empty label", with_rule("{ host: foo..com, ports: [443] }"), 6, 17, p,
         "'foo..com': empty label in host name"},
        {"leading dot", with_rule("{ host: .a.com, ports: [443] }"), 6, 17, p,
         "'.a.com': empty label"},
        {"two trailing dots", with_rule("{ host: a.com.., ports: [443] }"), 6, 17, p,
         "'a.com..': empty label"},
        {"leading hyphen", with_rule("{ host: -a.com, ports: [443] }"), 6, 17, p,
         "'-a.com': label starts or ends with '-'"},
        {"trailing hyphen", with_rule("{ host: a-.com, ports: [443] }"), 6, 17, p,
         "'a-.com': label starts or ends with '-'"},
        {"label of 64 characters", with_rule("{ host: " + label64 + ".com, ports: [443] }"), 6, 17,
         p, "label longer than 63 characters"},
        {"name of 254 characters", with_rule("{ host: " + name254 + ", ports: [443] }"), 6, 17, p,
         "host name is longer than 253 characters"},
        {"underscore", with_rule("{ host: ex_ample.com, ports: [443] }"), 6, 17, p,
         "'ex_ample.com': host name contains '_'"},
        {"non-ASCII", with_rule("{ host: münchen.de, ports: [443] }"), 6, 17, p,
         "host name contains a non-ASCII byte (write internationalised names as punycode"},
        {"space", with_rule("{ host: \"a b.com\", ports: [443] }"), 6, 17, p,
         "'a b.com': host name contains a space"},
        {"tab", with_rule("{ host: \"a\\tb.com\", ports: [443] }"), 6, 17, p,
         "host name contains a tab"},
        {"slash", with_rule("{ host: a/b.com, ports: [443] }"), 6, 17, p,
         "'a/b.com': host name contains '/'"},
        {"at sign", with_rule("{ host: a@b.com, ports: [443] }"), 6, 17, p,
         "'a@b.com': host name contains '@'"},
        {"colon", with_rule("{ host: \"a:b.com\", ports: [443] }"), 6, 17, p,
         "'a:b.com': host name contains ':'"},
        {"percent", with_rule("{ host: a%b.com, ports: [443] }"), 6, 17, p,
         "'a%b.com': host name contains '%'"},
        {"a port in the host", with_rule("{ host: \"a.com:443\", ports: [443] }"), 6, 17, p,
         "host name contains ':'"},
        {"IPv4 address", with_rule("{ host: 1.2.3.4, ports: [443] }"), 6, 17, p,
         "'1.2.3.4': an IP address is not a host name; use a `cidr` rule"},
        {"hex IPv4 form", with_rule("{ host: 0x7f.1, ports: [443] }"), 6, 17, p,
         "'0x7f.1': an IP address is not a host name"},
        {"short IPv4 form", with_rule("{ host: 127.1, ports: [443] }"), 6, 17, p,
         "an IP address is not a host name"},
        {"IPv4 with a leading zero", with_rule("{ host: 1.2.3.04, ports: [443] }"), 6, 17, p,
         "an IP address is not a host name"},
        {"bare IPv6", with_rule("{ host: \"::1\", ports: [443] }"), 6, 17, p,
         "an IP address is not a host name"},
        {"bracketed IPv6", with_rule("{ host: \"[::1]\", ports: [443] }"), 6, 17, p,
         "an IP address is not a host name"},
        {"empty", with_rule("{ host: \"\", ports: [443] }"), 6, 17, p, "must not be empty"},
        {"NUL byte", with_rule("{ host: \"a\\0b.com\", ports: [443] }"), 6, 17, p,
         "contains a NUL byte"},
    });
}

TEST_CASE("load: CIDR prefixes", "[load]") {
    const std::string c = "jobs.j.egress[0].cidr";
    check_cases({
        {"host bits set", with_rule("{ cidr: 10.0.0.1/8, ports: [22], protocol: tcp }"), 6, 17, c,
         "10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?"},
        {"IPv6 host bits set",
         with_rule("{ cidr: \"2001:db8::1/32\", ports: [22], protocol: tcp }"), 6, 17, c,
         "has host bits set; did you mean 2001:db8::/32?"},
        {"/33", with_rule("{ cidr: 10.0.0.0/33, ports: [22], protocol: tcp }"), 6, 17, c,
         "prefix length 33 is out of range 0..32 for IPv4"},
        {"/129", with_rule("{ cidr: \"::/129\", ports: [22], protocol: tcp }"), 6, 17, c,
         "prefix length 129 is out of range 0..128 for IPv6"},
        {"no prefix", with_rule("{ cidr: 10.0.0.0, ports: [22], protocol: tcp }"), 6, 17, c,
         "expected ADDRESS/LENGTH, got '10.0.0.0': write 10.0.0.0/32 for a single address"},
        {"garbage", with_rule("{ cidr: nope, ports: [22], protocol: tcp }"), 6, 17, c,
         "expected ADDRESS/LENGTH, got 'nope'"},
        {"empty length", with_rule("{ cidr: 10.0.0.0/, ports: [22], protocol: tcp }"), 6, 17, c,
         "with no length after '/'"},
        {"leading zero in the length",
         with_rule("{ cidr: 10.0.0.0/08, ports: [22], protocol: tcp }"), 6, 17, c,
         "prefix length '08' has a leading zero"},
        {"no address", with_rule("{ cidr: /8, ports: [22], protocol: tcp }"), 6, 17, c,
         "with no address"},
        {"a name", with_rule("{ cidr: example.com/24, ports: [22], protocol: tcp }"), 6, 17, c,
         "'example.com' is not an IP address"},
        {"in sources", with_job("    sources: [10.0.0.0/8, 10.0.0.1/8]"), 5, 27,
         "jobs.j.sources[1]", "10.0.0.1/8 has host bits set"},
        {"in resolves_to", with_rule("{ host: a.com, ports: [443], resolves_to: [10.0.0.0/33] }"),
         6, 52, "jobs.j.egress[0].resolves_to[0]", "prefix length 33 is out of range"},
    });
}

TEST_CASE("load: protocol and methods", "[load]") {
    const std::string r = "jobs.j.egress[0]";
    check_cases({
        {"unknown protocol", with_rule("{ host: a.com, ports: [53], protocol: udp }"), 6, 47,
         r + ".protocol", "unknown protocol 'udp' (expected tls, tcp, ssh, http or https)"},
        {"protocol in upper case", with_rule("{ host: a.com, ports: [53], protocol: TLS }"), 6, 47,
         r + ".protocol", "unknown protocol 'TLS'"},
        {"methods with the default protocol",
         with_rule("{ host: a.com, ports: [443], methods: [GET] }"), 6, 47, r + ".methods",
         "'methods' applies only to protocol: http"},
        {"methods with tls",
         with_rule("{ host: a.com, ports: [443], protocol: tls, methods: [GET] }"), 6, 62,
         r + ".methods", "'methods' applies only to protocol: http"},
        {"methods with tcp",
         with_rule("{ host: a.com, ports: [443], protocol: tcp, methods: [GET] }"), 6, 62,
         r + ".methods", "'methods' applies only to protocol: http"},
        {"lower-case method",
         with_rule("{ host: a.com, ports: [80], protocol: http, methods: [GET, get] }"), 6, 68,
         r + ".methods[1]", "'get' is not an HTTP method (write it in upper case, e.g. GET)"},
        {"method with a digit",
         with_rule("{ host: a.com, ports: [80], protocol: http, methods: [GET1] }"), 6, 63,
         r + ".methods[0]", "'GET1' is not an HTTP method"},
        {"method with a space",
         with_rule("{ host: a.com, ports: [80], protocol: http, methods: [\"GE T\"] }"), 6, 63,
         r + ".methods[0]", "'GE T' is not an HTTP method"},
        {"method of 33 characters",
         with_rule("{ host: a.com, ports: [80], protocol: http, methods: [" + std::string(33, 'A') +
                   "] }"),
         6, 63, r + ".methods[0]", "is not an HTTP method"},
        {"empty method", with_rule("{ host: a.com, ports: [80], protocol: http, methods: [''] }"),
         6, 63, r + ".methods[0]", "must not be empty"},
        {"CONNECT", with_rule("{ host: a.com, ports: [80], protocol: http, methods: [CONNECT] }"),
         6, 63, r + ".methods[0]", "CONNECT is not forwarded by http rules; use a tls or tcp rule"},
        {"empty methods list",
         with_rule("{ host: a.com, ports: [80], protocol: http, methods: [] }"), 6, 62,
         r + ".methods", "an empty list allows no method; leave 'methods' out to allow any"},
        {"method listed twice",
         with_rule("{ host: a.com, ports: [80], protocol: http, methods: [GET, GET] }"), 6, 68,
         r + ".methods[1]", "'GET' listed twice"},
        {"cidr rule without a protocol", with_rule("{ cidr: 203.0.113.0/24, ports: [22] }"), 6, 9,
         r, "a 'cidr' rule must name its protocol: tcp, ssh or http"},
        {"cidr rule with tls", with_rule("{ cidr: 203.0.113.0/24, ports: [22], protocol: tls }"), 6,
         56, r + ".protocol", "tls needs a host name to check the SNI against; use tcp"},
        {"host and cidr",
         with_rule("{ host: a.com, cidr: 10.0.0.0/8, ports: [443], protocol: tcp }"), 6, 9, r,
         "give either 'host' or 'cidr', not both"},
        {"protocol empty", with_rule("{ host: a.com, ports: [443], protocol: '' }"), 6, 48,
         r + ".protocol", "must not be empty"},
    });
    SECTION("an unknown protocol with methods gives both errors") {
        const load_result res = load(
            with_rule("{ host: a.com, ports: [443], protocol: udp, methods: [GET] }"));
        INFO(dump(res));
        REQUIRE(res.errors.size() == 2);
        CHECK_THAT(res.errors[0].message, StartsWith(r + ".protocol: unknown protocol 'udp'"));
        CHECK_THAT(res.errors[1].message, StartsWith(r + ".methods: 'methods' applies only"));
    }
}

TEST_CASE("load: resolves_to", "[load]") {
    const std::string r = "jobs.j.egress[0].resolves_to";
    check_cases({
        {"on a cidr rule",
         with_rule(
             "{ cidr: 203.0.113.0/24, ports: [22], protocol: tcp, resolves_to: [10.0.0.0/8] }"),
         6, 74, r, "applies only to 'host' rules"},
        {"public space", with_rule("{ host: a.com, ports: [443], resolves_to: [8.8.8.0/24] }"), 6,
         52, r + "[0]",
         "8.8.8.0/24 is public address space; resolves_to lists only the non-public ranges"},
        {"public space after a private range",
         with_rule("{ host: a.com, ports: [443], resolves_to: [10.0.0.0/8, 1.1.1.1/32] }"), 6, 64,
         r + "[1]", "1.1.1.1/32 is public address space"},
        {"every IPv4 address", with_rule("{ host: a.com, ports: [443], resolves_to: [0.0.0.0/0] }"),
         6, 52, r + "[0]", "0.0.0.0/0 reaches beyond the unspecified range"},
        {"every IPv6 address", with_rule("{ host: a.com, ports: [443], resolves_to: [\"::/0\"] }"),
         6, 52, r + "[0]", "::/0 reaches beyond the unspecified range"},
        {"wider than one private range",
         with_rule("{ host: a.com, ports: [443], resolves_to: [10.0.0.0/7] }"), 6, 52, r + "[0]",
         "10.0.0.0/7 reaches beyond the private range 10.0.0.0/8"},
    });
}

TEST_CASE("load: rules that open the unspecified range are refused", "[load]") {
    // Linux connects 0.0.0.0 (and ::) to this host: CONNECT 0.0.0.0:ADMIN_PORT reached
    // cordon's own admin API through a rule opening 0.0.0.0/32 (issue 17).
    const std::string c = "jobs.j.egress[0].cidr";
    const std::string r = "jobs.j.egress[0].resolves_to";
    const std::string says = "which the kernel connects to this host";
    check_cases({
        {"0.0.0.0/32", with_rule("{ cidr: 0.0.0.0/32, ports: [9090], protocol: tcp }"), 6, 17, c,
         "0.0.0.0/32 opens the unspecified range 0.0.0.0/32, " + says},
        {"0.0.0.0/8", with_rule("{ cidr: 0.0.0.0/8, ports: [80], protocol: http }"), 6, 17, c,
         "0.0.0.0/8 opens the unspecified range 0.0.0.0/8"},
        {"0.0.0.0/31", with_rule("{ cidr: 0.0.0.0/31, ports: [22], protocol: tcp }"), 6, 17, c,
         "0.0.0.0/31 opens the unspecified range 0.0.0.0/8"},
        {"0.1.2.3/32", with_rule("{ cidr: 0.1.2.3/32, ports: [22], protocol: tcp }"), 6, 17, c,
         "0.1.2.3/32 opens the unspecified range 0.0.0.0/8"},
        {"::/128", with_rule("{ cidr: \"::/128\", ports: [22], protocol: tcp }"), 6, 17, c,
         "::/128 opens the unspecified range ::/128"},
        {"IPv4-compatible ::/104", with_rule("{ cidr: \"::/104\", ports: [22], protocol: tcp }"), 6,
         17, c, "::/104 opens the unspecified range ::/104"},
        {"NAT64 of 0.0.0.0", with_rule("{ cidr: \"64:ff9b::/128\", ports: [22], protocol: tcp }"),
         6, 17, c, "64:ff9b::/128 opens the unspecified range 64:ff9b::/128"},
        {"resolves_to 0.0.0.0/32",
         with_rule("{ host: a.com, ports: [443], resolves_to: [0.0.0.0/32] }"), 6, 52, r + "[0]",
         "0.0.0.0/32 opens the unspecified range 0.0.0.0/32"},
        {"resolves_to ::/128",
         with_rule("{ host: a.com, ports: [443], resolves_to: [10.0.0.0/8, \"::/128\"] }"), 6, 64,
         r + "[1]", "::/128 opens the unspecified range ::/128"},
    });
    // Wider prefixes never open it (classify: their range is not inside it): still valid.
    check_valid({
        {"cidr 0.0.0.0/0", with_rule("{ cidr: 0.0.0.0/0, ports: [22], protocol: tcp }")},
        {"cidr ::/0", with_rule("{ cidr: \"::/0\", ports: [22], protocol: tcp }")},
        {"cidr 0.0.0.0/7", with_rule("{ cidr: 0.0.0.0/7, ports: [22], protocol: tcp }")},
        {"cidr ::/96", with_rule("{ cidr: \"::/96\", ports: [22], protocol: tcp }")},
        {"resolves_to loopback",
         with_rule("{ host: a.com, ports: [443], resolves_to: [127.0.0.0/8] }")},
    });
}

// Rules after the first of job `j`: `rules` are its egress items, one per line from line 6.
std::string with_rules(std::initializer_list<std::string_view> rules) {
    std::string egress = "    egress:";
    for (const auto r : rules) {
        egress += "\n      - " + std::string(r);
    }
    return with_job(egress);
}

TEST_CASE("load: warnings for rules an earlier rule shadows", "[load]") {
    SECTION("a tls and a tcp rule for the same host and port: the second never matches") {
        const load_result r = load(with_rules(
            {"{ host: a.com, ports: [443] }", "{ host: a.com, ports: [443], protocol: tcp }"}));
        INFO(dump(r));
        REQUIRE(r.ok());
        REQUIRE(r.warnings.size() == 1);
        CHECK(r.warnings[0].line == 7);
        CHECK(r.warnings[0].column == 9);
        CHECK(r.warnings[0].message ==
              "jobs.j.egress[1]: never matches: an earlier rule, jobs.j.egress[0] "
              "(a.com:443/tls, line 6), takes those requests first (the first matching rule "
              "wins)");
    }
    SECTION("some ports only") {
        const load_result r = load(
            with_rules({"{ host: \"*.a.com\", ports: [443, 8443], protocol: tcp }",
                        "{ host: \"*.a.com\", ports: [80, 443, 8443] }"}));
        REQUIRE(r.ok());
        REQUIRE(r.warnings.size() == 1);
        CHECK_THAT(r.warnings[0].message,
                   StartsWith("jobs.j.egress[1]: ports 443,8443 never match: an earlier rule, "
                              "jobs.j.egress[0] (*.a.com:443,8443/tcp, line 6)"));
    }
    SECTION("several earlier rules together") {
        const load_result r = load(
            with_rules({"{ cidr: 10.0.0.0/8, ports: [22], protocol: tcp }",
                        "{ cidr: 10.0.0.0/8, ports: [23], protocol: tcp }",
                        "{ cidr: 10.0.0.0/8, ports: [22, 23], protocol: tcp }"}));
        REQUIRE(r.ok());
        REQUIRE(r.warnings.size() == 1);
        CHECK(r.warnings[0].line == 8);
        CHECK_THAT(r.warnings[0].message, StartsWith("jobs.j.egress[2]: never matches"));
    }
    SECTION("http rules: by method") {
        const load_result r = load(
            with_rules({"{ host: a.com, ports: [80], protocol: http, methods: [GET, POST] }",
                        "{ host: a.com, ports: [80], protocol: http, methods: [GET] }",
                        "{ host: a.com, ports: [80], protocol: http }",
                        "{ host: a.com, ports: [80], protocol: http, methods: [PUT] }"}));
        REQUIRE(r.ok());
        // [GET] is inside [GET, POST]; "any" is not; [PUT] is inside "any" (line 8).
        REQUIRE(r.warnings.size() == 2);
        CHECK(r.warnings[0].line == 7);
        CHECK(r.warnings[1].line == 9);
        CHECK_THAT(r.warnings[1].message, Contains("jobs.j.egress[2] (a.com:80/http, line 8)"));
    }
    SECTION("no warning where the rules differ in what they take") {
        const load_result r = load(with_rules(
            {"{ host: a.com, ports: [443] }", "{ host: a.com, ports: [80], protocol: http }",
             "{ host: b.a.com, ports: [443] }", "{ host: \"*.a.com\", ports: [443] }",
             "{ host: a.com, ports: [8443] }", "{ cidr: 10.0.0.0/16, ports: [22], protocol: tcp }",
             "{ cidr: 10.0.0.0/8, ports: [22], protocol: tcp }"}));
        INFO(dump(r));
        REQUIRE(r.ok());
        CHECK(r.warnings.empty());
    }
    SECTION("other jobs' rules never shadow") {
        const load_result r = load(std::string(listen_line) +
                                   "jobs:\n  a:\n    task: t\n    egress: [{ host: a.com, "
                                   "ports: [443] }]\n  b:\n    task: t\n    egress: [{ host: "
                                   "a.com, ports: [443], protocol: tcp }]\n");
        REQUIRE(r.ok());
        CHECK(r.warnings.empty());
    }
    SECTION("the examples have none") {
        for (const char* f : {"quickstart.yaml", "agent-fleet.yaml"}) {
            const load_result r = load_policy_file(examples + f);
            REQUIRE(r.ok());
            CHECK(r.warnings.empty());
        }
    }
}

TEST_CASE("load: identity", "[load]") {
    const std::string t = "jobs.j.identity.ttl";
    check_cases({
        {"30s is too short", with_job("    identity: { ttl: 30s }"), 5, 22, t,
         "'30s' is outside 1m..24h (tokens are short-lived)"},
        {"59s999ms is too short", with_job("    identity: { ttl: 59s999ms }"), 5, 22, t,
         "'59s999ms' is outside 1m..24h"},
        {"25h is too long", with_job("    identity: { ttl: 25h }"), 5, 22, t,
         "'25h' is outside 1m..24h"},
        {"24h1ms is too long", with_job("    identity: { ttl: 24h1ms }"), 5, 22, t,
         "'24h1ms' is outside 1m..24h"},
        {"0s", with_job("    identity: { ttl: 0s }"), 5, 22, t, "'0s' is outside 1m..24h"},
        {"a word", with_job("    identity: { ttl: soon }"), 5, 22, t,
         "expected a duration such as 30m or 2h, got 'soon'"},
        {"no unit", with_job("    identity: { ttl: 30 }"), 5, 22, t,
         "expected a duration such as 30m or 2h, got '30'"},
        {"upper-case unit", with_job("    identity: { ttl: 30M }"), 5, 22, t, "got '30M'"},
        {"negative", with_job("    identity: { ttl: -30m }"), 5, 22, t, "got '-30m'"},
        {"a space inside", with_job("    identity: { ttl: 1h 30m }"), 5, 22, t, "got '1h 30m'"},
        {"empty", with_job("    identity: { ttl: '' }"), 5, 22, t, "must not be empty"},
        {"mint empty", with_job("    identity: { mint: '' }"), 5, 23, "jobs.j.identity.mint",
         "must not be empty"},
        {"revoke with a NUL byte", with_job("    identity: { revoke: \"a\\0b\" }"), 5, 25,
         "jobs.j.identity.revoke", "contains a NUL byte"},
    });
}

TEST_CASE("load: limits", "[load]") {
    const std::string t = "jobs.j.limits.max_tunnels";
    const std::string b = "jobs.j.limits.max_bytes_up";
    check_cases({
        {"max_tunnels 0", with_job("    limits: { max_tunnels: 0 }"), 5, 28, t,
         "0 is out of range; expected a count 1..1000000"},
        {"max_tunnels -1", with_job("    limits: { max_tunnels: -1 }"), 5, 28, t,
         "-1 is out of range; expected a count 1..1000000"},
        {"max_tunnels 1000001", with_job("    limits: { max_tunnels: 1000001 }"), 5, 28, t,
         "1000001 is out of range"},
        {"max_tunnels 1.5", with_job("    limits: { max_tunnels: 1.5 }"), 5, 28, t,
         "expected a count 1..1000000, got '1.5'"},
        {"max_bytes_up 1XB", with_job("    limits: { max_bytes_up: 1XB }"), 5, 29, b,
         "expected a size above 0 such as 500MB or 1GiB, got '1XB'"},
        {"max_bytes_up 0", with_job("    limits: { max_bytes_up: 0 }"), 5, 29, b,
         "expected a size above 0 such as 500MB or 1GiB, got '0'"},
        {"max_bytes_up 0GiB", with_job("    limits: { max_bytes_up: 0GiB }"), 5, 29, b,
         "got '0GiB'"},
        {"max_bytes_up -5", with_job("    limits: { max_bytes_up: -5 }"), 5, 29, b, "got '-5'"},
        {"max_bytes_up 1.5GB", with_job("    limits: { max_bytes_up: 1.5GB }"), 5, 29, b,
         "got '1.5GB'"},
        {"max_bytes_up with a space", with_job("    limits: { max_bytes_up: 1 GB }"), 5, 29, b,
         "got '1 GB'"},
        {"max_bytes_up lower case", with_job("    limits: { max_bytes_up: 1gb }"), 5, 29, b,
         "got '1gb'"},
        {"max_bytes_up overflows", with_job("    limits: { max_bytes_up: 16777216TiB }"), 5, 29, b,
         "got '16777216TiB'"},
        {"max_bytes_up beyond 64 bits",
         with_job("    limits: { max_bytes_up: 18446744073709551616 }"), 5, 29, b,
         "got '18446744073709551616'"},
    });
}

TEST_CASE("load: filesystem", "[load]") {
    const std::string f = "jobs.j.filesystem";
    check_cases({
        {"relative scratch", with_job("    filesystem: { scratch: scratch }"), 5, 28,
         f + ".scratch", "'scratch' is not an absolute path"},
        {"scratch /", with_job("    filesystem: { scratch: / }"), 5, 28, f + ".scratch",
         "the scratch dir cannot be / (it is wiped)"},
        {"scratch inside never_write",
         with_job("    filesystem: { scratch: /home/agent/scratch, never_write: [/etc, /home] }"),
         5, 69, f + ".never_write[1]",
         "scratch dir /home/agent/scratch lies in never_write path /home"},
        {"scratch equal to never_write",
         with_job("    filesystem: { scratch: /scratch, never_write: [/scratch/] }"), 5, 52,
         f + ".never_write[0]", "scratch dir /scratch lies in never_write path /scratch/"},
        {"never_write /", with_job("    filesystem: { scratch: /scratch, never_write: [/] }"), 5,
         52, f + ".never_write[0]", "lies in never_write path /"},
        {"never_write written first",
         with_job("    filesystem: { never_write: [/tmp], scratch: /tmp/s }"), 5, 33,
         f + ".never_write[0]", "scratch dir /tmp/s lies in never_write path /tmp"},
        {"relative never_write", with_job("    filesystem: { never_write: [etc] }"), 5, 33,
         f + ".never_write[0]", "'etc' is not an absolute path"},
        {"empty never_write", with_job("    filesystem: { never_write: [''] }"), 5, 33,
         f + ".never_write[0]", "must not be empty"},
        // Paths are compared as strings, so they must be written plainly: "//" is / and
        // "/tmp/.." is / too.
        {"scratch //", with_job("    filesystem: { scratch: // }"), 5, 28, f + ".scratch",
         "'//' is not a plain path: write it without '//', '.' or '..' parts"},
        {"scratch /tmp/..", with_job("    filesystem: { scratch: /tmp/.. }"), 5, 28, f + ".scratch",
         "'/tmp/..' is not a plain path"},
        {"scratch /./", with_job("    filesystem: { scratch: /./ }"), 5, 28, f + ".scratch",
         "'/./' is not a plain path"},
        {"scratch with // inside a never_write path",
         with_job("    filesystem: { scratch: /home//agent, never_write: [/home/agent] }"), 5, 28,
         f + ".scratch", "'/home//agent' is not a plain path"},
        {"never_write with ..",
         with_job("    filesystem: { scratch: /scratch, never_write: [/etc/../scratch] }"), 5, 52,
         f + ".never_write[0]", "'/etc/../scratch' is not a plain path"},
    });
}

TEST_CASE("load: env", "[load]") {
    check_cases({
        {"leading digit", with_job("    env: [LANG, 1X]"), 5, 17, "jobs.j.env[1]",
         "'1X' is not a variable name"},
        {"hyphen", with_job("    env: [LANG, A-B]"), 5, 17, "jobs.j.env[1]",
         "'A-B' is not a variable name"},
        {"space", with_job("    env: [LANG, \"A B\"]"), 5, 17, "jobs.j.env[1]",
         "'A B' is not a variable name"},
        {"an assignment", with_job("    env: [LANG, LANG=C]"), 5, 17, "jobs.j.env[1]",
         "'LANG=C' is not a variable name"},
        {"non-ASCII", with_job("    env: [LANG, Ä]"), 5, 17, "jobs.j.env[1]",
         "is not a variable name"},
        {"empty", with_job("    env: [LANG, '']"), 5, 17, "jobs.j.env[1]", "must not be empty"},
        {"duplicate", with_job("    env: [LANG, TZ, LANG]"), 5, 21, "jobs.j.env[2]",
         "'LANG' listed twice"},
    });
}

TEST_CASE("load: job names", "[load]") {
    const std::string rule_text =
        "job names are 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit";
    auto named = [](const std::string& name) {
        return std::string(listen_line) + "jobs:\n  " + name + ":\n    task: t\n";
    };
    check_cases({
        {"leading hyphen", named("-bad"), 3, 3, "jobs.-bad", rule_text},
        {"leading dot", named(".x"), 3, 3, "jobs..x", rule_text},
        {"leading underscore", named("_x"), 3, 3, "jobs._x", rule_text},
        {"space", named("\"a b\""), 3, 3, "jobs.a b", rule_text},
        {"slash", named("\"a/b\""), 3, 3, "jobs.a/b", rule_text},
        {"colon", named("\"a:b\""), 3, 3, "jobs.a:b", rule_text},
        {"non-ASCII", named("\"é\""), 3, 3, "jobs.é", rule_text},
        {"empty", named("\"\""), 3, 3, "jobs.", rule_text},
        {"65 characters", named(std::string(65, 'a')), 3, 3, "jobs." + std::string(65, 'a'),
         rule_text},
        {"a list", std::string(listen_line) + "jobs:\n  ? [a]\n  : { task: t }\n", 3, 5, "jobs",
         "job names must be plain words, got a list"},
        {"duplicate",
         std::string(listen_line) +
             "jobs:\n  a:\n    task: t\n  b:\n    task: t\n  a:\n    task: u\n",
         7, 3, "jobs.a", "duplicate job name"},
    });
    SECTION("a job with no value is reported at its name") {
        // `j:` alone: the value is null; the error is about the job, on its line.
        const load_result r = load(std::string(listen_line) + "jobs:\n  j:\n  k:\n    task: t\n");
        INFO(dump(r));
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].line == 3);
        CHECK(r.errors[0].column == 3);
        CHECK_THAT(r.errors[0].message, Equals("jobs.j: expected a mapping, got nothing"));
    }
    SECTION("... also at the end of the file") {
        const load_result r = load(std::string(listen_line) + "jobs:\n  j:\n");
        INFO(dump(r));
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].line == 3);
        CHECK(r.errors[0].column == 3);
    }
}

TEST_CASE("load: dns", "[load]") {
    check_cases({
        {"default_job names no job", with_top("dns: { default_job: nobody }"), 3, 21,
         "dns.default_job", "no job named 'nobody' in jobs"},
        {"default_job names a job that was refused",
         std::string(listen_line) + "dns: { default_job: \"-x\" }\njobs: {}\n", 2, 21,
         "dns.default_job", "no job named '-x' in jobs"},
        {"deny_rcode in lower case", with_top("dns: { deny_rcode: refused }"), 3, 20,
         "dns.deny_rcode", "expected REFUSED or NXDOMAIN, got 'refused'"},
        {"deny_rcode SERVFAIL", with_top("dns: { deny_rcode: SERVFAIL }"), 3, 20, "dns.deny_rcode",
         "expected REFUSED or NXDOMAIN, got 'SERVFAIL'"},
        {"deny_rcode empty", with_top("dns: { deny_rcode: '' }"), 3, 20, "dns.deny_rcode",
         "must not be empty"},
        {"upstream without a port", with_top("dns: { upstream: [system, 8.8.8.8] }"), 3, 27,
         "dns.upstream[1]", "expected ADDRESS:PORT"},
        {"upstream as a name", with_top("dns: { upstream: [system, \"dns.google:53\"] }"), 3, 27,
         "dns.upstream[1]", "'dns.google' is not an IP address"},
        {"upstream IPv6 without brackets", with_top("dns: { upstream: [\"::1:53\"] }"), 3, 19,
         "dns.upstream[0]", "write IPv6 addresses in brackets"},
        {"upstream port 65536", with_top("dns: { upstream: [8.8.8.8:65536] }"), 3, 19,
         "dns.upstream[0]", "'65536' is not a port"},
        {"upstream port 0", with_top("dns: { upstream: [8.8.8.8:0] }"), 3, 19, "dns.upstream[0]",
         "port 0 is not a server's port; expected 1..65535"},
        {"upstream SYSTEM", with_top("dns: { upstream: [SYSTEM] }"), 3, 19, "dns.upstream[0]",
         "expected ADDRESS:PORT"},
        {"upstream empty string", with_top("dns: { upstream: [''] }"), 3, 19, "dns.upstream[0]",
         "must not be empty"},
        {"upstream empty list", with_top("dns: { upstream: [] }"), 3, 18, "dns.upstream",
         "must name at least one server (or 'system')"},
    });
}

TEST_CASE("load: alerts, audit and kill", "[load]") {
    check_cases({
        {"webhook ftp", with_top("alerts: { webhook: \"ftp://x\" }"), 3, 20, "alerts.webhook",
         "expected an http:// or https:// URL"},
        {"webhook without a scheme", with_top("alerts: { webhook: hooks.example.com }"), 3, 20,
         "alerts.webhook", "expected an http:// or https:// URL"},
        {"webhook scheme in upper case", with_top("alerts: { webhook: \"HTTPS://x\" }"), 3, 20,
         "alerts.webhook", "expected an http:// or https:// URL"},
        {"webhook with a space", with_top("alerts: { webhook: \"http://a b\" }"), 3, 20,
         "alerts.webhook", "URL contains whitespace"},
        {"webhook with a newline", with_top("alerts: { webhook: \"https://x\\n\" }"), 3, 20,
         "alerts.webhook", "URL contains whitespace"},
        {"max_file_bytes 4095", with_top("audit: { max_file_bytes: 4095 }"), 3, 26,
         "audit.max_file_bytes", "expected a size 4KiB..1TiB such as 256MiB, got '4095'"},
        {"max_file_bytes 2TiB", with_top("audit: { max_file_bytes: 2TiB }"), 3, 26,
         "audit.max_file_bytes", "got '2TiB'"},
        {"max_file_bytes 1.5GB", with_top("audit: { max_file_bytes: 1.5GB }"), 3, 26,
         "audit.max_file_bytes", "got '1.5GB'"},
        {"max_file_bytes a list", with_top("audit: { max_file_bytes: [1] }"), 3, 26,
         "audit.max_file_bytes", "expected a string, got a list"},
        {"retention_days 0", with_top("audit: { retention_days: 0 }"), 3, 26,
         "audit.retention_days", "0 is out of range; expected days 1..3650"},
        {"retention_days 3651", with_top("audit: { retention_days: 3651 }"), 3, 26,
         "audit.retention_days", "3651 is out of range; expected days 1..3650"},
        {"retention_days 1e3", with_top("audit: { retention_days: 1e3 }"), 3, 26,
         "audit.retention_days", "expected days 1..3650, got '1e3'"},
        {"retention_days 90.0", with_top("audit: { retention_days: 90.0 }"), 3, 26,
         "audit.retention_days", "got '90.0'"},
        {"audit.path relative", with_top("audit: { path: ./log }"), 3, 16, "audit.path",
         "'./log' is not an absolute path"},
        {"state.path relative", with_top("state: { path: var/lib }"), 3, 16, "state.path",
         "'var/lib' is not an absolute path"},
        {"max_stop_seconds 0", with_top("kill: { max_stop_seconds: 0 }"), 3, 27,
         "kill.max_stop_seconds", "0 is out of range; expected seconds 1..3600"},
        {"max_stop_seconds 3601", with_top("kill: { max_stop_seconds: 3601 }"), 3, 27,
         "kill.max_stop_seconds", "3601 is out of range"},
        {"max_stop_seconds -5", with_top("kill: { max_stop_seconds: -5 }"), 3, 27,
         "kill.max_stop_seconds", "-5 is out of range"},
    });
}

TEST_CASE("load: listen", "[load]") {
    const std::string jobs = "jobs: {}\n";
    check_cases({
        {"a name, not an address", "listen: { proxy: localhost:3128 }\n" + jobs, 1, 18,
         "listen.proxy", "'localhost' is not an IP address (listen on an address, not a name)"},
        {"IPv6 without brackets", "listen: { proxy: \"::1:3128\" }\n" + jobs, 1, 18, "listen.proxy",
         "write IPv6 addresses in brackets, e.g. [::1]:3128"},
        {"port 70000", "listen: { proxy: 127.0.0.1:70000 }\n" + jobs, 1, 18, "listen.proxy",
         "'70000' is not a port 0..65535"},
        {"no port", "listen: { proxy: 127.0.0.1 }\n" + jobs, 1, 18, "listen.proxy",
         "expected ADDRESS:PORT, e.g. 127.0.0.1:3128"},
        {"empty port", "listen: { proxy: \"127.0.0.1:\" }\n" + jobs, 1, 18, "listen.proxy",
         "'' is not a port"},
        {"port with a leading zero", "listen: { proxy: 127.0.0.1:03128 }\n" + jobs, 1, 18,
         "listen.proxy", "'03128' is not a port"},
        {"bracketed IPv6 without a port", "listen: { proxy: \"[::1]\" }\n" + jobs, 1, 18,
         "listen.proxy", "expected [IPV6]:PORT"},
        {"unclosed bracket", "listen: { proxy: \"[::1:3128\" }\n" + jobs, 1, 18, "listen.proxy",
         "expected [IPV6]:PORT"},
        {"dns not an address", "listen: { proxy: 127.0.0.1:3128, dns: \"x:53\" }\n" + jobs, 1, 39,
         "listen.dns", "'x' is not an IP address"},
        {"admin without a port", "listen: { proxy: 127.0.0.1:3128, admin: 1.2.3.4 }\n" + jobs, 1,
         41, "listen.admin", "expected ADDRESS:PORT"},
        {"proxy and dns on one address",
         "listen: { proxy: 127.0.0.1:3128, dns: 127.0.0.1:3128 }\n" + jobs, 1, 9, "listen",
         "proxy and dns both use 127.0.0.1:3128"},
        {"proxy and admin on one address",
         "listen: { proxy: 127.0.0.1:9090, admin: 127.0.0.1:9090 }\n"
         "admin: { token_file: /t }\n" +
             jobs,
         1, 9, "listen", "proxy and admin both use 127.0.0.1:9090"},
        {"dns and admin on one address",
         "listen: { proxy: 127.0.0.1:3128, dns: 127.0.0.1:9090, admin: 127.0.0.1:9090 }\n"
         "admin: { token_file: /t }\n" +
             jobs,
         1, 9, "listen", "dns and admin both use 127.0.0.1:9090"},
        {"one address written two ways",
         "listen: { proxy: 127.0.0.1:3128, dns: \"[::ffff:127.0.0.1]:3128\" }\n" + jobs, 1, 9,
         "listen", "proxy and dns both use 127.0.0.1:3128"},
        {"IPv6 listeners on one address",
         "listen:\n  proxy: \"[::1]:3128\"\n  dns: \"[0:0::1]:3128\"\n" + jobs, 2, 3, "listen",
         "proxy and dns both use [::1]:3128"},
    });
    SECTION("three listeners on one address: every pair") {
        const load_result r = load(
            "listen: { proxy: 127.0.0.1:9090, dns: 127.0.0.1:9090, admin: 127.0.0.1:9090 }\n"
            "admin: { token_file: /t }\njobs: {}\n");
        INFO(dump(r));
        REQUIRE(r.errors.size() == 3);
        CHECK_THAT(r.errors[0].message, Contains("proxy and dns"));
        CHECK_THAT(r.errors[1].message, Contains("proxy and admin"));
        CHECK_THAT(r.errors[2].message, Contains("dns and admin"));
    }
}

TEST_CASE("load: admin", "[load]") {
    const std::string listen_admin = "listen: { proxy: 127.0.0.1:3128, admin: 127.0.0.1:9090 }\n";
    check_cases({
        {"admin listener without an admin section", listen_admin + "jobs: {}\n", 1, 1, "admin",
         "missing 'token_file': the admin API is never open without a token"},
        {"admin listener with admin: null", listen_admin + "admin:\njobs: {}\n", 1, 1, "admin",
         "missing 'token_file'"},
        {"admin listener, admin section without token_file",
         listen_admin + "admin: { tls: { cert: /c, key: /k } }\njobs: {}\n", 2, 8, "admin",
         "missing 'token_file': the admin API is never open without a token"},
        {"token_file relative", with_top("admin: { token_file: admin.token }"), 3, 22,
         "admin.token_file", "'admin.token' is not an absolute path"},
        {"tls cert relative", with_top("admin: { token_file: /t, tls: { cert: c.pem, key: /k } }"),
         3, 39, "admin.tls.cert", "'c.pem' is not an absolute path"},
        {"tls key relative", with_top("admin: { token_file: /t, tls: { cert: /c, key: k.pem } }"),
         3, 48, "admin.tls.key", "'k.pem' is not an absolute path"},
        {"tls client_ca relative",
         with_top("admin: { token_file: /t, tls: { cert: /c, key: /k, client_ca: ca.pem } }"), 3,
         63, "admin.tls.client_ca", "'ca.pem' is not an absolute path"},
    });
}

TEST_CASE("load: a client address belongs to one job", "[load]") {
    const std::string head = std::string(listen_line) + "jobs:\n";
    check_cases({
        {"second job inside the first",
         head + "  a:\n    task: t\n    sources: [10.0.0.0/8]\n"
                "  b:\n    task: t\n    sources: [192.168.0.0/16, 10.1.0.0/16]\n",
         6, 3, "jobs.b.sources",
         "10.1.0.0/16 overlaps 10.0.0.0/8 of job a; a client belongs to one job"},
        {"first job inside the second",
         head + "  a:\n    task: t\n    sources: [10.1.2.0/24]\n"
                "  b:\n    task: t\n    sources: [10.0.0.0/8]\n",
         6, 3, "jobs.b.sources", "10.0.0.0/8 overlaps 10.1.2.0/24 of job a"},
        {"the same IPv6 prefix",
         head + "  a: { task: t, sources: [\"fd00::/8\"] }\n"
                "  b: { task: t, sources: [\"fd00::/8\"] }\n",
         4, 3, "jobs.b.sources", "fd00::/8 overlaps fd00::/8 of job a"},
    });
    SECTION("three jobs with one prefix: every pair") {
        const load_result r = load(head + "  a: { task: t, sources: [10.0.0.0/8] }\n"
                                          "  b: { task: t, sources: [10.0.0.0/8] }\n"
                                          "  c: { task: t, sources: [10.0.0.0/8] }\n");
        INFO(dump(r));
        REQUIRE(r.errors.size() == 3);
        CHECK(r.errors[0].line == 4);
        CHECK_THAT(r.errors[0].message, StartsWith("jobs.b.sources: "));
        CHECK_THAT(r.errors[0].message, Contains("of job a"));
        CHECK(r.errors[1].line == 5);
        CHECK_THAT(r.errors[1].message, StartsWith("jobs.c.sources: "));
        CHECK_THAT(r.errors[1].message, Contains("of job a"));
        CHECK(r.errors[2].line == 5);
        CHECK_THAT(r.errors[2].message, Contains("of job b"));
    }
}

TEST_CASE("load: a file holds one YAML document", "[load]") {
    const std::string one = with_top("");
    check_cases({
        // `one` is three lines; the second document starts with the "---" on line 4.
        {"two documents", one + "---\n" + one, 4, 1, "",
         "a policy file holds one YAML document; found more"},
        {"three documents", one + "---\na: 1\n---\nb: 2\n", 4, 1, "",
         "a policy file holds one YAML document; found more"},
        {"a bare document after an end marker", one + "...\na: 1\n", 5, 1, "",
         "a policy file holds one YAML document"},
    });
    SECTION("errors in the first document are reported too") {
        const load_result r = load("x: 1\n---\n" + one);
        INFO(dump(r));
        REQUIRE(r.errors.size() == 4);
        CHECK_THAT(r.errors[0].message, StartsWith("policy: unknown key 'x'"));
        CHECK_THAT(r.errors[1].message, Contains("missing key 'jobs'"));
        CHECK_THAT(r.errors[2].message, Contains("missing key 'listen'"));
        CHECK(r.errors[3].line == 2);
        CHECK_THAT(r.errors[3].message, Contains("holds one YAML document"));
    }
}

// --- the file as a whole ----------------------------------------------------------

TEST_CASE("load: a broken file reports every error, in line order", "[load]") {
    const std::string path = policies + "broken.yaml";
    const load_result r = load_policy_file(path);
    INFO(dump(r));
    CHECK_FALSE(r.ok());
    CHECK_FALSE(r.value.has_value());
    struct want {
        int line;
        int column;
        std::string start;
    };
    const std::vector<want> expected{
        {4, 10, "listen.proxy: 'localhost' is not an IP address"},
        {6, 1, "policy: unknown key 'bogus'"},
        {10, 11, "jobs.broken.mode: expected enforce or report, got 'fast'"},
        {12, 17, "jobs.broken.egress[0].host: 'a*.example.com': '*' is allowed only"},
        {13, 56, "jobs.broken.egress[1].methods: 'methods' applies only to protocol: http"},
        {14, 17, "jobs.broken.egress[2].cidr: 10.0.0.1/8 has host bits set"},
        {15, 47,
         "jobs.broken.egress[3].ports[1]: 70000 is out of range; expected a port "
         "1..65535"},
        {16, 28, "jobs.broken.limits.max_tunnels: 0 is out of range"},
        {17, 22, "jobs.broken.identity.ttl: '30s' is outside 1m..24h"},
        {18, 17, "jobs.broken.env[1]: '1BAD' is not a variable name"},
        {20, 15, "dns.deny_rcode: expected REFUSED or NXDOMAIN, got 'SERVFAIL'"},
        {22, 19, "audit.retention_days: 0 is out of range"},
    };
    REQUIRE(r.errors.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        INFO("error " << i);
        CHECK(r.errors[i].file == path);
        CHECK(r.errors[i].line == expected[i].line);
        CHECK(r.errors[i].column == expected[i].column);
        CHECK_THAT(r.errors[i].message, StartsWith(expected[i].start));
    }
    for (std::size_t i = 1; i < r.errors.size(); ++i) {
        CHECK(r.errors[i - 1].line <= r.errors[i].line);
    }
    SECTION("the same text loaded from memory gives the same errors") {
        std::ifstream in(path, std::ios::binary);
        const std::string text((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
        const load_result m = load_policy(text, path);
        REQUIRE(m.errors.size() == r.errors.size());
        for (std::size_t i = 0; i < m.errors.size(); ++i) {
            CHECK(m.errors[i].to_string() == r.errors[i].to_string());
        }
    }
}

TEST_CASE("load: errors on one line are in column order", "[load]") {
    const load_result r = load(with_rule("{ host: \"a*.com\", ports: [0, 70000], protocol: udp }"));
    INFO(dump(r));
    REQUIRE(r.errors.size() == 4);
    CHECK(r.errors[0].column == 17);
    CHECK(r.errors[1].column == 35);
    CHECK(r.errors[2].column == 38);
    CHECK(r.errors[3].column == 56);
    for (const auto& d : r.errors) {
        CHECK(d.line == 6);
    }
}

TEST_CASE("load: whole-file errors", "[load]") {
    struct whole_case {
        std::string name;
        std::string text;
        std::string what;
    };
    const std::vector<whole_case> cases{
        {"empty", "", "policy is empty"},
        {"whitespace only", " \n\t\r\n  \n", "policy is empty"},
        {"a comment only", "# nothing here\n", "policy is empty"},
        {"a document marker only", "---\n", "policy is empty"},
        {"a NUL byte", std::string("listen: {}\0\n", 12), "policy contains NUL bytes"},
        {"only a NUL byte", std::string(1, '\0'), "policy contains NUL bytes"},
        {"over 16 MiB", std::string(max_policy_bytes + 1, '#'),
         "policy is larger than 16 MiB; refusing to read it"},
        {"over 16 MiB of spaces", std::string(max_policy_bytes + 1, ' '),
         "policy is larger than 16 MiB"},
    };
    for (const auto& c : cases) {
        DYNAMIC_SECTION(c.name) {
            const load_result r = load(c.text);
            INFO(dump(r));
            CHECK_FALSE(r.value.has_value());
            REQUIRE(r.errors.size() == 1);
            CHECK(r.errors[0].file == "test.yaml");
            CHECK(r.errors[0].line == 0);
            CHECK(r.errors[0].column == 0);
            CHECK_THAT(r.errors[0].message, Equals(c.what) || StartsWith(c.what));
            CHECK(r.errors[0].to_string() == "test.yaml: " + r.errors[0].message);
        }
    }
    SECTION("a null document") {
        const load_result r = load("~\n");
        INFO(dump(r));
        CHECK_FALSE(r.value.has_value());
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].line == 0);
    }
    SECTION("exactly 16 MiB is read") {
        std::string text = with_top("");
        text += "#";
        text.append(max_policy_bytes - text.size() - 1, 'x');
        text += "\n";
        REQUIRE(text.size() == max_policy_bytes);
        const load_result r = load(text);
        INFO(dump(r).substr(0, 500));
        CHECK(r.ok());
    }
}

TEST_CASE("load: the top level must be a mapping", "[load]") {
    check_cases({
        {"a scalar", "hello\n", 1, 1, "",
         "a policy is a mapping with keys listen, jobs, ...; "
         "got 'hello'"},
        {"a list", "- listen\n- jobs\n", 1, 1, "", "got a list"},
        {"a flow list after blank lines", "\n\n  [a, b]\n", 3, 3, "", "got a list"},
        {"a number", "42", 1, 1, "", "got '42'"},
    });
}

TEST_CASE("load: text that is not YAML", "[load]") {
    check_cases({
        {"an unclosed mapping", "{ unclosed", 1, 1, "", "not valid YAML: "},
        {"an unclosed list", with_top("state: { path: [ /x"), 4, 1, "", "not valid YAML: "},
        {"a tab in the indentation", std::string(listen_line) + "jobs:\n\tj: {}\n", 3, 3, "",
         "not valid YAML: "},
        {"a bad indent", std::string(listen_line) + "jobs:\n  j:\n    task: t\n   mode: x\n", 5, 4,
         "", "not valid YAML: "},
        {"an undefined alias", std::string(listen_line) + "jobs:\n  b: *nope\n", 3, 6, "",
         "not valid YAML: "},
        {"an unclosed quote", "listen: { proxy: \"127.0.0.1:3128 }\njobs: {}\n", 3, 1, "",
         "not valid YAML: "},
    });
}

TEST_CASE("load: hostile input returns errors, never a crash", "[load]") {
    SECTION("10,000 nested lists") {
        const load_result r = load(std::string(10'000, '['));
        INFO(dump(r));
        CHECK_FALSE(r.ok());
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].line >= 1);
        CHECK_THAT(r.errors[0].message, StartsWith("not valid YAML: "));
    }
    SECTION("10,000 nested mappings") {
        const load_result r = load(std::string(10'000, '{'));
        INFO(dump(r));
        CHECK_FALSE(r.ok());
        REQUIRE(r.errors.size() == 1);
        CHECK_THAT(r.errors[0].message, StartsWith("not valid YAML: "));
    }
    SECTION("10,000 balanced nested lists inside a job") {
        const load_result r = load(
            with_job("    inputs: " + std::string(10'000, '[') + std::string(10'000, ']')));
        INFO(dump(r));
        CHECK_FALSE(r.ok());
        REQUIRE_FALSE(r.errors.empty());
    }
    SECTION("deeply nested block mappings") {
        std::string text = std::string(listen_line) + "jobs:\n";
        for (int i = 0; i < 3000; ++i) {
            text += std::string(2 * static_cast<std::size_t>(i) + 2, ' ') + "k" +
                    std::to_string(i) + ":\n";
        }
        const load_result r = load(text);
        CHECK_FALSE(r.ok());
        CHECK_FALSE(r.errors.empty());
    }
    SECTION("a billion laughs: aliases are not expanded") {
        std::string text = std::string(listen_line) +
                           "x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
        for (int i = 1; i < 10; ++i) {
            text += "x" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
            for (int k = 0; k < 9; ++k) {
                text += (k == 0 ? "*a" : ", *a") + std::to_string(i - 1);
            }
            text += "]\n";
        }
        text += "jobs:\n  j:\n    task: t\n    inputs: *a9\n";
        const load_result r = load(text);
        CHECK_FALSE(r.ok());
        // 10 unknown keys x0..x9, 9 inputs that are lists instead of strings.
        CHECK(r.errors.size() == 19);
    }
    SECTION("a merge key is an unknown key, not a merge") {
        const load_result r = load(std::string(listen_line) +
                                   "jobs:\n  a: &b { task: t }\n  b: { <<: *b }\n");
        INFO(dump(r));
        CHECK_FALSE(r.ok());
        bool saw_merge = false;
        for (const auto& d : r.errors) {
            saw_merge = saw_merge || d.message.find("unknown key '<<'") != std::string::npos;
        }
        CHECK(saw_merge);
    }
    SECTION("control characters and invalid UTF-8 in values") {
        const load_result r = load(
            with_job("    inputs: [\"\\x1b[31mred\"]\n    egress: [{ host: \"a\xff.com\", "
                     "ports: [443] }]"));
        INFO(dump(r));
        REQUIRE(r.errors.size() == 1);
        CHECK_THAT(r.errors[0].message, Contains("non-ASCII byte"));
    }
}

TEST_CASE("load: load_policy_file", "[load]") {
    SECTION("a file that does not exist") {
        const std::string path = policies + "no-such-file.yaml";
        const load_result r = load_policy_file(path);
        CHECK_FALSE(r.ok());
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].file == path);
        CHECK(r.errors[0].line == 0);
        CHECK_THAT(r.errors[0].message, Equals("cannot open: No such file or directory"));
        CHECK(r.errors[0].to_string() == path + ": cannot open: No such file or directory");
    }
    SECTION("a directory") {
        const std::string path = policies;
        const load_result r = load_policy_file(path);
        INFO(dump(r));
        CHECK_FALSE(r.ok());
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].file == path);
        CHECK(r.errors[0].line == 0);
        CHECK(r.errors[0].message == "is a directory, not a policy file");
    }
    SECTION("a file over 16 MiB is refused") {
        const temp_file f(std::string(max_policy_bytes + 1, '#'));
        const load_result r = load_policy_file(f.path());
        CHECK_FALSE(r.ok());
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].file == f.path());
        CHECK(r.errors[0].line == 0);
        CHECK_THAT(r.errors[0].message, Contains("larger than 16 MiB"));
    }
    SECTION("an empty file") {
        const temp_file f("");
        const load_result r = load_policy_file(f.path());
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].to_string() == f.path() + ": policy is empty");
    }
    SECTION("a file with NUL bytes") {
        const temp_file f(std::string("jobs: {}\0listen: {}\n", 20));
        const load_result r = load_policy_file(f.path());
        REQUIRE(r.errors.size() == 1);
        CHECK_THAT(r.errors[0].message, Contains("NUL bytes"));
    }
    SECTION("errors name the file") {
        const temp_file f(with_top("bogus: 1"));
        const load_result r = load_policy_file(f.path());
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].file == f.path());
        CHECK_THAT(r.errors[0].to_string(), StartsWith(f.path() + ":3:1: policy: unknown key"));
    }
    SECTION("a valid file records its name in the policy") {
        const temp_file f(with_top(""));
        const load_result r = load_policy_file(f.path());
        REQUIRE(r.ok());
        CHECK(r.value->source == f.path());
    }
    SECTION("a FIFO is refused at once, never waited on") {
        // open() of a FIFO blocked until a writer came: on SIGHUP that was the control
        // thread, and with it the kill switch (issue 18).
        std::random_device rd;
        const std::string path = (std::filesystem::temp_directory_path() /
                                  ("cordon_load_test_" + std::to_string(rd()) + ".fifo"))
                                     .string();
        REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
        auto pending = std::async(std::launch::async, [&path] { return load_policy_file(path); });
        const bool answered = pending.wait_for(std::chrono::seconds(3)) ==
                              std::future_status::ready;
        if (!answered) {
            // Let the blocked reader go (a writer's open), so the test ends either way.
            ::close(::open(path.c_str(), O_WRONLY | O_NONBLOCK));
        }
        const load_result r = pending.get();
        std::filesystem::remove(path);
        REQUIRE(answered);
        CHECK_FALSE(r.ok());
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].to_string() ==
              path + ": is not a regular file (a FIFO); refusing to read it");
    }
    SECTION("a character device is refused") {
        const load_result r = load_policy_file("/dev/zero");
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].message == "is not a regular file (a character device); refusing to "
                                     "read it");
    }
}

TEST_CASE("load: diagnostic::to_string", "[load]") {
    SECTION("with a position") {
        const diagnostic d{"policy.yaml", 12, 7, "jobs.a.task: must not be empty"};
        CHECK(d.to_string() == "policy.yaml:12:7: jobs.a.task: must not be empty");
    }
    SECTION("without a position") {
        const diagnostic d{"policy.yaml", 0, 0, "policy is empty"};
        CHECK(d.to_string() == "policy.yaml: policy is empty");
    }
    SECTION("a column without a line is no position") {
        const diagnostic d{"p.yaml", 0, 5, "m"};
        CHECK(d.to_string() == "p.yaml: m");
    }
    SECTION("from the loader") {
        const load_result r = load_policy(with_top("bogus: 1"), "etc/cordon.yaml");
        REQUIRE(r.errors.size() == 1);
        CHECK(r.errors[0].to_string() ==
              "etc/cordon.yaml:3:1: policy: unknown key 'bogus' (expected one of: listen, admin, "
              "dns, state, audit, alerts, kill, proxy, inspect, secrets, jobs, upstream_proxy, "
              "cluster)");
    }
    SECTION("a YAML syntax error carries its position") {
        const load_result r = load_policy("{ unclosed", "x.yaml");
        REQUIRE(r.errors.size() == 1);
        CHECK_THAT(r.errors[0].to_string(), StartsWith("x.yaml:1:1: not valid YAML: "));
    }
}

TEST_CASE("load: `jobs:` written empty is a policy with no job cards", "[load]") {
    const load_result r = load_policy("listen: { proxy: 127.0.0.1:3128 }\njobs:\n", "t.yaml");
    REQUIRE(r.ok());
    CHECK(r.value->jobs.empty());
}

TEST_CASE("load: a relative admin.token_file is reported once", "[load]") {
    const load_result r = load_policy("listen: { proxy: 127.0.0.1:3128, admin: 127.0.0.1:9090 }\n"
                                      "admin: { token_file: rel }\njobs: {}\n",
                                      "t.yaml");
    REQUIRE(r.errors.size() == 1);
    CHECK_THAT(r.errors[0].message, Catch::Contains("'rel' is not an absolute path"));
}

TEST_CASE("load: nesting too deep is named as such", "[load]") {
    const load_result r = load_policy(std::string(10000, '['), "t.yaml");
    REQUIRE(r.errors.size() == 1);
    CHECK_THAT(r.errors[0].message, Catch::Contains("nested too deeply"));
}

TEST_CASE("load: dns resolver keys", "[load]") {
    const load_result r = load_policy(
        "listen: { proxy: 127.0.0.1:3128, dns: 127.0.0.1:5353 }\n"
        "dns: { cache_entries: 50, query_types: [A, TXT], rate_limit: { qps: 5, burst: 7 } }\n"
        "jobs: {}\n",
        "t.yaml");
    REQUIRE(r.ok());
    CHECK(r.value->dns.cache_entries == 50);
    CHECK(r.value->dns.query_types == std::vector<std::uint16_t>{1, 16});
    CHECK(r.value->dns.rate_qps == 5);
    CHECK(r.value->dns.rate_burst == 7);

    const load_result bad = load_policy(
        "listen: { proxy: 127.0.0.1:3128 }\n"
        "dns: { query_types: [A, ANY, BOGUS], rate_limit: { qps: 0, bogus: 1 } }\njobs: {}\n",
        "t.yaml");
    REQUIRE(bad.errors.size() == 4);
    CHECK_THAT(bad.errors[0].message, Catch::Contains("dns.query_types[1]: 'ANY'"));
    CHECK_THAT(bad.errors[1].message, Catch::Contains("dns.query_types[2]: 'BOGUS'"));
}

TEST_CASE("load: dns budgets and TCP caps", "[load]") {
    const load_result def = load_policy("listen: { proxy: 127.0.0.1:3128 }\njobs: {}\n", "t.yaml");
    REQUIRE(def.ok());
    CHECK(def.value->dns.inflight_per_client == 64);
    CHECK(def.value->dns.inflight_total == 2048);
    CHECK(def.value->dns.tcp_max_connections == 256);
    CHECK(def.value->dns.tcp_max_per_client == 16);
    CHECK(def.value->dns.tcp_timeout == std::chrono::seconds(10));

    const load_result r = load_policy(
        "listen: { proxy: 127.0.0.1:3128 }\n"
        "dns: { inflight: { per_client: 8, total: 100 },\n"
        "       tcp: { max_connections: 32, max_per_client: 2, timeout: 1500ms } }\n"
        "jobs: {}\n",
        "t.yaml");
    REQUIRE(r.ok());
    CHECK(r.value->dns.inflight_per_client == 8);
    CHECK(r.value->dns.inflight_total == 100);
    CHECK(r.value->dns.tcp_max_connections == 32);
    CHECK(r.value->dns.tcp_max_per_client == 2);
    CHECK(r.value->dns.tcp_timeout == std::chrono::milliseconds(1500));

    const load_result bad = load_policy(
        "listen: { proxy: 127.0.0.1:3128 }\n"
        "dns: { inflight: { total: 5000, x: 1 }, tcp: { max_connections: 0, timeout: 1h } }\n"
        "jobs: {}\n",
        "t.yaml");
    REQUIRE(bad.errors.size() == 4);
    CHECK_THAT(bad.errors[0].message, Catch::Contains("dns.inflight"));
}
