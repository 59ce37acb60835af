#include "common/json_string.hpp"

#include <cstdint>
#include <cstring>

#include "common/utf8.hpp"

namespace cordon::common {
namespace {

constexpr char hex[] = "0123456789abcdef";

void append_u16(std::string& out, unsigned v) {
    out.append("\\u");
    for (int shift = 12; shift >= 0; shift -= 4) {
        out.push_back(hex[(v >> shift) & 0xf]);
    }
}

// Whether any of the 8 bytes in `w` needs more than a copy: a control byte (< 0x20), DEL or
// a byte >= 0x80, '"' or '\\'. Exact for the word as a whole (no false negative); which
// byte it is, the byte loop finds.
constexpr bool word_needs_escape(std::uint64_t w) noexcept {
    constexpr std::uint64_t ones = 0x0101010101010101ULL;
    constexpr std::uint64_t highs = 0x8080808080808080ULL;
    const auto has_zero = [](std::uint64_t x) { return ((x - ones) & ~x & highs) != 0; };
    const bool high = (w & highs) != 0;
    const bool control = ((w - ones * 0x20) & ~w & highs) != 0;  // a byte < 0x20 (w < 0x80)
    return high || control || has_zero(w ^ (ones * '"')) || has_zero(w ^ (ones * '\\')) ||
           has_zero(w ^ (ones * 0x7f));
}

// Length of the leading run of bytes that go across as they are (printable ASCII but '"'
// and '\\'), eight at a time where it can.
std::size_t plain_run(std::string_view s) noexcept {
    std::size_t run = 0;
    while (run + 8 <= s.size()) {
        std::uint64_t w;
        std::memcpy(&w, s.data() + run, 8);
        if (word_needs_escape(w)) {
            break;
        }
        run += 8;
    }
    while (run < s.size()) {
        const auto u = static_cast<unsigned char>(s[run]);
        if (u < 0x20 || u >= 0x7f || u == '"' || u == '\\') {
            break;
        }
        ++run;
    }
    return run;
}

template <bool Ascii>
void append_impl(std::string& out, std::string_view s) {
    out.reserve(out.size() + s.size() + 2);
    out.push_back('"');
    while (!s.empty()) {
        // A run of printable ASCII but '"' and '\\' goes across as it is, in one append.
        const std::size_t run = plain_run(s);
        if (run > 0) {
            out.append(s.data(), run);
            s.remove_prefix(run);
            continue;
        }
        const auto c = static_cast<unsigned char>(s[0]);
        if (c == '"' || c == '\\') {  // the usual stop (JSON text written as a string): no decoding
            out.push_back('\\');
            out.push_back(static_cast<char>(c));
            s.remove_prefix(1);
            continue;
        }
        const utf8::sequence q = utf8::next(s);
        if (!q.valid) {
            out.append(Ascii ? "\\ufffd" : "\xef\xbf\xbd");  // U+FFFD
            s.remove_prefix(q.length);
            continue;
        }
        const std::uint32_t cp = q.code_point;
        if (Ascii && q.length > 1) {
            if (cp >= 0x10000) {  // a surrogate pair
                append_u16(out, 0xd800 + ((cp - 0x10000) >> 10));
                append_u16(out, 0xdc00 + ((cp - 0x10000) & 0x3ff));
            } else {
                append_u16(out, cp);
            }
            s.remove_prefix(q.length);
            continue;
        }
        if (cp == 0x2028 || cp == 0x2029) {
            out.append(cp == 0x2028 ? "\\u2028" : "\\u2029");
        } else if (q.length > 1) {
            out.append(s.substr(0, q.length));
        } else if (c == '\n') {
            out.append("\\n");
        } else if (c == '\r') {
            out.append("\\r");
        } else if (c == '\t') {
            out.append("\\t");
        } else if (c == '\b') {
            out.append("\\b");
        } else if (c == '\f') {
            out.append("\\f");
        } else if (c < 0x20 || c == 0x7f) {
            out.append("\\u00");
            out.push_back(hex[c >> 4]);
            out.push_back(hex[c & 0xf]);
        } else {
            out.push_back(static_cast<char>(c));
        }
        s.remove_prefix(q.length);
    }
    out.push_back('"');
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) { append_impl<false>(out, s); }

void append_json_string_ascii(std::string& out, std::string_view s) { append_impl<true>(out, s); }

}  // namespace cordon::common
