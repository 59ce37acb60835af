#include "shims/cgroup.hpp"

#include <catch2/catch.hpp>

TEST_CASE("cgroup: the v2 mount is found or absent, never guessed", "[shim][cgroup]") {
    const std::string m = cordon::shim::cgroup2_mount();
    CHECK((m.empty() || m.front() == '/'));
}
