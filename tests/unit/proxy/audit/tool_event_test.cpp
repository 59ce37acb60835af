// Tests of tool.call events: parsing and bounds, redaction of the arguments, the record,
// and the reserved name of the proxy.
#include "proxy/audit/tool_event.hpp"
#include "common/time.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <string>
#include <vector>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::audit;
using namespace cordon::common;
namespace json = boost::json;

const std::string hex64(64, 'c');
const std::string secret = "Qw8" + std::string(20, 'z');

json::object line_object(const audit_record& r) {
    std::string line = r.to_json_line();
    line.pop_back();
    boost::system::error_code ec;
    json::value v = json::parse(line, ec);
    REQUIRE_FALSE(ec);
    return v.as_object();
}

}  // namespace

TEST_CASE("tool events: well-formed bodies", "[tool_event]") {
    std::string error;
    SECTION("object arguments") {
        const auto e = parse_tool_event(
            R"({"event":"tool.call","tool":"web.fetch","arguments":{"url":"https://x.example/a","n":3}})",
            error);
        REQUIRE(e);
        CHECK(e->tool == "web.fetch");
        CHECK(e->arguments == R"({"url":"https://x.example/a","n":3})");
        CHECK_FALSE(e->truncated);
    }
    SECTION("string, array and absent arguments") {
        auto e = parse_tool_event(R"({"event":"tool.call","tool":"shell","arguments":"ls -l"})",
                                  error);
        REQUIRE(e);
        CHECK(e->arguments == R"("ls -l")");
        e = parse_tool_event(R"({"tool":"t","event":"tool.call","arguments":[1,"two"]})", error);
        REQUIRE(e);
        CHECK(e->arguments == R"([1,"two"])");
        e = parse_tool_event(R"({"event":"tool.call","tool":"noargs"})", error);
        REQUIRE(e);
        CHECK(e->arguments.empty());
        e = parse_tool_event(R"({"event":"tool.call","tool":"nullargs","arguments":null})", error);
        REQUIRE(e);
        CHECK(e->arguments.empty());
    }
}

TEST_CASE("tool events: malformed bodies are refused with a reason", "[tool_event]") {
    struct row {
        std::string name;
        std::string body;
        std::string says;
    };
    const std::vector<row> rows{
        {"empty", "", "JSON object"},
        {"not JSON", "tool=x", "JSON object"},
        {"an array", "[1]", "JSON object"},
        {"truncated", R"({"event":"tool.call","tool":"x")", "JSON object"},
        {"invalid UTF-8", "{\"event\":\"tool.call\",\"tool\":\"\xff\"}", "JSON object"},
        {"no event", R"({"tool":"x"})", "\"event\" must be \"tool.call\""},
        {"other event", R"({"event":"kill.session","tool":"x"})", "\"event\" must be"},
        {"event not a string", R"({"event":1,"tool":"x"})", "\"event\" must be"},
        {"no tool", R"({"event":"tool.call"})", "\"tool\""},
        {"empty tool", R"({"event":"tool.call","tool":""})", "\"tool\""},
        {"tool not a string", R"({"event":"tool.call","tool":{}})", "\"tool\""},
        {"tool too long", R"({"event":"tool.call","tool":")" + std::string(129, 'a') + "\"}",
         "1-128"},
        {"tool with a newline", R"({"event":"tool.call","tool":"a\nb"})", "printable"},
        {"number arguments", R"({"event":"tool.call","tool":"x","arguments":5})",
         "\"arguments\" must be"},
        {"unknown field", R"({"event":"tool.call","tool":"x","extra":1})", "unknown field"},
        {"too deep",
         R"({"event":"tool.call","tool":"x","arguments":)" + std::string(40, '[') +
             std::string(40, ']') + "}",
         "JSON object"},
        {"too big",
         R"({"event":"tool.call","tool":"x","arguments":")" +
             std::string(max_event_body_bytes, 'a') + "\"}",
         "larger than"},
    };
    for (const auto& r : rows) {
        INFO(r.name);
        std::string error;
        CHECK_FALSE(parse_tool_event(r.body, error));
        CHECK_THAT(error, Catch::Contains(r.says));
    }
    SECTION("an unknown field's name is redacted and cut in the message") {
        std::string error;
        CHECK_FALSE(
            parse_tool_event(R"({"event":"tool.call","tool":"x",")" + hex64 + R"(":1})", error));
        CHECK(error.find(hex64) == std::string::npos);
    }
}

