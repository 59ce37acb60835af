// Tests of the audit log: JSON escaping, records with redaction, and the daily-file writer
// (in a temporary directory under /tmp, removed afterwards).
#include "proxy/audit/audit.hpp"
#include "common/time.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::audit;
using namespace cordon::common;
using namespace std::chrono;
namespace fs = std::filesystem;
namespace json = boost::json;

wall_clock::time_point at(sys_days day, milliseconds since_midnight = milliseconds::zero()) {
    return wall_clock::time_point(day) + since_midnight;
}

const wall_clock::time_point fixed_ts = at(2026y / 11 / 29, 15h + 20min + 18s + 123ms);

std::string json_quoted(std::string_view s) {
    std::string out;
    append_json_string(out, s);
    return out;
}

// Parses one line (without its '\n') as a JSON object; fails the test if it is not one.
json::object parse_object(std::string_view line) {
    boost::system::error_code ec;
    json::value v = json::parse(line, ec);
    INFO(line);
    REQUIRE_FALSE(ec);
    REQUIRE(v.is_object());
    return v.as_object();
}

std::string without_newline(std::string line) {
    REQUIRE(!line.empty());
    REQUIRE(line.back() == '\n');
    line.pop_back();
    return line;
}

std::string day_file(wall_clock::time_point t) {
    const year_month_day ymd{floor<days>(t)};
    char buf[40];
    std::snprintf(buf, sizeof buf, "cordon-%04d-%02u-%02u.jsonl", static_cast<int>(ymd.year()),
                  static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
    return buf;
}

std::vector<std::string> read_lines(const fs::path& file) {
    std::ifstream in(file);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) {
        lines.push_back(line);
    }
    return lines;
}

// A unique directory under /tmp, removed with everything in it at the end of the test.
struct temp_dir {
    fs::path path;
    temp_dir() {
        std::string tmpl = "/tmp/cordon-audit-test-XXXXXX";
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
};

mode_t mode_of(const fs::path& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}

mode_t current_umask() {
    const mode_t m = ::umask(022);
    ::umask(m);
    return m;
}

audit_options options(const fs::path& dir, milliseconds interval = 20ms) {
    audit_options o;
    o.dir = dir.string();
    o.flush_interval = interval;
    return o;
}

audit_record event(std::string_view name, std::int64_t n, wall_clock::time_point ts) {
    audit_record r(name, ts);
    r.add("n", n);
    return r;
}

}  // namespace

