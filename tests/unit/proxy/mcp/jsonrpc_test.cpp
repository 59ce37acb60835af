#include "proxy/mcp/jsonrpc.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <string>

using namespace cordon::proxy::mcp;
using cordon::config::deny_reason;

namespace {

request_body parsed(std::string_view body) {
    request_body b;
    std::string error;
    INFO(body);
    REQUIRE(parse_request_body(body, b, error));
    CHECK(error.empty());
    return b;
}

std::string refused(std::string_view body) {
    request_body b;
    std::string error;
    INFO(body);
    CHECK_FALSE(parse_request_body(body, b, error));
    CHECK_FALSE(error.empty());
    return error;
}

cordon::config::mcp_spec spec(std::initializer_list<const char*> tools) {
    cordon::config::mcp_spec s;
    for (const char* t : tools) {
        s.tools.emplace_back(t);
    }
    std::sort(s.tools.begin(), s.tools.end());
    return s;
}

}  // namespace

TEST_CASE("mcp jsonrpc: a call, its tool and arguments", "[mcp]") {
    const request_body b = parsed(
        R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search","arguments":{"q":"x","n":[1,2]}}})");
    REQUIRE(b.messages.size() == 1);
    CHECK_FALSE(b.batch);
    const message& m = b.messages[0];
    CHECK(m.is_call());
    CHECK(m.id == "7");
    CHECK(m.tool == "search");
    CHECK(m.arguments == R"({"q":"x","n":[1,2]})");
    // Redacted for the audit log as the body is read, numbers as spelled.
    const request_body s = parsed(
        R"({"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"fetch","arguments":)"
        R"({"url":"https://u:pw@h/?token=t1","api_key":"sk-x","n":1.50,"h":[["Cookie","c=1"]]}}})");
    CHECK(s.messages[0].arguments ==
          R"({"url":"https://REDACTED@h/?token=REDACTED","api_key":"REDACTED","n":1.50,)"
          R"("h":[["Cookie","REDACTED"]]})");
    const request_body scalar = parsed(
        R"({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"sh","arguments":"password=hunter2"}})");
    CHECK(scalar.messages[0].arguments == R"("password=REDACTED")");

    const request_body n = parsed(R"({"jsonrpc":"2.0","method":"notifications/initialized"})");
    CHECK_FALSE(n.messages[0].has_id());
    CHECK_FALSE(n.messages[0].is_call());
    // A response to a server's request (sampling) is a message too.
    const request_body r = parsed(R"({"jsonrpc":"2.0","id":"s1","result":{}})");
    CHECK(r.messages[0].method.empty());
    CHECK(r.messages[0].id == R"("s1")");
}

TEST_CASE("mcp jsonrpc: ids come back exactly as sent", "[mcp]") {
    const auto id_of = [](std::string_view id) {
        const std::string body = std::string(R"({"jsonrpc":"2.0","method":"ping","id":)") +
                                 std::string(id) + "}";
        return parsed(body).messages.at(0).id;
    };
    CHECK(id_of("0") == "0");
    CHECK(id_of("-3") == "-3");
    CHECK(id_of("1.50") == "1.50");  // not 1.5E0: the client matches what it sent
    CHECK(id_of("1e2") == "1e2");
    CHECK(id_of("18446744073709551615") == "18446744073709551615");
    CHECK(id_of("123456789012345678901234567890") == "123456789012345678901234567890");
    CHECK(id_of("null") == "null");
    CHECK(id_of(R"("")") == R"("")");
    CHECK(boost::json::parse(id_of(R"("a\"b\\c\u2028")")) == "a\"b\\c\u2028");
    // In a batch, each message its own.
    const request_body b = parsed(
        R"([{"jsonrpc":"2.0","id":1.0,"method":"ping"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":-0,"method":"ping"}])");
    REQUIRE(b.messages.size() == 3);
    CHECK(b.batch);
    CHECK(b.messages[0].id == "1.0");
    CHECK(b.messages[1].id.empty());
    CHECK(b.messages[2].id == "-0");
}

