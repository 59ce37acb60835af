// Tests of the head rewriting of the HTTP forward path: which fields cross the proxy, the
// Connection value of a forwarded response, and the fields part of a raw head.
#include "proxy/data/http_head.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::data;

std::string filtered(std::string_view lines, field_filter f = {}) {
    std::string out = "keep";  // appended to, never cleared
    append_end_to_end_lines(out, lines, f);
    return out.substr(4);
}

std::vector<std::pair<std::string, std::string>> fields_of(std::string_view lines) {
    std::vector<std::pair<std::string, std::string>> v;
    for_each_field(lines,
                   [&](std::string_view n, std::string_view value) { v.emplace_back(n, value); });
    return v;
}

}  // namespace

TEST_CASE("for_each_field splits CRLF lines and trims values", "[http_head]") {
    const auto v = fields_of("Host: a\r\nX-Empty:\r\nX-Pad: \t b c \t\r\nno colon\r\nLast:z\r\n");
    REQUIRE(v.size() == 4);
    CHECK(v[0] == std::pair<std::string, std::string>{"Host", "a"});
    CHECK(v[1] == std::pair<std::string, std::string>{"X-Empty", ""});
    CHECK(v[2] == std::pair<std::string, std::string>{"X-Pad", "b c"});
    CHECK(v[3] == std::pair<std::string, std::string>{"Last", "z"});
    CHECK(fields_of("").empty());
    CHECK(fields_of("A: 1").size() == 1);  // a last line without CRLF still counts
}

TEST_CASE("hop-by-hop names, any case", "[http_head]") {
    for (const char* n : {"Connection", "keep-alive", "PROXY-CONNECTION", "Proxy-Authorization",
                          "proxy-authenticate", "TE", "Trailer", "upgrade"}) {
        CHECK(hop_by_hop_name(n));
    }
    for (const char* n : {"Host", "Content-Length", "Transfer-Encoding", "Authorization",
                          "Trailers", "Connectio", "", "X-Proxy-Authorization"}) {
        CHECK_FALSE(hop_by_hop_name(n));
    }
}

TEST_CASE("hop-by-hop names: the length switch agrees with the list, for any name", "[http_head]") {
    const std::set<std::string> list{
        "connection",         "keep-alive", "proxy-connection", "proxy-authorization",
        "proxy-authenticate", "te",         "trailer",          "upgrade"};
    std::mt19937 rng(20261130);
    const std::string letters = "connectikalv-pryuhzsgdTECONRAUPGKLIV";
    for (int i = 0; i < 200000; ++i) {
        std::string n;
        if (i % 4 == 0) {  // a listed name with its case flipped at random
            auto it = list.begin();
            std::advance(it, static_cast<long>(rng() % list.size()));
            n = *it;
            for (char& c : n) {
                if (rng() % 2 != 0 && c >= 'a' && c <= 'z') {
                    c = static_cast<char>(c - 32);
                }
            }
        } else {
            const std::size_t len = rng() % 21;
            for (std::size_t k = 0; k < len; ++k) {
                n.push_back(letters[rng() % letters.size()]);
            }
        }
        std::string lower = n;
        for (char& c : lower) {
            c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
        }
        INFO(n);
        REQUIRE(hop_by_hop_name(n) == (list.count(lower) != 0));
    }
}

TEST_CASE("end-to-end fields keep their order and values; hop-by-hop ones go", "[http_head]") {
    const std::string in =
        "Host: example.com\r\nUser-Agent: t/1\r\nProxy-Authorization: Basic eDp5\r\n"
        "Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nTrailer: X\r\n"
        "Upgrade: websocket\r\nProxy-Connection: keep-alive\r\nAccept:  */* \r\n"
        "Proxy-Authenticate: Basic\r\n";
    CHECK(filtered(in) == "Host: example.com\r\nUser-Agent: t/1\r\nAccept: */*\r\n");
    field_filter req;
    req.drop_host = true;
    CHECK(filtered(in, req) == "User-Agent: t/1\r\nAccept: */*\r\n");
}

TEST_CASE("fields named by Connection or Proxy-Connection go, framing stays", "[http_head]") {
    const std::string in =
        "Connection: X-Secret, , content-length ,Transfer-Encoding\r\n"
        "Proxy-Connection: x-other\r\nX-Secret: 1\r\nx-secret: 2\r\nX-Other: 3\r\n"
        "Content-Length: 4\r\nTransfer-Encoding: chunked\r\nX-Kept: 5\r\n";
    CHECK(filtered(in) == "Content-Length: 4\r\nTransfer-Encoding: chunked\r\nX-Kept: 5\r\n");
    // Listing Host drops the client's Host: the request writes its own from the URL anyway.
    CHECK(filtered("Connection: host\r\nHost: a\r\nB: c\r\n") == "B: c\r\n");
}

TEST_CASE("many Connection names over many fields: exactly the listed ones go", "[http_head]") {
    // Gathered once and looked up sorted, in any case and order, across two Connection
    // fields and Proxy-Connection.
    std::string lines = "Connection: keep-alive";
    for (int i = 0; i < 300; i += 2) {
        lines += ", X-F" + std::to_string(i);
    }
    lines += "\r\nProxy-Connection: x-f1\r\nconnection: CONTENT-LENGTH, x-F299\r\n";
    std::string want;
    for (int i = 0; i < 300; ++i) {
        const std::string line = "x-f" + std::to_string(i) + ": v\r\n";
        lines += line;
        if (i % 2 == 1 && i != 1 && i != 299) {
            want += line;
        }
    }
    lines += "Content-Length: 3\r\n";
    CHECK(filtered(lines) == want + "Content-Length: 3\r\n");
}

