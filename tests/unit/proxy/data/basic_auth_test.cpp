// Tests of Proxy-Authorization: Basic parsing and of the canonical base64 it relies on.
#include "proxy/data/basic_auth.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::data;
using namespace std::string_literals;

constexpr std::size_t max_header_value = 1024;
constexpr std::string_view alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string basic(std::string_view user_colon_password) {
    return "Basic " + base64_encode(user_colon_password);
}

}  // namespace

TEST_CASE("basic_auth: RFC 4648 section 10 test vectors", "[basic_auth]") {
    struct test_vector {
        std::string plain;
        std::string encoded;
    };
    const auto v = GENERATE(values<test_vector>({
        {"", ""},
        {"f", "Zg=="},
        {"fo", "Zm8="},
        {"foo", "Zm9v"},
        {"foob", "Zm9vYg=="},
        {"fooba", "Zm9vYmE="},
        {"foobar", "Zm9vYmFy"},
    }));
    INFO(v.plain);
    CHECK(base64_encode(v.plain) == v.encoded);
    const auto d = base64_decode(v.encoded);
    REQUIRE(d);
    CHECK(*d == v.plain);
}

TEST_CASE("basic_auth: base64 of binary bytes uses the standard alphabet", "[basic_auth]") {
    CHECK(base64_encode("\xfb\xff\xbf"s) == "+/+/");
    CHECK(base64_encode("\0\0\0"s) == "AAAA");
    CHECK(base64_encode("\xff"s) == "/w==");
    CHECK(base64_encode("\xff\xff"s) == "//8=");
    CHECK(base64_decode("+/+/") == "\xfb\xff\xbf"s);
    CHECK(base64_decode("AAAA") == "\0\0\0"s);
    CHECK(base64_decode("/w==") == "\xff"s);
}

TEST_CASE("basic_auth: encode then decode round-trips random bytes", "[basic_auth]") {
    std::mt19937 rng(20240611);  // fixed seed: a failure reproduces
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_int_distribution<std::size_t> length(0, 300);
    for (int i = 0; i < 2000; ++i) {
        std::string in(length(rng), '\0');
        for (auto& c : in) {
            c = static_cast<char>(byte(rng));
        }
        const std::string enc = base64_encode(in);
        REQUIRE(enc.size() == (in.size() + 2) / 3 * 4);
        const auto dec = base64_decode(enc);
        REQUIRE(dec);
        REQUIRE(*dec == in);
    }
}

TEST_CASE("basic_auth: every single byte value round-trips", "[basic_auth]") {
    for (int b = 0; b < 256; ++b) {
        for (std::size_t n = 1; n <= 3; ++n) {
            const std::string in(n, static_cast<char>(b));
            const auto dec = base64_decode(base64_encode(in));
            REQUIRE(dec);
            REQUIRE(*dec == in);
        }
    }
}

TEST_CASE("basic_auth: base64_decode refuses non-canonical and invalid input", "[basic_auth]") {
    struct bad {
        const char* name;
        std::string in;
    };
    const auto c = GENERATE(values<bad>({
        {"1 char", "Y"},
        {"2 chars, unpadded", "YQ"},
        {"3 chars, unpadded", "YWI"},
        {"5 chars", "Zm9vY"},
        {"one pad too few", "YQ="},
        {"one pad too many", "YWI=="},
        {"three pads", "Y==="},
        {"only pads", "===="},
        {"pad in the first position", "=YWI"},
        {"pad in the second position", "Y=WI"},
        {"data after a pad", "YW=I"},
        {"pad then data", "YQ=a"},
        {"pad in the middle group", "YQ==YQ=="},
        {"pad in a non-last group", "YWI=Zm9v"},
        {"non-zero pad bits, 2 pads", "YR=="},
        {"non-zero pad bits, 2 pads, last char /", "Y/=="},
        {"non-zero pad bits, 1 pad", "YWJ="},
        {"non-zero pad bits, 1 pad, last char z", "Zm9="},
        {"URL-safe minus", "YW-i"},
        {"URL-safe underscore", "YW_i"},
        {"dot", "YW.i"},
        {"space inside", "YW i"},
        {"leading space", " YWJj"},
        {"trailing newline", "YQ==\n"},
        {"line break inside", "Zm9v\nYmFy"},
        {"CR LF", "Zm9v\r\nYmFy"},
        {"NUL", "YWI\0"s},
        {"byte 0x80", "YW\x80i"},
        {"byte 0xff", "\xffWJj"},
        {"percent-encoded", "YW%3D"},
    }));
    INFO(c.name);
    CHECK_FALSE(base64_decode(c.in));
}

TEST_CASE("basic_auth: base64_decode accepts exactly the canonical padded forms", "[basic_auth]") {
    // Every "XY==" and "XYZ=": accepted exactly when the pad bits are zero, and then the
    // decoded bytes encode back to the same text.
    std::size_t accepted_two = 0;
    for (const char x : alphabet) {
        for (const char y : alphabet) {
            const std::string s{x, y, '=', '='};
            const auto d = base64_decode(s);
            const bool canonical = (alphabet.find(y) & 0x0f) == 0;
            REQUIRE(d.has_value() == canonical);
            if (d) {
                REQUIRE(d->size() == 1);
                REQUIRE(base64_encode(*d) == s);
                ++accepted_two;
            }
        }
    }
    CHECK(accepted_two == 256);

    std::size_t accepted_one = 0;
    for (const char x : alphabet) {
        for (const char y : alphabet) {
            for (const char z : alphabet) {
                const std::string s{x, y, z, '='};
                const auto d = base64_decode(s);
                REQUIRE(d.has_value() == ((alphabet.find(z) & 0x03) == 0));
                if (d) {
                    REQUIRE(d->size() == 2);
                    REQUIRE(base64_encode(*d) == s);
                    ++accepted_one;
                }
            }
        }
    }
    CHECK(accepted_one == 65536);
}