TEST_CASE("mcp jsonrpc: what a server could read differently is refused", "[mcp]") {
    // Duplicate members, at every depth, however spelled.
    CHECK(
        refused(
            R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","name":"delete"}})")
            .find("twice") != std::string::npos);
    refused(R"({"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"})");
    refused(
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","na\u006de":"b"}})");
    refused(
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":1,"x":2}}})");
    refused(R"([{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}])");
    // Not one JSON text; not UTF-8; too deep.
    refused(R"({"jsonrpc":"2.0","method":"ping"} {"jsonrpc":"2.0","method":"tools/call"})");
    refused("{\"jsonrpc\":\"2.0\",\"method\":\"p\xff\"}");
    refused(R"({"jsonrpc":"2.0","method":"ping"})" + std::string(1, '\0'));
    refused(
        std::string(R"({"jsonrpc":"2.0","method":"tools/call","params":{"name":"a","arguments":)") +
        std::string(70, '[') + std::string(70, ']') + "}}");
}

TEST_CASE("mcp jsonrpc: not JSON-RPC 2.0", "[mcp]") {
    refused("");
    refused("42");
    refused(R"("tools/call")");
    refused("[]");
    refused("[1]");
    refused(R"({"method":"tools/call","params":{"name":"x"}})");
    refused(R"({"jsonrpc":"1.0","method":"ping"})");
    refused(R"({"jsonrpc":2.0,"method":"ping"})");
    refused(R"({"jsonrpc":"2.0","method":7})");
    refused(R"({"jsonrpc":"2.0","method":""})");
    refused(R"({"jsonrpc":"2.0","id":{},"method":"ping"})");
    refused(R"({"jsonrpc":"2.0","id":[1],"method":"ping"})");
    refused(R"({"jsonrpc":"2.0","method":"ping","params":"x"})");
    refused(R"({"jsonrpc":"2.0","id":1})");                        // neither
    refused(R"({"jsonrpc":"2.0","id":1,"result":1,"error":{}})");  // both
    refused(R"({"jsonrpc":"2.0","result":1})");                    // a response with no id
    // A call names its tool.
    refused(R"({"jsonrpc":"2.0","id":1,"method":"tools/call"})");
    refused(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":[]})");
    refused(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":""}})");
    refused(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["search"]}})");
    refused(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":")" +
            std::string(129, 'a') + "\"}}");
    // A batch is bounded.
    std::string big = "[";
    for (std::size_t i = 0; i <= max_batch; ++i) {
        big += std::string(i ? "," : "") + R"({"jsonrpc":"2.0","method":"n"})";
    }
    CHECK(refused(big + "]").find("batch") != std::string::npos);
    CHECK(refused(R"([{"jsonrpc":"2.0","method":"n"},3])").starts_with("message 2 of the batch"));
}

TEST_CASE("mcp jsonrpc: calls judged on the tool and the pins", "[mcp]") {
    const auto s = spec({"search", "fetch_page"});
    message m;
    m.method = "tools/call";
    m.tool = "search";
    const auto never = [](std::string_view) { return false; };
    const auto always = [](std::string_view) { return true; };
    CHECK(judge_call(m, s, false, never).reason == deny_reason::none);
    CHECK(judge_call(m, s, false, always).reason == deny_reason::mcp_tool_changed);
    m.tool = "Search";  // exact names
    CHECK(judge_call(m, s, false, never).reason == deny_reason::mcp_tool);
    m.tool = "delete_repo";
    CHECK(judge_call(m, s, false, never).reason == deny_reason::mcp_tool);
    // Report mode lets it through and says what enforce would do.
    const call_verdict v = judge_call(m, s, true, never);
    CHECK(v.reason == deny_reason::none);
    CHECK(v.would_deny == deny_reason::mcp_tool);
    CHECK(judge_call(m, spec({}), false, never).reason == deny_reason::mcp_tool);
}

