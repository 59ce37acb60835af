#include "shims/follow.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using cordon::shim::kill_reason;
using cordon::shim::sse_event;
using cordon::shim::sse_parser;

TEST_CASE("sse: events split anywhere, CRLF or LF, comments ignored", "[shim][follow]") {
    const std::string stream =
        ": cordon events\n\nid: 7\nevent: kill.session\r\ndata: {\"session\":\"s-1\"}\r\n\r\n"
        ": keepalive\n\nid: 8\nevent: revive\ndata: {}\n\n";
    // Fed byte by byte and whole: the same events.
    for (const std::size_t step : {std::size_t{1}, std::size_t{5}, stream.size()}) {
        sse_parser p;
        std::vector<sse_event> out;
        for (std::size_t i = 0; i < stream.size(); i += step) {
            p.feed(std::string_view(stream).substr(i, step), out);
        }
        REQUIRE(out.size() == 2);
        CHECK(out[0].id == "7");
        CHECK(out[0].type == "kill.session");
        CHECK(out[0].data == "{\"session\":\"s-1\"}");
        CHECK(out[1].id == "8");
        CHECK(out[1].type == "revive");
    }
}

TEST_CASE("sse: an id-only block is kept: the resume point before any event", "[shim][follow]") {
    sse_parser p;
    std::vector<sse_event> out;
    p.feed(": cordon events\n\nid: 41\n\nid: 42\nevent: revive\ndata: {}\n\n", out);
    REQUIRE(out.size() == 2);
    CHECK(out[0].id == "41");
    CHECK(out[0].type.empty());
    CHECK(out[0].data.empty());
    CHECK_FALSE(kill_reason(out[0], "s-1"));
    CHECK(out[1].id == "42");
}

TEST_CASE("sse: a line beyond 64 KiB is cut, memory stays bounded", "[shim][follow]") {
    sse_parser p;
    std::vector<sse_event> out;
    p.feed("event: x\ndata: ", out);
    p.feed(std::string(200 * 1024, 'a'), out);
    p.feed("\n\n", out);
    REQUIRE(out.size() == 1);
    CHECK(out[0].data.size() <= 64 * 1024);
}

TEST_CASE("kill_reason: which events stop the agent", "[shim][follow]") {
    const auto ev = [](std::string type, std::string data) {
        return sse_event{"1", std::move(type), std::move(data)};
    };
    const auto k = kill_reason(
        ev("kill.session", R"({"session":"s-1","job":"j","reason":"runaway","by":"ops"})"), "s-1");
    REQUIRE(k.has_value());
    CHECK(*k == "session killed by ops: runaway");
    CHECK_FALSE(kill_reason(ev("kill.session", R"({"session":"s-2"})"), "s-1").has_value());
    CHECK(kill_reason(ev("kill.network", R"({"reason":"incident","by":"oncall"})"), "s-1") ==
          "network kill by oncall: incident");
    CHECK(kill_reason(ev("session.end", R"({"session":"s-1"})"), "s-1").has_value());
    CHECK_FALSE(kill_reason(ev("revive", "{}"), "s-1").has_value());
    CHECK_FALSE(kill_reason(ev("token.revoke", R"({"session":"s-1"})"), "s-1").has_value());
    // Garbage data: a network kill is still one; a session kill names no session.
    CHECK(kill_reason(ev("kill.network", "not json"), "s-1").has_value());
    CHECK_FALSE(kill_reason(ev("kill.session", "not json"), "s-1").has_value());
}

TEST_CASE("resume_lost_reason: a follower that lost its place never misses a kill",
          "[shim][follow]") {
    using cordon::shim::resume_lost_reason;
    using std::chrono::milliseconds;
    const auto lost = [](const std::string& data) { return sse_event{"9", "resume.lost", data}; };
    const std::string s1 = R"("session":{"id":"s-1","state":"active"})";
    const milliseconds down{3000};
    SECTION("nothing happened to the kill switch or the session: keep going") {
        CHECK_FALSE(resume_lost_reason(
            lost(R"({"reason":"ahead","kill":{"engaged":false,"changed_ms_ago":null},)" + s1 + "}"),
            "s-1", down));
        CHECK_FALSE(resume_lost_reason(
            lost(R"({"reason":"gone","kill":{"engaged":false,"changed_ms_ago":60000},)" + s1 + "}"),
            "s-1", down));
    }
    SECTION("the network kill is engaged now") {
        const auto why = resume_lost_reason(
            lost(R"({"reason":"ahead","kill":{"engaged":true,"changed_ms_ago":10},)" + s1 + "}"),
            "s-1", down);
        REQUIRE(why);
        CHECK_THAT(*why, Catch::Matchers::StartsWith("network kill"));
    }
    SECTION("a kill and a revive inside the gap") {
        const auto why = resume_lost_reason(
            lost(R"({"reason":"ahead","kill":{"engaged":false,"changed_ms_ago":2500},)" + s1 + "}"),
            "s-1", down);
        REQUIRE(why);
        CHECK_THAT(*why, Catch::Matchers::Contains("a kill may have been missed"));
    }
    SECTION("the session was killed, ended or is unknown to cordon") {
        for (const char* state : {"killed", "ended", "unknown"}) {
            INFO(state);
            const auto why = resume_lost_reason(
                lost(std::string(R"({"reason":"ahead","kill":{"engaged":false,)"
                                 R"("changed_ms_ago":null},"session":{"id":"s-1","state":")") +
                     state + "\"}}"),
                "s-1", down);
            REQUIRE(why);
            CHECK(*why == "session " + std::string(state) + " while the event stream was down");
        }
    }
    SECTION("an unreadable account of the gap fails closed") {
        for (const char* data :
             {"", "[]", "{}", R"({"kill":{}})", R"({"kill":{"engaged":"no"}})",
              R"({"kill":{"engaged":false,"changed_ms_ago":null}})",
              R"({"kill":{"engaged":false},"session":{"state":"active"}})",
              R"({"kill":{"engaged":false,"changed_ms_ago":"1"},"session":{"state":"active"}})"}) {
            INFO(data);
            CHECK(resume_lost_reason(lost(data), "s-1", down));
        }
    }
    SECTION("kill_reason alone would have let it pass") {
        CHECK_FALSE(kill_reason(lost(R"({"kill":{"engaged":true}})"), "s-1"));
    }
}