TEST_CASE("audit: JSON strings are escaped", "[audit]") {
    using namespace std::string_literals;
    const std::vector<std::pair<std::string, std::string>> cases{
        {"", R"("")"},
        {"plain host.example", R"("plain host.example")"},
        {"say \"hi\"", R"("say \"hi\"")"},
        {"back\\slash", R"("back\\slash")"},
        {"line\nbreak\r\n", R"("line\nbreak\r\n")"},
        {"tab\there", R"("tab\there")"},
        {"\b\f", R"("\b\f")"},
        {"nul\0byte"s, R"("nul\u0000byte")"},
        {"\x01\x1f", R"("\u0001\u001f")"},
        {"del\x7f", R"("del\u007f")"},
        {"/ is fine", R"("/ is fine")"},
        // valid multibyte UTF-8 is kept as is
        {"caf\xc3\xa9", "\"caf\xc3\xa9\""},
        {"\xe2\x82\xac 5", "\"\xe2\x82\xac 5\""},
        {"\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\""},
        {"\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\""},  // U+10FFFF
        // line and paragraph separators are escaped (they end lines in JavaScript)
        {"a\xe2\x80\xa8z\xe2\x80\xa9", R"("a\u2028z\u2029")"},
        // invalid UTF-8: each maximal invalid subsequence becomes U+FFFD
        {"\xff", "\"\xef\xbf\xbd\""},
        {"a\x80z", "\"a\xef\xbf\xbdz\""},
        {"\xc3", "\"\xef\xbf\xbd\""},
        {"\xc3(", "\"\xef\xbf\xbd(\""},
        {"\xe2\x82", "\"\xef\xbf\xbd\""},
        {"\xe2\x82z", "\"\xef\xbf\xbdz\""},
        {"\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\""},                  // overlong '/'
        {"\xe0\x80\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""},  // overlong
        {"\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""},  // surrogate
        {"\xf4\x90\x80\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""},
        {"\xf5", "\"\xef\xbf\xbd\""},
        {"\xf0\x9f\x98", "\"\xef\xbf\xbd\""},
    };
    for (const auto& [in, want] : cases) {
        INFO(in);
        const std::string out = json_quoted(in);
        CHECK(out == want);
        boost::system::error_code ec;
        const json::value v = json::parse(out, ec);
        REQUIRE_FALSE(ec);
        REQUIRE(v.is_string());
    }
    // Valid strings survive the round trip unchanged.
    for (const std::string& s : std::vector<std::string>{"say \"hi\"", "nul\0byte"s, "caf\xc3\xa9",
                                                         "a\xe2\x80\xa8z", "\x01\x7f\\/"s}) {
        CHECK(json::value_to<std::string>(json::parse(json_quoted(s))) == s);
    }
}

TEST_CASE("audit: records keep ts and event first and fields in order", "[audit]") {
    audit_record r("conn.open", fixed_ts);
    r.add("session", "s-0123456789abcdef")
        .add("job", std::string("ci"))
        .add("client", std::string_view("10.0.0.7"))
        .add("port", 443)
        .add("ok", true);
    CHECK(r.event() == "conn.open");
    CHECK(r.ts() == fixed_ts);
    CHECK(r.size() == 5);
    CHECK(r.to_json_line() ==
          R"({"ts":"2026-11-29T15:20:18.123Z","event":"conn.open","session":"s-0123456789abcdef",)"
          R"("job":"ci","client":"10.0.0.7","port":443,"ok":true})"
          "\n");

    SECTION("a key added again keeps its place and takes the new value") {
        r.add("job", "other");
        CHECK(r.size() == 5);
        CHECK(r.to_json_line().find(R"("session":"s-0123456789abcdef","job":"other",)") !=
              std::string::npos);
    }
    SECTION("ts and event cannot be overridden") {
        r.add("ts", "1970").add("event", "forged");
        CHECK(r.size() == 5);
        const json::object o = parse_object(without_newline(r.to_json_line()));
        CHECK(o.at("ts") == "2026-11-29T15:20:18.123Z");
        CHECK(o.at("event") == "conn.open");
    }
    SECTION("timestamps are UTC with milliseconds") {
        CHECK(audit_record("e", at(1970y / 1 / 1)).to_json_line() ==
              "{\"ts\":\"1970-01-01T00:00:00.000Z\",\"event\":\"e\"}\n");
        CHECK(audit_record("e", at(2026y / 12 / 31, 23h + 59min + 59s + 999ms) + 999us)
                  .to_json_line()
                  .starts_with("{\"ts\":\"2026-12-31T23:59:59.999Z\""));
    }
}

TEST_CASE("audit: replacing fields of every kind keeps the others in place", "[audit]") {
    audit_record r("e", fixed_ts);
    r.add("a", "1").add("b:c", 2).add("b", 3.5).add("d\"q", true).add_null("e");
    r.add("b", "x").add("a", std::uint64_t{7}).add("e", "long value, longer than before");
    r.add("b:c", "y").add("d\"q", "z");
    CHECK(r.size() == 5);
    CHECK(r.to_json_line() ==
          R"({"ts":"2026-11-29T15:20:18.123Z","event":"e","a":7,"b:c":"y","b":"x",)"
          R"("d\"q":"z","e":"long value, longer than before"})"
          "\n");
    std::string batch = "x";
    r.append_json_line(batch);
    CHECK(batch == "x" + r.to_json_line());
}

TEST_CASE("audit: many fields, replaced past the first sixteen", "[audit]") {
    audit_record r("e", fixed_ts);
    std::string want = R"({"ts":"2026-11-29T15:20:18.123Z","event":"e")";
    for (int i = 0; i < 40; ++i) {
        r.add("f" + std::to_string(i), i);
    }
    for (int i = 0; i < 40; i += 3) {
        r.add("f" + std::to_string(i), "v" + std::to_string(i));
    }
    for (int i = 0; i < 40; ++i) {
        want += ",\"f" + std::to_string(i) +
                "\":" + (i % 3 == 0 ? "\"v" + std::to_string(i) + "\"" : std::to_string(i));
    }
    CHECK(r.size() == 40);
    CHECK(r.to_json_line() == want + "}\n");
    audit_record moved = std::move(r);
    CHECK(moved.to_json_line() == want + "}\n");
}

TEST_CASE("audit: a value seen before is redacted the same way again", "[audit]") {
    // The per-thread memory of clean values must never let a secret through: the same
    // strings in clean and secret-bearing forms, added repeatedly, in both kinds of field.
    const std::string token = "ghp_" + std::string(36, 'a');
    for (int round = 0; round < 3; ++round) {
        audit_record r("e", fixed_ts);
        r.add("message", "plain words")
            .add("message2", "key " + token)
            .add("target", "http://u:p@h/x?token=abc")
            .add("target2", "h:80")
            .add("authorization", "plain words");
        const std::string line = r.to_json_line();
        CHECK(line.find("\"message\":\"plain words\"") != std::string::npos);
        CHECK(line.find(token) == std::string::npos);
        CHECK(line.find("u:p@") == std::string::npos);
        CHECK(line.find("abc") == std::string::npos);
        CHECK(line.find("\"target2\":\"h:80\"") != std::string::npos);
        CHECK(line.find("\"authorization\":\"REDACTED\"") != std::string::npos);
    }
}

TEST_CASE("audit: a value already redacted is escaped and cut, not scanned again", "[audit]") {
    // A tool call's arguments, redacted string by string: a second scan of the JSON text
    // would read the escaped quote of a redacted value as the start of another and erase the
    // rest of the text.
    const std::string args = R"({"note":"a\"token\":\"REDACTED","q":"cats"})";
    audit_record r("tool.call", fixed_ts);
    r.add_redacted("arguments", args).add_redacted("api_key", "x").add_redacted("empty_key", "");
    const std::string line = r.to_json_line();
    boost::json::object o = boost::json::parse(line).as_object();
    CHECK(o.at("arguments").as_string() == args);
    CHECK(o.at("api_key").as_string() == "REDACTED");  // a secret-looking name still hides it
    CHECK(o.at("empty_key").as_string() == "");
    audit_record scanned("tool.call", fixed_ts);
    scanned.add("arguments", args);
    CHECK(boost::json::parse(scanned.to_json_line()).at("arguments").as_string() != args);
    audit_record long_one("tool.call", fixed_ts);
    long_one.add_redacted("arguments", std::string(audit_record::max_string_bytes + 10, 'a'));
    CHECK(boost::json::parse(long_one.to_json_line())
              .at("arguments")
              .as_string()
              .ends_with("...(truncated)"));
}

