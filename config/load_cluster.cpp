// The policy loader: the `cluster` section (a fleet on etcd; docs/fleet.md).

#include <unistd.h>

#include <array>
#include <charconv>

#include "config/load_internal.hpp"

namespace cordon::config::detail {
namespace {

// http://HOST:PORT with nothing after it but an optional '/'.
bool parse_etcd_url(std::string_view s, etcd_endpoint& out, std::string& why) {
    constexpr std::string_view scheme = "http://";
    if (s.substr(0, 8) == "https://") {
        why = "TLS to etcd is not built yet: use http:// on a trusted network (docs/fleet.md)";
        return false;
    }
    if (s.substr(0, scheme.size()) != scheme) {
        why = "expected http://HOST:PORT";
        return false;
    }
    s.remove_prefix(scheme.size());
    if (!s.empty() && s.back() == '/') {
        s.remove_suffix(1);
    }
    std::string_view host;
    std::string_view port;
    if (!s.empty() && s.front() == '[') {
        const auto close = s.find(']');
        if (close == std::string_view::npos) {
            why = "an IPv6 address without its ']'";
            return false;
        }
        host = s.substr(1, close - 1);
        s.remove_prefix(close + 1);
        if (!s.empty() && s.front() != ':') {
            why = "expected :PORT after the address";
            return false;
        }
        port = s.empty() ? std::string_view() : s.substr(1);
    } else {
        const auto colon = s.rfind(':');
        host = s.substr(0, colon);
        port = colon == std::string_view::npos ? std::string_view() : s.substr(colon + 1);
    }
    if (host.empty() || host.size() > 253 ||
        host.find_first_of("/?#@ ") != std::string_view::npos) {
        why = "expected http://HOST:PORT";
        return false;
    }
    out.host = std::string(host);
    out.port = 2379;
    if (!port.empty()) {
        unsigned v = 0;
        const auto r = std::from_chars(port.data(), port.data() + port.size(), v);
        if (r.ec != std::errc() || r.ptr != port.data() + port.size() || v == 0 || v > 65535) {
            why = "the port must be 1..65535";
            return false;
        }
        out.port = static_cast<std::uint16_t>(v);
    }
    return true;
}

std::string host_name() {
    std::array<char, 256> buf{};
    if (::gethostname(buf.data(), buf.size() - 1) != 0) {
        return "cordon";
    }
    std::string h(buf.data());
    // The first label, within the instance name's alphabet.
    h = h.substr(0, h.find('.'));
    return valid_instance_name(h) ? h : std::string("cordon");
}

}  // namespace

void loader::load_cluster(const YAML::Node& n, policy& p) {
    if (!expect_map(n, "cluster")) {
        return;
    }
    cluster_spec c;
    const auto keys = check_keys(n, "cluster",
                                 {"etcd", "instance", "fail_closed", "store_timeout",
                                  "start_without_store", "kill_wait", "instance_ttl"});
    if (const auto* e = find(keys, "etcd")) {
        if (expect_map(*e, "cluster.etcd")) {
            const auto ekeys = check_keys(*e, "cluster.etcd",
                                          {"endpoints", "prefix", "username", "password_file"});
            if (const auto* v = find(ekeys, "endpoints")) {
                for (const auto& u : get_strings(*v, "cluster.etcd.endpoints", "URLs")) {
                    etcd_endpoint ep;
                    std::string why;
                    if (!parse_etcd_url(u, ep, why)) {
                        error(*v, "cluster.etcd.endpoints", "'" + u + "': " + why);
                        continue;
                    }
                    c.endpoints.push_back(std::move(ep));
                }
                if (c.endpoints.size() > 16) {
                    error(*v, "cluster.etcd.endpoints", "at most 16 endpoints");
                }
            }
            if (c.endpoints.empty()) {
                error(*e, "cluster.etcd", "needs 'endpoints': at least one http://HOST:PORT");
            }
            if (const auto* v = find(ekeys, "prefix")) {
                if (auto s = get_string(*v, "cluster.etcd.prefix")) {
                    if (s->empty() || s->front() != '/' || s->back() != '/' || s->size() > 128 ||
                        s->find_first_of(" \t\r\n") != std::string::npos) {
                        error(*v, "cluster.etcd.prefix",
                              "expected a key prefix such as /cordon/ (starting and ending with "
                              "'/', at most 128 characters)");
                    } else {
                        c.prefix = std::move(*s);
                    }
                }
            }
            if (const auto* v = find(ekeys, "username")) {
                c.username = get_string(*v, "cluster.etcd.username");
            }
            if (const auto* v = find(ekeys, "password_file")) {
                c.password_file = get_path(*v, "cluster.etcd.password_file");
            }
            if (c.username.has_value() != c.password_file.has_value()) {
                error(*e, "cluster.etcd", "username and password_file go together");
            }
        }
    } else {
        error(n, "cluster", "missing 'etcd': { endpoints: [http://HOST:2379] }");
    }
    if (const auto* v = find(keys, "instance")) {
        if (auto s = get_string(*v, "cluster.instance")) {
            if (!valid_instance_name(*s)) {
                error(*v, "cluster.instance", "expected 1-64 characters of A-Z a-z 0-9 . _ -");
            } else {
                c.instance = std::move(*s);
            }
        }
    }
    if (c.instance.empty()) {
        c.instance = host_name();
    }
    const auto flag = [&](const char* name, bool& out) {
        if (const auto* v = find(keys, name)) {
            if (auto s = get_string(*v, std::string("cluster.") + name)) {
                if (*s == "true") {
                    out = true;
                } else if (*s == "false") {
                    out = false;
                } else {
                    error(*v, std::string("cluster.") + name, "expected true or false");
                }
            }
        }
    };
    flag("fail_closed", c.fail_closed);
    flag("start_without_store", c.start_without_store);
    using std::chrono::milliseconds;
    const std::tuple<const char*, milliseconds*, milliseconds, milliseconds> times[] = {
        {"store_timeout", &c.store_timeout, milliseconds(1000), milliseconds(600'000)},
        {"kill_wait", &c.kill_wait, milliseconds(100), milliseconds(30'000)},
        {"instance_ttl", &c.instance_ttl, milliseconds(2000), milliseconds(600'000)},
    };
    for (const auto& [name, field, lo, hi] : times) {
        if (const auto* v = find(keys, name)) {
            if (auto d = get_duration(*v, std::string("cluster.") + name, lo, hi)) {
                *field = *d;
            }
        }
    }
    p.cluster = std::move(c);
}

}  // namespace cordon::config::detail