TEST_CASE("tool events: arguments are redacted like every audit value", "[tool_event]") {
    std::string error;
    const std::string body = R"({"event":"tool.call","tool":"http.get","arguments":{)"
                             R"("url":"https://u:)" +
                             secret + R"(@api.example/v1?q=cats&api_key=)" + secret +
                             R"(&page=2",)"
                             R"("headers":{"Authorization":"Bearer )" +
                             secret + R"(","Cookie":"sid=)" + secret +
                             R"(","Accept":"text/html"},)"
                             R"("password":")" +
                             secret +
                             R"(",)"
                             R"("client_secret":12345,)"
                             R"("token":"",)"
                             R"("nested":[{"apiKey":")" +
                             secret + R"("},"see https://h/x?sig=)" + secret + R"( now",")" +
                             hex64 +
                             R"("],)"
                             R"x("code":"print(1)"}})x";
    const auto e = parse_tool_event(body, error);
    REQUIRE(e);
    INFO(e->arguments);
    CHECK(e->arguments.find(secret) == std::string::npos);
    CHECK(e->arguments.find(hex64) == std::string::npos);
    boost::system::error_code ec;
    const json::value v = json::parse(e->arguments, ec);
    REQUIRE_FALSE(ec);
    const json::object& a = v.as_object();
    CHECK(a.at("url") == "https://REDACTED@api.example/v1?q=cats&api_key=REDACTED&page=2");
    CHECK(a.at("headers").at("Authorization") == "REDACTED");
    CHECK(a.at("headers").at("Cookie") == "REDACTED");
    CHECK(a.at("headers").at("Accept") == "text/html");
    CHECK(a.at("password") == "REDACTED");
    CHECK(a.at("client_secret") == "REDACTED");
    CHECK(a.at("token") == "");
    CHECK(a.at("nested").at(0).at("apiKey") == "REDACTED");
    CHECK(a.at("nested").at(1) == "see https://h/x?sig=REDACTED now");
    CHECK(a.at("nested").at(2) == "REDACTED");
    CHECK(a.at("code") == "print(1)");  // harmless names stay readable

    SECTION("string arguments too") {
        const auto s = parse_tool_event(R"({"event":"tool.call","tool":"sh","arguments":)"
                                        R"("curl -H 'Authorization: Bearer )" +
                                            secret + R"(' https://h/?token=)" + secret + "\"}",
                                        error);
        REQUIRE(s);
        CHECK(s->arguments.find(secret) == std::string::npos);
    }
}

TEST_CASE("tool events: redact_urls_in_text", "[tool_event]") {
    CHECK(redact_urls_in_text("") == "");
    CHECK(redact_urls_in_text("no urls here") == "no urls here");
    CHECK(redact_urls_in_text("get https://h/p?token=a&x=1 and HTTP://u:p@h/?key=b.") ==
          "get https://h/p?token=REDACTED&x=1 and HTTP://REDACTED@h/?key=REDACTED");
    CHECK(redact_urls_in_text("\"http://h/?secret=s\"") == "\"http://h/?secret=REDACTED\"");
    CHECK(redact_urls_in_text("xhttp://h/?token=a") == "xhttp://h/?token=a");  // no boundary
    CHECK(redact_urls_in_text("http://") == "http://");
}

