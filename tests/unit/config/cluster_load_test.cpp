// The loader's `cluster` section (a fleet on etcd): defaults, every key, each refusal.
#include "config/load.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

namespace {

using namespace cordon::config;
using namespace std::chrono_literals;

load_result with_cluster(const std::string& s) {
    return load_policy("listen: { proxy: 127.0.0.1:3128 }\njobs: {}\n" + s + "\n", "t.yaml");
}

std::string dump(const load_result& r) {
    std::string out;
    for (const auto& d : r.errors) {
        out += d.to_string() + "\n";
    }
    return out;
}

}  // namespace

TEST_CASE("cluster: absent means SQLite, as before", "[load][cluster]") {
    const auto r = with_cluster("");
    REQUIRE(r.ok());
    CHECK_FALSE(r.value->cluster.has_value());
}

TEST_CASE("cluster: every key", "[load][cluster]") {
    const auto r = with_cluster(
        "cluster:\n"
        "  etcd: { endpoints: [http://10.0.0.5:2379, \"http://[::1]:2380/\", http://etcd], "
        "prefix: /fleet/ }\n"
        "  instance: cordon-a\n"
        "  fail_closed: true\n"
        "  store_timeout: 3s\n"
        "  start_without_store: true\n"
        "  kill_wait: 500ms\n"
        "  instance_ttl: 4s\n");
    INFO(dump(r));
    REQUIRE(r.ok());
    const cluster_spec& c = *r.value->cluster;
    REQUIRE(c.endpoints.size() == 3);
    CHECK(c.endpoints[0] == etcd_endpoint{"10.0.0.5", 2379});
    CHECK(c.endpoints[1] == etcd_endpoint{"::1", 2380});
    CHECK(c.endpoints[2] == etcd_endpoint{"etcd", 2379});
    CHECK(c.prefix == "/fleet/");
    CHECK(c.instance == "cordon-a");
    CHECK(c.fail_closed);
    CHECK(c.start_without_store);
    CHECK(c.store_timeout == 3s);
    CHECK(c.kill_wait == 500ms);
    CHECK(c.instance_ttl == 4s);
}

TEST_CASE("cluster: defaults", "[load][cluster]") {
    const auto r = with_cluster("cluster: { etcd: { endpoints: [http://127.0.0.1:2379] } }");
    INFO(dump(r));
    REQUIRE(r.ok());
    const cluster_spec& c = *r.value->cluster;
    CHECK(c.prefix == "/cordon/");
    CHECK(valid_instance_name(c.instance));  // the host name
    CHECK_FALSE(c.fail_closed);
    CHECK_FALSE(c.start_without_store);
    CHECK(c.store_timeout == 5s);
}

TEST_CASE("cluster: refusals", "[load][cluster]") {
    const char* bad[] = {
        "cluster: {}",
        "cluster: { etcd: { endpoints: [] } }",
        "cluster: { etcd: { endpoints: [https://10.0.0.5:2379] } }",
        "cluster: { etcd: { endpoints: [10.0.0.5:2379] } }",
        "cluster: { etcd: { endpoints: [http://10.0.0.5:0] } }",
        "cluster: { etcd: { endpoints: [http://u@10.0.0.5:2379] } }",
        "cluster: { etcd: { endpoints: [http://a:1], prefix: cordon } }",
        "cluster: { etcd: { endpoints: [http://a:1], username: u } }",
        "cluster: { etcd: { endpoints: [http://a:1] }, instance: \"a b\" }",
        "cluster: { etcd: { endpoints: [http://a:1] }, fail_closed: maybe }",
        "cluster: { etcd: { endpoints: [http://a:1] }, store_timeout: 10ms }",
        "cluster: { etcd: { endpoints: [http://a:1] }, colour: blue }",
    };
    for (const char* b : bad) {
        INFO(b);
        const auto r = with_cluster(b);
        CHECK_FALSE(r.ok());
        CHECK_FALSE(r.errors.empty());
    }
}
