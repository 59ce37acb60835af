// Tests of the proxy's own responses: the HTTP framing of denials and the JSON body an agent
// parses, which must stay valid whatever bytes the client put in the target.
#include "proxy/data/responses.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json_string.hpp"

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::data;
using namespace cordon::common;
using namespace std::string_literals;
namespace json = boost::json;
using cordon::config::deny_reason;

struct response {
    std::string status_line;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;

    std::optional<std::string> header(std::string_view name) const {
        std::optional<std::string> found;
        for (const auto& [n, v] : headers) {
            if (n == name) {
                REQUIRE_FALSE(found);  // every header appears at most once
                found = v;
            }
        }
        return found;
    }
};

response split(const std::string& raw) {
    response r;
    const auto end = raw.find("\r\n\r\n");
    REQUIRE(end != std::string::npos);
    r.body = raw.substr(end + 4);
    std::string_view head(raw.data(), end + 2);
    bool first = true;
    while (!head.empty()) {
        const auto eol = head.find("\r\n");
        REQUIRE(eol != std::string_view::npos);
        const std::string_view line = head.substr(0, eol);
        head.remove_prefix(eol + 2);
        REQUIRE(line.find_first_of("\r\n") == std::string_view::npos);
        if (first) {
            r.status_line = line;
            first = false;
            continue;
        }
        const auto colon = line.find(": ");
        REQUIRE(colon != std::string_view::npos);
        r.headers.emplace_back(line.substr(0, colon), line.substr(colon + 2));
    }
    return r;
}

json::object parse_body(const std::string& body) {
    REQUIRE(!body.empty());
    CHECK(body.back() == '\n');
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    REQUIRE_FALSE(ec);
    REQUIRE(v.is_object());
    return v.as_object();
}

std::string string_field(const json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    REQUIRE(v);
    REQUIRE(v->is_string());
    return std::string(v->as_string());
}

// What a JSON reader gets back from a deny body's string s (escaped in the ASCII form): the
// same as from the audit log's escaper (raw UTF-8 out), i.e. s with each invalid UTF-8
// subsequence replaced by U+FFFD.
std::string as_decoded(std::string_view s) {
    std::string quoted;
    cordon::common::append_json_string(quoted, s);
    const json::value v = json::parse(quoted);
    return std::string(v.as_string());
}

std::string all_bytes() {
    std::string s;
    for (int b = 0; b < 256; ++b) {
        s += static_cast<char>(b);
    }
    return s;
}

}  // namespace

TEST_CASE("responses: status_text names every status cordon sends", "[responses]") {
    const auto c = GENERATE(values<std::pair<int, std::string_view>>({
        {200, "OK"},
        {201, "Created"},
        {400, "Bad Request"},
        {401, "Unauthorized"},
        {403, "Forbidden"},
        {404, "Not Found"},
        {405, "Method Not Allowed"},
        {407, "Proxy Authentication Required"},
        {409, "Conflict"},
        {413, "Content Too Large"},
        {417, "Expectation Failed"},
        {431, "Request Header Fields Too Large"},
        {500, "Internal Server Error"},
        {502, "Bad Gateway"},
        {503, "Service Unavailable"},
        {504, "Gateway Timeout"},
        {0, "Error"},
        {-1, "Error"},
        {418, "Error"},
        {999, "Error"},
    }));
    INFO(c.first);
    CHECK(status_text(c.first) == c.second);
}

TEST_CASE("responses: explain has a distinct sentence for every deny reason", "[responses]") {
    std::set<std::string_view> seen;
    for (std::size_t i = 0; i < cordon::config::deny_reason_count; ++i) {
        const auto r = static_cast<deny_reason>(i);
        const std::string_view text = explain(r);
        INFO(i);
        CHECK(!text.empty());
        CHECK(text != "denied");
        // Each sentence is plain ASCII with no quote, so it reads the same in JSON.
        for (const char c : text) {
            CHECK((c >= 0x20 && c < 0x7f && c != '"' && c != '\\'));
        }
        seen.insert(text);
    }
    CHECK(seen.size() == cordon::config::deny_reason_count);
    CHECK(explain(deny_reason::none) == "allowed");
    CHECK(explain(deny_reason::auth).find("SESSION:TOKEN") != std::string_view::npos);
    // A value past the last reason (e.g. from a newer peer) still gets a sentence.
    CHECK(explain(static_cast<deny_reason>(200)) == "denied");
}