TEST_CASE("audit: numbers, booleans and null", "[audit]") {
    audit_record r("conn.close", fixed_ts);
    r.add("i64_min", std::numeric_limits<std::int64_t>::min())
        .add("i64_max", std::numeric_limits<std::int64_t>::max())
        .add("u64_max", std::numeric_limits<std::uint64_t>::max())
        .add("int", -7)
        .add("unsigned", 7u)
        .add("long_long", 5LL)
        .add("size", std::size_t{12})
        .add("half", 0.5)
        .add("tenth", 0.1)
        .add("big", 1e300)
        .add("nan", std::numeric_limits<double>::quiet_NaN())
        .add("inf", std::numeric_limits<double>::infinity())
        .add("yes", true)
        .add("no", false)
        .add_null("nothing")
        .add("null_ptr", static_cast<const char*>(nullptr));
    const std::string line = without_newline(r.to_json_line());
    CHECK(line.find(R"("i64_min":-9223372036854775808,"i64_max":9223372036854775807,)") !=
          std::string::npos);
    CHECK(line.find(R"("u64_max":18446744073709551615,)") != std::string::npos);
    CHECK(line.find(R"("int":-7,"unsigned":7,"long_long":5,"size":12,"half":0.5,)") !=
          std::string::npos);
    CHECK(line.find(R"("nan":null,"inf":null,"yes":true,"no":false,"nothing":null,)") !=
          std::string::npos);
    const json::object o = parse_object(line);
    CHECK(o.at("u64_max").as_uint64() == std::numeric_limits<std::uint64_t>::max());
    CHECK(o.at("i64_min").as_int64() == std::numeric_limits<std::int64_t>::min());
    CHECK(o.at("tenth").as_double() == 0.1);
    CHECK(o.at("big").as_double() == 1e300);
    CHECK(o.at("null_ptr").is_null());
}

TEST_CASE("audit: milliseconds to the microsecond, and cordon's own formatted values", "[audit]") {
    audit_record r("conn.open", fixed_ts);
    r.add_millis("zero", 0)
        .add_millis("small", 0.0431)
        .add_millis("half", 12.5)
        .add_millis("whole", 7)
        .add_millis("below_a_microsecond", 0.0004)
        .add_millis("rounds_up", 0.0005)
        .add_millis("carry", 1.9999)
        .add_millis("tens", 3.05)
        .add_millis("big", 123456789.123)
        .add_millis("negative", -1)
        .add_millis("nan", std::numeric_limits<double>::quiet_NaN())
        .add_millis("inf", std::numeric_limits<double>::infinity())
        .add_millis("absurd", 1e13)
        .add_millis("api_key", 1.5)  // a secret-looking name hides any value
        .add_formatted("client", "127.0.0.1:54321")
        .add_formatted("ip", "::1");
    const std::string line = without_newline(r.to_json_line());
    INFO(line);
    CHECK(line.find(R"("zero":0,"small":0.043,"half":12.5,"whole":7,"below_a_microsecond":0,)"
                    R"("rounds_up":0.001,"carry":2,"tens":3.05,"big":123456789.123,)"
                    R"("negative":null,"nan":null,"inf":null,"absurd":null,)"
                    R"("api_key":"REDACTED","client":"127.0.0.1:54321","ip":"::1"})") !=
          std::string::npos);
    INFO(line);
    CHECK(parse_object(line).at("small").as_double() == 0.043);
}

TEST_CASE("audit: records redact secrets", "[audit]") {
    const std::string hex64(64, 'a');
    audit_record r("session.create", fixed_ts);
    r.add("session", "s-1")
        .add("token", hex64)
        .add("Authorization", "Bearer abc")
        .add("api_key", std::int64_t{12345})
        .add("password", true)
        .add("secret", "")
        .add("cookie", static_cast<const char*>(nullptr))
        .add("token_id", "t-0123456789ab")
        .add("proxy_url", "http://s-1:" + hex64 + "@127.0.0.1:3128")
        .add("url", "https://api.example.com/x?access_token=abc&page=2")
        .add("target", "user:pw@host:443")
        .add("detail", "upstream said: Bearer abcdefghijkl and " + hex64)
        .add("note", "password=hunter2");
    const json::object o = parse_object(without_newline(r.to_json_line()));
    CHECK(o.at("session") == "s-1");
    CHECK(o.at("token") == "REDACTED");
    CHECK(o.at("Authorization") == "REDACTED");
    CHECK(o.at("api_key") == "REDACTED");
    CHECK(o.at("password") == "REDACTED");
    CHECK(o.at("secret") == "");
    CHECK(o.at("cookie").is_null());
    CHECK(o.at("token_id") == "t-0123456789ab");
    CHECK(o.at("proxy_url") == "http://REDACTED@127.0.0.1:3128");
    CHECK(o.at("url") == "https://api.example.com/x?access_token=REDACTED&page=2");
    CHECK(o.at("target") == "REDACTED@host:443");
    CHECK(o.at("detail") == "upstream said: Bearer REDACTED and REDACTED");
    CHECK(o.at("note") == "password=REDACTED");
    CHECK(r.to_json_line().find(hex64) == std::string::npos);
}

