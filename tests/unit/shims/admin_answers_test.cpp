#include "shims/admin_answers.hpp"

#include <catch2/catch.hpp>

using cordon::shim::parse_host_port;
using cordon::shim::parse_job_card;

TEST_CASE("admin answers: the job card", "[shim][admin_answers]") {
    std::string err;
    const auto c = parse_job_card(
        R"({"job":"j","filesystem":{"scratch":"/s","never_write":["/etc"],"landlock":"optional"},)"
        R"("env":[{"name":"LANG","allow_long_lived":false},{"name":"K","allow_long_lived":true}],)"
        R"("identity":{"ttl_ms":1,"mint":{"command":"m","file":"f"},"revoke":"r"}})",
        err);
    REQUIRE(c.has_value());
    CHECK(c->scratch == "/s");
    CHECK(c->never_write == std::vector<std::string>{"/etc"});
    CHECK_FALSE(c->landlock_required);
    REQUIRE(c->env.size() == 2);
    CHECK(c->env[1].name == "K");
    CHECK(c->env[1].allow_long_lived);
    CHECK(c->mint == "m");
    CHECK(c->mint_file == "f");
    CHECK(c->revoke == "r");

    const auto bare = parse_job_card(R"({"filesystem":{"scratch":null,"never_write":[]},"env":[],)"
                                     R"("identity":{"mint":null,"revoke":null}})",
                                     err);
    REQUIRE(bare.has_value());
    CHECK(bare->scratch.empty());
    CHECK(bare->landlock_required);  // unless the card says optional
    CHECK(bare->mint.empty());

    CHECK_FALSE(parse_job_card("not json", err).has_value());
    CHECK_FALSE(parse_job_card(R"({"env":[]})", err).has_value());
    CHECK(err.find("filesystem") != std::string::npos);
}

TEST_CASE("admin answers: listener addresses", "[shim][admin_answers]") {
    const auto a = parse_host_port("127.0.0.1:3128");
    REQUIRE(a.has_value());
    CHECK(a->host == "127.0.0.1");
    CHECK(a->port == 3128);
    const auto b = parse_host_port("[::1]:53");
    REQUIRE(b.has_value());
    CHECK(b->host == "::1");
    CHECK(b->port == 53);
    CHECK(parse_host_port("0.0.0.0:3128")->host == "127.0.0.1");
    CHECK(parse_host_port("[::]:3128")->host == "::1");
    for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536",
                            "127.0.0.1:99999999999", "[::1]", "[::1]53", ":53", "h:5x"}) {
        INFO(bad);
        CHECK_FALSE(parse_host_port(bad).has_value());
    }
}
