#include "shims/hooks.hpp"

#include <catch2/catch.hpp>

using cordon::shim::run_hook;
using cordon::shim::trim_credential;
using namespace std::chrono_literals;

TEST_CASE("hooks: output, environment, stdin", "[shim][hooks]") {
    const auto r = run_hook("echo \"$CORDON_SESSION\"; cat; exit 3", {"CORDON_SESSION=s-1"},
                            "the-credential", 10s);
    CHECK(r.exit_code == 3);
    CHECK_FALSE(r.ok());
    CHECK(r.output == "s-1\nthe-credential");
    CHECK(trim_credential("tok\r\n \t") == "tok");
    // Exactly the environment given: nothing of the test's.
    const auto e = run_hook("env", {"A=1"}, "", 10s);
    CHECK(e.ok());
    CHECK(e.output.find("A=1") != std::string::npos);
    CHECK(e.output.find("HOME=") == std::string::npos);
}

TEST_CASE("hooks: a hook that hangs is killed at the timeout", "[shim][hooks]") {
    const auto r = run_hook("echo partial; exec sleep 30", {}, "", 300ms);
    CHECK(r.timed_out);
    CHECK_FALSE(r.ok());
    CHECK(r.duration < 10s);
}

TEST_CASE("hooks: output beyond the bound is cut and fails the hook", "[shim][hooks]") {
    const auto r = run_hook("head -c 5000 /dev/zero", {}, "", 10s, 1000);
    CHECK(r.output.size() == 1000);
    CHECK(r.output_truncated);
    CHECK_FALSE(r.ok());
}
