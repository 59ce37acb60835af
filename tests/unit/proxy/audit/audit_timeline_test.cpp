// Tests of `cordon audit timeline`'s reader: time arguments, the scan, ordering and the
// human-readable lines.
#include "proxy/audit/audit_timeline.hpp"
#include "common/time.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "proxy/audit/audit.hpp"
#include "proxy/audit/audit_files.hpp"

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::audit;
using namespace cordon::common;
using namespace std::chrono;
namespace fs = std::filesystem;

wall_clock::time_point utc(sys_days d, milliseconds ms = {}) {
    return wall_clock::time_point(d) + ms;
}

std::string line(std::string_view event, wall_clock::time_point ts, std::string_view session,
                 std::string_view extra_key = {}, std::string_view extra = {}) {
    audit_record r(event, ts);
    if (!session.empty()) {
        r.add("session", session).add("job", "j");
    }
    if (!extra_key.empty()) {
        r.add(extra_key, extra);
    }
    return r.to_json_line();
}

std::vector<std::string> events_of(const std::vector<timeline_event>& v) {
    std::vector<std::string> out;
    for (const auto& e : v) {
        const auto at = e.line.find("\"event\":\"") + 9;
        out.push_back(e.line.substr(at, e.line.find('"', at) - at));
    }
    return out;
}

}  // namespace

TEST_CASE("timeline: time arguments", "[timeline]") {
    const auto now = utc(2026y / 11 / 29, 12h);
    const sys_days d = 2026y / 11 / 29;
    CHECK(parse_time_arg("2026-11-29T15:20:18Z", now) == utc(d, 15h + 20min + 18s));
    CHECK(parse_time_arg("2026-11-29t15:20:18.123z", now) == utc(d, 15h + 20min + 18s + 123ms));
    CHECK(parse_time_arg("2026-11-29 15:20:18.5Z", now) == utc(d, 15h + 20min + 18s + 500ms));
    CHECK(parse_time_arg("2026-11-29T15:20:18+02:00", now) == utc(d, 13h + 20min + 18s));
    CHECK(parse_time_arg("2026-11-29T01:00:00-01:30", now) == utc(d, 2h + 30min));
    CHECK(parse_time_arg("2026-11-29", now) == utc(d));
    CHECK(parse_time_arg("2h", now) == now - 2h);
    CHECK(parse_time_arg("30m", now) == now - 30min);
    CHECK(parse_time_arg("1h30m", now) == now - 90min);
    CHECK(parse_time_arg("2d", now) == now - 48h);
    for (const char* bad : {"", "yesterday", "2026-11-29T15:20:18", "2026-13-01",
                            "2026-11-29T25:00:00Z", "2026-11-29T15:20Z", "2026-11-29T15:20:18.Z",
                            "2026-11-29T15:20:18+2", "-2h", "2h ago", "2026-11-29Z"}) {
        INFO(bad);
        CHECK_FALSE(parse_time_arg(bad, now));
    }
}

TEST_CASE("timeline: the scan finds the session's lines and nothing else", "[timeline]") {
    const sys_days d = 2026y / 11 / 29;
    std::string data;
    data += line("session.create", utc(d, 1s), "s-a");
    data += line("session.create", utc(d, 1s), "s-ab");  // a longer id sharing the prefix
    data += line("kill.network", utc(d, 500ms), "", "reason", "before the session");
    data += line("conn.open", utc(d, 3s), "s-a", "target", "a.example:443");
    data += line("tool.call", utc(d, 4s), "s-b", "arguments", R"({"session":"s-a"})");
    data += "{\"ts\":\"2026-11-29T00:00:04.500Z\",\"event\":\"x\",\"n\":{\"session\":\"s-a\"}}\n";
    data += "{\"session\":\"s-a\", broken\n";
    data += line("kill.network", utc(d, 5s), "", "reason", "incident");
    data += line("conn.close", utc(d, 2s), "s-a", "target", "a.example:443");  // written late
    data += line("kill.session", utc(d, 6s), "s-a", "reason", "done");
    data += line("revive", utc(d, 7s), "", "reason", "after the session");
    data +=
        "{\"ts\":\"2026-11-29T00:00:08.000Z\",\"event\":\"conn.open\",\"session\":\"s-a\"";  // being
                                                                                             // written

    timeline_query q;
    q.session = "s-a";
    std::vector<timeline_event> out;
    timeline_stats stats;
    scan_timeline(data, q, out, stats);
    CHECK(stats.malformed == 1);
    CHECK(stats.bytes == data.size());
    finish_timeline(out);
    CHECK(events_of(out) == std::vector<std::string>{"session.create", "conn.close", "conn.open",
                                                     "kill.network", "kill.session"});
    CHECK(out[3].network);
    CHECK_FALSE(out[4].network);

    SECTION("since and until") {
        q.since = utc(d, 2s);
        q.until = utc(d, 6s);
        out.clear();
        scan_timeline(data, q, out, stats);
        finish_timeline(out);
        CHECK(events_of(out) ==
              std::vector<std::string>{"conn.close", "conn.open", "kill.network", "kill.session"});
        q.until = utc(d, 5s);  // the network kill is after the last event left: not shown
        out.clear();
        scan_timeline(data, q, out, stats);
        finish_timeline(out);
        CHECK(events_of(out) == std::vector<std::string>{"conn.close", "conn.open"});
    }
    SECTION("a session with no events has no network events either") {
        q.session = "s-zz";
        out.clear();
        scan_timeline(data, q, out, stats);
        finish_timeline(out);
        CHECK(out.empty());
    }
    SECTION("matches across the 4 MiB search windows") {
        std::string big;
        const std::string filler = line("conn.open", utc(d, 1s), "s-other", "target", "x:1");
        std::vector<std::string> want;
        for (int i = 1; big.size() < 9 * 1024 * 1024; ++i) {
            big += filler;
            if (i % 997 == 0) {
                big += line("dns.query", utc(d, 2s), "s-a", "name", "a.example");
                want.push_back("dns.query");
            }
        }
        out.clear();
        timeline_stats s2;
        scan_timeline(big, q, out, s2);
        CHECK(events_of(out) == want);
        CHECK(s2.parsed == want.size());
    }
}

