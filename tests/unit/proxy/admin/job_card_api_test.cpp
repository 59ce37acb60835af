#include "proxy/admin/job_card_api.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include "config/load.hpp"

TEST_CASE("job card: what cordon run reads", "[job_card]") {
    const auto r = cordon::config::load_policy(
        "listen: { proxy: 127.0.0.1:3128 }\njobs:\n  j:\n    task: t\n"
        "    filesystem: { scratch: /scratch, never_write: [/etc], landlock: optional }\n"
        "    identity: { ttl: 10m, mint: { command: m, file: tok }, revoke: r }\n"
        "    env: [LANG, { name: K, allow_long_lived: true }]\n"
        "  bare:\n    task: nothing\n",
        "p.yaml");
    REQUIRE(r.ok());
    const auto o = cordon::proxy::admin::job_card_json(r.value->jobs[0]);
    const auto text = boost::json::serialize(o);
    CHECK(text.find(R"("scratch":"/scratch")") != std::string::npos);
    CHECK(text.find(R"("never_write":["/etc"])") != std::string::npos);
    CHECK(text.find(R"("landlock":"optional")") != std::string::npos);
    CHECK(text.find(R"({"name":"LANG","allow_long_lived":false})") != std::string::npos);
    CHECK(text.find(R"({"name":"K","allow_long_lived":true})") != std::string::npos);
    CHECK(text.find(R"("mint":{"command":"m","file":"tok"})") != std::string::npos);
    CHECK(text.find(R"("revoke":"r")") != std::string::npos);
    CHECK(text.find(R"("ttl_ms":600000)") != std::string::npos);
    const auto b = boost::json::serialize(cordon::proxy::admin::job_card_json(r.value->jobs[1]));
    CHECK(b.find(R"("scratch":null)") != std::string::npos);
    CHECK(b.find(R"("mint":null)") != std::string::npos);
    CHECK(b.find(R"("landlock":"required")") != std::string::npos);
    CHECK(b.find(R"("env":[])") != std::string::npos);
}
