#include "config/target.hpp"

#include <algorithm>
#include <charconv>

namespace cordon::config {
namespace {

constexpr std::size_t max_target_length = 8192;

bool parse_port(std::string_view s, std::uint16_t& out) {
    if (s.empty() || s.size() > 5 || (s.size() > 1 && s[0] == '0')) {
        return false;
    }
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v == 0 || v > 65535) {
        return false;
    }
    out = static_cast<std::uint16_t>(v);
    return true;
}

// Splits "host:port" / "[v6]:port" / "host" (when the port is optional).
bool split_authority(std::string_view a, bool port_required, std::uint16_t default_port,
                     target& out, std::string& error) {
    std::string_view host;
    std::string_view port;
    bool has_port = false;
    if (a.starts_with('[')) {
        const auto close = a.find(']');
        if (close == std::string_view::npos) {
            error = "unterminated '[' in the target";
            return false;
        }
        host = a.substr(1, close - 1);
        const std::string_view rest = a.substr(close + 1);
        if (!rest.empty()) {
            if (rest[0] != ':') {
                error = "unexpected characters after ']' in the target";
                return false;
            }
            port = rest.substr(1);
            has_port = true;
        }
        if (host.find(':') == std::string_view::npos) {
            error = "brackets are only for IPv6 addresses";
            return false;
        }
    } else {
        const auto colon = a.rfind(':');
        if (colon != std::string_view::npos) {
            host = a.substr(0, colon);
            port = a.substr(colon + 1);
            has_port = true;
            if (host.find(':') != std::string_view::npos) {
                error = "write IPv6 addresses in brackets, e.g. [2001:db8::1]:443";
                return false;
            }
        } else {
            host = a;
        }
    }
    if (host.empty()) {
        error = "the target has no host";
        return false;
    }
    if (!has_port) {
        if (port_required) {
            error = "the target needs a port, e.g. example.com:443";
            return false;
        }
        out.port = default_port;
    } else if (!parse_port(port, out.port)) {
        error = "the port must be a number 1..65535";
        return false;
    }
    out.host.assign(host);
    return true;
}

bool printable(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u > 0x20 && u < 0x7f;
    });
}

}  // namespace

target_result parse_connect_target(std::string_view text) {
    target_result r;
    if (text.empty() || text.size() > max_target_length || !printable(text)) {
        r.error = "the CONNECT target must be host:port";
        return r;
    }
    if (text.find('/') != std::string_view::npos || text.find('@') != std::string_view::npos) {
        r.error = "the CONNECT target must be host:port, not a URL";
        return r;
    }
    target t;
    if (!split_authority(text, true, 0, t, r.error)) {
        return r;
    }
    r.value = std::move(t);
    return r;
}

target_result parse_absolute_uri(std::string_view text) {
    target_result r;
    if (text.size() > max_target_length || !printable(text)) {
        r.error = "the request target is too long or has control characters";
        return r;
    }
    // Origin-form first: its query may itself hold a "://" ("/login?next=http://...").
    if (text.starts_with('/')) {
        r.error = "this is a proxy: send absolute-form requests (GET http://host/path)";
        return r;
    }
    const auto scheme_end = text.find("://");
    if (scheme_end == std::string_view::npos) {
        r.error = "the request target must be an absolute http:// URL";
        return r;
    }
    std::string scheme(text.substr(0, scheme_end));
    std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                   [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); });
    if (scheme == "https") {
        r.error = "https is proxied with CONNECT, not as an absolute-form request";
        return r;
    }
    if (scheme != "http") {
        r.error = "only http:// URLs are forwarded";
        return r;
    }
    std::string_view rest = text.substr(scheme_end + 3);
    const auto path_start = rest.find_first_of("/?#");
    const std::string_view authority = rest.substr(0, path_start);
    std::string_view path = path_start == std::string_view::npos ? std::string_view()
                                                                 : rest.substr(path_start);
    if (authority.find('@') != std::string_view::npos) {
        r.error = "credentials in the URL are not forwarded; remove the user@ part";
        return r;
    }
    if (path.find('#') != std::string_view::npos) {
        r.error = "a fragment (#...) is never sent to a server";
        return r;
    }
    target t;
    if (!split_authority(authority, false, 80, t, r.error)) {
        return r;
    }
    t.authority.assign(authority);
    if (path.empty()) {
        t.origin_form = "/";
    } else if (path[0] == '?') {
        t.origin_form = "/" + std::string(path);
    } else {
        t.origin_form.assign(path);
    }
    r.value = std::move(t);
    return r;
}

bool host_header_matches(std::string_view host_header, const target& t,
                         std::uint16_t default_port) {
    target h;
    std::string error;
    if (!split_authority(host_header, false, default_port, h, error)) {
        return false;
    }
    if (h.port != t.port || h.host.size() != t.host.size()) {
        return false;
    }
    return std::equal(h.host.begin(), h.host.end(), t.host.begin(), [](char a, char b) {
        auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
        return lower(a) == lower(b);
    });
}

}  // namespace cordon::config