TEST_CASE("an upgrade keeps Upgrade, even when Connection lists it", "[http_head]") {
    const std::string in = "Connection: Upgrade, X-A\r\nUpgrade: websocket\r\nX-A: 1\r\nX-B: 2\r\n";
    field_filter f;
    f.keep_upgrade = true;
    CHECK(filtered(in, f) == "Upgrade: websocket\r\nX-B: 2\r\n");
    CHECK(filtered(in) == "X-B: 2\r\n");
}

TEST_CASE("Expect goes only when cordon answered it", "[http_head]") {
    const std::string in = "Expect: 100-continue\r\nContent-Length: 3\r\n";
    CHECK(filtered(in) == in);
    field_filter f;
    f.drop_expect = true;
    CHECK(filtered(in, f) == "Content-Length: 3\r\n");
}

TEST_CASE("response Connection values match Beast's keep_alive()", "[http_head]") {
    CHECK(response_connection(11, true, false).empty());
    CHECK(response_connection(11, false, false) == "close");
    CHECK(response_connection(10, true, false) == "keep-alive");
    CHECK(response_connection(10, false, false).empty());
    CHECK(response_connection(11, false, true) == "upgrade, close");
    CHECK(response_connection(10, false, true) == "upgrade");
}

TEST_CASE("head_fields is the part between the start line and the blank line", "[http_head]") {
    CHECK(head_fields("GET / HTTP/1.1\r\nHost: a\r\nB: c\r\n\r\n") == "Host: a\r\nB: c\r\n");
    CHECK(head_fields("GET / HTTP/1.1\r\n\r\n").empty());
    CHECK(head_fields("GET / HTTP/1.1").empty());
    CHECK(head_fields("").empty());
}

namespace {

// head_prefix_refusal over `s` fed in pieces of `step` bytes, as read_head sees it.
std::string refusal_fed(std::string_view s, std::size_t step) {
    std::size_t checked = 0;
    for (std::size_t n = std::min(step, s.size());; n = std::min(n + step, s.size())) {
        const std::string_view r = head_prefix_refusal(s.substr(0, n), checked);
        if (!r.empty()) {
            return std::string(r);
        }
        checked = n;
        if (n == s.size()) {
            return {};
        }
    }
}

}  // namespace

TEST_CASE("head_prefix_refusal: HTTP heads pass, in any split", "[http_head]") {
    for (const std::string_view head :
         {std::string_view("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"),
          std::string_view("CONNECT a.test:443 HTTP/1.1\r\nX-A: caf\xc3\xa9\t\r\n\r\n"),
          std::string_view("\r\nPOST http://a.test/ HTTP/1.0\r\n\r\n"),
          std::string_view("M-SEARCH * HTTP/1.1\r\n\r\n"), std::string_view("G"),
          std::string_view("\r")}) {
        for (const std::size_t step :
             {std::size_t{1}, std::size_t{2}, std::size_t{7}, head.size()}) {
            INFO(head << " by " << step);
            CHECK(refusal_fed(head, step).empty());
        }
    }
}

TEST_CASE("head_prefix_refusal: what is not HTTP is named at its first bytes", "[http_head]") {
    struct refusal_case {
        std::string bytes;
        std::string says;
    };
    const auto c = GENERATE(values<refusal_case>({
        {"GET http://a.test/ HTTP/1.1\nHost: a.test\n\n", "a bare LF"},
        {"GET http://a.test/ HTTP/1.1\r\nHost: a\rb\r\n", "a bare CR"},
        {std::string("\0\0\0\0", 4), "does not start with a method"},
        {std::string("GET / HTTP/1.1\r\nX: a\0b", 22), "a NUL byte"},
        {"GET / HTTP/1.1\r\nX: a\x1b[2Jb\r\n", "a control character"},
        {"GET / HTTP/1.1\r\nX: a\x7f\r\n", "a control character"},
        {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "a TLS handshake"},
        {"\xff\xfd\x18", "does not start with a method"},
        {"GE(T / HTTP/1.1\r\n", "does not start with a method"},
        {"HELLO\r\n", "no request-target"},
        {std::string(65, 'A') + " / HTTP/1.1\r\n", "the method is too long"},
        {"SSH-2.0-OpenSSH_9.2\r\n", "not an HTTP request"},
    }));
    for (const std::size_t step : {std::size_t{1}, std::size_t{3}, c.bytes.size()}) {
        INFO(c.bytes << " by " << step);
        CHECK_THAT(refusal_fed(c.bytes, step), Catch::Matchers::Contains(c.says));
    }
}

TEST_CASE("framing_refusal: RFC 9112 framing and Host", "[http_head]") {
    CHECK(framing_refusal(1, 1, 0, "").empty());
    CHECK(framing_refusal(0, 0, 1, "chunked").empty());
    CHECK(framing_refusal(1, 0, 1, "Chunked").empty());
    CHECK(framing_refusal(2, 0, 0, "") == "more than one Host");
    CHECK(framing_refusal(1, 2, 0, "") == "more than one Content-Length");
    CHECK(framing_refusal(1, 1, 1, "chunked") == "both Content-Length and Transfer-Encoding");
    CHECK(framing_refusal(1, 1, 1, "xchunked") == "both Content-Length and Transfer-Encoding");
    CHECK(framing_refusal(1, 0, 1, "xchunked") ==
          "only a single Transfer-Encoding: chunked is accepted");
    CHECK(framing_refusal(1, 0, 2, "chunked") ==
          "only a single Transfer-Encoding: chunked is accepted");
}
