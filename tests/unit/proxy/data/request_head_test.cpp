// Tests of the request head reader over an in-memory stream (beast::test::stream), failed
// at every read in turn (fail_count), and of the smuggling refusals on a parsed head.
#include "proxy/data/request_head.hpp"

#include <catch2/catch.hpp>

#include <boost/beast/_experimental/test/fail_count.hpp>
#include <boost/beast/_experimental/test/stream.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace cordon;
using namespace cordon::proxy::data;
namespace test = boost::beast::test;

struct read_outcome {
    read_head_result r;
    std::string buffered;  // what the buffer holds afterwards
};

// Reads a head from `input`, served `read_size` bytes per read; `fc` fails the n-th
// operation when given.
read_outcome read_from(std::string_view input, std::size_t limit, std::size_t read_size,
                       test::fail_count* fc = nullptr) {
    net::io_context ioc;
    test::stream s = fc != nullptr ? test::stream(ioc, *fc, input) : test::stream(ioc, input);
    s.read_size(read_size);
    s.close_remote();  // the input is all there is: then end of stream
    beast::flat_buffer buffer(limit + 64 * 1024);
    read_outcome out;
    bool done = false;
    net::co_spawn(ioc, read_request_head(s, buffer, limit),
                  [&](std::exception_ptr e, read_head_result r) {
                      REQUIRE_FALSE(e);
                      out.r = r;
                      done = true;
                  });
    ioc.run();
    REQUIRE(done);
    out.buffered.assign(static_cast<const char*>(buffer.data().data()), buffer.size());
    return out;
}

constexpr std::string_view get_head =
    "GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\nContent-Length: 4\r\n\r\n";

http::request_header<> header_of(const std::vector<std::pair<std::string, std::string>>& fields) {
    http::request_header<> h;
    h.method(http::verb::post);
    h.target("http://example.com/");
    for (const auto& [n, v] : fields) {
        h.insert(n, v);
    }
    return h;
}

}  // namespace

TEST_CASE("request_head: a head in small pieces; the body stays buffered", "[request_head]") {
    const std::string input = std::string(get_head) + "body";
    for (const std::size_t piece : {1, 3, 7, 64, 4096}) {
        const read_outcome o = read_from(input, 8192, piece);
        INFO("read size " << piece);
        CHECK_FALSE(o.r.error);
        CHECK(o.r.refusal.empty());
        CHECK_FALSE(o.r.too_large);
        CHECK(o.r.head_len == get_head.size());
        CHECK(o.buffered.substr(0, o.r.head_len) == get_head);
    }
}

TEST_CASE("request_head: a failure at every read in turn is reported, then success",
          "[request_head]") {
    const std::string input = std::string(get_head) + "body";
    const read_outcome clean = read_from(input, 8192, 16);
    REQUIRE(clean.r.head_len == get_head.size());
    std::size_t failures = 0;
    for (std::size_t n = 1; n < 1000; ++n) {
        test::fail_count fc(n);  // the n-th operation fails
        const read_outcome o = read_from(input, 8192, 16, &fc);
        if (o.r.error == test::error::test_failure) {
            ++failures;
            CHECK(o.r.head_len == 0);  // a failed read never yields a head
            continue;
        }
        CHECK_FALSE(o.r.error);
        CHECK(o.r.head_len == clean.r.head_len);
        CHECK(o.buffered == clean.buffered);
        break;
    }
    // One failure point per read the head needs: ceil(head / 16) reads.
    CHECK(failures == (get_head.size() + 15) / 16);
}

TEST_CASE("request_head: what is refused before the head ends", "[request_head]") {
    SECTION("a TLS ClientHello sent to the proxy port") {
        const read_outcome o = read_from(std::string("\x16\x03\x01\x02\x00\x01", 6), 8192, 64);
        CHECK_FALSE(o.r.refusal.empty());
        CHECK(o.r.head_len == 0);
    }
    SECTION("a bare LF line end") {
        const read_outcome o = read_from("GET / HTTP/1.1\nHost: a\n\n", 8192, 64);
        CHECK_FALSE(o.r.refusal.empty());
    }
    SECTION("a head over the limit") {
        const std::string big = "GET http://a/ HTTP/1.1\r\nX: " + std::string(300, 'a') +
                                "\r\n\r\n";
        const read_outcome o = read_from(big, 128, 64);
        CHECK(o.r.too_large);
        CHECK(o.r.refusal.empty());
    }
    SECTION("the client stops mid-head: end of stream, its bytes kept") {
        const read_outcome o = read_from("GET http://a/ HTTP/1.1\r\nHo", 8192, 64);
        CHECK(o.r.error == net::error::eof);
        CHECK(o.buffered == "GET http://a/ HTTP/1.1\r\nHo");
    }
}