TEST_CASE("audit: a hostile value cannot break the line", "[audit]") {
    using namespace std::string_literals;
    const std::string host = "evil.example\n{\"ts\":\"x\",\"event\":\"forged\"}\r\0\x7f\xff\""s;
    audit_record r("conn.deny", fixed_ts);
    r.add("host", host).add("re\"ason\n", "no_rule");
    const std::string line = r.to_json_line();
    CHECK(line.find('\n') == line.size() - 1);
    CHECK(line.find('\r') == std::string::npos);
    CHECK(line.find('\0') == std::string::npos);
    const json::object o = parse_object(without_newline(line));
    CHECK(o.at("event") == "conn.deny");
    CHECK(json::value_to<std::string>(o.at("host")) ==
          "evil.example\n{\"ts\":\"x\",\"event\":\"forged\"}\r\0\x7f\xef\xbf\xbd\""s);
    CHECK(o.at("re\"ason\n") == "no_rule");
}

TEST_CASE("audit: long string values are cut", "[audit]") {
    audit_record r("tool.call", fixed_ts);
    r.add("args", std::string(100000, 'x')).add("short", std::string(1000, 'y'));
    // A cut never splits a UTF-8 sequence.
    std::string euros;
    while (euros.size() < 20000) {
        euros += "\xe2\x82\xac";
    }
    r.add("euros", euros);
    const json::object o = parse_object(without_newline(r.to_json_line()));
    const std::string args = json::value_to<std::string>(o.at("args"));
    CHECK(args.size() == audit_record::max_string_bytes);
    CHECK(args.ends_with("...(truncated)"));
    CHECK(o.at("short").as_string().size() == 1000);
    const std::string cut = json::value_to<std::string>(o.at("euros"));
    CHECK(cut.size() <= audit_record::max_string_bytes);
    CHECK(cut.find("\xef\xbf\xbd") == std::string::npos);
}

TEST_CASE("audit: memory sink keeps lines while healthy", "[audit]") {
    memory_audit_sink sink;
    audit_sink& as_sink = sink;
    CHECK(as_sink.healthy());
    CHECK(as_sink.write(event("a", 1, fixed_ts)));
    sink.set_healthy(false);
    CHECK_FALSE(as_sink.healthy());
    CHECK_FALSE(as_sink.write(event("b", 2, fixed_ts)));
    sink.set_healthy(true);
    CHECK(as_sink.write(event("c", 3, fixed_ts)));
    const auto lines = sink.lines();
    REQUIRE(lines.size() == 2);
    CHECK(parse_object(lines[0]).at("event") == "a");
    CHECK(parse_object(lines[1]).at("event") == "c");
    sink.clear();
    CHECK(sink.lines().empty());
}

TEST_CASE("audit: the log writes daily files", "[audit]") {
    temp_dir tmp;
    const fs::path dir = tmp.path / "nested" / "audit";
    std::vector<std::string> errors;
    audit_log log(options(dir, 1h), [&errors](const std::string& e) { errors.push_back(e); });
    std::string error;
    REQUIRE(log.open(error));
    CHECK(error.empty());
    CHECK(log.healthy());
    const mode_t mask = current_umask();
    CHECK(mode_of(dir) == (0750 & ~mask));
    const auto now = wall_clock::now();
    const fs::path today = dir / day_file(now);
    REQUIRE(fs::exists(today));
    CHECK(mode_of(today) == (0640 & ~mask));

    SECTION("flush makes queued lines visible") {
        CHECK(log.write(event("conn.open", 1, now)));
        CHECK(log.write(event("conn.close", 2, now)));
        CHECK(read_lines(today).empty());  // the interval is an hour: nothing written yet
        CHECK(log.flush());
        const auto lines = read_lines(today);
        REQUIRE(lines.size() == 2);
        CHECK(parse_object(lines[0]).at("event") == "conn.open");
        CHECK(parse_object(lines[1]).at("n") == 2);
        CHECK(log.flush());  // nothing queued: still fine
        CHECK(read_lines(today).size() == 2);
    }
    SECTION("each record goes to the file of its own UTC day") {
        const auto yesterday = now - 24h;
        const auto day_start = floor<days>(now);
        log.write(event("a", 1, now));
        log.write(event("b", 2, yesterday));
        log.write(event("c", 3, day_start - 1ms));  // last ms of yesterday
        log.write(event("d", 4, day_start));        // first ms of today
        log.write(event("e", 5, now));
        REQUIRE(log.flush());
        const auto today_lines = read_lines(today);
        const auto yesterday_lines = read_lines(dir / day_file(yesterday));
        REQUIRE(today_lines.size() == 3);
        REQUIRE(yesterday_lines.size() == 2);
        CHECK(parse_object(today_lines[0]).at("event") == "a");
        CHECK(parse_object(today_lines[1]).at("event") == "d");
        CHECK(parse_object(today_lines[2]).at("event") == "e");
        CHECK(parse_object(yesterday_lines[0]).at("event") == "b");
        CHECK(parse_object(yesterday_lines[1]).at("event") == "c");
    }
    SECTION("the interval writes without flush") {
        audit_log fast(options(tmp.path / "fast", 10ms));
        REQUIRE(fast.open(error));
        fast.write(event("tick", 1, now));
        const fs::path file = tmp.path / "fast" / day_file(now);
        for (int i = 0; i < 500 && read_lines(file).empty(); ++i) {
            std::this_thread::sleep_for(10ms);
        }
        CHECK(read_lines(file).size() == 1);
    }
    SECTION("a file deleted under the writer is created again") {
        log.write(event("before", 1, now));
        REQUIRE(log.flush());
        fs::remove(today);
        log.write(event("after", 2, now));
        REQUIRE(log.flush());
        const auto lines = read_lines(today);
        REQUIRE(lines.size() == 1);
        CHECK(parse_object(lines[0]).at("event") == "after");
    }
    SECTION("stop writes what is queued") {
        log.write(event("last", 1, now));
        log.stop();
        CHECK(read_lines(today).size() == 1);
    }
    CHECK(errors.empty());
    CHECK(log.write_errors() == 0);
    CHECK(log.dropped() == 0);
}

