// Loading a policy's daemon sections: listen, admin, dns, state, audit, alerts, kill, proxy.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "config/http_url.hpp"
#include "config/load_internal.hpp"
#include "config/units.hpp"

namespace cordon::config::detail {

namespace {

constexpr int max_retention_days = 3650;
constexpr int max_stop_seconds_limit = 3600;

}  // namespace

void loader::load_listen(const YAML::Node& n, listen_spec& out) {
    if (!expect_map(n, "listen")) {
        return;
    }
    const auto keys = check_keys(n, "listen", {"proxy", "socks", "dns", "admin"});
    if (const auto* v = find(keys, "proxy")) {
        if (auto e = get_endpoint(*v, "listen.proxy")) {
            out.proxy = *e;
        }
    } else {
        error(n, "listen", "missing key 'proxy' (e.g. `proxy: 127.0.0.1:3128`)");
    }
    if (const auto* v = find(keys, "socks")) {
        out.socks = get_endpoint(*v, "listen.socks");
    }
    if (const auto* v = find(keys, "dns")) {
        out.dns = get_endpoint(*v, "listen.dns");
    }
    if (const auto* v = find(keys, "admin")) {
        out.admin = get_endpoint(*v, "listen.admin");
    }
    // Two listeners on one TCP address and port cannot both bind.
    auto clash = [&](const std::optional<endpoint>& a, const std::optional<endpoint>& b,
                     const char* a_name, const char* b_name) {
        if (a && b && a->port != 0 && *a == *b) {
            error(n, "listen",
                  std::string(a_name) + " and " + b_name + " both use " + a->to_string());
        }
    };
    const std::optional<endpoint> proxy = find(keys, "proxy") != nullptr
                                              ? std::optional<endpoint>(out.proxy)
                                              : std::nullopt;
    clash(proxy, out.socks, "proxy", "socks");
    clash(out.socks, out.dns, "socks", "dns");
    clash(out.socks, out.admin, "socks", "admin");
    clash(proxy, out.dns, "proxy", "dns");
    clash(proxy, out.admin, "proxy", "admin");
    clash(out.dns, out.admin, "dns", "admin");
}

void loader::load_admin(const YAML::Node& n, admin_spec& out) {
    if (!expect_map(n, "admin")) {
        return;
    }
    const auto keys = check_keys(n, "admin", {"token_file", "tls"});
    if (const auto* v = find(keys, "token_file")) {
        out.token_file = get_path(*v, "admin.token_file");
    }
    if (const auto* v = find(keys, "tls")) {
        if (!expect_map(*v, "admin.tls")) {
            return;
        }
        const auto tk = check_keys(*v, "admin.tls", {"cert", "key", "client_ca"});
        tls_files t;
        bool ok = true;
        for (const char* name : {"cert", "key"}) {
            const auto* f = find(tk, name);
            if (f == nullptr) {
                error(*v, "admin.tls", std::string("missing key '") + name + "'");
                ok = false;
                continue;
            }
            auto s = get_path(*f, std::string("admin.tls.") + name);
            ok = ok && s.has_value();
            (std::string_view(name) == "cert" ? t.cert : t.key) = s.value_or("");
        }
        if (const auto* f = find(tk, "client_ca")) {
            t.client_ca = get_path(*f, "admin.tls.client_ca");
        }
        if (ok) {
            out.tls = std::move(t);
        }
    }
}

void loader::load_dns(const YAML::Node& n, policy& p) {
    if (!expect_map(n, "dns")) {
        return;
    }
    const auto keys = check_keys(n, "dns",
                                 {"upstream", "deny_rcode", "default_job", "cache_entries",
                                  "query_types", "rate_limit", "inflight", "tcp"});
    if (const auto* v = find(keys, "inflight")) {
        if (expect_map(*v, "dns.inflight")) {
            const auto ik = check_keys(*v, "dns.inflight", {"per_client", "total"});
            if (const auto* c = find(ik, "per_client")) {
                if (auto x = get_int(*c, "dns.inflight.per_client", 1, 65'536, "lookups")) {
                    p.dns.inflight_per_client = static_cast<std::uint32_t>(*x);
                }
            }
            if (const auto* t = find(ik, "total")) {
                // Below the resolver's 4096 per thread: the rest is the proxy's.
                if (auto x = get_int(*t, "dns.inflight.total", 1, 3'072, "lookups")) {
                    p.dns.inflight_total = static_cast<std::uint32_t>(*x);
                }
            }
        }
    }
    if (const auto* v = find(keys, "tcp")) {
        if (expect_map(*v, "dns.tcp")) {
            const auto tk = check_keys(*v, "dns.tcp",
                                       {"max_connections", "max_per_client", "timeout"});
            if (const auto* c = find(tk, "max_connections")) {
                if (auto x = get_int(*c, "dns.tcp.max_connections", 1, 65'536, "a count")) {
                    p.dns.tcp_max_connections = static_cast<std::uint32_t>(*x);
                }
            }
            if (const auto* c = find(tk, "max_per_client")) {
                if (auto x = get_int(*c, "dns.tcp.max_per_client", 1, 65'536, "a count")) {
                    p.dns.tcp_max_per_client = static_cast<std::uint32_t>(*x);
                }
            }
            if (const auto* t = find(tk, "timeout")) {
                if (auto d = get_duration(*t, "dns.tcp.timeout", std::chrono::milliseconds(100),
                                          std::chrono::minutes(10))) {
                    p.dns.tcp_timeout = *d;
                }
            }
        }
    }
    if (const auto* v = find(keys, "cache_entries")) {
        if (auto c = get_int(*v, "dns.cache_entries", 0, 10'000'000, "a count")) {
            p.dns.cache_entries = static_cast<std::uint32_t>(*c);
        }
    }
    if (const auto* v = find(keys, "query_types")) {
        const auto names = get_strings(*v, "dns.query_types", "query types such as A");
        if (v->IsSequence() && names.size() == v->size()) {
            p.dns.query_types.clear();
            for (std::size_t i = 0; i < names.size(); ++i) {
                const auto t = parse_query_type(names[i]);
                if (!t || *t == 255) {
                    error((*v)[i], "dns.query_types[" + std::to_string(i) + "]",
                          "'" + names[i] +
                              "' is not a query type cordon answers (A, AAAA, "
                              "CNAME, HTTPS, SVCB, TXT, MX, NS, PTR, SRV, SOA, CAA)");
                } else {
                    p.dns.query_types.push_back(*t);
                }
            }
        }
    }
    if (const auto* v = find(keys, "rate_limit")) {
        if (expect_map(*v, "dns.rate_limit")) {
            const auto rk = check_keys(*v, "dns.rate_limit", {"qps", "burst"});
            if (const auto* q = find(rk, "qps")) {
                if (auto x = get_int(*q, "dns.rate_limit.qps", 1, 1'000'000, "queries/s")) {
                    p.dns.rate_qps = static_cast<std::uint32_t>(*x);
                }
            }
            if (const auto* b = find(rk, "burst")) {
                if (auto x = get_int(*b, "dns.rate_limit.burst", 1, 1'000'000, "queries")) {
                    p.dns.rate_burst = static_cast<std::uint32_t>(*x);
                }
            }
        }
    }
    if (const auto* v = find(keys, "upstream")) {
        if (expect_list(*v, "dns.upstream", "'system' or ADDRESS:PORT servers")) {
            p.dns.upstream.clear();
            for (std::size_t i = 0; i < v->size(); ++i) {
                const std::string path = "dns.upstream[" + std::to_string(i) + "]";
                const YAML::Node item = (*v)[i];
                auto s = get_string(item, path);
                if (!s) {
                    continue;
                }
                if (*s == "system") {
                    p.dns.upstream.push_back(dns_upstream{true, {}});
                } else if (auto e = get_endpoint(item, path)) {
                    if (e->port == 0) {  // 0 means "any free port" only for listening
                        error(item, path, "port 0 is not a server's port; expected 1..65535");
                    } else {
                        p.dns.upstream.push_back(dns_upstream{false, *e});
                    }
                }
            }
            if (v->size() == 0) {
                error(*v, "dns.upstream", "must name at least one server (or 'system')");
            }
        }
    }
    if (const auto* v = find(keys, "deny_rcode")) {
        if (auto s = get_string(*v, "dns.deny_rcode")) {
            if (*s == "REFUSED") {
                p.dns.deny = deny_rcode::refused;
            } else if (*s == "NXDOMAIN") {
                p.dns.deny = deny_rcode::nxdomain;
            } else {
                error(*v, "dns.deny_rcode", "expected REFUSED or NXDOMAIN, got '" + *s + "'");
            }
        }
    }
    if (const auto* v = find(keys, "default_job")) {
        if (auto s = get_string(*v, "dns.default_job")) {
            if (p.find_job(*s) == nullptr) {
                error(*v, "dns.default_job", "no job named '" + *s + "' in jobs");
            } else {
                p.dns.default_job = std::move(*s);
            }
        }
    }
}

void loader::load_state(const YAML::Node& n, state_spec& out) {
    if (!expect_map(n, "state")) {
        return;
    }
    const auto keys = check_keys(n, "state", {"path"});
    if (const auto* v = find(keys, "path")) {
        if (auto s = get_path(*v, "state.path")) {
            out.path = std::move(*s);
        }
    }
}

void loader::load_audit(const YAML::Node& n, audit_spec& out) {
    if (!expect_map(n, "audit")) {
        return;
    }
    const auto keys = check_keys(n, "audit", {"path", "retention_days", "max_file_bytes"});
    if (const auto* v = find(keys, "path")) {
        if (auto s = get_path(*v, "audit.path")) {
            out.path = std::move(*s);
        }
    }
    if (const auto* v = find(keys, "retention_days")) {
        if (auto d = get_int(*v, "audit.retention_days", 1, max_retention_days, "days")) {
            out.retention_days = static_cast<int>(*d);
        }
    }
    if (const auto* v = find(keys, "max_file_bytes")) {
        if (auto s = get_string(*v, "audit.max_file_bytes")) {
            const auto size = parse_size(*s);
            if (!size || *size < 4096 || *size > (1ull << 40)) {
                error(*v, "audit.max_file_bytes",
                      "expected a size 4KiB..1TiB such as 256MiB, got '" + *s + "'");
            } else {
                out.max_file_bytes = *size;
            }
        }
    }
}

void loader::load_alerts(const YAML::Node& n, alerts_spec& out) {
    if (!expect_map(n, "alerts")) {
        return;
    }
    const auto keys = check_keys(n, "alerts", {"webhook"});
    if (const auto* v = find(keys, "webhook")) {
        load_webhook(*v, out);
    }
}

// The URL may be a secret (Slack webhook URLs are): no message here quotes it, and none
// quotes a header value.
std::optional<std::string> loader::get_webhook_url(const YAML::Node& n, const std::string& path) {
    auto s = get_string(n, path);
    if (!s) {
        return std::nullopt;
    }
    const http_url_result u = parse_http_url(*s);
    if (!u.value) {
        error(n, path, u.error);
        return std::nullopt;
    }
    return s;
}

void loader::load_webhook(const YAML::Node& n, alerts_spec& out) {
    const std::string path = "alerts.webhook";
    if (n.IsScalar()) {
        if (auto url = get_webhook_url(n, path)) {
            out.webhook.emplace();
            out.webhook->url = std::move(*url);
        }
        return;
    }
    if (!n.IsMap()) {
        error(n, path, "expected a URL or a mapping with url, interval, ..., got " + kind_of(n));
        return;
    }
    const auto keys = check_keys(n, path,
                                 {"url", "interval", "max_per_minute", "timeout", "retries",
                                  "burst_threshold", "burst_window", "headers"});
    webhook_spec w;
    bool ok = true;
    if (const auto* v = find(keys, "url")) {
        auto url = get_webhook_url(*v, path + ".url");
        ok = url.has_value();
        w.url = url.value_or("");
    } else {
        error(n, path, "missing key 'url'");
        ok = false;
    }
    using std::chrono::milliseconds;
    using std::chrono::seconds;
    const std::tuple<const char*, milliseconds*, milliseconds, milliseconds> durations[] = {
        {"interval", &w.interval, milliseconds(100), std::chrono::hours(1)},
        {"timeout", &w.timeout, milliseconds(100), seconds(60)},
        {"burst_window", &w.burst_window, milliseconds(100), std::chrono::hours(1)},
    };
    for (const auto& [name, field, lo, hi] : durations) {
        if (const auto* v = find(keys, name)) {
            if (auto d = get_duration(*v, path + "." + name, lo, hi)) {
                *field = *d;
            }
        }
    }
    const std::tuple<const char*, std::uint32_t*, std::int64_t, std::int64_t, const char*>
        counts[] = {
            {"max_per_minute", &w.max_per_minute, 1, 6000, "a count"},
            {"retries", &w.retries, 0, 10, "a count"},
            // Each tracked session keeps its last burst_threshold denial times.
            {"burst_threshold", &w.burst_threshold, 1, 1000, "a count"},
        };
    for (const auto& [name, field, lo, hi, what] : counts) {
        if (const auto* v = find(keys, name)) {
            if (auto c = get_int(*v, path + "." + name, lo, hi, what)) {
                *field = static_cast<std::uint32_t>(*c);
            }
        }
    }
    if (const auto* v = find(keys, "headers")) {
        load_webhook_headers(*v, path + ".headers", w.headers);
    }
    if (ok) {
        out.webhook = std::move(w);
    }
}

void loader::load_webhook_headers(const YAML::Node& n, const std::string& path,
                                  std::vector<std::pair<std::string, std::string>>& out) {
    if (!expect_map(n, path)) {
        return;
    }
    constexpr std::size_t max_headers = 32;
    constexpr std::size_t max_value = 8192;
    // Headers cordon writes itself, or that would change how the request is framed.
    constexpr std::string_view reserved[] = {
        "host", "content-length", "content-type", "transfer-encoding", "connection",
        "te",   "upgrade",        "expect",       "keep-alive",        "trailer"};
    std::set<std::string> seen;
    for (const auto& entry : n) {
        const YAML::Node& key = entry.first;
        const YAML::Node& value = entry.second;
        if (!key.IsScalar()) {
            error(key, path, "header names must be plain words, got " + kind_of(key));
            continue;
        }
        const std::string& name = key.Scalar();
        const bool token = !name.empty() && name.size() <= 64 &&
                           std::all_of(name.begin(), name.end(), [](char c) {
                               return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                      (c >= '0' && c <= '9') || c == '-' || c == '_';
                           });
        if (!token) {
            error(key, path,
                  "'" + name +
                      "' is not a header name ([A-Za-z0-9_-], at "
                      "most 64 characters)");
            continue;
        }
        std::string lower = name;
        for (char& c : lower) {
            c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
        }
        const std::string where = path + "." + name;
        if (std::find(std::begin(reserved), std::end(reserved), lower) != std::end(reserved)) {
            error(key, where, "cordon sets this header itself");
            continue;
        }
        if (!seen.insert(lower).second) {
            error(key, where, "header given twice");
            continue;
        }
        if (out.size() == max_headers) {
            error(key, path, "more than 32 headers");
            break;
        }
        // Values are secrets: messages say what is wrong, never what was written.
        if (!value.IsScalar()) {
            error(value, where,
                  "expected a string, got " + std::string(value.IsSequence() ? "a list"
                                                          : value.IsMap()    ? "a mapping"
                                                                             : "nothing"));
            continue;
        }
        const std::string& v = value.Scalar();
        const bool clean = std::all_of(v.begin(), v.end(), [](char c) {
            const auto b = static_cast<unsigned char>(c);
            return b == '\t' || (b >= 0x20 && b != 0x7f);
        });
        if (v.empty() || v.size() > max_value || !clean) {
            error(value, where,
                  "the value must be 1..8192 characters without control "
                  "characters or line breaks");
            continue;
        }
        out.emplace_back(name, v);
    }
}

void loader::load_kill(const YAML::Node& n, kill_spec& out) {
    if (!expect_map(n, "kill")) {
        return;
    }
    const auto keys = check_keys(n, "kill", {"stop_authority", "max_stop_seconds"});
    if (const auto* v = find(keys, "stop_authority")) {
        out.stop_authority = get_strings(*v, "kill.stop_authority", "people or teams");
    }
    if (const auto* v = find(keys, "max_stop_seconds")) {
        if (auto s = get_int(*v, "kill.max_stop_seconds", 1, max_stop_seconds_limit, "seconds")) {
            out.max_stop_seconds = static_cast<int>(*s);
        }
    }
}

void loader::load_proxy(const YAML::Node& n, proxy_spec& out) {
    if (!expect_map(n, "proxy")) {
        return;
    }
    const auto keys = check_keys(n, "proxy",
                                 {"max_header_bytes", "header_timeout", "connect_timeout",
                                  "handshake_timeout", "idle_timeout", "max_connections"});
    using std::chrono::milliseconds;
    if (const auto* v = find(keys, "max_header_bytes")) {
        if (auto s = get_string(*v, "proxy.max_header_bytes")) {
            const auto size = parse_size(*s);
            if (!size || *size < 1024 || *size > 1024 * 1024) {
                error(*v, "proxy.max_header_bytes",
                      "expected a size 1KiB..1MiB such as 16KiB, got '" + *s + "'");
            } else {
                out.max_header_bytes = static_cast<std::size_t>(*size);
            }
        }
    }
    const std::pair<const char*, milliseconds*> timeouts[] = {
        {"header_timeout", &out.header_timeout},
        {"connect_timeout", &out.connect_timeout},
        {"handshake_timeout", &out.handshake_timeout},
        {"idle_timeout", &out.idle_timeout},
    };
    for (const auto& [name, field] : timeouts) {
        if (const auto* v = find(keys, name)) {
            if (auto d = get_duration(*v, std::string("proxy.") + name, milliseconds(100),
                                      std::chrono::hours(24))) {
                *field = *d;
            }
        }
    }
    if (const auto* v = find(keys, "max_connections")) {
        if (auto c = get_int(*v, "proxy.max_connections", 1, 1'000'000, "a count")) {
            out.max_connections = static_cast<std::uint32_t>(*c);
        }
    }
}

void loader::load_inspect(const YAML::Node& n, policy& p) {
    if (!expect_map(n, "inspect")) {
        return;
    }
    const auto keys = check_keys(n, "inspect", {"ca", "upstream_ca", "leaf_ttl", "leaf_cache"});
    inspect_spec out;
    bool ok = true;
    if (const auto* v = find(keys, "ca")) {
        if (expect_map(*v, "inspect.ca")) {
            const auto ck = check_keys(*v, "inspect.ca", {"cert", "key"});
            for (const char* name : {"cert", "key"}) {
                const auto* f = find(ck, name);
                if (f == nullptr) {
                    error(*v, "inspect.ca",
                          std::string("missing key '") + name +
                              "' (`cordon ca init DIR` makes DIR/ca.pem and DIR/ca.key)");
                    ok = false;
                    continue;
                }
                auto s = get_path(*f, std::string("inspect.ca.") + name);
                ok = ok && s.has_value();
                (std::string_view(name) == "cert" ? out.ca_cert : out.ca_key) = s.value_or("");
            }
        } else {
            ok = false;
        }
    } else {
        error(n, "inspect",
              "missing key 'ca' (`ca: { cert: DIR/ca.pem, key: DIR/ca.key }`, made by "
              "`cordon ca init DIR`)");
        ok = false;
    }
    if (const auto* v = find(keys, "upstream_ca")) {
        if (auto s = get_string(*v, "inspect.upstream_ca")) {
            if (*s != "system") {
                out.upstream_ca = get_path(*v, "inspect.upstream_ca");
                ok = ok && out.upstream_ca.has_value();
            }
        } else {
            ok = false;
        }
    }
    if (const auto* v = find(keys, "leaf_ttl")) {
        if (auto d = get_duration(*v, "inspect.leaf_ttl", std::chrono::hours(1),
                                  std::chrono::hours(24 * 90))) {
            out.leaf_ttl = std::chrono::duration_cast<std::chrono::seconds>(*d);
        } else {
            ok = false;
        }
    }
    if (const auto* v = find(keys, "leaf_cache")) {
        if (auto c = get_int(*v, "inspect.leaf_cache", 1, 1'000'000, "a count of names")) {
            out.leaf_cache = static_cast<std::uint32_t>(*c);
        } else {
            ok = false;
        }
    }
    if (ok) {
        p.inspect = std::move(out);
    }
}

// `secrets: { openai: { file: /etc/cordon/secrets/openai } }` or `{ env: NAME }`. The values
// are read by the daemon (proxy/inspect/secrets), never here: a policy check reads no secret.
void loader::load_secrets(const YAML::Node& n, policy& p) {
    if (!expect_map(n, "secrets")) {
        return;
    }
    for (const auto& entry : n) {
        if (!entry.first.IsScalar()) {
            error(entry.first, "secrets", "secret names are plain words");
            continue;
        }
        const std::string name = entry.first.Scalar();
        const std::string path = "secrets." + name;
        if (!valid_job_name(name)) {
            error(entry.first, path,
                  "secret names are 1-64 characters of [A-Za-z0-9._-], starting with a letter "
                  "or digit");
            continue;
        }
        if (std::any_of(p.secrets.begin(), p.secrets.end(),
                        [&name](const secret_spec& s) { return s.name == name; })) {
            error(entry.first, path, "duplicate secret name");
            continue;
        }
        if (!expect_map(entry.second, path)) {
            continue;
        }
        const auto keys = check_keys(entry.second, path, {"file", "env"});
        secret_spec s;
        s.name = name;
        s.pos = {entry.first.Mark().line + 1, entry.first.Mark().column + 1};
        const auto* f = find(keys, "file");
        const auto* e = find(keys, "env");
        if ((f == nullptr) == (e == nullptr)) {
            error(entry.second, path,
                  "give exactly one of 'file' (an absolute path, mode 0600) or 'env' (a "
                  "variable of cordon's own environment)");
            continue;
        }
        if (f != nullptr) {
            s.file = get_path(*f, path + ".file");
            if (!s.file) {
                continue;
            }
        } else {
            s.env = get_string(*e, path + ".env");
            if (!s.env) {
                continue;
            }
            if (!valid_env_name(*s.env)) {
                error(*e, path + ".env", "'" + *s.env + "' is not a variable name");
                continue;
            }
        }
        p.secrets.push_back(std::move(s));
    }
}

}  // namespace cordon::config::detail