TEST_CASE("timeline: read_timeline reads days and parts in order", "[timeline]") {
    std::string tmpl = "/tmp/cordon-timeline-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    const fs::path dir = tmpl;
    const sys_days d = 2026y / 11 / 28;
    const auto dayn = [](sys_days x) { return x.time_since_epoch().count(); };
    const auto write = [&](audit_file_id id, const std::string& text) {
        std::ofstream(dir / audit_file_name(id)) << text;
    };
    write({dayn(d), 0}, line("session.create", utc(d, 23h), "s-a"));
    write({dayn(d), 1}, line("token.mint", utc(d, 23h + 1s), "s-a"));
    write({dayn(d + days{1}), 0}, line("conn.open", utc(d + days{1}, 1s), "s-a"));
    write({dayn(d + days{1}), 1}, line("conn.close", utc(d + days{1}, 2s), "s-a"));
    write({dayn(d + days{1}), 12}, line("kill.session", utc(d + days{1}, 3s), "s-a"));
    std::ofstream(dir / "notes.txt") << line("tool.call", utc(d, 1h), "s-a");

    timeline_query q;
    q.session = "s-a";
    timeline_stats stats;
    std::string error;
    auto ev = read_timeline(dir.string(), q, stats, error);
    CHECK(error.empty());
    CHECK(stats.files == 5);
    CHECK(events_of(ev) == std::vector<std::string>{"session.create", "token.mint", "conn.open",
                                                    "conn.close", "kill.session"});
    SECTION("--since skips the files of earlier days unread") {
        q.since = utc(d + days{1}, 1500ms);
        timeline_stats s2;
        ev = read_timeline(dir.string(), q, s2, error);
        CHECK(s2.files == 3);
        CHECK(events_of(ev) == std::vector<std::string>{"conn.close", "kill.session"});
    }
    SECTION("--until skips later days") {
        q.until = utc(d, 23h + 30min);
        timeline_stats s2;
        ev = read_timeline(dir.string(), q, s2, error);
        CHECK(s2.files == 2);
        CHECK(events_of(ev) == std::vector<std::string>{"session.create", "token.mint"});
    }
    fs::remove_all(dir);
}

