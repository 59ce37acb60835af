// Fuzzes parse_basic_auth and base64_decode on the raw bytes. Checks that only canonical
// base64 decodes (so decoding then encoding gives back the input), that encoding then
// decoding gives back any bytes, and that accepted credentials re-encode to the header.
// Any violation traps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "proxy/data/basic_auth.hpp"

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::data;

constexpr std::size_t max_header_value = 1024;

void check(bool ok, const char* what, std::size_t size) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s (input %zu bytes)\n", what, size);
        __builtin_trap();
    }
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
        s.remove_suffix(1);
    }
    return s;
}

void fuzz_base64(std::string_view text) {
    const std::size_t n = text.size();
    const std::string enc = base64_encode(text);
    check(enc.size() == (n + 2) / 3 * 4, "encoded size is 4 * ceil(n / 3)", n);
    const auto round = base64_decode(enc);
    check(round && *round == text, "decode(encode(x)) == x", n);

    const auto dec = base64_decode(text);
    if (dec) {
        check(n % 4 == 0, "only whole quanta decode", n);
        check(dec->size() <= n / 4 * 3 && dec->size() + 2 >= n / 4 * 3, "decoded size", n);
        check(base64_encode(*dec) == text, "encode(decode(s)) == s: only canonical input", n);
    }
}

void fuzz_parse(std::string_view text) {
    const std::size_t n = text.size();
    const auto creds = parse_basic_auth(text);
    if (!creds) {
        return;
    }
    check(n <= max_header_value, "values over 1 KiB are refused", n);
    check(creds->user.find(':') == std::string::npos, "the user ends at the first colon", n);

    // The value is "basic" in any case, spaces, then exactly the credentials' base64.
    const std::string_view v = trim(text);
    check(v.size() > 6, "scheme, space and credentials", n);
    std::string scheme(v.substr(0, 5));
    for (auto& c : scheme) {
        if (c >= 'A' && c <= 'Z') {
            c = static_cast<char>(c + 32);
        }
    }
    check(scheme == "basic" && v[5] == ' ', "the Basic scheme then a space", n);
    const std::string_view encoded = v.substr(v.find_first_not_of(' ', 5));
    check(encoded == base64_encode(creds->user + ":" + creds->password),
          "the credentials re-encode to the header", n);

    // Re-parsing the canonical form gives the same credentials.
    const auto again = parse_basic_auth("Basic " + std::string(encoded));
    check(again && again->user == creds->user && again->password == creds->password,
          "the canonical header parses the same", n);
}

/// The input as the credentials of a well-formed header.
void fuzz_credentials(std::string_view text) {
    const std::size_t n = text.size();
    const std::string header = "Basic " + base64_encode(text);
    const auto creds = parse_basic_auth(header);
    const auto colon = text.find(':');
    if (header.size() > max_header_value || colon == std::string_view::npos) {
        check(!creds, "too long or no colon is refused", n);
        return;
    }
    check(creds && creds->user == text.substr(0, colon) &&
              creds->password == text.substr(colon + 1),
          "user before the first colon, password after", n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    fuzz_base64(text);
    fuzz_parse(text);
    fuzz_credentials(text);
    return 0;
}