TEST_CASE("audit: a line cut by a crash does not swallow the next", "[audit]") {
    temp_dir tmp;
    const auto now = wall_clock::now();
    const fs::path file = tmp.path / day_file(now);
    std::ofstream(file) << "{\"ts\":\"2026-11-29T00:00:00.000Z\",\"event\":\"cut";
    audit_log log(options(tmp.path, 1h));
    std::string error;
    REQUIRE(log.open(error));
    log.write(event("next", 1, now));
    REQUIRE(log.flush());
    const auto lines = read_lines(file);
    REQUIRE(lines.size() == 2);
    CHECK(parse_object(lines[1]).at("event") == "next");
}

TEST_CASE("audit: retention prunes only old cordon-*.jsonl files", "[audit]") {
    temp_dir tmp;
    const auto now = wall_clock::now();
    const auto touch = [&tmp](const std::string& name) {
        std::ofstream(tmp.path / name) << "{}\n";
    };
    const std::vector<std::string> old{
        "cordon-2000-01-01.jsonl",
        day_file(now - 24h * 91),
        day_file(now - 24h * 400),
    };
    const std::vector<std::string> kept{
        day_file(now - 24h * 89),  day_file(now - 24h),       "cordon-2000-01-01.jsonl.gz",
        "cordon-2000-13-01.jsonl", "cordon-2000-02-30.jsonl", "cordon-bogus.jsonl",
        "cordon-2000-1-01.jsonl",  "other-2000-01-01.jsonl",  "notes.txt",
    };
    for (const auto& name : old) {
        touch(name);
    }
    for (const auto& name : kept) {
        touch(name);
    }
    fs::create_directory(tmp.path / "cordon-2000-01-02.jsonl");  // a directory: left alone

    SECTION("retention_days = 90") {
        audit_options o = options(tmp.path);
        o.retention_days = 90;
        audit_log log(o);
        std::string error;
        REQUIRE(log.open(error));
        for (const auto& name : old) {
            INFO(name);
            CHECK_FALSE(fs::exists(tmp.path / name));
        }
        for (const auto& name : kept) {
            INFO(name);
            CHECK(fs::exists(tmp.path / name));
        }
        CHECK(fs::is_directory(tmp.path / "cordon-2000-01-02.jsonl"));
        CHECK(fs::exists(tmp.path / day_file(now)));
    }
    SECTION("retention_days = 0 keeps everything") {
        audit_options o = options(tmp.path);
        o.retention_days = 0;
        audit_log log(o);
        std::string error;
        REQUIRE(log.open(error));
        for (const auto& name : old) {
            CHECK(fs::exists(tmp.path / name));
        }
    }
}

TEST_CASE("audit: an unwritable directory fails closed and recovers", "[audit]") {
    temp_dir tmp;
    const auto now = wall_clock::now();
    // Tests run as root, where permissions stop nothing: a regular file where the directory
    // should be makes creating it fail for everyone.
    const fs::path blocker = tmp.path / "blocker";
    std::ofstream(blocker) << "not a directory\n";
    const fs::path dir = blocker / "audit";
    std::atomic<int> errors{0};
    std::string last_error;
    std::mutex last_error_mutex;
    audit_log log(options(dir, 10ms), [&](const std::string& e) {
        ++errors;
        std::lock_guard lock(last_error_mutex);
        last_error = e;
    });
    std::string error;
    CHECK_FALSE(log.open(error));
    CHECK(error.find(blocker.string()) != std::string::npos);
    CHECK_FALSE(log.healthy());
    CHECK(errors.load() == 0);  // open() reports through its error string only

    CHECK_FALSE(log.write(event("conn.deny", 1, now)));
    CHECK_FALSE(log.write(event("conn.deny", 2, now)));
    CHECK_FALSE(log.flush());
    CHECK_FALSE(log.healthy());
    CHECK(log.write_errors() >= 1);
    CHECK(errors.load() >= 1);
    {
        std::lock_guard lock(last_error_mutex);
        CHECK(last_error.find("audit: cannot create directory") == 0);
    }

    // The path becomes writable: the queued records are written and health comes back.
    fs::remove(blocker);
    CHECK(log.flush());
    CHECK(log.healthy());
    CHECK(log.write(event("conn.open", 3, now)));
    CHECK(log.flush());
    const auto lines = read_lines(dir / day_file(now));
    REQUIRE(lines.size() == 3);
    CHECK(parse_object(lines[0]).at("n") == 1);
    CHECK(parse_object(lines[1]).at("n") == 2);
    CHECK(parse_object(lines[2]).at("n") == 3);
    CHECK(log.dropped() == 0);
}

