// Tests of the descriptor budget: what the kill needs is reserved at every limit, and the
// listeners' caps never add up past the limit.
#include "proxy/control/capacity.hpp"

#include <catch2/catch.hpp>
#include <cstdint>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::control;

capacity_inputs inputs(std::uint64_t limit, std::size_t workers, bool dns) {
    capacity_inputs in;
    in.descriptor_limit = limit;
    in.workers = workers;
    in.admin = true;
    in.dns = dns;
    in.dns_tcp_connections = dns ? 256 : 0;  // dns.tcp.max_connections's default
    in.configured_max_connections = 20'000;
    return in;
}

}  // namespace

TEST_CASE("capacity: the listeners never add up past the descriptor limit", "[capacity]") {
    const std::uint64_t limit = GENERATE(256, 1024, 4096, 20'000, 65'536, 524'288, 1'048'576);
    const std::size_t workers = GENERATE(1, 2, 8);
    const bool dns = GENERATE(false, true);
    INFO("limit " << limit << ", workers " << workers << ", dns " << dns);
    const capacity c = plan_capacity(inputs(limit, workers, dns));
    if (!c.error.empty()) {
        // Only a limit too low for the reserve and the minimum is refused, and it says so.
        CHECK(limit <= 1024);
        CHECK(c.error.find("RLIMIT_NOFILE") != std::string::npos);
        CHECK(c.max_connections == 0);
        return;
    }
    CHECK(c.descriptor_limit == limit);
    CHECK(c.max_connections >= min_proxy_connections);
    CHECK(c.max_connections <= 20'000);
    CHECK(c.reserved + c.max_connections * capacity::descriptors_per_connection <= limit);
    // The reserve holds the admin connections, the DNS TCP cap and the pipes.
    CHECK(c.admin_connections >= 8);
    CHECK(c.admin_connections <= 4096);
    CHECK(c.reserved >= c.admin_connections + workers * c.pipes_per_worker * 2 + (dns ? 256 : 0));
    CHECK(c.pipes_per_worker <= 256);
}

TEST_CASE("capacity: ulimit -n 256 still leaves the admin API and clients", "[capacity]") {
    const capacity c = plan_capacity(inputs(256, 2, false));
    REQUIRE(c.error.empty());
    CHECK(c.admin_connections == 8);
    CHECK(c.max_connections < 128);  // the default 20,000 would have protected nothing
    CHECK(c.max_connections >= min_proxy_connections);
    CHECK(c.note.find("proxy.max_connections 20000 lowered to") == 0);
}

TEST_CASE("capacity: a limit too low for the reserve is refused", "[capacity]") {
    // 256 descriptors cannot also hold 256 DNS TCP connections.
    const capacity c = plan_capacity(inputs(256, 2, true));
    CHECK_FALSE(c.error.empty());
    CHECK(c.error.find("DNS over TCP") != std::string::npos);
    CHECK(plan_capacity(inputs(64, 1, false)).error.find("raise the limit") != std::string::npos);
}

TEST_CASE("capacity: a configured max_connections below the budget is kept", "[capacity]") {
    capacity_inputs in = inputs(1'048'576, 2, true);
    in.configured_max_connections = 500;
    const capacity c = plan_capacity(in);
    CHECK(c.max_connections == 500);
    CHECK(c.note.empty());
}
