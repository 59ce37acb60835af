#include "config/http_url.hpp"

#include <charconv>

#include "config/host.hpp"
#include "config/ip.hpp"

namespace cordon::config {

namespace {

constexpr std::size_t max_url_length = 8192;

http_url_result fail(std::string msg) {
    http_url_result r;
    r.error = std::move(msg);
    return r;
}

}  // namespace

std::string http_url::origin() const {
    return std::string(tls ? "https://" : "http://") + host_header();
}

std::string http_url::host_header() const {
    std::string out = ipv6 ? "[" + host + "]" : host;
    if (port != (tls ? 443 : 80)) {
        out += ':';
        out += std::to_string(port);
    }
    return out;
}

http_url_result parse_http_url(std::string_view text) {
    http_url u;
    if (text.starts_with("https://")) {
        u.tls = true;
        text.remove_prefix(8);
    } else if (text.starts_with("http://")) {
        text.remove_prefix(7);
    } else {
        return fail("expected an http:// or https:// URL");
    }
    for (const char c : text) {
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            return fail("URL contains whitespace");
        }
    }
    for (const char c : text) {
        const auto b = static_cast<unsigned char>(c);
        if (b < 0x20 || b == 0x7f) {
            return fail("URL contains a control character");
        }
        if (b >= 0x80) {
            return fail("URL contains non-ASCII characters (percent-encode them)");
        }
    }
    if (text.size() > max_url_length) {
        return fail("URL is longer than 8192 characters");
    }
    if (text.find('#') != std::string_view::npos) {
        return fail("URL has a fragment ('#'); remove it");
    }
    const std::size_t end = text.find_first_of("/?");
    std::string_view authority = text.substr(0, end);
    std::string_view rest = end == std::string_view::npos ? std::string_view() : text.substr(end);
    if (authority.find('@') != std::string_view::npos) {
        return fail("URL has credentials ('user:password@'); put them in `headers` "
                    "(e.g. Authorization) instead");
    }
    std::string_view host = authority;
    std::string_view port_text;
    if (authority.starts_with('[')) {
        const std::size_t close = authority.find(']');
        if (close == std::string_view::npos) {
            return fail("URL has an unclosed '[' in its host");
        }
        host = authority.substr(1, close - 1);
        std::string_view after = authority.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':') {
                return fail("URL has characters after its IPv6 host");
            }
            port_text = after.substr(1);
            if (port_text.empty()) {
                return fail("URL has an empty port");
            }
        }
        const auto ip = parse_ip(host);
        if (!ip || ip->is_v4()) {
            return fail("URL has an invalid IPv6 host");
        }
        u.host = ip->to_string();
        u.ipv6 = true;
    } else {
        const std::size_t colon = authority.rfind(':');
        if (colon != std::string_view::npos) {
            host = authority.substr(0, colon);
            port_text = authority.substr(colon + 1);
            if (port_text.empty()) {
                return fail("URL has an empty port");
            }
        }
        if (host.empty()) {
            return fail("URL has no host");
        }
        const literal lit = parse_literal(host);
        if (lit.kind == literal_kind::ipv4) {
            u.host = lit.address.to_string();
        } else if (lit.kind == literal_kind::not_ip) {
            const host_result h = normalise_host(host);
            if (!h.ok()) {
                return fail("URL host is not a valid DNS name: " + h.error);
            }
            u.host = h.value;
        } else {
            return fail("URL host is not a valid name or canonical IPv4 address");
        }
    }
    u.port = u.tls ? 443 : 80;
    if (!port_text.empty()) {
        unsigned v = 0;
        const char* port_end = port_text.data() + port_text.size();
        const auto [p, ec] = std::from_chars(port_text.data(), port_end, v);
        if (ec != std::errc() || p != port_end || v < 1 || v > 65535) {
            return fail("URL port must be 1..65535");
        }
        u.port = static_cast<std::uint16_t>(v);
    }
    u.target = rest.empty() ? "/" : std::string(rest);
    if (u.target.front() == '?') {
        u.target.insert(u.target.begin(), '/');
    }
    http_url_result r;
    r.value = std::move(u);
    return r;
}

}  // namespace cordon::config