TEST_CASE("request_head: smuggling refusals on a parsed head", "[request_head]") {
    using fields = std::vector<std::pair<std::string, std::string>>;
    const std::string plain = "POST http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n";
    struct row {
        const char* name;
        fields f;
        std::string_view want;
    };
    const std::vector<row> rows = {
        {"one Host, one Content-Length", {{"Host", "a"}, {"Content-Length", "4"}}, ""},
        {"chunked", {{"Host", "a"}, {"Transfer-Encoding", "chunked"}}, ""},
        {"duplicate Content-Length, even equal",
         {{"Host", "a"}, {"Content-Length", "4"}, {"Content-Length", "4"}},
         "more than one Content-Length"},
        {"Transfer-Encoding with Content-Length",
         {{"Host", "a"}, {"Content-Length", "4"}, {"Transfer-Encoding", "chunked"}},
         "both Content-Length and Transfer-Encoding"},
        {"a coding other than chunked",
         {{"Host", "a"}, {"Transfer-Encoding", "gzip"}},
         "only a single Transfer-Encoding: chunked is accepted"},
        {"two Transfer-Encoding fields",
         {{"Host", "a"}, {"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}},
         "only a single Transfer-Encoding: chunked is accepted"},
        {"two Hosts", {{"Host", "a"}, {"Host", "b"}}, "more than one Host"},
    };
    for (const auto& r : rows) {
        SECTION(r.name) { CHECK(request_refusal(header_of(r.f), plain) == r.want); }
    }
    SECTION("obsolete line folding, seen in the raw bytes") {
        const std::string folded =
            "POST http://example.com/ HTTP/1.1\r\nHost: example.com\r\nX-A: 1\r\n 2\r\n\r\n";
        CHECK(request_refusal(header_of({{"Host", "a"}}), folded) ==
              "obsolete header line folding");
        const std::string tab =
            "POST http://example.com/ HTTP/1.1\r\nHost: example.com\r\nX-A: 1\r\n\t2\r\n\r\n";
        CHECK(request_refusal(header_of({{"Host", "a"}}), tab) == "obsolete header line folding");
    }
}

TEST_CASE("restricted_refusal: what a restricting rule refuses that could smuggle a request",
          "[request_head]") {
    using boost::beast::http::verb;
    using cordon::config::egress_rule;
    egress_rule open_rule;  // no methods, no request rules: nothing refused here
    egress_rule methods_rule;
    methods_rule.methods = {"GET"};
    egress_rule paths_rule;
    paths_rule.http.resize(1);
    const auto none = header_of({{"Host", "a"}});
    const auto ws = header_of({{"Host", "a"}, {"Upgrade", "websocket"}, {"Connection", "Upgrade"}});
    const auto h2c = header_of({{"Host", "a"}, {"Upgrade", "h2c"}, {"Connection", "Upgrade"}});
    const auto no_conn = header_of({{"Host", "a"}, {"Upgrade", "h2c"}});  // no upgrade asked

    for (const verb v : {verb::get, verb::head, verb::options, verb::trace}) {
        INFO(boost::beast::http::to_string(v));
        CHECK(restricted_refusal(&methods_rule, v, true, none).find("a body on this method") == 0);
        CHECK(restricted_refusal(&paths_rule, v, true, none).find("a body on this method") == 0);
        CHECK(restricted_refusal(&paths_rule, v, false, none).empty());
        CHECK(restricted_refusal(&open_rule, v, true, none).empty());
        CHECK(restricted_refusal(nullptr, v, true, none).empty());
    }
    for (const verb v : {verb::post, verb::put, verb::patch, verb::delete_}) {
        CHECK(restricted_refusal(&paths_rule, v, true, none).empty());
    }
    CHECK(restricted_refusal(&paths_rule, verb::get, false, ws).empty());
    CHECK(restricted_refusal(&paths_rule, verb::get, false, h2c).find("only a WebSocket") == 0);
    CHECK(restricted_refusal(&methods_rule, verb::get, false, h2c).find("only a WebSocket") == 0);
    CHECK(restricted_refusal(&open_rule, verb::get, false, h2c).empty());
    CHECK(restricted_refusal(&paths_rule, verb::get, false, no_conn).empty());
    CHECK(wants_upgrade(ws));
    CHECK_FALSE(wants_upgrade(no_conn));
}
