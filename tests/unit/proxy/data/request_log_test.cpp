// Tests of the request log: whatever way a request ends, its records are one conn.deny, or
// one conn.error, or a conn.open and then one conn.close; never two terminal records, never
// none.
#include "proxy/data/request_log.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace cordon;
using namespace cordon::proxy;
using namespace cordon::proxy::data;
using cordon::config::deny_reason;
namespace json = boost::json;

class list_sink final : public record_sink {
public:
    std::vector<json::object> records;
    audit::audit_record make(std::string_view event) override {
        return audit::audit_record(event, common::wall_clock::now());
    }
    void write(audit::audit_record&& r) override {
        records.push_back(json::parse(r.to_json_line()).as_object());
    }
    std::vector<std::string> events() const {
        std::vector<std::string> out;
        for (const auto& r : records) {
            out.emplace_back(r.at("event").as_string());
        }
        return out;
    }
};

class fake_conn final : public control::live_connection {
public:
    void close_client(std::string_view) override {}
    void close_upstream() override {}
};

struct harness {
    list_sink sink;
    fake_conn who;
    std::string client = "127.0.0.1:40000";
    std::string closed_by;
    harness() {
        who.session = "s1";
        who.job = "ci";
        who.method = "CONNECT";
    }
    request_log log() {
        request_log l(sink, who, client, closed_by);
        l.target = "example.com:443";
        return l;
    }
};

std::string str(const json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

}  // namespace

TEST_CASE("request_log: a denial is one conn.deny", "[request_log]") {
    harness h;
    {
        auto l = h.log();
        l.resolved = "10.0.0.1";
        l.deny(deny_reason::private_address, 403);
        l.close("eof");  // too late: the request has ended
        l.error(502, "x");
    }
    REQUIRE(h.sink.events() == std::vector<std::string>{"conn.deny"});
    const auto& r = h.sink.records[0];
    CHECK(str(r, "reason") == "private_address");
    CHECK(str(r, "resolved") == "10.0.0.1");
    CHECK(str(r, "method") == "CONNECT");
    CHECK(str(r, "session") == "s1");
    CHECK(str(r, "job") == "ci");
    CHECK(str(r, "client") == "127.0.0.1:40000");
    CHECK(r.at("status").as_int64() == 403);
}

TEST_CASE("request_log: opened, then closed once", "[request_log]") {
    harness h;
    {
        auto l = h.log();
        l.ip = "93.184.216.34";
        l.resolved = "93.184.216.34";
        l.open("host example.com port 443");
        l.bytes_up = 10;
        l.bytes_down = 20;
        l.close("eof");
        l.close("error");
    }
    REQUIRE(h.sink.events() == std::vector<std::string>{"conn.open", "conn.close"});
    CHECK(str(h.sink.records[0], "resolved") == "93.184.216.34");
    CHECK(str(h.sink.records[0], "rule") == "host example.com port 443");
    CHECK(str(h.sink.records[1], "reason") == "eof");
    CHECK(h.sink.records[1].at("bytes_up").to_number<std::uint64_t>() == 10);
    CHECK(h.sink.records[1].at("bytes_down").to_number<std::uint64_t>() == 20);
    CHECK_FALSE(h.sink.records[1].contains("resolved"));
}

TEST_CASE("request_log: an SNI mismatch after the open is its conn.close", "[request_log]") {
    harness h;
    {
        auto l = h.log();
        l.open("");
        l.deny(deny_reason::sni_mismatch, 403, "evil.test");
    }
    REQUIRE(h.sink.events() == std::vector<std::string>{"conn.open", "conn.close"});
    CHECK(str(h.sink.records[1], "reason") == "sni_mismatch");
    CHECK(str(h.sink.records[1], "sni") == "evil.test");
}