TEST_CASE("tool events: arguments are bounded", "[tool_event]") {
    std::string error;
    std::string big = R"({"event":"tool.call","tool":"write","arguments":{"text":")";
    big += std::string(20000, 'x');
    big += "\"}}";
    const auto e = parse_tool_event(big, error);
    REQUIRE(e);
    CHECK(e->truncated);
    CHECK(e->arguments.size() == max_arguments_bytes);
    CHECK(e->arguments.ends_with("...(truncated)"));
    const auto o = line_object(
        tool_call_record(*e, {"s-1", "j", "t-1", "127.0.0.1:5", "proxy"}, wall_clock::now()));
    CHECK(o.at("arguments_truncated") == true);
}

TEST_CASE("tool events: the audit record", "[tool_event]") {
    std::string error;
    const auto e = parse_tool_event(
        R"({"event":"tool.call","tool":"search","arguments":{"q":"cats"}})", error);
    REQUIRE(e);
    const auto o = line_object(
        tool_call_record(*e, {"s-00ff", "ticket-summarizer", "t-0123", "127.0.0.1:4000", "admin"},
                         wall_clock::now()));
    CHECK(o.at("event") == "tool.call");
    CHECK(o.at("session") == "s-00ff");
    CHECK(o.at("job") == "ticket-summarizer");
    CHECK(o.at("token_id") == "t-0123");
    CHECK(o.at("client") == "127.0.0.1:4000");
    CHECK(o.at("via") == "admin");
    CHECK(o.at("tool") == "search");
    CHECK(o.at("arguments") == R"({"q":"cats"})");
    CHECK_FALSE(o.contains("arguments_truncated"));

    const auto no_token = line_object(
        tool_call_record(*e, {"s-1", "j", "", "c", "admin"}, wall_clock::now()));
    CHECK_FALSE(no_token.contains("token_id"));
}

TEST_CASE("tool events: the reserved name", "[tool_event]") {
    CHECK(targets_reserved_host("http://cordon.events/v1/events", false));
    CHECK(targets_reserved_host("http://CORDON.Events./v1/events", false));
    CHECK(targets_reserved_host("http://cordon.events:8080/anything?x=1", false));
    CHECK(targets_reserved_host("cordon.events:443", true));
    CHECK(targets_reserved_host("cordon.events.:80", true));
    CHECK_FALSE(targets_reserved_host("http://cordon.events.example/v1/events", false));
    CHECK_FALSE(targets_reserved_host("http://x.cordon.events/v1/events", false));
    CHECK_FALSE(targets_reserved_host("http://example.com/cordon.events", false));
    CHECK_FALSE(targets_reserved_host("/v1/events", false));
    CHECK_FALSE(targets_reserved_host("cordon.events", true));  // no port: not a target
    CHECK_FALSE(targets_reserved_host("api.example.com:443", true));
}

TEST_CASE("tool events: secrets named by a sibling, and deep arguments", "[tool_event]") {
    const std::string a = redact_tool_arguments(
        R"({"headers":[{"name":"Authorization","value":"Basic dXNlcjpodW50ZXIy"},)"
        R"({"name":"Accept","value":"text/html"}],"env":[{"key":"DB_PASSWORD","value":"hunter2-prod"}],)"
        R"("pairs":[["X-Api-Key","Zq8vN3cR1xT7"],["page","2"]]})");
    CHECK(a.find("dXNlcjpodW50ZXIy") == std::string::npos);
    CHECK(a.find("hunter2-prod") == std::string::npos);
    CHECK(a.find("Zq8vN3cR1xT7") == std::string::npos);
    CHECK(a.find("text/html") != std::string::npos);  // what names no secret stays
    CHECK(a.find(R"(["page","2"])") != std::string::npos);
    // As deep as an MCP body may nest: read, not hidden whole.
    const std::string deep = std::string(60, '[') + R"("http://attacker.example/collect?d=1")" +
                             std::string(60, ']');
    CHECK(redact_tool_arguments(deep).find("attacker.example") != std::string::npos);
    // The MCP form: redacted and bounded as posted events are.
    const tool_event e = tool_event_of("search", R"({"api_key":"REDACTED","q":"y"})");
    CHECK(e.tool == "search");
    CHECK(e.arguments == R"({"api_key":"REDACTED","q":"y"})");
    CHECK_FALSE(e.truncated);
    CHECK(tool_event_of("search", "").arguments.empty());
    const tool_event big = tool_event_of("t", "[\"" + std::string(20000, 'a') + "\"]");
    CHECK(big.truncated);
    CHECK(big.arguments.size() <= max_arguments_bytes);
}