TEST_CASE("audit: health comes back without records to write", "[audit]") {
    temp_dir tmp;
    const fs::path blocker = tmp.path / "blocker";
    std::ofstream(blocker) << "x";
    audit_log log(options(blocker / "audit", 10ms));
    std::string error;
    CHECK_FALSE(log.open(error));
    fs::remove(blocker);
    for (int i = 0; i < 500 && !log.healthy(); ++i) {
        std::this_thread::sleep_for(10ms);
    }
    CHECK(log.healthy());
}

TEST_CASE("audit: paths that can never be written", "[audit]") {
    for (const char* dir : {"/proc/cordon-audit-test", "/proc/self/cordon-audit", ""}) {
        INFO(dir);
        audit_log log(options(dir));
        std::string error;
        CHECK_FALSE(log.open(error));
        CHECK_FALSE(error.empty());
        CHECK_FALSE(log.healthy());
        CHECK_FALSE(log.write(event("e", 1, wall_clock::now())));
    }
}

TEST_CASE("audit: a full queue drops and counts", "[audit]") {
    temp_dir tmp;
    const fs::path blocker = tmp.path / "blocker";
    std::ofstream(blocker) << "x";
    audit_options o = options(blocker / "audit", 1h);
    o.max_queue = 4;
    audit_log log(o);
    std::string error;
    CHECK_FALSE(log.open(error));
    for (int i = 0; i < 10; ++i) {
        CHECK_FALSE(log.write(event("e", i, wall_clock::now())));
    }
    CHECK(log.dropped() == 6);
    CHECK_FALSE(log.flush());  // fails and keeps the four records queued
    CHECK(log.dropped() == 6);

    fs::remove(blocker);
    REQUIRE(log.flush());
    const auto lines = read_lines(blocker / "audit" / day_file(wall_clock::now()));
    REQUIRE(lines.size() == 4);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        CHECK(parse_object(lines[i]).at("n") == static_cast<std::int64_t>(i));
    }
}

TEST_CASE("audit: stop is idempotent", "[audit]") {
    temp_dir tmp;
    audit_log log(options(tmp.path, 1h));
    std::string error;
    REQUIRE(log.open(error));
    const auto now = wall_clock::now();
    CHECK(log.write(event("a", 1, now)));
    {
        std::vector<std::thread> stoppers;
        for (int i = 0; i < 4; ++i) {
            stoppers.emplace_back([&log] { log.stop(); });
        }
        for (auto& t : stoppers) {
            t.join();
        }
    }
    log.stop();
    CHECK(read_lines(tmp.path / day_file(now)).size() == 1);
    CHECK_FALSE(log.write(event("late", 2, now)));
    CHECK(log.dropped() == 1);
    CHECK(log.flush());  // nothing was lost before the stop
    log.stop();
}

TEST_CASE("audit: concurrent writers produce exactly their lines", "[audit]") {
    temp_dir tmp;
    constexpr int threads = 8;
    constexpr int per_thread = 500;
    audit_log log(options(tmp.path, 5ms));
    std::string error;
    REQUIRE(log.open(error));
    const auto now = wall_clock::now();
    std::atomic<int> refused{0};
    std::vector<std::thread> writers;
    for (int t = 0; t < threads; ++t) {
        writers.emplace_back([&, t] {
            for (int i = 0; i < per_thread; ++i) {
                audit_record r("conn.open", now);
                r.add("thread", t).add("i", i).add("host", "h\"\n" + std::to_string(i));
                if (!log.write(std::move(r))) {
                    ++refused;
                }
                if (i % 100 == 0) {
                    log.flush();
                }
            }
        });
    }
    for (auto& w : writers) {
        w.join();
    }
    REQUIRE(log.flush());
    CHECK(refused.load() == 0);
    const auto lines = read_lines(tmp.path / day_file(now));
    REQUIRE(lines.size() == threads * per_thread);
    std::set<std::pair<std::int64_t, std::int64_t>> seen;
    for (const auto& line : lines) {
        const json::object o = parse_object(line);
        seen.emplace(o.at("thread").as_int64(), o.at("i").as_int64());
    }
    CHECK(seen.size() == threads * per_thread);
    CHECK(log.write_errors() == 0);
    CHECK(log.dropped() == 0);
}

// --- size-based rotation, durable writes ---------------------------------------------------

namespace {

std::string part_file(wall_clock::time_point t, unsigned part) {
    std::string name = day_file(t);
    if (part == 0) {
        return name;
    }
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".p%04u.jsonl", part % 10000);
    return name.substr(0, name.size() - 6) + suffix;
}

// The "n" of every line of the day's files, part by part, and each part's size.
std::vector<std::int64_t> numbers_in_parts(const fs::path& dir, wall_clock::time_point t,
                                           std::vector<std::uintmax_t>& sizes) {
    std::vector<std::int64_t> out;
    for (unsigned part = 0; fs::exists(dir / part_file(t, part)); ++part) {
        sizes.push_back(fs::file_size(dir / part_file(t, part)));
        for (const auto& line : read_lines(dir / part_file(t, part))) {
            out.push_back(parse_object(line).at("n").as_int64());
        }
    }
    return out;
}

}  // namespace

