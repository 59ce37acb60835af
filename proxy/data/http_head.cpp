#include "proxy/data/http_head.hpp"

#include <algorithm>

namespace cordon::proxy::data {

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
        case 2: return ascii_iequals(name, "te");
        case 7: return ascii_iequals(name, "trailer") || ascii_iequals(name, "upgrade");
        case 10: return ascii_iequals(name, "connection") || ascii_iequals(name, "keep-alive");
        case 16: return ascii_iequals(name, "proxy-connection");
        case 18: return ascii_iequals(name, "proxy-authenticate");
        case 19: return ascii_iequals(name, "proxy-authorization");
        default: return false;
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

namespace {

// RFC 9110 5.6.2 tchar.
bool tchar(unsigned char c) noexcept {
    if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) {
        return true;
    }
    return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

}  // namespace

std::string_view head_prefix_refusal(std::string_view have, std::size_t from) noexcept {
    // The request line first: the bytes that tell a stray protocol apart (a ClientHello
    // starts 0x16 0x03) are named by what they are. Bounded: a method is a short token.
    std::size_t start = 0;
    while (start + 1 < have.size() && have[start] == '\r' && have[start + 1] == '\n') {
        start += 2;
    }
    constexpr std::size_t max_method = 64;
    for (std::size_t i = start; i < have.size() && i - start <= max_method; ++i) {
        const auto c = static_cast<unsigned char>(have[i]);
        if (c == ' ' && i > start) {
            break;
        }
        if (i == start && c == 0x16) {
            return "a TLS handshake sent to the proxy port: it speaks HTTP; use CONNECT "
                   "(HTTPS_PROXY=http://...)";
        }
        if (c == '\r' || c == '\n') {
            if (i > start) {
                return "not an HTTP request: no request-target after the method";
            }
            break;  // an empty line's CR not yet followed by its LF, or a bare LF below
        }
        if (!tchar(c)) {
            return "not an HTTP request: the request line does not start with a method";
        }
        if (i - start == max_method) {
            return "not an HTTP request: the method is too long";
        }
    }
    for (std::size_t i = from; i < have.size(); ++i) {
        const auto c = static_cast<unsigned char>(have[i]);
        const bool after_cr = i > 0 && have[i - 1] == '\r';
        if (after_cr && c != '\n') {
            return "a bare CR in the request head (lines end with CRLF)";
        }
        if (c == '\n' && !after_cr) {
            return "a bare LF in the request head (lines end with CRLF)";
        }
        if (c == 0) {
            return "a NUL byte in the request head";
        }
        if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f) {
            return "a control character in the request head";
        }
    }
    return {};
}

std::string_view framing_refusal(std::size_t host_fields, std::size_t content_length_fields,
                                 std::size_t transfer_encoding_fields,
                                 std::string_view te_value) noexcept {
    if (host_fields > 1) {
        return "more than one Host";
    }
    if (content_length_fields > 1) {
        return "more than one Content-Length";
    }
    if (content_length_fields > 0 && transfer_encoding_fields > 0) {
        return "both Content-Length and Transfer-Encoding";
    }
    if (transfer_encoding_fields > 1 ||
        (transfer_encoding_fields == 1 && !ascii_iequals(te_value, "chunked"))) {
        return "only a single Transfer-Encoding: chunked is accepted";
    }
    return {};
}

}  // namespace cordon::proxy::data