TEST_CASE("timeline: one readable line per event", "[timeline]") {
    const auto fmt = [](std::string_view json) { return format_timeline_event(json); };
    const std::string ts = R"("ts":"2026-11-29T15:20:18.123Z",)";
    CHECK(
        fmt("{" + ts +
            R"("event":"conn.close","session":"s-1","job":"j","client":"c","target":"api.example.com:443","method":"CONNECT","ip":"1.2.3.4","bytes_up":1536,"bytes_down":3565158,"duration_ms":1200,"reason":"done"})") ==
        "2026-11-29T15:20:18.123Z  conn.close     CONNECT api.example.com:443 up 1.5 KiB, "
        "down 3.4 MiB, 1.20 s (done)");
    CHECK(
        fmt("{" + ts +
            R"("event":"conn.deny","session":"s-1","target":"evil.example:443","reason":"no_rule","status":403})") ==
        "2026-11-29T15:20:18.123Z  conn.deny      evil.example:443 denied: no_rule (403)");
    CHECK(
        fmt("{" + ts +
            R"("event":"tool.call","session":"s-1","tool":"web.fetch","arguments":"{\"url\":\"https://x\"}","via":"proxy"})") ==
        R"(2026-11-29T15:20:18.123Z  tool.call      web.fetch {"url":"https://x"}  [via proxy])");
    CHECK(
        fmt("{" + ts +
            R"("event":"kill.session","session":"s-1","reason":"exfil","by":"alice","tokens_revoked":1,"connections_closed":2})") ==
        "2026-11-29T15:20:18.123Z  kill.session   by alice: exfil (2 connections closed, 1 "
        "tokens revoked)");
    CHECK(
        fmt("{" + ts +
            R"("event":"dns.deny","session":"s-1","name":"evil.example","type":"A","reason":"no_rule"})") ==
        "2026-11-29T15:20:18.123Z  dns.deny       evil.example A denied: no_rule");
    CHECK(
        fmt("{" + ts +
            R"("event":"dns.query","session":"s-1","name":"a.example","type":"AAAA","rcode":"NOERROR","cached":true})") ==
        "2026-11-29T15:20:18.123Z  dns.query      a.example AAAA -> NOERROR, cached");
    CHECK(
        fmt("{" + ts +
            R"("event":"session.create","session":"s-1","job":"j","by":"admin:127.0.0.1","expires_at":"X"})") ==
        "2026-11-29T15:20:18.123Z  session.create job j, by admin:127.0.0.1, expires X");
    CHECK(fmt("{" + ts +
              R"("event":"token.mint","session":"s-1","token_id":"t-1","expires_at":"X"})") ==
          "2026-11-29T15:20:18.123Z  token.mint     token t-1, expires X");
    CHECK(fmt("{" + ts +
              R"("event":"file.write","session":"s-1","path":"/scratch/out.md","bytes":10})") ==
          "2026-11-29T15:20:18.123Z  file.write     /scratch/out.md (bytes=10)");
    CHECK(
        fmt("{" + ts + R"("event":"kill.network","reason":"r","by":"b","connections_closed":3})") ==
        "2026-11-29T15:20:18.123Z  kill.network   all egress, by b: r (3 connections closed)");
    CHECK(fmt("{" + ts + R"("event":"something.new","session":"s-1","a":1,"b":"x"})") ==
          "2026-11-29T15:20:18.123Z  something.new  a=1 b=x");
    // A hostile value cannot forge a line or move the cursor.
    CHECK(fmt("{" + ts +
              R"("event":"conn.deny","target":"x\n2026 forged\u001b[2J","reason":"no_rule"})") ==
          "2026-11-29T15:20:18.123Z  conn.deny      x\\x0a2026 forged\\x1b[2J denied: no_rule");
    // Long tool arguments are clipped in the text form.
    const std::string long_args = std::string(500, 'a');
    CHECK(fmt("{" + ts + R"("event":"tool.call","tool":"t","arguments":")" + long_args +
              R"(","via":"admin"})")
              .size() < 300);
}

TEST_CASE("timeline: human_bytes", "[timeline]") {
    CHECK(human_bytes(0) == "0 B");
    CHECK(human_bytes(1023) == "1023 B");
    CHECK(human_bytes(1024) == "1.0 KiB");
    CHECK(human_bytes(1536) == "1.5 KiB");
    CHECK(human_bytes(5ull << 30) == "5.0 GiB");
}

TEST_CASE("timeline: find_needles finds what a naive search finds", "[timeline]") {
    const std::vector<std::string> needles{"\"session\":\"s-0f1e\"", "\"event\":\"kill.network\"",
                                           "\"event\":\"revive\"", "x", "\"s\":\"\""};
    // Text made of the needles' own bytes, so that anchors match often and memcmp decides.
    std::string alphabet = "\"s:-0f1e,kil.ntwrvx{}";
    std::uint64_t seed = 6;
    const auto next = [&seed] {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        return seed >> 33;
    };
    for (int round = 0; round < 40; ++round) {
        std::string data;
        const std::size_t len = next() % 3000;
        while (data.size() < len) {
            if (next() % 50 == 0) {
                data += needles[next() % needles.size()];
            } else {
                data.push_back(alphabet[next() % alphabet.size()]);
            }
        }
        std::vector<std::size_t> want;
        for (const auto& n : needles) {
            for (std::size_t at = data.find(n); at != std::string::npos;
                 at = data.find(n, at + 1)) {
                want.push_back(at);
            }
        }
        std::vector<std::size_t> got;
        find_needles(data, needles, got);
        std::sort(want.begin(), want.end());
        std::sort(got.begin(), got.end());
        INFO("round " << round << ", " << data.size() << " bytes");
        CHECK(got == want);
    }
}

