// The job-card keys `cordon run` reads: env entries with allow_long_lived, identity.mint as
// a mapping (command + env or file), filesystem.landlock.
#include "config/load.hpp"

#include <catch2/catch.hpp>

#include <string>

using cordon::config::load_policy;

namespace {

std::string with_job(std::string_view s) {
    return "listen: { proxy: 127.0.0.1:3128 }\njobs:\n  j:\n    task: t\n" + std::string(s) + "\n";
}

std::string first_error(const std::string& text) {
    const auto r = load_policy(text, "p.yaml");
    return r.errors.empty() ? "" : r.errors.front().to_string();
}

}  // namespace

TEST_CASE("load: env entries may be marked allow_long_lived", "[load][shim]") {
    const auto r = load_policy(
        with_job("    env: [LANG, { name: AWS_ACCESS_KEY_ID, allow_long_lived: true },\n"
                 "          { name: REPO, allow_long_lived: false }, { name: X }]"),
        "p.yaml");
    REQUIRE(r.ok());
    const auto& j = r.value->jobs.front();
    CHECK(j.env == std::vector<std::string>{"LANG", "AWS_ACCESS_KEY_ID", "REPO", "X"});
    CHECK(j.env_allow_long_lived == std::vector<std::string>{"AWS_ACCESS_KEY_ID"});
}

TEST_CASE("load: bad env entries", "[load][shim]") {
    CHECK(
        first_error(with_job("    env: [{ allow_long_lived: true }]")).find("missing key 'name'") !=
        std::string::npos);
    CHECK(first_error(with_job("    env: [{ name: A, allow_long_lived: maybe }]"))
              .find("expected true or false") != std::string::npos);
    CHECK(first_error(with_job("    env: [{ name: A, other: 1 }]")).find("unknown key 'other'") !=
          std::string::npos);
    CHECK(first_error(with_job("    env: [A, { name: A }]")).find("listed twice") !=
          std::string::npos);
}

TEST_CASE("load: identity.mint as a mapping", "[load][shim]") {
    SECTION("to a variable") {
        const auto r = load_policy(
            with_job("    identity: { mint: { command: vault-mint, env: VAULT_TOKEN },\n"
                     "                revoke: vault-revoke }"),
            "p.yaml");
        REQUIRE(r.ok());
        const auto& id = r.value->jobs.front().identity;
        CHECK(id.mint == "vault-mint");
        CHECK(id.mint_env == "VAULT_TOKEN");
        CHECK_FALSE(id.mint_file.has_value());
        CHECK(id.revoke == "vault-revoke");
    }
    SECTION("to a scratch file") {
        const auto r = load_policy(
            with_job("    identity: { mint: { command: m, file: token.json } }"), "p.yaml");
        REQUIRE(r.ok());
        CHECK(r.value->jobs.front().identity.mint_file == "token.json");
    }
    SECTION("a plain string still works") {
        const auto r = load_policy(with_job("    identity: { mint: m }"), "p.yaml");
        REQUIRE(r.ok());
        CHECK(r.value->jobs.front().identity.mint == "m");
        CHECK_FALSE(r.value->jobs.front().identity.mint_env.has_value());
    }
    CHECK(
        first_error(with_job("    identity: { mint: { env: X } }")).find("missing key 'command'") !=
        std::string::npos);
    CHECK(first_error(with_job("    identity: { mint: { command: m, env: X, file: f } }"))
              .find("not both") != std::string::npos);
    CHECK(first_error(with_job("    identity: { mint: { command: m, file: ../x } }"))
              .find("inside scratch") != std::string::npos);
    CHECK(first_error(with_job("    identity: { mint: { command: m, env: 1X } }"))
              .find("not a variable name") != std::string::npos);
}

TEST_CASE("load: filesystem.landlock", "[load][shim]") {
    const auto r = load_policy(with_job("    filesystem: { scratch: /s, landlock: optional }"),
                               "p.yaml");
    REQUIRE(r.ok());
    CHECK(r.value->jobs.front().filesystem.landlock_optional);
    const auto d = load_policy(with_job("    filesystem: { scratch: /s }"), "p.yaml");
    REQUIRE(d.ok());
    CHECK_FALSE(d.value->jobs.front().filesystem.landlock_optional);
    CHECK(first_error(with_job("    filesystem: { landlock: sometimes }"))
              .find("expected required or optional") != std::string::npos);
}
