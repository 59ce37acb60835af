#include "common/percent.hpp"

#include <catch2/catch.hpp>

#include <string>

using cordon::common::hex_value;
using cordon::common::percent_decoded;

TEST_CASE("percent: hex digits of either case, anything else -1", "[percent]") {
    static_assert(hex_value('0') == 0 && hex_value('9') == 9);
    static_assert(hex_value('a') == 10 && hex_value('F') == 15);
    for (int c = 0; c < 256; ++c) {
        const char ch = static_cast<char>(c);
        const bool hex = (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
                         (ch >= 'A' && ch <= 'F');
        CHECK((hex_value(ch) >= 0) == hex);
        CHECK(hex_value(ch) < 16);
    }
}

TEST_CASE("percent: every escape decoded, whatever the byte; broken ones kept", "[percent]") {
    CHECK(percent_decoded("/v1/%63ordon-ph-%2F%zz%4") == "/v1/cordon-ph-/%zz%4");
    CHECK(percent_decoded("%00%41") == std::string("\0A", 2));
    CHECK(percent_decoded("").empty());
    CHECK(percent_decoded("%") == "%");
    CHECK(percent_decoded("%4") == "%4");
    CHECK(percent_decoded("%%41") == "%A");    // a lone '%' kept, the escape after it decoded
    CHECK(percent_decoded("%2541") == "%41");  // decoded once, never twice
    CHECK(percent_decoded("a+b") == "a+b");    // '+' is form encoding, not percent-encoding
    CHECK(percent_decoded("%e2%82%AC") == "\xe2\x82\xac");
}
