// Tests of the etcd v3 JSON gateway codec: bodies out, answers and the watch stream in.
#include "proxy/control/etcd_codec.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <string>
#include <vector>

namespace etcd = cordon::proxy::control::etcd;

TEST_CASE("etcd base64: round trip, canonical only, bounded", "[etcd]") {
    const std::vector<std::string> inputs{"",     "f",     "fo",     "foo",
                                          "foob", "fooba", "foobar", std::string("\0\xff", 2)};
    for (const auto& s : inputs) {
        const auto e = etcd::base64_encode(s);
        REQUIRE(etcd::base64_decode(e, 100) == s);
    }
    CHECK(etcd::base64_encode("foo") == "Zm9v");
    CHECK(etcd::base64_decode("Zm9v", 100) == std::string("foo"));
    CHECK_FALSE(etcd::base64_decode("Zm9", 100));       // not a multiple of 4
    CHECK_FALSE(etcd::base64_decode("Zm=v", 100));      // data after padding
    CHECK_FALSE(etcd::base64_decode("Zm9v!A==", 100));  // not the alphabet
    CHECK_FALSE(etcd::base64_decode("Zh==", 100));      // unused bits set: not canonical
    CHECK_FALSE(etcd::base64_decode("Zm9vYmFy", 5));    // over the bound
}

TEST_CASE("etcd integer: JSON integers in range, decimal strings only when asked", "[etcd]") {
    namespace json = boost::json;
    using cordon::proxy::control::etcd::integer;
    CHECK(integer<std::int64_t>(json::value(42), false) == 42);
    CHECK(integer<std::int64_t>(json::value(-7), false) == -7);
    CHECK(integer<std::uint64_t>(json::value(-7), false) == std::nullopt);
    CHECK(integer<std::uint64_t>(json::value(18446744073709551615ull), false) ==
          18446744073709551615ull);
    CHECK(integer<std::int64_t>(json::value(18446744073709551615ull), false) == std::nullopt);
    CHECK(integer<std::int64_t>(json::value("123"), false) == std::nullopt);
    CHECK(integer<std::int64_t>(json::value("123"), true) == 123);
    CHECK(integer<std::int64_t>(json::value("-5"), true) == -5);
    CHECK(integer<std::uint64_t>(json::value("-5"), true) == std::nullopt);
    CHECK(integer<std::int64_t>(json::value("12x"), true) == std::nullopt);
    CHECK(integer<std::int64_t>(json::value(""), true) == std::nullopt);
    CHECK(integer<std::int64_t>(json::value("99999999999999999999"), true) == std::nullopt);
    CHECK(integer<std::int64_t>(json::value(1.5), true) == std::nullopt);
    CHECK(integer<std::int64_t>(json::value(true), true) == std::nullopt);
}

TEST_CASE("etcd range_end_of: the prefix's end", "[etcd]") {
    CHECK(etcd::range_end_of("/cordon/") == "/cordon0");
    CHECK(etcd::range_end_of("a\xff") == "b");
    CHECK(etcd::range_end_of(std::string("\xff")) == std::string(1, '\0'));
}

TEST_CASE("etcd answers: put, range, txn, lease", "[etcd]") {
    etcd::header h;
    std::string error;
    REQUIRE(etcd::parse_put(
        R"({"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952","revision":"2","raft_term":"2"}})",
        h, error));
    CHECK(h.revision == 2);
    CHECK(h.cluster_id == 324952591200643719ull);

    std::vector<etcd::key_value> kvs;
    bool more = true;
    REQUIRE(etcd::parse_range(
        R"({"header":{"revision":"3"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"3","version":"2","value":"YmFy","lease":"7"}],"count":"1"})",
        h, kvs, more, error));
    REQUIRE(kvs.size() == 1);
    CHECK(kvs[0].key == "foo");
    CHECK(kvs[0].value == "bar");
    CHECK(kvs[0].mod_revision == 3);
    CHECK(kvs[0].lease == 7);
    CHECK_FALSE(more);

    bool ok = true;
    REQUIRE(etcd::parse_txn(R"({"header":{"revision":"3"},"responses":[]})", h, ok, error));
    CHECK_FALSE(ok);  // "succeeded" left out: false
    REQUIRE(etcd::parse_txn(R"({"header":{"revision":"4"},"succeeded":true})", h, ok, error));
    CHECK(ok);

    std::int64_t id = 0;
    std::int64_t ttl = 0;
    REQUIRE(etcd::parse_lease_grant(R"({"header":{},"ID":"2324035786568255750","TTL":"5"})", id,
                                    ttl, error));
    CHECK(id == 2324035786568255750);
    CHECK(ttl == 5);
    REQUIRE(etcd::parse_keepalive("{\"result\":{\"ID\":\"12345\"}}\n", id, ttl, error));
    CHECK(ttl == 0);  // gone
}

