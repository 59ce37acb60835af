// Tests of sizes ("1GiB") and durations ("1h30m") as a policy writes them.
#include "config/units.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace cordon::config;
using std::chrono::milliseconds;

constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();
constexpr std::int64_t ms_max = std::numeric_limits<std::int64_t>::max();

}  // namespace

TEST_CASE("units: parse_size reads every unit", "[units]") {
    const std::vector<std::pair<std::string, std::uint64_t>> cases{
        {"0", 0},
        {"1", 1},
        {"1B", 1},
        {"500", 500},
        {"500B", 500},
        {"1KB", 1000},
        {"1MB", 1000 * 1000},
        {"1GB", 1000ULL * 1000 * 1000},
        {"1TB", 1000ULL * 1000 * 1000 * 1000},
        {"1KiB", 1024},
        {"1MiB", 1024 * 1024},
        {"1GiB", 1024ULL * 1024 * 1024},
        {"1TiB", 1024ULL * 1024 * 1024 * 1024},
        {"500MB", 500'000'000},
        {"256MiB", 256ULL << 20},
        {"10MiB", 10ULL << 20},
        {"3TB", 3'000'000'000'000},
        {"0GiB", 0},
        {"18446744073709551615", u64_max},
        {"18446744073709551615B", u64_max},
        {"18446744073709551KB", 18'446'744'073'709'551'000ULL},
        {"16777215TiB", u64_max - (1ULL << 40) + 1},
        {"17179869183GiB", u64_max - (1ULL << 30) + 1},
    };
    for (const auto& [text, bytes] : cases) {
        INFO("text: " << text);
        const auto v = parse_size(text);
        REQUIRE(v.has_value());
        CHECK(*v == bytes);
    }
}

TEST_CASE("units: parse_size refuses overflow", "[units]") {
    for (const char* text : {
             "18446744073709551616",     // 2^64
             "18446744073709551616B",    //
             "99999999999999999999999",  // far beyond
             "18446744073709552KB",      // just over, after the multiplication
             "18446744073710MB",         //
             "18446744074GB",            //
             "18446745TB",               //
             "18014398509481984KiB",     // 2^54 KiB = 2^64
             "17592186044416MiB",        // 2^44 MiB
             "17179869184GiB",           // 2^34 GiB
             "16777216TiB",              // 2^24 TiB
         }) {
        INFO("text: " << text);
        CHECK_FALSE(parse_size(text).has_value());
    }
}

TEST_CASE("units: parse_size refuses what is not a size", "[units]") {
    for (const char* text : {
             "",      "B",    "KiB",    "GB",     "-1",   "+1",    "-1GB",  "1.5",
             "1.5GB", " 1",   "1 ",     "1 GB",   "1gb",  "1kb",   "1Kb",   "1kB",
             "1KIB",  "1kib", "1k",     "1K",     "1G",   "1iB",   "1Ki",   "0x10",
             "1e3",   "1BB",  "1KiBB",  "1GiB ",  "GiB1", "1GiB1", "1_000", "1,000",
             "1PB",   "1EiB", "1bytes", "1 byte", "one",  "\t1",   "1\n",   "1/2",
         }) {
        INFO("text: '" << text << "'");
        CHECK_FALSE(parse_size(text).has_value());
    }
    CHECK_FALSE(parse_size(std::string_view("1\0", 2)).has_value());
    CHECK_FALSE(parse_size(std::string_view("1G\0B", 4)).has_value());
    CHECK_FALSE(parse_size("\xd9\xa1").has_value());  // ARABIC-INDIC DIGIT ONE
}

