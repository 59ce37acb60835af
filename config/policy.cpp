#include "config/policy.hpp"

#include <algorithm>
#include <charconv>

namespace cordon::config {

std::string_view to_string(protocol p) noexcept {
    switch (p) {
        case protocol::tls: return "tls";
        case protocol::tcp: return "tcp";
        case protocol::http: return "http";
        case protocol::https: return "https";
        case protocol::ssh: return "ssh";
    }
    return "?";
}

std::string_view to_string(job_mode m) noexcept {
    return m == job_mode::report ? "report" : "enforce";
}

std::string_view to_string(deny_rcode r) noexcept {
    return r == deny_rcode::nxdomain ? "NXDOMAIN" : "REFUSED";
}

bool egress_rule::allows_port(std::uint16_t port) const noexcept {
    return std::binary_search(ports.begin(), ports.end(), port);
}

bool egress_rule::allows_method(std::string_view method) const noexcept {
    if (methods.empty()) {
        return true;
    }
    return std::find(methods.begin(), methods.end(), method) != methods.end();
}

bool mcp_spec::allows_tool(std::string_view name) const noexcept {
    return std::binary_search(tools.begin(), tools.end(), name);
}

bool valid_mcp_tool_name(std::string_view s) noexcept {
    if (s.empty() || s.size() > 128) {
        return false;
    }
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.' || c == '/';
    });
}

std::string egress_rule::describe() const {
    std::string out = host ? host->to_string() : net ? net->to_string() : "?";
    out += ':';
    for (std::size_t i = 0; i < ports.size(); ++i) {
        if (i > 0) {
            out += ',';
        }
        out += std::to_string(ports[i]);
    }
    out += '/';
    out += to_string(proto);
    return out;
}

std::string endpoint::to_string() const { return host_port(address.to_string(), port); }

endpoint_result parse_endpoint(std::string_view text) {
    endpoint_result r;
    std::string_view host;
    std::string_view port;
    if (text.starts_with('[')) {
        const auto close = text.find(']');
        if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
            r.error = "expected [IPV6]:PORT";
            return r;
        }
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos) {
            r.error = "expected ADDRESS:PORT, e.g. 127.0.0.1:3128";
            return r;
        }
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
        if (host.find(':') != std::string_view::npos) {
            r.error = "write IPv6 addresses in brackets, e.g. [::1]:3128";
            return r;
        }
    }
    const auto addr = parse_ip(host);
    if (!addr) {
        r.error = "'" + std::string(host) +
                  "' is not an IP address (listen on an address, "
                  "not a name)";
        return r;
    }
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535 ||
        (port.size() > 1 && port[0] == '0')) {
        r.error = "'" + std::string(port) + "' is not a port 0..65535";
        return r;
    }
    r.value = endpoint{*addr, static_cast<std::uint16_t>(value)};
    return r;
}

std::optional<std::uint16_t> parse_query_type(std::string_view name) {
    static constexpr std::pair<std::string_view, std::uint16_t> types[] = {
        {"A", 1},      {"NS", 2},    {"CNAME", 5}, {"SOA", 6},  {"PTR", 12},
        {"MX", 15},    {"TXT", 16},  {"AAAA", 28}, {"SRV", 33}, {"SVCB", 64},
        {"HTTPS", 65}, {"CAA", 257}, {"ANY", 255},
    };
    for (const auto& [n, v] : types) {
        if (n == name) {
            return v;
        }
    }
    return std::nullopt;
}

const job* policy::find_job(std::string_view name) const noexcept {
    for (const auto& j : jobs) {
        if (j.name == name) {
            return &j;
        }
    }
    return nullptr;
}

std::size_t policy::rule_count() const noexcept {
    std::size_t n = 0;
    for (const auto& j : jobs) {
        n += j.egress.size();
    }
    return n;
}

std::vector<std::string> keep_restart_only(const policy& running, policy& next) {
    std::vector<std::string> changed;
    const auto keep = [&changed](const char* name, const auto& now, auto& asked) {
        if (!(asked == now)) {
            asked = now;
            changed.emplace_back(name);
        }
    };
    keep("listen.proxy", running.listen.proxy, next.listen.proxy);
    keep("listen.socks", running.listen.socks, next.listen.socks);
    keep("listen.dns", running.listen.dns, next.listen.dns);
    keep("listen.admin", running.listen.admin, next.listen.admin);
    keep("admin.token_file", running.admin.token_file, next.admin.token_file);
    keep("state.path", running.state.path, next.state.path);
    keep("audit.path", running.audit.path, next.audit.path);
    keep("audit.retention_days", running.audit.retention_days, next.audit.retention_days);
    keep("audit.max_file_bytes", running.audit.max_file_bytes, next.audit.max_file_bytes);
    keep("cluster", running.cluster, next.cluster);
    return changed;
}

}  // namespace cordon::config