TEST_CASE("basic_auth: Proxy-Authorization values that parse", "[basic_auth]") {
    struct good {
        const char* name;
        std::string header;
        std::string user;
        std::string password;
    };
    const std::string enc = base64_encode("alice:secret");
    const auto c = GENERATE_COPY(values<good>({
        {"canonical", "Basic " + enc, "alice", "secret"},
        {"lower-case scheme", "basic " + enc, "alice", "secret"},
        {"upper-case scheme", "BASIC " + enc, "alice", "secret"},
        {"mixed-case scheme", "bAsIc " + enc, "alice", "secret"},
        {"leading spaces", "   Basic " + enc, "alice", "secret"},
        {"leading tab", "\tBasic " + enc, "alice", "secret"},
        {"trailing spaces and tabs", "Basic " + enc + " \t ", "alice", "secret"},
        {"several spaces after the scheme", "Basic    " + enc, "alice", "secret"},
        {"colon in the password is kept", basic("alice:pa:ss:"), "alice", "pa:ss:"},
        {"empty user", basic(":secret"), "", "secret"},
        {"empty password", basic("alice:"), "alice", ""},
        {"empty user and password", basic(":"), "", ""},
        {"+ and / in the base64", "Basic YWI6+/+/", "ab", "\xfb\xff\xbf"},
        {"session id and token", basic("s-0123abcd:" + std::string(64, 'f')), "s-0123abcd",
         std::string(64, 'f')},
        {"binary password", basic("u:\0\xff\r\n"s), "u", "\0\xff\r\n"s},
        {"UTF-8 user", basic("\xc3\xa9t\xc3\xa9:pw"), "\xc3\xa9t\xc3\xa9", "pw"},
    }));
    INFO(c.name);
    const auto r = parse_basic_auth(c.header);
    REQUIRE(r);
    CHECK(r->user == c.user);
    CHECK(r->password == c.password);
}

TEST_CASE("basic_auth: Proxy-Authorization values that are refused", "[basic_auth]") {
    struct bad {
        const char* name;
        std::string header;
    };
    const std::string enc = base64_encode("alice:secret");
    const auto c = GENERATE_COPY(values<bad>({
        {"empty", ""},
        {"only spaces", "   "},
        {"scheme only", "Basic"},
        {"scheme and a space", "Basic "},
        {"scheme and spaces", "Basic    \t "},
        {"other scheme", "Bearer " + enc},
        {"Digest", "Digest username=\"alice\""},
        {"scheme prefix", "Basi " + enc},
        {"longer scheme", "Basically " + enc},
        {"no space after the scheme", "Basic" + enc},
        {"tab after the scheme", "Basic\t" + enc},
        {"comma after the scheme", "Basic," + enc},
        {"credentials without a scheme", enc},
        {"space inside the base64", "Basic " + enc.substr(0, 4) + " " + enc.substr(4)},
        {"tab before the base64", "Basic \t" + enc},
        {"trailing junk", "Basic " + enc + " x"},
        {"two credentials", "Basic " + enc + ", Basic " + enc},
        {"no colon", basic("alicesecret")},
        {"empty credentials", basic("")},
        {"unpadded base64", "Basic YWxpY2U6c2VjcmV0MQ"},
        {"bad padding", "Basic YWxpY2U6c2VjcmV0MQ="},
        {"non-zero pad bits", "Basic YWxpY2U6c2VjcmV0MR=="},
        {"URL-safe alphabet", "Basic YWI6-_-_"},
        {"char outside the alphabet", "Basic YWxp*2U6c2VjcmV0"},
        {"length not a multiple of 4", "Basic " + enc + "A"},
        {"NUL before the base64", "Basic \0"s + enc},
        {"CR LF after the base64", "Basic " + enc + "\r\n"},
    }));
    INFO(c.name);
    CHECK_FALSE(parse_basic_auth(c.header));
}

TEST_CASE("basic_auth: values over 1 KiB are refused, counting surrounding whitespace",
          "[basic_auth]") {
    // "Basic " + 1016 base64 chars = 1022 bytes; two leading spaces make exactly 1 KiB.
    const std::string password(762 - 2, 'p');
    const std::string value = basic("u:" + password);
    REQUIRE(value.size() == 1022);

    const auto at_limit = parse_basic_auth("  " + value);
    REQUIRE(at_limit);
    CHECK(at_limit->user == "u");
    CHECK(at_limit->password == password);
    CHECK_FALSE(parse_basic_auth("   " + value));
    CHECK_FALSE(parse_basic_auth("  " + value + " "));

    // Well-formed credentials that are simply too long.
    const std::string long_value = basic("u:" + std::string(800, 'p'));
    REQUIRE(long_value.size() > max_header_value);
    CHECK_FALSE(parse_basic_auth(long_value));
    CHECK_FALSE(parse_basic_auth(basic("u:" + std::string(100000, 'p'))));
}

TEST_CASE("basic_auth: the user ends at the first colon of random credentials", "[basic_auth]") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_int_distribution<std::size_t> length(0, 40);
    for (int i = 0; i < 500; ++i) {
        std::string user(length(rng), '\0');
        for (auto& c : user) {
            c = static_cast<char>(byte(rng));
            if (c == ':') {
                c = 'x';
            }
        }
        std::string password(length(rng), '\0');
        for (auto& c : password) {
            c = static_cast<char>(byte(rng));
        }
        const auto r = parse_basic_auth(basic(user + ":" + password));
        REQUIRE(r);
        REQUIRE(r->user == user);
        REQUIRE(r->password == password);
    }
}