TEST_CASE("mcp jsonrpc: cordon's answers are JSON-RPC errors for the ids sent", "[mcp]") {
    namespace json = boost::json;
    const json::value one = json::parse(
        error_object("\"a\\\"b\"", deny_reason::mcp_tool, "delete_repo", "agent"));
    CHECK(one.at("jsonrpc") == "2.0");
    CHECK(one.at("id") == "a\"b");
    CHECK(one.at("error").at("code") == -32001);
    CHECK(one.at("error").at("data").at("reason") == "mcp_tool");
    CHECK(one.at("error").at("data").at("tool") == "delete_repo");
    CHECK(std::string(one.at("error").at("message").as_string()).find("delete_repo") !=
          std::string::npos);
    CHECK(json::parse(error_object("", deny_reason::mcp_tool, "x", "j")).at("id").is_null());

    const request_body b = parsed(
        R"([{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"}},)"
        R"({"jsonrpc":"2.0","method":"notifications/x"},)"
        R"({"jsonrpc":"2.0","id":"r","result":{}},)"
        R"({"jsonrpc":"2.0","id":2.5,"method":"tools/call","params":{"name":"delete_repo"}}])");
    std::vector<call_verdict> v(4);
    v[3].reason = deny_reason::mcp_tool;
    const json::value all = json::parse(refusal_answer(b, v, "agent"));
    REQUIRE(all.as_array().size() == 2);  // no answer to a notification or a response
    CHECK(all.at(0).at("id") == 1);
    CHECK(all.at(0).at("error").at("data").at("reason") == "mcp_batch");
    CHECK(all.at(1).at("id") == 2.5);
    CHECK(all.at(1).at("error").at("data").at("reason") == "mcp_tool");
    CHECK(refusal_answer(b, v, "agent").find("2.5") != std::string::npos);

    const std::string head = refusal_head(deny_reason::mcp_tool_changed, 42);
    CHECK(head.starts_with("HTTP/1.1 200 OK\r\n"));
    CHECK(head.find("X-Cordon-Deny: mcp_tool_changed\r\n") != std::string::npos);
    CHECK(head.find("Content-Length: 42\r\n") != std::string::npos);
    CHECK(head.ends_with("\r\n\r\n"));
}

TEST_CASE("mcp jsonrpc: media types", "[mcp]") {
    CHECK(is_json_type("application/json"));
    CHECK(is_json_type(" Application/JSON ; charset=utf-8"));
    CHECK(is_json_type("application/vnd.api+json"));
    CHECK_FALSE(is_json_type("text/json-ish"));
    CHECK_FALSE(is_json_type("application/jsonx"));
    CHECK_FALSE(is_json_type(""));
    CHECK(is_event_stream_type("text/event-stream"));
    CHECK(is_event_stream_type("TEXT/Event-Stream; charset=utf-8"));
    CHECK_FALSE(is_event_stream_type("text/event-streams"));
    CHECK(utf8_charset("application/json"));
    CHECK(utf8_charset("application/json; charset=utf-8"));
    CHECK(utf8_charset("application/json;CHARSET=\"UTF-8\"; x=y"));
    CHECK_FALSE(utf8_charset("application/json; charset=utf-7"));
    CHECK_FALSE(utf8_charset("application/json; x=1; charset=utf-16"));
    CHECK_FALSE(utf8_charset("text/event-stream; charset=latin1"));
    CHECK(request_type_refusal("application/json", "").empty());
    CHECK(request_type_refusal("application/json; charset=utf-8", "identity").empty());
    CHECK_FALSE(request_type_refusal("application/json; charset=utf-7", "").empty());
    CHECK_FALSE(request_type_refusal("text/plain", "").empty());
    CHECK_FALSE(request_type_refusal("", "").empty());
    CHECK_FALSE(request_type_refusal("application/json", "gzip").empty());
    std::string error;
    CHECK(well_formed_json(R"({"a":{"a":1},"b":[{"a":1},{"a":2}]})", error));
    CHECK_FALSE(well_formed_json(R"({"a":1,"b":{"c":1,"c":1}})", error));
    CHECK(error.find("twice") != std::string::npos);
}

TEST_CASE("mcp: media types are read without regard to case, parameters or blanks", "[mcp]") {
    CHECK(is_json_type("\tAPPLICATION/JSON\t"));
    CHECK(is_json_type("application/+json"));  // as the lower-cased comparison read it
    CHECK(is_json_type("Application/Problem+JSON;charset=\"utf-8\""));
    CHECK_FALSE(is_json_type("application/"));
    CHECK_FALSE(is_json_type("application/json+"));
    CHECK_FALSE(is_json_type("text/plain+json"));
    CHECK_FALSE(is_json_type("application/jso"));
    CHECK_FALSE(is_event_stream_type("text/event-stream-x; charset=utf-8"));
    CHECK(is_event_stream_type(" text/EVENT-stream "));
}

