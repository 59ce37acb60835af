#include "proxy/http_head.hpp"

#include <algorithm>

namespace cordon::proxy {

bool ascii_iless(std::string_view a, std::string_view b) noexcept {
    const auto lower = [](char c) {
        return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
    };
    const std::size_t n = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < n; ++i) {
        const char x = lower(a[i]);
        const char y = lower(b[i]);
        if (x != y) {
            return static_cast<unsigned char>(x) < static_cast<unsigned char>(y);
        }
    }
    return a.size() < b.size();
}

bool hop_by_hop_name(std::string_view name) noexcept {
    // By length first: a field name is compared with the one or two names of its length.
    switch (name.size()) {
        case 2:
            return ascii_iequals(name, "te");
        case 7:
            return ascii_iequals(name, "trailer") || ascii_iequals(name, "upgrade");
        case 10:
            return ascii_iequals(name, "connection") || ascii_iequals(name, "keep-alive");
        case 16:
            return ascii_iequals(name, "proxy-connection");
        case 18:
            return ascii_iequals(name, "proxy-authenticate");
        case 19:
            return ascii_iequals(name, "proxy-authorization");
        default:
            return false;
    }
}

void append_end_to_end_lines(std::string& out, std::string_view lines, const field_filter& f) {
    append_end_to_end_fields(
        out, [lines](auto&& fn) { for_each_field(lines, fn); }, f);
}

std::string_view response_connection(unsigned version, bool keep, bool upgrade) noexcept {
    if (version >= 11) {
        if (upgrade) {
            return keep ? "upgrade" : "upgrade, close";
        }
        return keep ? "" : "close";
    }
    if (upgrade) {
        return keep ? "upgrade, keep-alive" : "upgrade";
    }
    return keep ? "keep-alive" : "";
}

std::string_view head_fields(std::string_view head) noexcept {
    const std::size_t first = head.find("\r\n");
    if (first == std::string_view::npos || head.size() < first + 4) {
        return {};
    }
    std::string_view rest = head.substr(first + 2);
    // The head ends with the empty line: drop its CRLF (the last field keeps its own).
    if (rest.ends_with("\r\n")) {
        rest.remove_suffix(2);
    }
    return rest;
}

}  // namespace cordon::proxy
