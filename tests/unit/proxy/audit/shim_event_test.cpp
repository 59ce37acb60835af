#include "proxy/audit/shim_event.hpp"
#include "common/time.hpp"

#include <catch2/catch.hpp>

#include <string>

using cordon::proxy::audit::is_shim_event;
using cordon::proxy::audit::parse_shim_event;

namespace {
std::string line(std::string_view body) {
    std::string err;
    const auto r = parse_shim_event(body, "s-1", "j", cordon::common::wall_clock::time_point{},
                                    err);
    return r ? r->to_json_line() : "ERROR: " + err;
}
}  // namespace

TEST_CASE("shim events: which bodies are the shim's", "[shim_event]") {
    CHECK(is_shim_event(R"({"event":"file.write","path":"/s/x","size":1})"));
    CHECK(is_shim_event(R"({"event":"identity.mint","ok":true})"));
    CHECK(is_shim_event(R"({"event":"identity.revoke","ok":false})"));
    CHECK_FALSE(is_shim_event(R"({"event":"tool.call","tool":"x"})"));
    CHECK_FALSE(is_shim_event("not json"));
    CHECK_FALSE(is_shim_event(R"({"event":1})"));
}

TEST_CASE("shim events: records", "[shim_event]") {
    const auto fw = line(R"({"event":"file.write","path":"/scratch/out.md","size":123})");
    CHECK(fw.find(R"("event":"file.write")") != std::string::npos);
    CHECK(fw.find(R"("session":"s-1")") != std::string::npos);
    CHECK(fw.find(R"("path":"/scratch/out.md")") != std::string::npos);
    CHECK(fw.find(R"("size":123)") != std::string::npos);
    CHECK(fw.find(R"("by":"cordon-run")") != std::string::npos);
    const auto m = line(R"({"event":"identity.mint","ok":true,"exit_code":0,"duration_ms":4,)"
                        R"("bytes":40,"to":"env:CORDON_IDENTITY"})");
    CHECK(m.find(R"("ok":true)") != std::string::npos);
    CHECK(m.find(R"("to":"env:CORDON_IDENTITY")") != std::string::npos);
    const auto r = line(R"({"event":"identity.revoke","ok":false,"exit_code":3,"when":"kill"})");
    CHECK(r.find(R"("exit_code":3)") != std::string::npos);
    CHECK(r.find(R"("when":"kill")") != std::string::npos);
}

TEST_CASE("shim events: malformed bodies are refused", "[shim_event]") {
    const char* bad[] = {
        R"({"event":"file.write","path":"relative","size":1})",
        R"({"event":"file.write","path":"/x"})",
        R"({"event":"file.write","path":"/x","size":-1})",
        R"({"event":"file.write","path":"/x","size":1,"extra":1})",
        R"({"event":"identity.mint"})",
        R"({"event":"identity.mint","ok":"yes"})",
        R"({"event":"identity.mint","ok":true,"output":"the credential"})",
        R"({"event":"bogus"})",
        "[]",
    };
    for (const char* b : bad) {
        INFO(b);
        CHECK(line(b).starts_with("ERROR: "));
    }
    CHECK(line(R"({"event":"file.write","path":"/)" + std::string(5000, 'a') + R"(","size":1})")
              .starts_with("ERROR: "));
}