TEST_CASE("units: parse_duration reads every unit", "[units]") {
    const std::vector<std::pair<std::string, std::int64_t>> cases{
        {"0ms", 0},
        {"0s", 0},
        {"1ms", 1},
        {"1s", 1000},
        {"1m", 60'000},
        {"1h", 3'600'000},
        {"1d", 86'400'000},
        {"30m", 1'800'000},
        {"90s", 90'000},
        {"1500ms", 1500},
        {"1h30m", 5'400'000},
        {"2h", 7'200'000},
        {"24h", 86'400'000},
        {"1440m", 86'400'000},
        {"1d2h3m4s5ms", 86'400'000 + 2 * 3'600'000 + 3 * 60'000 + 4 * 1000 + 5},
        {"1s500ms", 1500},
        {"30m1h", 5'400'000},  // groups in any order
        {"1h1h", 7'200'000},   // and repeated: they add up
        {"007s", 7000},
        {"9223372036854775807ms", ms_max},
        {"106751991167d", 106'751'991'167LL * 86'400'000},
        {"9223372036854775s807ms", ms_max},
    };
    for (const auto& [text, ms] : cases) {
        INFO("text: " << text);
        const auto v = parse_duration(text);
        REQUIRE(v.has_value());
        CHECK(v->count() == ms);
    }
}

TEST_CASE("units: parse_duration refuses overflow", "[units]") {
    for (const char* text : {
             "9223372036854775808ms",      // 2^63: fits uint64, not milliseconds
             "18446744073709551615ms",     // 2^64 - 1
             "18446744073709551616ms",     // 2^64
             "99999999999999999999999ms",  //
             "106751991168d",              // just over, after the multiplication
             "2562047788016h",             //
             "153722867280913m",           //
             "9223372036854776s",          //
             "9223372036854775807ms1ms",   // the sum overflows
             "106751991167d1d",            //
             "5124095576030431d",          // the multiplication overflows uint64
         }) {
        INFO("text: " << text);
        CHECK_FALSE(parse_duration(text).has_value());
    }
}

TEST_CASE("units: parse_duration refuses what is not a duration", "[units]") {
    for (const char* text : {
             "",      "0",     "30",    "m",          "ms",     "h30",  "30x",   "30M",
             "30S",   "1H",    "1D",    "1MS",        "1h 30m", " 1h",  "1h ",   "-1s",
             "+1s",   "1.5h",  "1hh",   "1hm",        "1sm",    "1msx", "1us",   "1ns",
             "1w",    "1y",    "1min",  "1sec",       "1hour",  "1h30", "h",     "1_000ms",
             "1,5s",  "1e3ms", "PT30M", "30m\n",      "\t30m",  "30 m", "0x10s", "soon",
             "1h-1m", "1h+1m", "1:30",  "1\xc2\xb5s",
         }) {
        INFO("text: '" << text << "'");
        CHECK_FALSE(parse_duration(text).has_value());
    }
    CHECK_FALSE(parse_duration(std::string_view("1s\0", 3)).has_value());
    CHECK_FALSE(parse_duration(std::string_view("\0", 1)).has_value());
}

TEST_CASE("units: format_duration", "[units]") {
    const std::vector<std::pair<std::int64_t, std::string>> cases{
        {0, "0s"},
        {1, "1ms"},
        {999, "999ms"},
        {1000, "1s"},
        {60'000, "1m"},
        {1'800'000, "30m"},
        {3'600'000, "1h"},
        {5'400'000, "1h30m"},
        {86'400'000, "1d"},
        {90'000'000, "1d1h"},
        {86'400'000 + 3'600'000 + 60'000 + 1000 + 1, "1d1h1m1s1ms"},
        {86'400'000 + 1, "1d1ms"},
        {ms_max, "106751991167d7h12m55s807ms"},
    };
    for (const auto& [ms, text] : cases) {
        INFO("ms: " << ms);
        CHECK(format_duration(milliseconds(ms)) == text);
    }
    SECTION("a negative duration reads as zero") {
        CHECK(format_duration(milliseconds(-1)) == "0s");
        CHECK(format_duration(milliseconds(std::numeric_limits<std::int64_t>::min())) == "0s");
    }
}

TEST_CASE("units: format_duration and parse_duration round trip", "[units]") {
    SECTION("from milliseconds") {
        std::vector<std::int64_t> values{
            0,         1,         2,          59,         999,        1000,      1001,
            1500,      59'999,    60'000,     60'001,     90'000,     3'599'999, 3'600'000,
            3'600'001, 5'400'000, 86'399'999, 86'400'000, 86'400'001, ms_max,    ms_max - 1};
        // A spread of values over the whole range.
        for (std::int64_t v = 7; v < ms_max / 13; v = v * 13 + 5) {
            values.push_back(v);
        }
        for (const auto v : values) {
            const std::string text = format_duration(milliseconds(v));
            INFO("ms: " << v << " text: " << text);
            const auto back = parse_duration(text);
            REQUIRE(back.has_value());
            CHECK(back->count() == v);
        }
    }
    SECTION("from text: formatting is canonical") {
        for (const char* text :
             {"30m", "1h30m", "90s", "1500ms", "1d", "25h", "1440m", "59m60s", "0ms", "1h1h"}) {
            const auto d = parse_duration(text);
            REQUIRE(d.has_value());
            const std::string canonical = format_duration(*d);
            INFO("text: " << text << " canonical: " << canonical);
            CHECK(parse_duration(canonical) == d);
            CHECK(format_duration(*parse_duration(canonical)) == canonical);
        }
    }
}
