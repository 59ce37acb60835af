// run(): what it refuses before anything is created, driven through a fake admin API.
#include "shims/run.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <map>
#include <stdexcept>
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

namespace {
// Answers each call from a script; throws (unreachable) on "throw".
class scripted_admin final : public cordon::shim::admin_port {
public:
    std::vector<std::string> script;
    std::size_t calls = 0;
    cordon::shim::admin_reply call(std::string_view, std::string_view, std::string_view) override {
        const std::string next = calls < script.size() ? script[calls] : "500";
        ++calls;
        if (next == "throw") {
            throw std::runtime_error("connection refused");
        }
        return {std::stoi(next), "{}"};
    }
};
}  // namespace

TEST_CASE("run: ending the session is retried while the admin API is away", "[shim][run]") {
    using cordon::shim::end_session_call;
    const auto ms = std::chrono::milliseconds(1);
    std::string err;
    SECTION("unreachable, then 503, then ended") {
        scripted_admin a;
        a.script = {"throw", "503", "200"};
        CHECK(end_session_call(a, "s-1", 5, ms, err));
        CHECK(a.calls == 3);
    }
    SECTION("already gone counts as ended") {
        scripted_admin a;
        a.script = {"404"};
        CHECK(end_session_call(a, "s-1", 5, ms, err));
        CHECK(a.calls == 1);
    }
    SECTION("a refusal is not retried") {
        scripted_admin a;
        a.script = {"401"};
        CHECK_FALSE(end_session_call(a, "s-1", 5, ms, err));
        CHECK(a.calls == 1);
        CHECK(err.find("401") != std::string::npos);
    }
    SECTION("gives up after the attempts, saying why") {
        scripted_admin a;
        a.script = {"throw", "throw", "throw"};
        CHECK_FALSE(end_session_call(a, "s-1", 3, ms, err));
        CHECK(a.calls == 3);
        CHECK(err == "connection refused");
    }
}