TEST_CASE("responses: deny_response framing and body", "[responses]") {
    struct deny_case {
        const char* name;
        int status;
        std::string reason;
        std::string job;
        std::string target;
        std::string message;
        std::string error;
    };
    const auto c = GENERATE(values<deny_case>({
        {"policy denial", 403, "no_rule", "ci-build", "example.com:443",
         "no rule of this job card allows this host", "denied"},
        {"bad request", 400, "bad_request", "ci-build", "example.com",
         "the target needs a port, e.g. example.com:443", "denied"},
        {"auth challenge", 407, "auth", "", "example.com:443", "proxy credentials are missing",
         "proxy_auth_required"},
        {"upstream error without a reason", 502, "", "job-1", "example.com:443", "connect failed",
         "upstream_error"},
        {"audit unavailable", 503, "audit_unavailable", "job-1", "example.com:443",
         "the audit log cannot be written", "denied"},  // cordon refuses: no upstream failed
        {"gateway timeout", 504, "", "", "", "", "upstream_error"},
        {"too large", 431, "", "job", "t", "m", "denied"},
    }));
    INFO(c.name);
    const std::string raw = deny_response(c.status, c.reason, c.job, c.target, c.message);
    const response r = split(raw);

    CHECK(r.status_line ==
          "HTTP/1.1 " + std::to_string(c.status) + " " + std::string(status_text(c.status)));
    if (c.reason.empty()) {
        CHECK_FALSE(r.header("X-Cordon-Deny"));
    } else {
        CHECK(r.header("X-Cordon-Deny") == c.reason);
    }
    if (c.status == 407) {
        CHECK(r.header("Proxy-Authenticate") == "Basic realm=\"cordon\""s);
    } else {
        CHECK_FALSE(r.header("Proxy-Authenticate"));
    }
    CHECK(r.header("Content-Type") == "application/json"s);
    CHECK(r.header("Content-Length") == std::to_string(r.body.size()));
    CHECK(r.header("Connection") == "close"s);

    const json::object o = parse_body(r.body);
    CHECK(string_field(o, "error") == c.error);
    if (c.reason.empty()) {
        CHECK_FALSE(o.contains("reason"));
    } else {
        CHECK(string_field(o, "reason") == c.reason);
    }
    if (c.job.empty()) {
        REQUIRE(o.contains("job"));
        CHECK(o.at("job").is_null());
    } else {
        CHECK(string_field(o, "job") == c.job);
    }
    CHECK(string_field(o, "target") == c.target);
    CHECK(string_field(o, "message") == c.message);
    CHECK(o.size() == (c.reason.empty() ? 4u : 5u));
}

TEST_CASE("responses: the body stays valid JSON for hostile targets", "[responses]") {
    const auto target = GENERATE(
        as<std::string>{}, "quote\"d:443", "\"},\"injected\":true,\"x\":\"", "back\\slash\\",
        "\\u0000", "line\r\nX-Injected: 1\r\n\r\n", "\0nul"s, "\x01\x02\x1f\x7f",
        "invalid \xff\xfe utf-8 \xc3", "overlong \xc0\xaf and surrogate \xed\xa0\x80",
        "valid utf-8 \xc3\xa9 \xf0\x9f\x98\x80", all_bytes(), std::string(8192, '"'));
    const std::string raw = deny_response(400, "bad_request", "job \"x\"\n", target,
                                          "msg with \\ and \"\x01\xff");
    const response r = split(raw);
    // The hostile bytes never reach the header block.
    CHECK(r.headers.size() == 4);  // X-Cordon-Deny, Content-Type, -Length, Connection
    CHECK(r.header("Content-Length") == std::to_string(r.body.size()));

    // The body is one line of ASCII.
    for (std::size_t i = 0; i + 1 < r.body.size(); ++i) {
        const auto u = static_cast<unsigned char>(r.body[i]);
        REQUIRE(u >= 0x20);
        REQUIRE(u < 0x7f);
    }
    const json::object o = parse_body(r.body);
    CHECK(string_field(o, "reason") == "bad_request");
    CHECK(string_field(o, "job") == "job \"x\"\n");
    CHECK(string_field(o, "target") == as_decoded(target));
    CHECK(string_field(o, "message") == "msg with \\ and \"\x01\xef\xbf\xbd");
    CHECK_FALSE(o.contains("injected"));
}

TEST_CASE("responses: deny_response bytes pinned for quotes and UTF-8", "[responses]") {
    // Byte for byte: the answer an agent gets must not drift when its escaping is reworked.
    const std::string body =
        R"({"error":"denied","reason":"no_rule","job":"job \"\u00e9\"",)"
        R"("target":"caf\u00e9.example:443","message":"say \"hi\" \ud83d\ude00 \ufffd \\"})"
        "\n";
    CHECK(deny_response(403, "no_rule", "job \"\xc3\xa9\"", "caf\xc3\xa9.example:443",
                        "say \"hi\" \xf0\x9f\x98\x80 \xff \\") ==
          "HTTP/1.1 403 Forbidden\r\nX-Cordon-Deny: no_rule\r\nContent-Type: "
          "application/json\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);

    const std::string auth_body =
        R"({"error":"proxy_auth_required","reason":"auth","job":null,"target":"\"x\":1",)"
        R"("message":"\u2028"})"
        "\n";
    CHECK(deny_response(407, "auth", "", "\"x\":1", "\xe2\x80\xa8") ==
          "HTTP/1.1 407 Proxy Authentication Required\r\nX-Cordon-Deny: auth\r\n"
          "Proxy-Authenticate: Basic realm=\"cordon\"\r\nContent-Type: "
          "application/json\r\nContent-Length: " +
              std::to_string(auth_body.size()) + "\r\nConnection: close\r\n\r\n" + auth_body);

    const std::string err_body =
        R"({"error":"upstream_error","job":"j","target":"t:1","message":""})"
        "\n";
    CHECK(deny_response(502, "", "j", "t:1", "") ==
          "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: " +
              std::to_string(err_body.size()) + "\r\nConnection: close\r\n\r\n" + err_body);
}
