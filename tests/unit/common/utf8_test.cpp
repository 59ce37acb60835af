// Tests of config/utf8: the one strict UTF-8 decoder (JSON escaper, public suffix punycode).
#include "common/utf8.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace {

using cordon::common::utf8::decode;
using cordon::common::utf8::next;
using cordon::common::utf8::sequence;

// The reference encoder: the shortest form of `cp` (any value up to 0x1fffff, so tests can
// build the sequences a strict decoder must refuse).
std::string encode(std::uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xc0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        s += static_cast<char>(0xe0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        s += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        s += static_cast<char>(0xf0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        s += static_cast<char>(0x80 | (cp & 0x3f));
    }
    return s;
}

bool is_scalar(std::uint32_t cp) { return cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff); }

}  // namespace

TEST_CASE("utf8: every scalar value decodes from its encoding", "[utf8]") {
    for (std::uint32_t cp = 0; cp <= 0x10ffff; ++cp) {
        if (!is_scalar(cp)) {
            continue;
        }
        const std::string s = encode(cp);
        const sequence q = next(s + "tail");
        REQUIRE(q.valid);
        REQUIRE(q.code_point == cp);
        REQUIRE(q.length == s.size());
    }
}

TEST_CASE("utf8: invalid sequences and their maximal subparts", "[utf8]") {
    struct bad {
        const char* name;
        std::string bytes;
        std::size_t length;  // bytes one U+FFFD replaces
    };
    const auto c = GENERATE(values<bad>({
        {"stray continuation", "\x80", 1},
        {"stray continuation before ASCII",
         "\xbf"
         "a",
         1},
        {"0xff", "\xff", 1},
        {"0xfe", "\xfe", 1},
        {"overlong 2-byte '/'", "\xc0\xaf", 1},
        {"overlong 2-byte U+007F", "\xc1\xbf", 1},
        {"overlong 3-byte '/'", "\xe0\x80\xaf", 1},
        {"overlong 3-byte U+07FF", "\xe0\x9f\xbf", 1},
        {"overlong 4-byte '/'", "\xf0\x80\x80\xaf", 1},
        {"overlong 4-byte U+FFFF", "\xf0\x8f\xbf\xbf", 1},
        {"high surrogate U+D800", "\xed\xa0\x80", 1},
        {"low surrogate U+DFFF", "\xed\xbf\xbf", 1},
        {"U+110000", "\xf4\x90\x80\x80", 1},
        {"U+13FFFF", "\xf4\xbf\xbf\xbf", 1},
        {"lead 0xf5 (above U+10FFFF)", "\xf5\x80\x80\x80", 1},
        {"lead 0xf8 (5-byte form)", "\xf8\x88\x80\x80\x80", 1},
        {"truncated 2-byte", "\xc3", 1},
        {"truncated 3-byte after 1", "\xe2", 1},
        {"truncated 3-byte after 2", "\xe2\x82", 2},
        {"truncated 4-byte after 3", "\xf0\x9f\x98", 3},
        {"truncated 3-byte before ASCII",
         "\xe2\x82"
         "a",
         2},
        {"truncated 4-byte before a new lead", "\xf0\x9f\xc3\xa9", 2},
    }));
    INFO(c.name);
    const sequence q = next(c.bytes);
    CHECK_FALSE(q.valid);
    CHECK(q.length == c.length);
    std::vector<std::uint32_t> cps;
    CHECK_FALSE(decode("ok " + c.bytes + " ok", cps));
}

TEST_CASE("utf8: whatever it accepts is the shortest form of a scalar value", "[utf8]") {
    // Every first three bytes, with a continuation byte after: with the test above (every
    // scalar value's shortest form is accepted), valid exactly when a shortest form.
    std::size_t accepted = 0;
    std::size_t wrong = 0;
    for (std::uint32_t v = 0; v < (1U << 24); ++v) {
        for (const char last : {'\x80', '\xbf'}) {
            const char bytes[4] = {static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                                   static_cast<char>(v), last};
            const std::string_view s(bytes, 4);
            const sequence q = next(s);
            if (q.length < 1 || q.length > 4 || (!q.valid && q.length > 3)) {
                ++wrong;
            } else if (q.valid) {
                ++accepted;
                if (!is_scalar(q.code_point) || encode(q.code_point) != s.substr(0, q.length)) {
                    ++wrong;
                }
            }
        }
    }
    CHECK(wrong == 0);
    CHECK(accepted > 0);
}

TEST_CASE("utf8: random 4-byte strings agree with the reference encoder", "[utf8]") {
    std::mt19937 rng(20261130);
    std::uniform_int_distribution<int> lead(0xe8, 0xff);
    std::uniform_int_distribution<int> cont(0x70, 0xcf);
    for (int round = 0; round < 200'000; ++round) {
        std::string s;
        s += static_cast<char>(lead(rng));
        for (int i = 0; i < 3; ++i) {
            s += static_cast<char>(cont(rng));
        }
        const sequence q = next(s);
        if (q.valid) {
            REQUIRE(is_scalar(q.code_point));
            REQUIRE(encode(q.code_point) == s.substr(0, q.length));
        } else {
            REQUIRE(q.length >= 1);
            REQUIRE(q.length <= 3);
        }
    }
}

TEST_CASE("utf8: decode appends code points and is usable at compile time", "[utf8]") {
    std::vector<std::uint32_t> cps{7};
    REQUIRE(decode("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", cps));
    CHECK(cps == std::vector<std::uint32_t>{7, 'a', 0xe9, 0x20ac, 0x1f600});
    static_assert(next("\xf4\x8f\xbf\xbf").code_point == 0x10ffff);
    static_assert(!next("\xed\xa0\x80").valid);
}