TEST_CASE("timeline: the --since/--until window of the audit verbs", "[timeline]") {
    const auto now = utc(2026y / 11 / 29, 12h);
    std::string error;
    const auto both = parse_time_window("2h", "2026-11-29T11:30:00Z", now, error);
    REQUIRE(both);
    CHECK(both->since == now - 2h);
    CHECK(both->until == utc(2026y / 11 / 29, 11h + 30min));
    CHECK(error.empty());

    const auto none = parse_time_window(std::nullopt, std::nullopt, now, error);
    REQUIRE(none);
    CHECK_FALSE(none->since);
    CHECK_FALSE(none->until);
    const auto until_only = parse_time_window(std::nullopt, "30m", now, error);
    REQUIRE(until_only);
    CHECK_FALSE(until_only->since);
    CHECK(until_only->until == now - 30min);

    // The usage errors the verbs print, word for word; --since is read first.
    CHECK_FALSE(parse_time_window("yesterday", "2h", now, error));
    CHECK(error == "--since: 'yesterday' is neither RFC 3339 nor a duration like 2h");
    CHECK_FALSE(parse_time_window("2h", "", now, error));
    CHECK(error == "--until: '' is neither RFC 3339 nor a duration like 2h");
    CHECK_FALSE(parse_time_window("x", "y", now, error));
    CHECK(error == "--since: 'x' is neither RFC 3339 nor a duration like 2h");
}