TEST_CASE("audit: a day's file continues in parts beyond max_file_bytes", "[audit][rotation]") {
    temp_dir tmp;
    const auto now = wall_clock::now();
    const std::size_t line_size = event("conn.close", 100, now).to_json_line().size();
    audit_options o = options(tmp.path, 1h);
    o.max_file_bytes = line_size * 3 + 10;  // three lines fit, four do not
    std::vector<std::int64_t> want;
    {
        audit_log log(o);
        std::string error;
        REQUIRE(log.open(error));
        for (std::int64_t n = 100; n < 110; ++n) {  // one batch crossing three boundaries
            log.write(event("conn.close", n, now));
            want.push_back(n);
        }
        REQUIRE(log.flush());
        log.write(event("conn.close", 110, now));  // a second batch continues the last part
        want.push_back(110);
        REQUIRE(log.flush());
        CHECK(log.write_errors() == 0);
    }
    std::vector<std::uintmax_t> sizes;
    CHECK(numbers_in_parts(tmp.path, now, sizes) == want);
    CHECK(sizes ==
          std::vector<std::uintmax_t>{3 * line_size, 3 * line_size, 3 * line_size, 2 * line_size});
    CHECK_FALSE(fs::exists(tmp.path / part_file(now, 4)));

    SECTION("a restart continues the day's last part") {
        audit_log again(o);
        std::string error;
        REQUIRE(again.open(error));
        again.write(event("conn.close", 111, now));
        again.write(event("conn.close", 112, now));
        REQUIRE(again.flush());
        want.push_back(111);
        want.push_back(112);
        sizes.clear();
        CHECK(numbers_in_parts(tmp.path, now, sizes) == want);
        CHECK(sizes.size() == 5);  // part 3 took one more line, part 4 the next
        CHECK(fs::file_size(tmp.path / part_file(now, 3)) == 3 * line_size);
        CHECK(fs::file_size(tmp.path / part_file(now, 4)) == line_size);
    }
    SECTION("a line longer than the bound gets a part of its own") {
        audit_log big(o);
        std::string error;
        REQUIRE(big.open(error));
        audit_record huge("tool.call", now);
        huge.add("n", std::int64_t{200}).add("arguments", std::string(line_size * 5, 'x'));
        big.write(std::move(huge));
        big.write(event("conn.close", 201, now));
        REQUIRE(big.flush());
        const auto huge_lines = read_lines(tmp.path / part_file(now, 4));
        REQUIRE(huge_lines.size() == 1);
        CHECK(parse_object(huge_lines[0]).at("n") == 200);
        const auto next = read_lines(tmp.path / part_file(now, 5));
        REQUIRE(next.size() == 1);
        CHECK(parse_object(next[0]).at("n") == 201);
    }
}

TEST_CASE("audit: retention prunes every part of old days", "[audit][rotation]") {
    temp_dir tmp;
    const auto now = wall_clock::now();
    const auto touch = [&tmp](const std::string& name) {
        std::ofstream(tmp.path / name) << "{}\n";
    };
    const std::vector<std::string> old{part_file(now - 24h * 91, 0), part_file(now - 24h * 91, 1),
                                       part_file(now - 24h * 91, 12),
                                       part_file(now - 24h * 400, 9999)};
    const std::vector<std::string> kept{
        part_file(now - 24h * 89, 0), part_file(now - 24h * 89, 3), part_file(now - 24h, 1),
        // not names the log makes: left alone
        "cordon-2000-01-01.p0000.jsonl", "cordon-2000-01-01.p1.jsonl", "cordon-2000-01-01.1.jsonl",
        "cordon-2000-01-01.p10000.jsonl"};
    for (const auto& n : old) {
        touch(n);
    }
    for (const auto& n : kept) {
        touch(n);
    }
    audit_options o = options(tmp.path);
    o.retention_days = 90;
    audit_log log(o);
    std::string error;
    REQUIRE(log.open(error));
    for (const auto& n : old) {
        INFO(n);
        CHECK_FALSE(fs::exists(tmp.path / n));
    }
    for (const auto& n : kept) {
        INFO(n);
        CHECK(fs::exists(tmp.path / n));
    }
}

TEST_CASE("audit: write_durable is on disk when it returns", "[audit][durable]") {
    temp_dir tmp;
    const auto now = wall_clock::now();
    audit_log log(options(tmp.path, 1h));  // the interval alone would wait an hour
    std::string error;
    REQUIRE(log.open(error));
    log.write(event("conn.open", 1, now));
    audit_record kill("kill.session", now);
    kill.add("n", std::int64_t{2}).add("reason", "test").add("by", "unit");
    const auto t0 = steady_clock::now();
    CHECK(log.write_durable(std::move(kill), 5s));
    CHECK(steady_clock::now() - t0 < 2s);
    const auto lines = read_lines(tmp.path / day_file(now));
    REQUIRE(lines.size() == 2);  // what was queued before it too, in order
    CHECK(parse_object(lines[0]).at("event") == "conn.open");
    CHECK(parse_object(lines[1]).at("event") == "kill.session");

    SECTION("a stopped log cannot make it durable") {
        log.stop();
        CHECK_FALSE(log.write_durable(event("revive", 3, now), 1s));
    }
}