TEST_CASE("mcp: duplicates in a large object, and the reused reader", "[mcp]") {
    // Past the names compared as they come: a duplicate anywhere in a large object is found
    // when it closes, and sorting never confuses names of one object with another's.
    std::string big =
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{)";
    for (int i = 0; i < 3000; ++i) {
        big += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":{\"k" +
               std::to_string(i) + "\":1}";
    }
    request_body b;
    std::string error;
    REQUIRE(parse_request_body(big + "}}}", b, error));
    CHECK(b.messages.at(0).tool == "search");
    CHECK(boost::json::parse(b.messages[0].arguments).as_object().size() == 3000);
    CHECK_FALSE(parse_request_body(big + R"(,"k1234":2}}})", b, error));
    CHECK(error == R"(the member "k1234" appears twice in one object)");
    // A body that failed half-way leaves nothing behind for the next one on this thread.
    CHECK_FALSE(parse_request_body(
        R"([{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"evil","arguments":{"a":[1,{)",
        b, error));
    REQUIRE(parse_request_body(
        R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ok"}})", b, error));
    CHECK_FALSE(b.batch);
    REQUIRE(b.messages.size() == 1);
    CHECK(b.messages[0].tool == "ok");
    CHECK(b.messages[0].arguments.empty());
    CHECK(b.messages[0].id == "2");
    // The tool is the name in params, not a "name" deeper in the arguments or beside params.
    REQUIRE(parse_request_body(
        R"({"name":"evil","jsonrpc":"2.0","id":3,"method":"tools/call","params":{"arguments":{"name":"evil","params":{"name":"evil"}},"name":"ok"}})",
        b, error));
    CHECK(b.messages[0].tool == "ok");
    CHECK(b.messages[0].arguments == R"({"name":"evil","params":{"name":"evil"}})");
    // A batch of more than max_batch is refused however many follow.
    std::string many = "[";
    for (std::size_t i = 0; i <= max_batch + 5; ++i) {
        many += (i ? "," : "") + std::string(R"({"jsonrpc":"2.0","method":"n"})");
    }
    CHECK_FALSE(parse_request_body(many + "]", b, error));
    CHECK(error == "a batch of more than 128 messages");
}

TEST_CASE("mcp: names a case-blind server would read as JSON-RPC's are refused", "[mcp]") {
    // Go's encoding/json matches member names without regard to case (and folds U+017F and
    // U+212A to 's' and 'k'), the last match winning: each body below would run delete_repo
    // on such a server while cordon decided on something else, or on nothing.
    request_body b;
    std::string error;
    for (
        const char* body : {
            R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","Name":"delete_repo"}})",
            R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search"},"param\u017f":{"name":"delete_repo"}})",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/"
            "call\",\"params\":{\"name\":\"search\"},\"param\xc5\xbf\":{\"name\":\"delete_repo\"}}",
            R"({"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call","params":{"name":"delete_repo"}})",
            R"({"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"},"METHOD":"tools/call","Params":{"Name":"delete_repo"}})",
            R"([{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":2,"result":{},"mEthod":"tools/call"}])",
            R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","\u212aey":1,"ARGUMENTS":{}}})",
            R"({"JSONRPC":"2.0","jsonrpc":"2.0","id":1,"method":"ping"})",
        }) {
        INFO(body);
        CHECK_FALSE(parse_request_body(body, b, error));
        CHECK(error.find("without regard to case") != std::string::npos);
    }
    // Other names in other cases, and the same names deeper, are any message's own.
    CHECK(parse_request_body(
        R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"s","arguments":{"Name":1,"METHOD":2,"params":{"Params":3}},"Extra":1},"Other":1})",
        b, error));
    CHECK(b.messages.at(0).tool == "s");
    // A server's messages too, at their own level: a case-blind client would show the
    // unfiltered "Result".
    std::string answer_error;
    CHECK_FALSE(well_formed_json(R"({"jsonrpc":"2.0","id":1,"Result":{"tools":[]},"result":{}})",
                                 answer_error));
    CHECK(answer_error.find("without regard to case") != std::string::npos);
    CHECK_FALSE(well_formed_json(R"([{"jsonrpc":"2.0","id":1,"result":{},"Id":2}])", answer_error));
    CHECK(well_formed_json(
        R"({"jsonrpc":"2.0","id":1,"result":{"Result":1,"tools":[{"Name":"x"}]}})", answer_error));
}
