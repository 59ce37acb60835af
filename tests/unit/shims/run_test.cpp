// run(): what it refuses before anything is created, driven through a fake admin API.
#include "shims/run.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

class fake_admin final : public cordon::shim::admin_port {
public:
    std::map<std::string, cordon::shim::admin_reply> answers;  ///< "GET /v1/status" -> reply
    std::vector<std::string> calls;
    cordon::shim::admin_reply call(std::string_view method, std::string_view path,
                                   std::string_view) override {
        const std::string key = std::string(method) + " " + std::string(path);
        calls.push_back(key);
        const auto it = answers.find(key);
        return it == answers.end() ? cordon::shim::admin_reply{404, R"({"error":"no"})"}
                                   : it->second;
    }
};

constexpr const char* card =
    R"({"job":"j","filesystem":{"scratch":null,"never_write":[],"landlock":"required"},)"
    R"("env":[{"name":"CORDON_TEST_KEY","allow_long_lived":false}],)"
    R"("identity":{"ttl_ms":60000,"mint":null,"revoke":null}})";

cordon::shim::run_options options() {
    cordon::shim::run_options o;
    o.job = "j";
    o.command = {"true"};
    o.quiet = true;
    return o;
}

}  // namespace

TEST_CASE("run: an unknown job creates nothing", "[shim][run]") {
    fake_admin a;
    CHECK(cordon::shim::run(options(), a) == 1);
    CHECK(a.calls == std::vector<std::string>{"GET /v1/jobs/j"});
}

TEST_CASE("run: nothing starts during a network kill", "[shim][run]") {
    fake_admin a;
    a.answers["GET /v1/jobs/j"] = {200, card};
    a.answers["GET /v1/status"] = {200, R"({"kill":{"engaged":true},"listen":{}})"};
    CHECK(cordon::shim::run(options(), a) == 1);
    CHECK(a.calls.size() == 2);
}

TEST_CASE("run: a key-shaped job variable stops it before a session exists", "[shim][run]") {
    fake_admin a;
    a.answers["GET /v1/jobs/j"] = {200, card};
    a.answers["GET /v1/status"] = {200, R"({"kill":{"engaged":false},"listen":{}})"};
    ::setenv("CORDON_TEST_KEY", "AKIAIOSFODNN7EXAMPLE", 1);
    CHECK(cordon::shim::run(options(), a) == 1);
    ::unsetenv("CORDON_TEST_KEY");
    for (const auto& c : a.calls) {
        CHECK(c.rfind("POST", 0) != 0);  // no session was created
    }
}
