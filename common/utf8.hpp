#pragma once
// The one UTF-8 decoder of config/ (the JSON string escaper, the Public Suffix List's
// punycode): strict RFC 3629, so overlong forms, surrogates (U+D800..U+DFFF) and code points
// above U+10FFFF are invalid, as are stray continuation bytes and truncated sequences.
// Pure, header-only.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace cordon::common::utf8 {

/// What is at the front of a byte string: one valid sequence and its code point, or the
/// maximal invalid subpart (Unicode ch. 3, "U+FFFD substitution of maximal subparts"): the
/// bytes a decoder replaces by one U+FFFD before it goes on.
struct sequence {
    std::size_t length = 0;  ///< bytes taken, 1 to 4 (1 to 3 when invalid)
    bool valid = false;
    std::uint32_t code_point = 0;  ///< when valid
};

/// Decodes the sequence at the front of `s`, which is not empty.
constexpr sequence next(std::string_view s) noexcept {
    const auto b0 = static_cast<unsigned char>(s[0]);
    if (b0 < 0x80) {
        return {1, true, b0};
    }
    std::size_t need = 0;
    unsigned char lo = 0x80;  // the range of the second byte
    unsigned char hi = 0xbf;
    std::uint32_t cp = 0;
    if (b0 >= 0xc2 && b0 <= 0xdf) {  // 0xc0 and 0xc1 only start overlongs
        need = 1;
        cp = b0 & 0x1fU;
    } else if (b0 >= 0xe0 && b0 <= 0xef) {
        need = 2;
        lo = b0 == 0xe0 ? 0xa0 : 0x80;  // no overlongs
        hi = b0 == 0xed ? 0x9f : 0xbf;  // no surrogates
        cp = b0 & 0x0fU;
    } else if (b0 >= 0xf0 && b0 <= 0xf4) {
        need = 3;
        lo = b0 == 0xf0 ? 0x90 : 0x80;  // no overlongs
        hi = b0 == 0xf4 ? 0x8f : 0xbf;  // nothing above U+10FFFF
        cp = b0 & 0x07U;
    } else {
        return {1, false, 0};  // a continuation byte, or 0xc0, 0xc1, 0xf5..0xff
    }
    for (std::size_t k = 1; k <= need; ++k) {
        if (k >= s.size()) {
            return {k, false, 0};  // truncated
        }
        const auto b = static_cast<unsigned char>(s[k]);
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) {
            return {k, false, 0};
        }
        cp = (cp << 6) | (b & 0x3fU);
    }
    return {need + 1, true, cp};
}

/// Decodes all of `s` into `out` (appended); false, with `out` partly filled, at the first
/// invalid sequence.
inline bool decode(std::string_view s, std::vector<std::uint32_t>& out) {
    while (!s.empty()) {
        const sequence q = next(s);
        if (!q.valid) {
            return false;
        }
        out.push_back(q.code_point);
        s.remove_prefix(q.length);
    }
    return true;
}

}  // namespace cordon::common::utf8