TEST_CASE("timeline: MCP tool calls with the connections they rode on", "[timeline]") {
    const sys_days d = 2026y / 12 / 3;
    int at = 0;
    // A record of session s-1, job j, from `client`, written `at` ms after the last.
    const auto rec = [&](std::string_view event, std::string_view client) {
        audit_record r(event, utc(d, 10h + milliseconds(++at)));
        r.add("session", "s-1").add("job", "j").add("client", client);
        return r;
    };
    const auto tool = [&](std::string_view client, std::string_view target, std::string_view name,
                          std::string_view id) {
        auto r = rec("tool.call", client);
        r.add("via", "mcp").add("server", target.substr(0, target.find(':')));
        r.add("target", target).add("tool", name).add("id", id);
        return r;
    };
    const std::string a = "127.0.0.1:40001";  // an inspected tunnel to the MCP server
    const std::string b = "127.0.0.1:40002";  // plain HTTP to it
    const std::string c = "127.0.0.1:40003";  // a tunnel elsewhere: no MCP
    std::vector<std::string> lines;
    const auto add = [&lines](const audit_record& r) {
        std::string l = r.to_json_line();
        l.pop_back();  // the '\n'
        lines.push_back(std::move(l));
    };
    add(rec("conn.open", a)
            .add("target", "mcp.test:443")
            .add("ip", "127.0.0.1")
            .add("method", "CONNECT")
            .add("rule", "mcp.test:443/https"));
    add(rec("conn.open", c)
            .add("target", "api.test:443")
            .add("ip", "1.2.3.4")
            .add("method", "CONNECT"));
    add(tool(a, "mcp.test:443", "search", "2").add("arguments", R"({"q":"cordon"})"));
    add(rec("http.request", a)
            .add("target", "mcp.test:443")
            .add("method", "POST")
            .add("path", "/mcp")
            .add("status", std::int64_t{200})
            .add("bytes_up", std::int64_t{120})
            .add("bytes_down", std::int64_t{2048}));
    add(tool(a, "mcp.test:443", "delete_repo", R"("x-1")").add("reason", "mcp_tool"));
    add(rec("http.request", a)
            .add("target", "mcp.test:443")
            .add("method", "POST")
            .add("path", "/mcp")
            .add("status", std::int64_t{200})
            .add("reason", "mcp_tool")
            .add("bytes_up", std::int64_t{90})
            .add("bytes_down", std::int64_t{300}));
    add(rec("mcp.tool_changed", a)
            .add("server", "mcp.test")
            .add("target", "mcp.test:443")
            .add("tool", "search")
            .add("message", "the server's definition of this tool changed"));
    add(tool(b, "mcp.test:80", "fetch_page", "3").add("would_deny", "mcp_tool"));
    add(rec("conn.open", b)
            .add("target", "mcp.test:80")
            .add("ip", "127.0.0.1")
            .add("method", "POST"));
    add(rec("conn.close", b)
            .add("target", "mcp.test:80")
            .add("method", "POST")
            .add("bytes_up", std::int64_t{10})
            .add("bytes_down", std::int64_t{20})
            .add("duration_ms", std::int64_t{4})
            .add("reason", "done"));
    add(rec("conn.close", a)
            .add("target", "mcp.test:443")
            .add("method", "CONNECT")
            .add("bytes_up", std::int64_t{210})
            .add("bytes_down", std::int64_t{2348})
            .add("duration_ms", std::int64_t{1500})
            .add("reason", "done"));
    // A posted event (no target) and a later tunnel from the same client port.
    add(rec("tool.call", c).add("via", "proxy").add("tool", "note"));
    add(tool(a, "mcp.test:443", "search", "9").add("reason", "mcp_batch"));
    add(rec("conn.close", c)
            .add("target", "api.test:443")
            .add("method", "CONNECT")
            .add("bytes_up", std::int64_t{1})
            .add("bytes_down", std::int64_t{1})
            .add("duration_ms", std::int64_t{2000})
            .add("reason", "eof"));

    std::vector<timeline_event> events;
    for (const auto& l : lines) {
        events.push_back(timeline_event{std::string(l.substr(7, 24)), l, false});
    }
    const std::vector<std::string> text = format_timeline(events);
    REQUIRE(text.size() == events.size());
    const auto body = [](const std::string& l) { return l.substr(26); };  // after the ts
    CHECK(body(text[0]) ==
          "conn.open      CONNECT mcp.test:443 -> 127.0.0.1 (rule mcp.test:443/https)  [conn 1]");
    CHECK(body(text[1]) == "conn.open      CONNECT api.test:443 -> 1.2.3.4");  // no MCP: as before
    CHECK(body(text[2]) ==
          R"(tool.call      search {"q":"cordon"}  [via mcp, server mcp.test:443, id 2, conn 1])");
    CHECK(body(text[3]) ==
          "http.request   POST mcp.test:443/mcp -> 200, up 120 B, down 2.0 KiB  [conn 1]");
    CHECK(body(text[4]) ==
          R"(tool.call      delete_repo  [via mcp, server mcp.test:443, id "x-1", )"
          R"(conn 1] refused: mcp_tool)");
    CHECK(body(text[5]) == "http.request   POST mcp.test:443/mcp -> 200, up 90 B, down 300 B "
                           "(refused: mcp_tool)  [conn 1]");
    CHECK(body(text[6]) == "mcp.tool_changed ALERT: tool search of mcp.test:443: the server's "
                           "definition of this tool changed  [conn 1]");
    CHECK(body(text[7]) == "tool.call      fetch_page  [via mcp, server mcp.test:80, id 3, conn 2] "
                           "would deny: mcp_tool");
    CHECK(body(text[8]) == "conn.open      POST mcp.test:80 -> 127.0.0.1  [conn 2]");
    CHECK(body(text[9]) == "conn.close     POST mcp.test:80 up 10 B, down 20 B, 4 ms (done)  "
                           "[conn 2]");
    CHECK(body(text[10]) == "conn.close     CONNECT mcp.test:443 up 210 B, down 2.3 KiB, 1.50 s "
                            "(done)  [conn 1]");
    CHECK(body(text[11]) == "tool.call      note  [via proxy]");  // posted: as before
    // The tunnel closed: the same client port to the same server is another connection.
    CHECK(body(text[12]) ==
          "tool.call      search  [via mcp, server mcp.test:443, id 9, conn 3] not forwarded: "
          "another call of its batch was refused (mcp_batch)");
    CHECK(body(text[13]) == "conn.close     CONNECT api.test:443 up 1 B, down 1 B, 2.00 s (eof)");

    // One line alone (no connection known): the same, without the label.
    CHECK(
        format_timeline_event(lines[4]).substr(26) ==
        R"(tool.call      delete_repo  [via mcp, server mcp.test:443, id "x-1"] refused: mcp_tool)");
    // A timeline without MCP reads as format_timeline_event gives each line.
    std::vector<timeline_event> plain{events[1], events[11], events[13]};
    const auto plain_text = format_timeline(plain);
    for (std::size_t i = 0; i < plain.size(); ++i) {
        CHECK(plain_text[i] == format_timeline_event(plain[i].line));
    }
    // A line that is not JSON is shown escaped, as format_timeline_event does.
    const auto odd = format_timeline({timeline_event{"x", "not json\x1b[2J", false}});
    CHECK(odd == std::vector<std::string>{"not json\\x1b[2J"});
}
