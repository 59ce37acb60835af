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

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
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
            out.append("\xef\xbf\xbd");  // U+FFFD
            s.remove_prefix(static_cast<std::size_t>(-len));
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

}  // namespace cordon::config
