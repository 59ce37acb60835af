// The keys of "Every TCP client" (docs/policy.md): listen.socks, protocol: ssh and
// upstream_proxy (url, no_proxy, credentials_file); every error says what to write.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "config/load.hpp"

using namespace cordon::config;

namespace {

std::string errors_of(const load_result& r) {
    std::string all;
    for (const auto& e : r.errors) {
        all += e.to_string() + "\n";
    }
    return all;
}

load_result load(std::string_view top, std::string_view rule = "") {
    std::string text = "listen: { proxy: 127.0.0.1:3128, socks: 127.0.0.1:1080 }\n" +
                       std::string(top) + "jobs:\n  a:\n    task: t\n    egress:\n" +
                       (rule.empty() ? "      - { host: a.example, ports: [443] }\n"
                                     : "      - " + std::string(rule) + "\n");
    return load_policy(text, "p.yaml");
}

std::string temp_file(const std::string& content, mode_t mode) {
    char path[] = "/tmp/cordon-socks-load-XXXXXX";
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
    ::close(fd);
    ::chmod(path, mode);
    return path;
}

}  // namespace

TEST_CASE("socks load: listen.socks", "[load][socks]") {
    const auto r = load("");
    INFO(errors_of(r));
    REQUIRE(r.value);
    REQUIRE(r.value->listen.socks);
    CHECK(r.value->listen.socks->to_string() == "127.0.0.1:1080");
    const auto clash = load_policy(
        "listen: { proxy: 127.0.0.1:3128, socks: 127.0.0.1:3128 }\njobs: {}\n", "p");
    CHECK(errors_of(clash).find("proxy and socks both use 127.0.0.1:3128") != std::string::npos);
}

TEST_CASE("socks load: protocol ssh", "[load][socks]") {
    auto r = load("", "{ host: git.example, ports: [22], protocol: ssh }");
    INFO(errors_of(r));
    REQUIRE(r.value);
    CHECK(r.value->jobs[0].egress[0].proto == protocol::ssh);
    CHECK(r.value->jobs[0].egress[0].describe() == "git.example:22/ssh");
    r = load("", "{ cidr: 10.1.2.3/32, ports: [22], protocol: ssh }");
    CHECK(r.value);
    CHECK(errors_of(load("", "{ host: git.example, ports: [22], protocol: ssh, methods: [GET] }"))
              .find("'methods' applies only to protocol: http and https") != std::string::npos);
}

TEST_CASE("socks load: upstream_proxy", "[load][socks]") {
    SECTION("url and no_proxy") {
        const auto r = load(
            "upstream_proxy: { url: \"http://proxy.corp.example:8080\", "
            "no_proxy: [10.0.0.0/8, .corp.example, \"*.lab.example\", Exact.Example.] }\n");
        INFO(errors_of(r));
        REQUIRE(r.value);
        REQUIRE(r.value->upstream_proxy);
        const auto& up = *r.value->upstream_proxy;
        CHECK(up.host == "proxy.corp.example");
        CHECK(up.port == 8080);
        CHECK(up.no_proxy_nets.size() == 1);
        CHECK(up.no_proxy_names ==
              std::vector<std::string>{".corp.example", ".lab.example", "exact.example"});
        CHECK(up.credentials.empty());
    }
    SECTION("credentials from a file of mode 0600") {
        const std::string f = temp_file("cordon:s3cret\n", 0600);
        const auto r = load("upstream_proxy: { url: \"http://127.0.0.1:3129\", "
                            "credentials_file: " +
                            f + " }\n");
        INFO(errors_of(r));
        REQUIRE(r.value);
        CHECK(r.value->upstream_proxy->credentials == "cordon:s3cret");
        ::unlink(f.c_str());
    }
    SECTION("refused, each saying why (and never quoting a secret)") {
        const std::string open_file = temp_file("cordon:s3cret\n", 0644);
        const std::string no_colon = temp_file("s3cret\n", 0600);
        const auto cases = std::vector<std::pair<std::string, std::string>>{
            {"upstream_proxy: { no_proxy: [] }\n", "missing 'url'"},
            {"upstream_proxy: { url: \"https://p:8080\" }\n", "plain HTTP"},
            {"upstream_proxy: { url: \"http://user:pw@p:8080\" }\n", "upstream_proxy.url"},
            {"upstream_proxy: { url: \"http://p:8080/x\" }\n", "no path"},
            {"upstream_proxy: { url: \"http://p:8080\", no_proxy: [\"10.0.0.1/8\"] }\n",
             "no_proxy[0]"},
            {"upstream_proxy: { url: \"http://p:8080\", no_proxy: [\"a b\"] }\n",
             "not a CIDR or a host name"},
            {"upstream_proxy: { url: \"http://p:8080\", user: x }\n", "unknown key"},
            {"upstream_proxy: { url: \"http://p:8080\", credentials_file: " + open_file + " }\n",
             "readable by others"},
            {"upstream_proxy: { url: \"http://p:8080\", credentials_file: " + no_colon + " }\n",
             "one line user:password"},
            {"upstream_proxy: { url: \"http://p:8080\", credentials_file: /nonexistent/x }\n",
             "cannot read the credentials file"},
        };
        for (const auto& [top, want] : cases) {
            CAPTURE(top);
            const auto r = load(top);
            const std::string e = errors_of(r);
            CHECK(e.find(want) != std::string::npos);
            CHECK(e.find("s3cret") == std::string::npos);
            CHECK(!r.value);
        }
        ::unlink(open_file.c_str());
        ::unlink(no_colon.c_str());
    }
}