TEST_CASE("etcd answers: errors and malformed input are refused", "[etcd]") {
    etcd::header h;
    std::string error;
    CHECK_FALSE(etcd::parse_put(
        R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})",
        h, error));
    CHECK(error == "etcd: etcdserver: requested lease not found (code 5)");
    std::vector<etcd::key_value> kvs;
    bool more = false;
    const char* bad[] = {
        "",
        "[]",
        "{",
        R"({"header":{"revision":"x"}})",
        R"({"header":{"revision":"99999999999999999999999"}})",
        R"({"kvs":[{"value":"YmFy"}]})",  // no key
        R"({"kvs":[{"key":"Zm9v","value":"not base64!"}]})",
        R"({"kvs":[{"key":"Zm9v","mod_revision":"-1"}]})",
        R"({"kvs":{}})",
        R"({"more":"yes"})",
    };
    for (const char* b : bad) {
        INFO(b);
        CHECK_FALSE(etcd::parse_range(b, h, kvs, more, error));
    }
    std::int64_t id = 0;
    std::int64_t ttl = 0;
    CHECK_FALSE(etcd::parse_lease_grant(R"({"ID":"0","TTL":"5"})", id, ttl, error));
}

TEST_CASE("etcd request bodies", "[etcd]") {
    CHECK(etcd::put_body("foo", "bar", 7) == R"({"key":"Zm9v","value":"YmFy","lease":"7"})");
    CHECK(etcd::range_body("foo", "fop", 5, 10) ==
          R"({"key":"Zm9v","range_end":"Zm9w","revision":"5","limit":"10"})");
    CHECK(
        etcd::watch_create_body("foo", "fop", 9) ==
        R"({"create_request":{"key":"Zm9v","range_end":"Zm9w","progress_notify":true,"start_revision":"9"}})");
    CHECK(
        etcd::txn_body({},
                       {etcd::txn_op{false, "foo", "bar", 0}, etcd::txn_op{true, "x", "", 0}}) ==
        R"({"compare":[],"success":[{"request_put":{"key":"Zm9v","value":"YmFy"}},{"request_delete_range":{"key":"eA=="}}]})");
}

TEST_CASE("etcd watch stream: messages cut anywhere, created, events, compaction", "[etcd]") {
    const std::string body =
        "{\"result\":{\"header\":{\"revision\":\"2\"},\"created\":true}}\n"
        "{\"result\":{\"header\":{\"revision\":\"3\"},\"events\":[{\"kv\":{\"key\":\"Zm9v\","
        "\"mod_revision\":\"3\",\"value\":\"YmFy\"}},{\"type\":\"DELETE\",\"kv\":{\"key\":\"Zm9v\","
        "\"mod_revision\":\"4\"}}]}}\n"
        "{\"result\":{\"header\":{},\"canceled\":true,\"compact_revision\":\"5\"}}\n";
    // Every cut of the body in two gives the same three messages.
    for (std::size_t cut = 0; cut <= body.size(); ++cut) {
        etcd::watch_stream ws;
        std::vector<etcd::watch_message> out;
        std::string error;
        ws.feed(std::string_view(body).substr(0, cut), out, error);
        REQUIRE(ws.feed(std::string_view(body).substr(cut), out, error) !=
                etcd::watch_stream::status::bad);
        REQUIRE(out.size() == 3);
        CHECK(out[0].created);
        REQUIRE(out[1].events.size() == 2);
        CHECK_FALSE(out[1].events[0].deleted);
        CHECK(out[1].events[0].kv.value == "bar");
        CHECK(out[1].events[1].deleted);
        CHECK(out[2].canceled);
        CHECK(out[2].compact_revision == 5);
        CHECK(ws.pending() == 0);
    }
}

TEST_CASE("etcd watch stream: bounded, and bad once bad", "[etcd]") {
    etcd::watch_stream ws(64);
    std::vector<etcd::watch_message> out;
    std::string error;
    CHECK(ws.feed(std::string(65, 'x'), out, error) == etcd::watch_stream::status::bad);
    CHECK(ws.feed("{\"result\":{}}\n", out, error) == etcd::watch_stream::status::bad);
    etcd::watch_stream ws2;
    CHECK(ws2.feed("{\"result\":{\"events\":[{\"type\":\"MOVE\",\"kv\":{\"key\":\"eA==\"}}]}}\n",
                   out, error) == etcd::watch_stream::status::bad);
    etcd::watch_stream ws3;
    CHECK(ws3.feed("{\"error\":{\"message\":\"boom\"}}\n", out, error) ==
          etcd::watch_stream::status::bad);
}