TEST_CASE("audit: kill, revive and session records are never dropped", "[audit][faults]") {
    CHECK(audit_must_keep("kill.network"));
    CHECK(audit_must_keep("kill.session"));
    CHECK(audit_must_keep("revive"));
    CHECK(audit_must_keep("session.create"));
    CHECK(audit_must_keep("session.end"));
    CHECK(audit_must_keep("token.revoke"));
    CHECK_FALSE(audit_must_keep("conn.open"));
    CHECK_FALSE(audit_must_keep("dns.query"));

    temp_dir tmp;
    const fs::path blocker = tmp.path / "blocker";
    std::ofstream(blocker) << "x";
    audit_options o = options(blocker / "audit", 1h);
    o.max_queue = 4;
    audit_log log(o);
    std::string error;
    CHECK_FALSE(log.open(error));
    const auto now = wall_clock::now();
    for (int i = 0; i < 10; ++i) {
        log.write(event("conn.open", i, now));
    }
    for (const char* e : {"kill.network", "revive", "session.create", "kill.session"}) {
        log.write(event(e, 100, now));
    }
    CHECK(log.dropped() == 6);  // the connection records beyond the bound, nothing else
    CHECK_FALSE(log.flush());   // the failed pass queues them again: still nothing dropped
    CHECK(log.dropped() == 6);

    fs::remove(blocker);
    REQUIRE(log.flush());
    const auto lines = read_lines(blocker / "audit" / day_file(now));
    std::vector<std::string> events;
    for (const auto& l : lines) {
        events.push_back(std::string(parse_object(l).at("event").as_string()));
    }
    CHECK(events == std::vector<std::string>{"conn.open", "conn.open", "conn.open", "conn.open",
                                             "kill.network", "revive", "session.create",
                                             "kill.session"});
}

namespace {

// RLIMIT_FSIZE for this process while it lives (SIGXFSZ ignored): writes past `bytes` fail
// with EFBIG after a partial write, as on a disk that fills up mid-batch.
class file_size_limit {
public:
    explicit file_size_limit(rlim_t bytes) {
        REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
        old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
        rlimit r = saved_;
        r.rlim_cur = bytes;
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &r) == 0);
    }
    ~file_size_limit() { lift(); }
    void lift() {
        if (!lifted_) {
            ::setrlimit(RLIMIT_FSIZE, &saved_);
            std::signal(SIGXFSZ, old_handler_);
            lifted_ = true;
        }
    }
    file_size_limit(const file_size_limit&) = delete;
    file_size_limit& operator=(const file_size_limit&) = delete;

private:
    rlimit saved_{};
    void (*old_handler_)(int) = SIG_DFL;
    bool lifted_ = false;
};

}  // namespace

TEST_CASE("audit: a backlog larger than the free space is written in part", "[audit][faults]") {
    temp_dir tmp;
    audit_log log(options(tmp.path, 1h));
    std::string error;
    REQUIRE(log.open(error));
    const auto now = wall_clock::now();
    const fs::path file = tmp.path / day_file(now);
    REQUIRE(log.write(event("conn.open", 0, now)));
    REQUIRE(log.flush());
    const auto start = fs::file_size(file);
    constexpr int records = 400;
    const std::string pad(200, 'p');
    {
        file_size_limit room(static_cast<rlim_t>(start + 16 * 1024));  // room for some
        for (int i = 1; i <= records; ++i) {
            audit_record r("conn.open", now);
            r.add("n", std::int64_t{i}).add("pad", pad);
            log.write(std::move(r));
        }
        CHECK_FALSE(log.flush());
        CHECK_FALSE(log.healthy());
        const auto lines = read_lines(file);
        // The whole lines that fit were written and kept, none was cut.
        CHECK(lines.size() > 40);
        CHECK(lines.size() < records);
        for (const auto& l : lines) {
            parse_object(l);
        }
        room.lift();
    }
    REQUIRE(log.flush());
    CHECK(log.healthy());
    const auto lines = read_lines(file);
    REQUIRE(lines.size() == records + 1);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        CHECK(parse_object(lines[i]).at("n") == static_cast<std::int64_t>(i));
    }
    CHECK(log.dropped() == 0);
}

TEST_CASE("audit: stop during an outage retries, then hands over the kills it lost",
          "[audit][faults]") {
    temp_dir tmp;
    const fs::path blocker = tmp.path / "blocker";
    std::ofstream(blocker) << "x";
    audit_options o = options(blocker / "audit", 10ms);
    o.stop_retry = 300ms;
    audit_log log(o);
    std::string error;
    CHECK_FALSE(log.open(error));
    const auto now = wall_clock::now();
    log.write(event("conn.open", 1, now));
    audit_record kill("kill.network", now);
    kill.add("reason", "outage");
    log.write(std::move(kill));

    SECTION("the disk comes back within the retry: nothing is lost") {
        std::thread fixer([&] {
            std::this_thread::sleep_for(100ms);
            fs::remove(blocker);
        });
        log.stop();
        fixer.join();
        CHECK(log.dropped() == 0);
        CHECK(log.lost_records().empty());
        CHECK(read_lines(blocker / "audit" / day_file(now)).size() == 2);
    }
    SECTION("it does not: counted, and the kill is handed over") {
        const auto t0 = steady_clock::now();
        log.stop();
        CHECK(steady_clock::now() - t0 >= 250ms);
        CHECK(log.dropped() == 2);
        const auto lost = log.lost_records();
        REQUIRE(lost.size() == 1);
        CHECK(parse_object(without_newline(lost[0])).at("event") == "kill.network");
    }
}
