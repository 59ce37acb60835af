// Tests of the secret primitives: CSPRNG hex, SHA-256, constant-time equality, RFC 3339.
#include "proxy/control/tokens.hpp"
#include "common/time.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::control;
using namespace cordon::common;
using namespace std::chrono;

bool is_lower_hex(std::string_view s) {
    for (const char c : s) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return false;
        }
    }
    return true;
}

std::string to_hex(const secret_hash& h) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (const auto b : h) {
        out.push_back(digits[b >> 4]);
        out.push_back(digits[b & 0x0f]);
    }
    return out;
}

wall_clock::time_point at(sys_days day, milliseconds since_midnight = milliseconds::zero()) {
    return wall_clock::time_point(day) + since_midnight;
}

}  // namespace

TEST_CASE("tokens: random_hex gives 2 * bytes lower-case hex chars", "[tokens]") {
    const auto bytes = GENERATE(as<std::size_t>{}, 0, 1, 6, 8, 32, 100);
    const std::string s = random_hex(bytes);
    CHECK(s.size() == bytes * 2);
    CHECK(is_lower_hex(s));
}

TEST_CASE("tokens: 1000 random 32-byte secrets are all distinct", "[tokens]") {
    std::set<std::string> seen;
    for (int i = 0; i < 1000; ++i) {
        const std::string s = random_hex(32);
        REQUIRE(s.size() == 64);
        REQUIRE(is_lower_hex(s));
        seen.insert(s);
    }
    CHECK(seen.size() == 1000);
}

TEST_CASE("tokens: random_hex uses every hex digit", "[tokens]") {
    // 4000 hex digits from a uniform source miss one of 16 values with probability ~0.
    const std::string s = random_hex(2000);
    for (const char c : std::string_view("0123456789abcdef")) {
        CHECK(s.find(c) != std::string::npos);
    }
}

TEST_CASE("tokens: hash_secret is SHA-256 (FIPS 180-2 test vectors)", "[tokens]") {
    const std::vector<std::pair<std::string, std::string>> cases{
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    for (const auto& [input, expected] : cases) {
        INFO("input: \"" << input << '"');
        CHECK(to_hex(hash_secret(input)) == expected);
    }
}

TEST_CASE("tokens: hash_secret is stable and tells secrets apart", "[tokens]") {
    const std::string secret = random_hex(32);
    CHECK(hash_secret(secret) == hash_secret(secret));
    std::string other = secret;
    other.back() = other.back() == '0' ? '1' : '0';
    CHECK(hash_secret(secret) != hash_secret(other));
    // Embedded NULs are part of the secret.
    CHECK(hash_secret(std::string_view("a\0b", 3)) != hash_secret("a"));
}

TEST_CASE("tokens: equal_constant_time on strings", "[tokens]") {
    CHECK(equal_constant_time("", ""));
    CHECK(equal_constant_time("secret", "secret"));
    CHECK_FALSE(equal_constant_time("secret", "secreT"));
    CHECK_FALSE(equal_constant_time("secret", "Secret"));
    CHECK_FALSE(equal_constant_time("secret", "secret2"));
    CHECK_FALSE(equal_constant_time("secret", ""));
    CHECK_FALSE(equal_constant_time("", "x"));
    CHECK(equal_constant_time(std::string_view("a\0b", 3), std::string_view("a\0b", 3)));
    CHECK_FALSE(equal_constant_time(std::string_view("a\0b", 3), std::string_view("a\0c", 3)));
}

TEST_CASE("tokens: equal_constant_time on hashes", "[tokens]") {
    const secret_hash a = hash_secret("a");
    secret_hash b = a;
    CHECK(equal_constant_time(a, b));
    b[31] ^= 1;
    CHECK_FALSE(equal_constant_time(a, b));
    b = a;
    b[0] ^= 0x80;
    CHECK_FALSE(equal_constant_time(a, b));
    CHECK_FALSE(equal_constant_time(a, hash_secret("b")));
}

TEST_CASE("tokens: format_rfc3339 of known instants", "[tokens]") {
    using std::chrono::year;
    const std::vector<std::pair<wall_clock::time_point, std::string>> cases{
        {wall_clock::time_point{}, "1970-01-01T00:00:00.000Z"},
        {at(year{2026} / 11 / 29, 15h + 20min + 18s + 123ms), "2026-11-29T15:20:18.123Z"},
        {wall_clock::time_point(seconds(1700000000)), "2023-11-14T22:13:20.000Z"},
        {at(year{2000} / 2 / 29, 23h + 59min + 59s + 999ms), "2000-02-29T23:59:59.999Z"},
        {at(year{2024} / 1 / 1, 7ms), "2024-01-01T00:00:00.007Z"},
        {at(year{2100} / 12 / 31, 23h + 59min + 59s + 999ms), "2100-12-31T23:59:59.999Z"},
        // Before the epoch, and sub-millisecond parts: truncated towards the past.
        {wall_clock::time_point(milliseconds(-1)), "1969-12-31T23:59:59.999Z"},
        {wall_clock::time_point{} + microseconds(1999), "1970-01-01T00:00:00.001Z"},
        {wall_clock::time_point{} - microseconds(1), "1969-12-31T23:59:59.999Z"},
    };
    for (const auto& [t, expected] : cases) {
        CHECK(format_rfc3339(t) == expected);
    }
}

TEST_CASE("tokens: append_rfc3339 appends what format_rfc3339 returns", "[tokens]") {
    using std::chrono::year;
    for (const auto t : {wall_clock::time_point{}, wall_clock::time_point::min(),
                         wall_clock::time_point::max(), wall_clock::time_point(milliseconds(-1)),
                         at(year{2026} / 11 / 29, 15h + 20min + 18s + 123ms)}) {
        std::string out = "ts=";
        append_rfc3339(out, t);
        CHECK(out == "ts=" + format_rfc3339(t));
        CHECK(out.size() == 3 + 24);
    }
    CHECK(format_rfc3339(wall_clock::time_point::min()) == "1677-09-21T00:12:43.145Z");
}
