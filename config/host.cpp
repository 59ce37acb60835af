#include "config/host.hpp"

#include "config/ip.hpp"

namespace cordon::config {
namespace {

constexpr std::size_t max_label_length = 63;

char lower(char c) noexcept {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool name_char(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

std::string describe_char(char c) {
    switch (c) {
        case ' ': return "a space";
        case '\t': return "a tab";
        case '\0': return "a NUL byte";
        case '_': return "'_' (not allowed in host names)";
        default: break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
        return "a non-ASCII byte (write internationalised names as punycode A-labels, "
               "xn--...)";
    }
    if (u < 0x20 || u == 0x7f) {
        return "a control character";
    }
    return std::string("'") + c + "'";
}

// Validates and lower-cases `host` into `out`; returns the length or 0, and sets `error`
// when given. One implementation for both the allocating and the data-path forms.
std::size_t normalise(std::string_view host, char* out, std::string* error) {
    auto fail = [&](std::string why) -> std::size_t {
        if (error != nullptr) {
            *error = std::move(why);
        }
        return 0;
    };
    if (!host.empty() && host.back() == '.') {
        host.remove_suffix(1);
    }
    if (host.empty()) {
        return fail("empty host name");
    }
    if (host.size() > max_host_length) {
        return fail("host name is longer than 253 characters");
    }
    std::size_t label_start = 0;
    for (std::size_t i = 0; i <= host.size(); ++i) {
        if (i == host.size() || host[i] == '.') {
            const std::size_t len = i - label_start;
            if (len == 0) {
                return fail("empty label in host name");
            }
            if (len > max_label_length) {
                return fail("label longer than 63 characters in host name");
            }
            if (out[label_start] == '-' || out[i - 1] == '-') {
                return fail("label starts or ends with '-' in host name");
            }
            if (i < host.size()) {
                out[i] = '.';
            }
            label_start = i + 1;
            continue;
        }
        const char c = lower(host[i]);
        if (!name_char(c)) {
            return fail("host name contains " + describe_char(host[i]));
        }
        out[i] = c;
    }
    return host.size();
}

}  // namespace

host_result normalise_host(std::string_view host) {
    host_result r;
    char buf[max_host_length + 1];
    const std::size_t n = normalise(host, buf, &r.error);
    if (n > 0) {
        r.value.assign(buf, n);
    }
    return r;
}

std::size_t normalise_host_into(std::string_view host, char* out) noexcept {
    try {
        return normalise(host, out, nullptr);
    } catch (...) {  // only the error string can throw, and it is not built here
        return 0;
    }
}

bool host_pattern::matches(std::string_view host) const noexcept {
    if (!wildcard) {
        return host == name;
    }
    // Strictly below: "a.example.com" and "a.b.example.com", never "example.com" nor
    // "badexample.com".
    return host.size() > name.size() + 1 && host.ends_with(name) &&
           host[host.size() - name.size() - 1] == '.';
}

host_pattern_result parse_host_pattern(std::string_view text) {
    host_pattern_result r;
    std::string_view rest = text;
    if (rest.starts_with("*.")) {
        r.value.wildcard = true;
        rest.remove_prefix(2);
    }
    if (rest.find('*') != std::string_view::npos) {
        r.error = "'*' is allowed only as the whole leftmost label, as in \"*.example.com\"";
        return r;
    }
    const literal lit = parse_literal(rest);
    if (lit.kind != literal_kind::not_ip) {
        r.error = "an IP address is not a host name; use a `cidr` rule for addresses";
        return r;
    }
    host_result n = normalise_host(rest);
    if (!n.ok()) {
        r.error = n.error;
        return r;
    }
    if (r.value.wildcard && n.value.find('.') == std::string::npos) {
        r.error = "a wildcard needs at least two labels after \"*.\" (\"*." + n.value +
                  "\" would match every name under a top-level domain)";
        return r;
    }
    r.value.name = std::move(n.value);
    return r;
}

std::string host_port(std::string_view host, std::uint16_t port) {
    const bool brackets = host.find(':') != std::string_view::npos;
    std::string out;
    out.reserve(host.size() + 8);
    if (brackets) {
        out += '[';
    }
    out += host;
    if (brackets) {
        out += ']';
    }
    out += ':';
    out += std::to_string(port);
    return out;
}

}  // namespace cordon::config