TEST_CASE("tool events: what redaction keeps and what it hides, wherever it is", "[tool_event]") {
    // Numbers as they were spelled (a DOM would print 1.5, a double for the big integer and
    // Infinity for 1e999); escapes read and written back; whitespace dropped.
    CHECK(redact_tool_arguments(R"({ "a" : 1.50, "b": 1e999, "c": 123456789012345678901234567890,)"
                                R"( "d": -0, "e": [true, false, null], "f": "\u00e9\"\\\n" })") ==
          R"({"a":1.50,"b":1e999,"c":123456789012345678901234567890,"d":-0,)"
          R"("e":[true,false,null],"f":"é\"\\\n"})");
    // The sibling that names the secret may come after the value; null and "" stay.
    CHECK(redact_tool_arguments(R"({"value":"hunter2","name":"X-Api-Key"})") ==
          R"({"value":"REDACTED","name":"X-Api-Key"})");
    CHECK(redact_tool_arguments(R"({"value":null,"name":"password"})") ==
          R"({"value":null,"name":"password"})");
    CHECK(redact_tool_arguments(R"({"data":{"deep":[1,2]},"field":"cookie"})") ==
          R"({"data":"REDACTED","field":"cookie"})");
    // A name that is not a string names nothing; a sibling test is per object.
    CHECK(redact_tool_arguments(R"({"name":["password"],"value":"v"})") ==
          R"({"name":["password"],"value":"v"})");
    CHECK(redact_tool_arguments(R"({"o":{"name":"token"},"value":"v"})") ==
          R"({"o":{"name":"token"},"value":"v"})");
    // Pairs: exactly two elements, the first a secret's name; the second hidden whatever it is.
    CHECK(redact_tool_arguments(R"([["api_key",{"x":1}],["api_key"],["api_key",""],)"
                                R"(["api_key","a","b"],[["api_key"],"v"]])") ==
          R"([["api_key","REDACTED"],["api_key"],["api_key",""],["api_key","a","b"],)"
          R"([["api_key"],"v"]])");
    // A secret member's value is hidden whole, whatever its type.
    CHECK(redact_tool_arguments(R"({"password":{"a":[1,{"b":2}]},"n":1,"token":7})") ==
          R"({"password":"REDACTED","n":1,"token":"REDACTED"})");
    // Two names that redact to the same text are both kept (a DOM would keep one).
    CHECK(redact_tool_arguments(R"({"x?token=1":1,"x?token=2":2})") ==
          R"({"x?token=REDACTED":1,"x?token=REDACTED":2})");
    // Scalars alone; a text that is not JSON is hidden whole.
    CHECK(redact_tool_arguments(R"("Bearer abcdefghijklmnop")") == R"("Bearer REDACTED")");
    CHECK(redact_tool_arguments("42") == "42");
    CHECK(redact_tool_arguments("{\"a\":") == "REDACTED");

    // The redactor fed event by event (as the MCP reader does) writes what the text gives.
    argument_redactor r;
    r.begin_object();
    r.key("headers");
    r.begin_array();
    r.begin_object();
    r.key("name");
    r.string("Authorization");
    r.key("value");
    r.string("Basic dXNlcjpodW50ZXIy");
    r.end();
    r.end();
    r.key("q");
    r.string("see https://u:p@h/x?sig=1");
    r.key("n");
    r.literal("1.0");
    r.end();
    CHECK(r.finish() == R"({"headers":[{"name":"Authorization","value":"REDACTED"}],)"
                        R"("q":"see https://REDACTED@h/x?sig=REDACTED","n":1.0})");
    r.string("x");
    CHECK(r.finish() == R"("x")");  // ready for the next value
    r.begin_array();
    CHECK(r.finish() == "REDACTED");  // not a whole value: hidden
}
