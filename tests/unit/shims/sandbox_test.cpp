#include "shims/sandbox.hpp"

#include <catch2/catch.hpp>

TEST_CASE("sandbox: Landlock is probed, not assumed", "[shim][sandbox]") {
    CHECK(cordon::shim::landlock_abi() >= 0);
}

TEST_CASE("sandbox: an empty command starts nothing", "[shim][sandbox]") {
    std::string why;
    CHECK_FALSE(cordon::shim::start_sandbox({}, why).has_value());
    CHECK(why == "no command");
}

TEST_CASE("sandbox: Landlock degrades only where the job allows", "[shim][sandbox]") {
    using cordon::shim::plan_landlock;
    const auto with = plan_landlock(3, true);
    CHECK(with.run);
    CHECK(with.use_landlock);
    CHECK(with.message.empty());
    const auto refused = plan_landlock(0, true);
    CHECK_FALSE(refused.run);
    CHECK(refused.message.find("requires it") != std::string::npos);
    const auto degraded = plan_landlock(0, false);
    CHECK(degraded.run);
    CHECK_FALSE(degraded.use_landlock);
    CHECK(degraded.message.find("read-only mounts alone") != std::string::npos);
}
