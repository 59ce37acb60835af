// Tests of config/json_string: the one JSON string escaper, in its UTF-8 and ASCII forms.
#include "common/json_string.hpp"

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <random>
#include <string>
#include <utility>

namespace {

using namespace std::string_literals;

std::string quoted(std::string_view s, bool ascii) {
    std::string out;
    if (ascii) {
        cordon::common::append_json_string_ascii(out, s);
    } else {
        cordon::common::append_json_string(out, s);
    }
    return out;
}

std::string decoded(const std::string& json_text) {
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(json_text, ec);
    REQUIRE_FALSE(ec);
    REQUIRE(v.is_string());
    return std::string(v.as_string());
}

}  // namespace

TEST_CASE("json_string: the ASCII form reads back as the UTF-8 form, for any bytes",
          "[json_string]") {
    std::mt19937 rng(20261130);
    std::uniform_int_distribution<int> len(0, 64);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_int_distribution<int> pick(0, 3);
    // Random bytes, biased towards the lead and continuation bytes of multi-byte sequences.
    for (int round = 0; round < 5000; ++round) {
        std::string s;
        for (int i = len(rng); i > 0; --i) {
            const int p = pick(rng);
            s += static_cast<char>(p == 0   ? byte(rng)
                                   : p == 1 ? 0x80 + byte(rng) % 0x40
                                   : p == 2 ? 0xc2 + byte(rng) % 0x33
                                            : 0x20 + byte(rng) % 0x5f);
        }
        const std::string a = quoted(s, true);
        for (const char c : a) {
            const auto u = static_cast<unsigned char>(c);
            REQUIRE(u >= 0x20);
            REQUIRE(u < 0x7f);
        }
        REQUIRE(decoded(a) == decoded(quoted(s, false)));
    }
}

TEST_CASE("json_string: code points in the ASCII form", "[json_string]") {
    CHECK(quoted("plain", true) == "\"plain\"");
    CHECK(quoted("\xc3\xa9", true) == "\"\\u00e9\"");
    CHECK(quoted("\xef\xbf\xbf", true) == "\"\\uffff\"");
    CHECK(quoted("\xf0\x90\x80\x80", true) == "\"\\ud800\\udc00\"");                // U+10000
    CHECK(quoted("\xf4\x8f\xbf\xbf", true) == "\"\\udbff\\udfff\"");                // U+10FFFF
    CHECK(quoted("\xf4\x90\x80\x80", true) == "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // too high
    CHECK(quoted("\xe2\x80\xa9", true) == "\"\\u2029\"");
    CHECK(decoded(quoted("\xf0\x9f\x98\x80", true)) == "\xf0\x9f\x98\x80");
}

TEST_CASE("json_string: single characters in the ASCII form", "[json_string]") {
    const auto c = GENERATE(values<std::pair<std::string, std::string>>({
        {"", ""},
        {"plain text", "plain text"},
        {"/", "/"},
        {"'", "'"},
        {"\"", "\\\""},
        {"\\", "\\\\"},
        {"\n", "\\n"},
        {"\r", "\\r"},
        {"\t", "\\t"},
        {"\0"s, "\\u0000"},
        {"\x01", "\\u0001"},
        {"\b", "\\b"},
        {"\f", "\\f"},
        {"\x1b", "\\u001b"},
        {"\x1f", "\\u001f"},
        {" ", " "},
        {"~", "~"},
        {"\x7f", "\\u007f"},
        {"\x80", "\\ufffd"},  // a stray continuation byte
        {"\xff", "\\ufffd"},
        {"\xc3", "\\ufffd"},                        // truncated
        {"\xc0\xaf", "\\ufffd\\ufffd"},             // overlong '/'
        {"\xed\xa0\x80", "\\ufffd\\ufffd\\ufffd"},  // a surrogate
        {"\xc3\xa9", "\\u00e9"},                    // é
        {"\xe2\x82\xac", "\\u20ac"},                // €
        {"\xf0\x9f\x98\x80", "\\ud83d\\ude00"},     // U+1F600: a surrogate pair
        {"a\"b\\c\nd", "a\\\"b\\\\c\\nd"},
        {"\xe2\x80\xa8", "\\u2028"},
    }));
    INFO(c.first);
    CHECK(quoted(c.first, true) == "\"" + c.second + "\"");
}

TEST_CASE("json_string: the ASCII form of every byte is printable and parses back",
          "[json_string]") {
    std::string in;
    for (int b = 0; b < 256; ++b) {
        in += static_cast<char>(b);
    }
    in += "\xc3\xa9 \xf0\x9f\x98\x80 \xed\xa0\x80 \xc0\xaf";
    const std::string out = quoted(in, true);
    for (const char c : out) {
        const auto u = static_cast<unsigned char>(c);
        INFO(static_cast<unsigned>(u));
        REQUIRE(u >= 0x20);
        REQUIRE(u < 0x7f);
    }
    const std::string back = decoded(out);
    CHECK(back == decoded(quoted(in, false)));
    CHECK(back.find("\xc3\xa9 \xf0\x9f\x98\x80 ") != std::string::npos);  // valid UTF-8 kept
}

TEST_CASE("json_string: one special byte anywhere in plain text, word boundaries included",
          "[json_string]") {
    // Plain runs are scanned eight bytes at a time: every byte value at every position of a
    // 21-byte string (words 0-7, 8-15, then the byte-wise tail) is escaped exactly as alone.
    const auto alone = [](unsigned char b) -> std::string {
        switch (b) {
            case '"': return "\\\"";
            case '\\': return "\\\\";
            case '\n': return "\\n";
            case '\r': return "\\r";
            case '\t': return "\\t";
            case '\b': return "\\b";
            case '\f': return "\\f";
            default: break;
        }
        if (b < 0x20 || b == 0x7f) {
            constexpr char hex[] = "0123456789abcdef";
            return std::string("\\u00") + hex[b >> 4] + hex[b & 0xf];
        }
        if (b >= 0x80) {
            return "\xef\xbf\xbd";  // a lone byte >= 0x80 is invalid UTF-8: U+FFFD
        }
        return std::string(1, static_cast<char>(b));
    };
    const std::string plain = "abcdefghijklmnopqrstu";
    for (int b = 0; b < 256; ++b) {
        for (std::size_t at = 0; at < plain.size(); ++at) {
            std::string s = plain;
            s[at] = static_cast<char>(b);
            const std::string want = "\"" + plain.substr(0, at) +
                                     alone(static_cast<unsigned char>(b)) + plain.substr(at + 1) +
                                     "\"";
            INFO("byte " << b << " at " << at);
            REQUIRE(quoted(s, false) == want);
        }
    }
}
