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