TEST_CASE("request_log: an error after the open is a note; the close still comes",
          "[request_log]") {
    harness h;
    {
        auto l = h.log();
        l.open("");
        l.error(417, "only Expect: 100-continue is supported");
    }  // nobody closed it: the destructor does
    REQUIRE(h.sink.events() == std::vector<std::string>{"conn.open", "conn.error", "conn.close"});
    CHECK(str(h.sink.records[2], "reason") == "error");
}

TEST_CASE("request_log: requests that end without saying how", "[request_log]") {
    harness h;
    SECTION("killed while connecting: a conn.deny with the kill's reason") {
        h.closed_by = "kill_switch";
        { auto l = h.log(); }
        REQUIRE(h.sink.events() == std::vector<std::string>{"conn.deny"});
        CHECK(str(h.sink.records[0], "reason") == "kill_switch");
        CHECK_FALSE(h.sink.records[0].contains("status"));  // nothing was answered
    }
    SECTION("the client went away before its answer: a conn.error") {
        { auto l = h.log(); }
        REQUIRE(h.sink.events() == std::vector<std::string>{"conn.error"});
        CHECK(str(h.sink.records[0], "message") == "closed before an answer");
    }
    SECTION("opened, then closed from outside: the close names it") {
        {
            auto l = h.log();
            l.open("");
            h.closed_by = "session_killed";
        }
        REQUIRE(h.sink.events() == std::vector<std::string>{"conn.open", "conn.close"});
        CHECK(str(h.sink.records[1], "reason") == "session_killed");
    }
    SECTION("dismissed: no record at all") {
        {
            auto l = h.log();
            l.dismiss();
        }
        CHECK(h.sink.records.empty());
    }
}

TEST_CASE("request_log: a moved log writes once, from where it went", "[request_log]") {
    harness h;
    std::optional<request_log> tunnel;
    {
        auto l = h.log();
        l.open("");
        tunnel.emplace(std::move(l));
    }  // the moved-from log ends silently
    CHECK(h.sink.events() == std::vector<std::string>{"conn.open"});
    tunnel->close("eof");
    tunnel.reset();
    CHECK(h.sink.events() == std::vector<std::string>{"conn.open", "conn.close"});
}

TEST_CASE("request_log: exactly one terminal record, whatever the sequence", "[request_log]") {
    // Every sequence of up to four calls among the terminal and non-terminal operations,
    // then the destructor: the records must be deny | error | open (error)* close.
    using op = std::function<void(request_log&, harness&)>;
    const std::vector<op> ops = {
        [](request_log& l, harness&) { l.open("r"); },
        [](request_log& l, harness&) { l.deny(deny_reason::no_rule, 403); },
        [](request_log& l, harness&) { l.error(502, "bad gateway"); },
        [](request_log& l, harness&) { l.close("eof"); },
        [](request_log& l, harness&) { l.finish(); },
        [](request_log&, harness& h) { h.closed_by = "policy_changed"; },
    };
    const std::size_t n = ops.size();
    std::size_t sequences = 0;
    for (std::size_t len = 0; len <= 4; ++len) {
        std::size_t count = 1;
        for (std::size_t i = 0; i < len; ++i) {
            count *= n;
        }
        for (std::size_t code = 0; code < count; ++code) {
            harness h;
            {
                auto l = h.log();
                std::size_t c = code;
                for (std::size_t i = 0; i < len; ++i, c /= n) {
                    ops[c % n](l, h);
                }
            }
            ++sequences;
            const auto ev = h.sink.events();
            INFO("sequence " << code << " of length " << len);
            REQUIRE_FALSE(ev.empty());
            if (ev.front() == "conn.open") {
                REQUIRE(ev.back() == "conn.close");
                for (std::size_t i = 1; i + 1 < ev.size(); ++i) {
                    CHECK(ev[i] == "conn.error");
                }
            } else {
                REQUIRE(ev.size() == 1);
                CHECK((ev[0] == "conn.deny" || ev[0] == "conn.error"));
            }
        }
    }
    CHECK(sequences == 1 + 6 + 36 + 216 + 1296);
}
