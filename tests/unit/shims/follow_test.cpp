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
        ev("kill.session", R"({"session":"s-1","job":"j","reason":"runaway","by":"ops"})"),
        "s-1");
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
