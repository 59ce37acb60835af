#include "proxy/mcp/sse.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using cordon::proxy::mcp::sse_filter;

namespace {

// Events whose data holds "secret" are rewritten to "{}", "bad" refused, the rest passed.
struct run {
    std::vector<std::string> seen;
    std::string out;
    bool ok = true;
    std::string error;
};

run feed(std::string_view stream, std::size_t piece, std::size_t max = 1024) {
    run r;
    sse_filter f(max, [&r](std::string_view data, std::string& replacement) {
        r.seen.emplace_back(data);
        if (data.find("bad") != std::string_view::npos) {
            return sse_filter::verdict::refuse;
        }
        if (data.find("secret") != std::string_view::npos) {
            replacement = "{}";
            return sse_filter::verdict::rewrite;
        }
        return sse_filter::verdict::pass;
    });
    for (std::size_t i = 0; i < stream.size() && r.ok; i += piece) {
        r.ok = f.feed(stream.substr(i, piece), r.out);
    }
    f.finish(r.out);
    r.error = f.error();
    return r;
}

}  // namespace

TEST_CASE("mcp sse: whole events pass as they came, cut anywhere", "[mcp]") {
    const std::string stream =
        ": keep-alive\n\n"
        "event: message\nid: 1\ndata: {\"a\":1}\n\n"
        "data: line one\ndata:line two\r\n\r\n"
        "retry: 10\rdata: x\r\r"
        "data\n\n"  // a data field with no value: empty data, never dispatched
        "data: {\"last\":true}\n\n";
    for (std::size_t piece = 1; piece <= stream.size(); ++piece) {
        INFO("pieces of " << piece);
        const run r = feed(stream, piece);
        CHECK(r.ok);
        CHECK(r.out == stream);
        CHECK(r.seen ==
              std::vector<std::string>{"{\"a\":1}", "line one\nline two", "x", "{\"last\":true}"});
    }
}

TEST_CASE("mcp sse: a rewritten event keeps its other fields and no old data", "[mcp]") {
    const std::string stream =
        "event: message\r\nid: 7\r\ndata: {\"secret\":\r\ndata: 1}\r\n\r\ndata: after\n\n";
    for (std::size_t piece = 1; piece <= stream.size(); ++piece) {
        INFO("pieces of " << piece);
        const run r = feed(stream, piece);
        CHECK(r.ok);
        CHECK(r.out == "event: message\nid: 7\ndata: {}\n\ndata: after\n\n");
    }
    // A byte order mark first: skipped by the parse (as a client skips it), kept first.
    const run b = feed("\xEF\xBB\xBF"
                       "data: secret\n\n",
                       1);
    CHECK(b.seen == std::vector<std::string>{"secret"});
    CHECK(b.out == "\xEF\xBB\xBF"
                   "data: {}\n\n");
    // A field the standard does not name is refused: "Data", or data behind what one
    // client takes for a byte order mark ("\xC3\xAF\xC2\xBB\xC2\xBF", eventsource-parser's).
    for (const std::string& bad : {std::string("Data: secret\n\n"),
                                   std::string("\xC3\xAF\xC2\xBB\xC2\xBF"
                                               "data: secret\n\n"),
                                   std::string("data : secret\n\n"), std::string("dat\n\n")}) {
        const run c = feed(bad, 3);
        CHECK_FALSE(c.ok);
        CHECK(c.seen.empty());
        CHECK(c.out.empty());
    }
}

TEST_CASE("mcp sse: refused and oversized events end the stream", "[mcp]") {
    const run r = feed("data: ok\n\ndata: bad\n\ndata: never\n\n", 4);
    CHECK_FALSE(r.ok);
    CHECK(r.out == "data: ok\n\n");
    CHECK(r.seen == std::vector<std::string>{"ok", "bad"});

    const std::string big = "data: " + std::string(2000, 'x') + "\n\n";
    const run s = feed("data: ok\n\n" + big, 100, 1024);
    CHECK_FALSE(s.ok);
    CHECK(s.out == "data: ok\n\n");
    CHECK(s.error.find("1024") != std::string::npos);
    // The same bound whether the event comes in one read or many.
    CHECK_FALSE(feed(big, big.size(), 1024).ok);
    CHECK_FALSE(feed(big, 7, 1024).ok);
    // Many small events never add up: the bound is per event.
    std::string many;
    for (int i = 0; i < 200; ++i) {
        many += "data: " + std::string(100, 'y') + "\n\n";
    }
    CHECK(feed(many, 333, 1024).ok);
}

TEST_CASE("mcp sse: an event without its blank line is never passed on", "[mcp]") {
    const run r = feed("data: one\n\ndata: cut sho", 2);
    CHECK(r.ok);
    CHECK(r.out == "data: one\n\n");
    CHECK(r.seen == std::vector<std::string>{"one"});
}
