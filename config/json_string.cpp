#include "config/json_string.hpp"

namespace cordon::config {
namespace {

// Length of the valid UTF-8 sequence at the front of `s`, or of its maximal invalid
// subpart (negated) when it is not valid. `s` is not empty.
int utf8_sequence(std::string_view s) {
    const auto b0 = static_cast<unsigned char>(s[0]);
    if (b0 < 0x80) {
        return 1;
    }
    int need = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xbf;
    if (b0 >= 0xc2 && b0 <= 0xdf) {
        need = 1;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
        need = 2;
        lo = b0 == 0xe0 ? 0xa0 : 0x80;  // no overlongs
        hi = b0 == 0xed ? 0x9f : 0xbf;  // no surrogates
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
        need = 3;
        lo = b0 == 0xf0 ? 0x90 : 0x80;  // no overlongs
        hi = b0 == 0xf4 ? 0x8f : 0xbf;  // nothing above U+10FFFF
    } else {
        return -1;
    }
    for (int k = 1; k <= need; ++k) {
        if (static_cast<std::size_t>(k) >= s.size()) {
            return -k;
        }
        const auto b = static_cast<unsigned char>(s[static_cast<std::size_t>(k)]);
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) {
            return -k;
        }
    }
    return need + 1;
}

constexpr char hex[] = "0123456789abcdef";

void append_u16(std::string& out, unsigned v) {
    out.append("\\u");
    for (int shift = 12; shift >= 0; shift -= 4) {
        out.push_back(hex[(v >> shift) & 0xf]);
    }
}

// The code point of a valid UTF-8 sequence of `len` bytes (2 to 4) at the front of `s`.
unsigned code_point(std::string_view s, int len) {
    const auto b = [&](int i) { return static_cast<unsigned>(static_cast<unsigned char>(s[i])); };
    if (len == 2) {
        return ((b(0) & 0x1fU) << 6) | (b(1) & 0x3fU);
    }
    if (len == 3) {
        return ((b(0) & 0x0fU) << 12) | ((b(1) & 0x3fU) << 6) | (b(2) & 0x3fU);
    }
    return ((b(0) & 0x07U) << 18) | ((b(1) & 0x3fU) << 12) | ((b(2) & 0x3fU) << 6) |
           (b(3) & 0x3fU);
}

template <bool Ascii>
void append_impl(std::string& out, std::string_view s) {
    out.reserve(out.size() + s.size() + 2);
    out.push_back('"');
    while (!s.empty()) {
        // A run of printable ASCII but '"' and '\\' goes across as it is, in one append.
        std::size_t run = 0;
        while (run < s.size()) {
            const auto u = static_cast<unsigned char>(s[run]);
            if (u < 0x20 || u >= 0x7f || u == '"' || u == '\\') {
                break;
            }
            ++run;
        }
        if (run > 0) {
            out.append(s.data(), run);
            s.remove_prefix(run);
            continue;
        }
        const auto c = static_cast<unsigned char>(s[0]);
        const int len = utf8_sequence(s);
        if (len < 0) {
            out.append(Ascii ? "\\ufffd" : "\xef\xbf\xbd");  // U+FFFD
            s.remove_prefix(static_cast<std::size_t>(-len));
            continue;
        }
        if (Ascii && len > 1) {
            const unsigned cp = code_point(s, len);
            if (cp >= 0x10000) {  // a surrogate pair
                append_u16(out, 0xd800 + ((cp - 0x10000) >> 10));
                append_u16(out, 0xdc00 + ((cp - 0x10000) & 0x3ff));
            } else {
                append_u16(out, cp);
            }
            s.remove_prefix(static_cast<std::size_t>(len));
            continue;
        }
        const auto c2 = len == 3 ? static_cast<unsigned char>(s[2]) : 0;
        if (len == 3 && c == 0xe2 && static_cast<unsigned char>(s[1]) == 0x80 &&
            (c2 == 0xa8 || c2 == 0xa9)) {
            out.append(c2 == 0xa8 ? "\\u2028" : "\\u2029");
        } else if (len > 1) {
            out.append(s.substr(0, static_cast<std::size_t>(len)));
        } else if (c == '"') {
            out.append("\\\"");
        } else if (c == '\\') {
            out.append("\\\\");
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
        s.remove_prefix(static_cast<std::size_t>(len));
    }
    out.push_back('"');
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) { append_impl<false>(out, s); }

void append_json_string_ascii(std::string& out, std::string_view s) {
    append_impl<true>(out, s);
}

}  // namespace cordon::config
