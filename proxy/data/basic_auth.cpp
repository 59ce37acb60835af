#include "proxy/data/basic_auth.hpp"

#include <array>

namespace cordon::proxy::data {
namespace {

constexpr std::string_view alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr std::size_t max_header_value = 1024;

constexpr std::array<std::int8_t, 256> make_table() {
    std::array<std::int8_t, 256> t{};
    for (auto& v : t) {
        v = -1;
    }
    for (std::size_t i = 0; i < alphabet.size(); ++i) {
        t[static_cast<unsigned char>(alphabet[i])] = static_cast<std::int8_t>(i);
    }
    return t;
}
constexpr auto table = make_table();

}  // namespace

std::optional<std::string> base64_decode(std::string_view in) {
    if (in.size() % 4 != 0) {
        return std::nullopt;
    }
    std::string out;
    out.reserve(in.size() / 4 * 3);
    for (std::size_t i = 0; i < in.size(); i += 4) {
        const bool last = i + 4 == in.size();
        int pad = 0;
        std::uint32_t v = 0;
        for (std::size_t j = 0; j < 4; ++j) {
            const char c = in[i + j];
            if (c == '=') {
                // Padding only at the very end, and only in the last two positions.
                if (!last || j < 2) {
                    return std::nullopt;
                }
                ++pad;
                v <<= 6;
                continue;
            }
            if (pad > 0) {
                return std::nullopt;  // data after padding
            }
            const auto d = table[static_cast<unsigned char>(c)];
            if (d < 0) {
                return std::nullopt;
            }
            v = (v << 6) | static_cast<std::uint32_t>(d);
        }
        // Canonical: the bits the padding drops must be zero.
        if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0)) {
            return std::nullopt;
        }
        out += static_cast<char>(v >> 16);
        if (pad < 2) {
            out += static_cast<char>((v >> 8) & 0xff);
        }
        if (pad < 1) {
            out += static_cast<char>(v & 0xff);
        }
    }
    return out;
}

std::string base64_encode(std::string_view in) {
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 3 <= in.size(); i += 3) {
        const std::uint32_t v = (static_cast<unsigned char>(in[i]) << 16) |
                                (static_cast<unsigned char>(in[i + 1]) << 8) |
                                static_cast<unsigned char>(in[i + 2]);
        out += alphabet[v >> 18];
        out += alphabet[(v >> 12) & 63];
        out += alphabet[(v >> 6) & 63];
        out += alphabet[v & 63];
    }
    if (i < in.size()) {
        std::uint32_t v = static_cast<std::uint32_t>(static_cast<unsigned char>(in[i])) << 16;
        if (i + 1 < in.size()) {
            v |= static_cast<std::uint32_t>(static_cast<unsigned char>(in[i + 1])) << 8;
        }
        out += alphabet[v >> 18];
        out += alphabet[(v >> 12) & 63];
        out += i + 1 < in.size() ? alphabet[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::optional<basic_credentials> parse_basic_auth(std::string_view value) {
    if (value.size() > max_header_value) {
        return std::nullopt;
    }
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
        value.remove_prefix(1);
    }
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) {
        value.remove_suffix(1);
    }
    constexpr std::string_view scheme = "basic";
    if (value.size() <= scheme.size() + 1) {
        return std::nullopt;
    }
    for (std::size_t i = 0; i < scheme.size(); ++i) {
        const char c = value[i];
        if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c) != scheme[i]) {
            return std::nullopt;
        }
    }
    if (value[scheme.size()] != ' ') {
        return std::nullopt;
    }
    std::string_view encoded = value.substr(scheme.size() + 1);
    while (!encoded.empty() && encoded.front() == ' ') {
        encoded.remove_prefix(1);
    }
    auto decoded = base64_decode(encoded);
    if (!decoded) {
        return std::nullopt;
    }
    const auto colon = decoded->find(':');
    if (colon == std::string::npos) {
        return std::nullopt;
    }
    basic_credentials c;
    c.user = decoded->substr(0, colon);
    c.password = decoded->substr(colon + 1);
    return c;
}

}  // namespace cordon::proxy::data
