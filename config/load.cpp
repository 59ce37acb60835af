#include "config/load.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <initializer_list>
#include <set>
#include <sstream>
#include <tuple>

#include "config/classify.hpp"
#include "config/http_url.hpp"
#include "config/units.hpp"

namespace cordon::config {

std::string diagnostic::to_string() const {
    if (line <= 0) {
        return file + ": " + message;
    }
    return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

namespace {

constexpr int max_job_name = 64;
constexpr std::uint32_t max_tunnels_limit = 1'000'000;
constexpr int max_retention_days = 3650;
constexpr int max_stop_seconds_limit = 3600;
constexpr auto min_ttl = std::chrono::minutes(1);
constexpr auto max_ttl = std::chrono::hours(24);

std::string kind_of(const YAML::Node& n) {
    switch (n.Type()) {
        case YAML::NodeType::Null: return "nothing";
        case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
        case YAML::NodeType::Sequence: return "a list";
        case YAML::NodeType::Map: return "a mapping";
        case YAML::NodeType::Undefined: return "nothing";
    }
    return "something else";
}

bool valid_env_name(std::string_view s) {
    if (s.empty() || (s[0] >= '0' && s[0] <= '9')) {
        return false;
    }
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_';
    });
}

bool absolute_path(std::string_view s) {
    return !s.empty() && s.front() == '/' && s.find('\0') == std::string_view::npos;
}

// True when absolute path `s` has no empty ("//"), "." or ".." part; a trailing '/' is
// fine. Only such paths can be compared as strings: "//", "/tmp/.." and "/home//x" would
// slip past the checks that scratch is not / and lies in no never_write path.
bool plain_path(std::string_view s) {
    std::size_t start = 1;
    while (start < s.size()) {
        std::size_t end = s.find('/', start);
        if (end == std::string_view::npos) {
            end = s.size();
        }
        const std::string_view part = s.substr(start, end - start);
        if (part.empty() || part == "." || part == "..") {
            return false;
        }
        start = end + 1;
    }
    return true;
}
constexpr const char* not_plain =
    "is not a plain path: write it without '//', '.' or '..' parts";

// True when path `inner` is `outer` or lies below it.
bool path_within(std::string_view inner, std::string_view outer) {
    while (outer.size() > 1 && outer.back() == '/') {
        outer.remove_suffix(1);
    }
    if (outer == "/") {
        return true;
    }
    return inner == outer || (inner.starts_with(outer) && inner.size() > outer.size() &&
                              inner[outer.size()] == '/');
}

// Walks the YAML tree of a policy, filling a `policy` and collecting every error.
class loader {
public:
    explicit loader(std::string file) : file_(std::move(file)) {}

    std::vector<diagnostic>& errors() { return errors_; }

    void error(const YAML::Mark& m, const std::string& path, const std::string& msg) {
        diagnostic d;
        d.file = file_;
        d.line = m.is_null() ? 0 : m.line + 1;
        d.column = m.is_null() ? 0 : m.column + 1;
        d.message = path.empty() ? msg : path + ": " + msg;
        errors_.push_back(std::move(d));
    }
    void error(const YAML::Node& n, const std::string& path, const std::string& msg) {
        error(n.Mark(), path, msg);
    }

    void load(const YAML::Node& root, policy& p) {
        if (!root.IsMap()) {
            error(root, "", "a policy is a mapping with keys listen, jobs, ...; got " +
                                kind_of(root));
            return;
        }
        const auto keys = check_keys(root, "", {"listen", "admin", "dns", "state", "audit",
                                                "alerts", "kill", "proxy", "jobs"});
        // Jobs first: later sections refer to job names.
        if (const auto* n = find(keys, "jobs")) {
            load_jobs(*n, p);
        } else if (!root["jobs"].IsDefined()) {
            error(root, "", "missing key 'jobs' (write `jobs: {}` for a policy that allows "
                            "nothing)");
        }
        if (const auto* n = find(keys, "listen")) {
            load_listen(*n, p.listen);
        } else {
            error(root, "", "missing key 'listen' (at least `listen: { proxy: ADDR:PORT }`)");
        }
        if (const auto* n = find(keys, "admin")) {
            load_admin(*n, p.admin);
        }
        if (p.listen.admin && !p.admin.token_file &&
            (find(keys, "admin") == nullptr || !(*find(keys, "admin"))["token_file"])) {
            const YAML::Node* at = find(keys, "admin");
            error(at != nullptr ? at->Mark() : root.Mark(), "admin",
                  "missing 'token_file': the admin API is never open without a token");
        }
        if (const auto* n = find(keys, "dns")) {
            load_dns(*n, p);
        }
        if (const auto* n = find(keys, "state")) {
            load_state(*n, p.state);
        }
        if (const auto* n = find(keys, "audit")) {
            load_audit(*n, p.audit);
        }
        if (const auto* n = find(keys, "alerts")) {
            load_alerts(*n, p.alerts);
        }
        if (const auto* n = find(keys, "kill")) {
            load_kill(*n, p.kill);
        }
        if (const auto* n = find(keys, "proxy")) {
            load_proxy(*n, p.proxy);
        }
        check_sources(p);
    }

private:
    using key_list = std::vector<std::pair<std::string, YAML::Node>>;

    static const YAML::Node* find(const key_list& keys, std::string_view name) {
        for (const auto& [k, v] : keys) {
            if (k == name) {
                return &v;
            }
        }
        return nullptr;
    }

    // Returns the entries of a mapping, reporting unknown and duplicate keys. Entries whose
    // value is null count as absent, so `webhook: null` and a missing key read the same.
    key_list check_keys(const YAML::Node& map, const std::string& path,
                        std::initializer_list<std::string_view> allowed, bool keep_null = false) {
        key_list out;
        std::set<std::string> seen;
        // Range-for binds each entry to a named reference: yaml-cpp's `it->first` refers to
        // a temporary that dies at the end of the expression.
        for (const auto& entry : map) {
            const YAML::Node& key = entry.first;
            if (!key.IsScalar()) {
                error(key, path, "keys must be plain words, got " + kind_of(key));
                continue;
            }
            const std::string& k = key.Scalar();
            const std::string where = path.empty() ? k : path + "." + k;
            if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
                std::string list;
                for (const auto& a : allowed) {
                    list += list.empty() ? "" : ", ";
                    list += a;
                }
                error(key, path.empty() ? std::string("policy") : path,
                      "unknown key '" + k + "' (expected one of: " + list + ")");
                continue;
            }
            if (!seen.insert(k).second) {
                error(key, where, "key given twice");
                continue;
            }
            if (!keep_null && entry.second.IsNull()) {
                continue;
            }
            out.emplace_back(k, entry.second);
        }
        return out;
    }

    bool expect_map(const YAML::Node& n, const std::string& path) {
        if (!n.IsMap()) {
            error(n, path, "expected a mapping, got " + kind_of(n));
            return false;
        }
        return true;
    }

    bool expect_list(const YAML::Node& n, const std::string& path, const std::string& what) {
        if (!n.IsSequence()) {
            error(n, path, "expected a list of " + what + ", got " + kind_of(n));
            return false;
        }
        return true;
    }

    std::optional<std::string> get_string(const YAML::Node& n, const std::string& path,
                                          bool allow_empty = false) {
        if (!n.IsScalar()) {
            error(n, path, "expected a string, got " + kind_of(n));
            return std::nullopt;
        }
        if (!allow_empty && n.Scalar().empty()) {
            error(n, path, "must not be empty");
            return std::nullopt;
        }
        if (n.Scalar().find('\0') != std::string::npos) {
            error(n, path, "contains a NUL byte");
            return std::nullopt;
        }
        return n.Scalar();
    }

    std::optional<std::int64_t> get_int(const YAML::Node& n, const std::string& path,
                                        std::int64_t lo, std::int64_t hi,
                                        const std::string& what) {
        const std::string expected =
            "expected " + what + " " + std::to_string(lo) + ".." + std::to_string(hi);
        if (!n.IsScalar()) {
            error(n, path, expected + ", got " + kind_of(n));
            return std::nullopt;
        }
        const std::string& s = n.Scalar();
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size() ||
            (s.size() > 1 && s[0] == '0')) {
            error(n, path, expected + ", got " + kind_of(n));
            return std::nullopt;
        }
        if (v < lo || v > hi) {
            error(n, path, s + " is out of range; " + expected);
            return std::nullopt;
        }
        return v;
    }

    std::vector<std::string> get_strings(const YAML::Node& n, const std::string& path,
                                         const std::string& what) {
        std::vector<std::string> out;
        if (!expect_list(n, path, what)) {
            return out;
        }
        for (std::size_t i = 0; i < n.size(); ++i) {
            if (auto s = get_string(n[i], path + "[" + std::to_string(i) + "]")) {
                out.push_back(std::move(*s));
            }
        }
        return out;
    }

    std::optional<std::string> get_path(const YAML::Node& n, const std::string& path) {
        auto s = get_string(n, path);
        if (s && !absolute_path(*s)) {
            error(n, path, "'" + *s + "' is not an absolute path");
            return std::nullopt;
        }
        return s;
    }

    std::optional<cidr> get_cidr(const YAML::Node& n, const std::string& path) {
        auto s = get_string(n, path);
        if (!s) {
            return std::nullopt;
        }
        cidr_result r = parse_cidr(*s);
        if (!r.value) {
            error(n, path, r.error);
            return std::nullopt;
        }
        return r.value;
    }

    std::vector<cidr> get_cidrs(const YAML::Node& n, const std::string& path) {
        std::vector<cidr> out;
        if (!expect_list(n, path, "CIDR prefixes")) {
            return out;
        }
        for (std::size_t i = 0; i < n.size(); ++i) {
            if (auto c = get_cidr(n[i], path + "[" + std::to_string(i) + "]")) {
                out.push_back(*c);
            }
        }
        return out;
    }

    std::optional<endpoint> get_endpoint(const YAML::Node& n, const std::string& path) {
        auto s = get_string(n, path);
        if (!s) {
            return std::nullopt;
        }
        endpoint_result r = parse_endpoint(*s);
        if (!r.value) {
            error(n, path, r.error);
        }
        return r.value;
    }

    void load_listen(const YAML::Node& n, listen_spec& out) {
        if (!expect_map(n, "listen")) {
            return;
        }
        const auto keys = check_keys(n, "listen", {"proxy", "dns", "admin"});
        if (const auto* v = find(keys, "proxy")) {
            if (auto e = get_endpoint(*v, "listen.proxy")) {
                out.proxy = *e;
            }
        } else {
            error(n, "listen", "missing key 'proxy' (e.g. `proxy: 127.0.0.1:3128`)");
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
                error(n, "listen", std::string(a_name) + " and " + b_name + " both use " +
                                       a->to_string());
            }
        };
        const std::optional<endpoint> proxy =
            find(keys, "proxy") != nullptr ? std::optional<endpoint>(out.proxy) : std::nullopt;
        clash(proxy, out.dns, "proxy", "dns");
        clash(proxy, out.admin, "proxy", "admin");
        clash(out.dns, out.admin, "dns", "admin");
    }

    void load_admin(const YAML::Node& n, admin_spec& out) {
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

    void load_dns(const YAML::Node& n, policy& p) {
        if (!expect_map(n, "dns")) {
            return;
        }
        const auto keys =
            check_keys(n, "dns", {"upstream", "deny_rcode", "default_job", "cache_entries",
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
                const auto tk =
                    check_keys(*v, "dns.tcp", {"max_connections", "max_per_client", "timeout"});
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
                    if (auto d = get_duration(*t, "dns.tcp.timeout",
                                              std::chrono::milliseconds(100),
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
                              "'" + names[i] + "' is not a query type cordon answers (A, AAAA, "
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

    void load_state(const YAML::Node& n, state_spec& out) {
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

    void load_audit(const YAML::Node& n, audit_spec& out) {
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

    void load_alerts(const YAML::Node& n, alerts_spec& out) {
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
    std::optional<std::string> get_webhook_url(const YAML::Node& n, const std::string& path) {
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

    void load_webhook(const YAML::Node& n, alerts_spec& out) {
        const std::string path = "alerts.webhook";
        if (n.IsScalar()) {
            if (auto url = get_webhook_url(n, path)) {
                out.webhook.emplace();
                out.webhook->url = std::move(*url);
            }
            return;
        }
        if (!n.IsMap()) {
            error(n, path, "expected a URL or a mapping with url, interval, ..., got " +
                               kind_of(n));
            return;
        }
        const auto keys =
            check_keys(n, path, {"url", "interval", "max_per_minute", "timeout", "retries",
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

    void load_webhook_headers(const YAML::Node& n, const std::string& path,
                              std::vector<std::pair<std::string, std::string>>& out) {
        if (!expect_map(n, path)) {
            return;
        }
        constexpr std::size_t max_headers = 32;
        constexpr std::size_t max_value = 8192;
        // Headers cordon writes itself, or that would change how the request is framed.
        constexpr std::string_view reserved[] = {"host",    "content-length", "content-type",
                                                 "transfer-encoding", "connection", "te",
                                                 "upgrade", "expect",         "keep-alive",
                                                 "trailer"};
        std::set<std::string> seen;
        for (const auto& entry : n) {
            const YAML::Node& key = entry.first;
            const YAML::Node& value = entry.second;
            if (!key.IsScalar()) {
                error(key, path, "header names must be plain words, got " + kind_of(key));
                continue;
            }
            const std::string& name = key.Scalar();
            const bool token =
                !name.empty() && name.size() <= 64 &&
                std::all_of(name.begin(), name.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '-' || c == '_';
                });
            if (!token) {
                error(key, path, "'" + name + "' is not a header name ([A-Za-z0-9_-], at "
                                 "most 64 characters)");
                continue;
            }
            std::string lower = name;
            for (char& c : lower) {
                c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
            }
            const std::string where = path + "." + name;
            if (std::find(std::begin(reserved), std::end(reserved), lower) !=
                std::end(reserved)) {
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
                error(value, where, "expected a string, got " +
                                        std::string(value.IsSequence() ? "a list"
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
                error(value, where, "the value must be 1..8192 characters without control "
                                    "characters or line breaks");
                continue;
            }
            out.emplace_back(name, v);
        }
    }

    void load_kill(const YAML::Node& n, kill_spec& out) {
        if (!expect_map(n, "kill")) {
            return;
        }
        const auto keys = check_keys(n, "kill", {"stop_authority", "max_stop_seconds"});
        if (const auto* v = find(keys, "stop_authority")) {
            out.stop_authority = get_strings(*v, "kill.stop_authority", "people or teams");
        }
        if (const auto* v = find(keys, "max_stop_seconds")) {
            if (auto s = get_int(*v, "kill.max_stop_seconds", 1, max_stop_seconds_limit,
                                 "seconds")) {
                out.max_stop_seconds = static_cast<int>(*s);
            }
        }
    }

    std::optional<std::chrono::milliseconds> get_duration(const YAML::Node& n,
                                                          const std::string& path,
                                                          std::chrono::milliseconds lo,
                                                          std::chrono::milliseconds hi) {
        auto s = get_string(n, path);
        if (!s) {
            return std::nullopt;
        }
        auto d = parse_duration(*s);
        if (!d) {
            error(n, path, "expected a duration such as 500ms, 10s or 5m, got '" + *s + "'");
            return std::nullopt;
        }
        if (*d < lo || *d > hi) {
            error(n, path, "'" + *s + "' is outside " + format_duration(lo) + ".." +
                               format_duration(hi));
            return std::nullopt;
        }
        return d;
    }

    void load_proxy(const YAML::Node& n, proxy_spec& out) {
        if (!expect_map(n, "proxy")) {
            return;
        }
        const auto keys =
            check_keys(n, "proxy", {"max_header_bytes", "header_timeout", "connect_timeout",
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

    void load_jobs(const YAML::Node& n, policy& p) {
        if (n.IsNull()) {
            return;
        }
        if (!expect_map(n, "jobs")) {
            return;
        }
        std::set<std::string> seen;
        for (const auto& entry : n) {
            const YAML::Node& key = entry.first;
            if (!key.IsScalar()) {
                error(key, "jobs", "job names must be plain words, got " + kind_of(key));
                continue;
            }
            const std::string& name = key.Scalar();
            const std::string path = "jobs." + name;
            if (!valid_job_name(name)) {
                error(key, path, "job names are 1-64 characters of [A-Za-z0-9._-], starting "
                                 "with a letter or digit");
                continue;
            }
            if (!seen.insert(name).second) {
                error(key, path, "duplicate job name");
                continue;
            }
            job j;
            j.name = name;
            j.pos = {key.Mark().line + 1, key.Mark().column + 1};
            if (entry.second.IsNull()) {
                // `name:` and nothing more. yaml-cpp marks a null value where the next token
                // starts (the next line, or past the end of the file): point at the name.
                error(key, path, "expected a mapping, got nothing");
            } else {
                load_job(entry.second, path, j);
            }
            p.jobs.push_back(std::move(j));
        }
    }

    void load_job(const YAML::Node& n, const std::string& path, job& j) {
        if (!expect_map(n, path)) {
            return;
        }
        const auto keys =
            check_keys(n, path, {"task", "inputs", "outputs", "mode", "egress", "limits",
                                 "sources", "identity", "filesystem", "env"});
        if (const auto* v = find(keys, "task")) {
            j.task = get_string(*v, path + ".task").value_or("");
        } else {
            error(n, path, "missing key 'task' (say what the agent is for)");
        }
        if (const auto* v = find(keys, "inputs")) {
            j.inputs = get_strings(*v, path + ".inputs", "strings");
        }
        if (const auto* v = find(keys, "outputs")) {
            j.outputs = get_strings(*v, path + ".outputs", "strings");
        }
        if (const auto* v = find(keys, "mode")) {
            if (auto s = get_string(*v, path + ".mode")) {
                if (*s == "enforce") {
                    j.mode = job_mode::enforce;
                } else if (*s == "report") {
                    j.mode = job_mode::report;
                } else {
                    error(*v, path + ".mode", "expected enforce or report, got '" + *s + "'");
                }
            }
        }
        if (const auto* v = find(keys, "egress")) {
            if (expect_list(*v, path + ".egress", "rules")) {
                for (std::size_t i = 0; i < v->size(); ++i) {
                    egress_rule r;
                    const std::string rp = path + ".egress[" + std::to_string(i) + "]";
                    if (load_rule((*v)[i], rp, r)) {
                        j.egress.push_back(std::move(r));
                    }
                }
            }
        }
        if (const auto* v = find(keys, "limits")) {
            load_limits(*v, path + ".limits", j.limits);
        }
        if (const auto* v = find(keys, "sources")) {
            j.sources = get_cidrs(*v, path + ".sources");
        }
        if (const auto* v = find(keys, "identity")) {
            load_identity(*v, path + ".identity", j.identity);
        }
        if (const auto* v = find(keys, "filesystem")) {
            load_filesystem(*v, path + ".filesystem", j.filesystem);
        }
        if (const auto* v = find(keys, "env")) {
            const std::string ep = path + ".env";
            if (expect_list(*v, ep, "variable names")) {
                std::set<std::string> names;
                for (std::size_t i = 0; i < v->size(); ++i) {
                    const std::string ip = ep + "[" + std::to_string(i) + "]";
                    bool allow_long_lived = false;
                    std::optional<std::string> s;
                    if ((*v)[i].IsMap()) {
                        // {name: X, allow_long_lived: true}: `cordon run` passes X even if
                        // its value looks like a long-lived key.
                        const auto ek = check_keys((*v)[i], ip, {"name", "allow_long_lived"});
                        if (const auto* nv = find(ek, "name")) {
                            s = get_string(*nv, ip + ".name");
                        } else {
                            error((*v)[i], ip, "missing key 'name'");
                        }
                        if (const auto* av = find(ek, "allow_long_lived")) {
                            bool b = false;
                            if (!av->IsScalar() || !YAML::convert<bool>::decode(*av, b)) {
                                error(*av, ip + ".allow_long_lived", "expected true or false");
                            }
                            allow_long_lived = b;
                        }
                    } else {
                        s = get_string((*v)[i], ip);
                    }
                    if (!s) {
                        continue;
                    }
                    if (!valid_env_name(*s)) {
                        error((*v)[i], ip, "'" + *s + "' is not a variable name");
                    } else if (!names.insert(*s).second) {
                        error((*v)[i], ip, "'" + *s + "' listed twice");
                    } else {
                        if (allow_long_lived) {
                            j.env_allow_long_lived.push_back(*s);
                        }
                        j.env.push_back(std::move(*s));
                    }
                }
            }
        }
    }

    // Returns false when the rule is unusable; errors are reported either way.
    bool load_rule(const YAML::Node& n, const std::string& path, egress_rule& r) {
        if (!expect_map(n, path)) {
            return false;
        }
        r.pos = {n.Mark().line + 1, n.Mark().column + 1};
        const std::size_t errors_before = errors_.size();
        const auto keys =
            check_keys(n, path, {"host", "cidr", "ports", "protocol", "methods", "resolves_to"});
        const auto* host = find(keys, "host");
        const auto* net = find(keys, "cidr");
        if (host != nullptr && net != nullptr) {
            error(n, path, "give either 'host' or 'cidr', not both");
        } else if (host == nullptr && net == nullptr) {
            error(n, path, "missing 'host' (a name or \"*.domain\") or 'cidr' (addresses)");
        }
        if (host != nullptr) {
            if (auto s = get_string(*host, path + ".host")) {
                host_pattern_result h = parse_host_pattern(*s);
                if (h.ok()) {
                    r.host = std::move(h.value);
                } else {
                    error(*host, path + ".host", "'" + *s + "': " + h.error);
                }
            }
        }
        if (net != nullptr) {
            r.net = get_cidr(*net, path + ".cidr");
            if (r.net) {
                refuse_unspecified(*net, path + ".cidr", *r.net);
            }
        }
        if (const auto* v = find(keys, "ports")) {
            load_ports(*v, path + ".ports", r.ports);
        } else {
            error(n, path, "missing 'ports' (ports are never implied; e.g. `ports: [443]`)");
        }
        const auto* proto = find(keys, "protocol");
        if (proto != nullptr) {
            if (auto s = get_string(*proto, path + ".protocol")) {
                if (*s == "tls") {
                    r.proto = protocol::tls;
                } else if (*s == "tcp") {
                    r.proto = protocol::tcp;
                } else if (*s == "http") {
                    r.proto = protocol::http;
                } else {
                    error(*proto, path + ".protocol",
                          "unknown protocol '" + *s + "' (expected tls, tcp or http)");
                }
            }
        }
        if (net != nullptr) {
            if (proto == nullptr) {
                error(n, path, "a 'cidr' rule must name its protocol: tcp or http (tls needs "
                               "a host name for the SNI check)");
            } else if (r.proto == protocol::tls && proto->IsScalar() &&
                       proto->Scalar() == "tls") {
                error(*proto, path + ".protocol",
                      "tls needs a host name to check the SNI against; use tcp for a 'cidr' "
                      "rule");
            }
        }
        if (const auto* v = find(keys, "methods")) {
            if (r.proto != protocol::http) {
                error(*v, path + ".methods", "'methods' applies only to protocol: http");
            } else if (expect_list(*v, path + ".methods", "HTTP methods")) {
                for (std::size_t i = 0; i < v->size(); ++i) {
                    const std::string mp = path + ".methods[" + std::to_string(i) + "]";
                    auto s = get_string((*v)[i], mp);
                    if (!s) {
                        continue;
                    }
                    if (!valid_http_method(*s)) {
                        error((*v)[i], mp, "'" + *s + "' is not an HTTP method (write it in "
                                           "upper case, e.g. GET)");
                    } else if (*s == "CONNECT") {
                        error((*v)[i], mp, "CONNECT is not forwarded by http rules; use a tls "
                                           "or tcp rule");
                    } else if (std::find(r.methods.begin(), r.methods.end(), *s) !=
                               r.methods.end()) {
                        error((*v)[i], mp, "'" + *s + "' listed twice");
                    } else {
                        r.methods.push_back(std::move(*s));
                    }
                }
                if (v->size() == 0) {
                    error(*v, path + ".methods",
                          "an empty list allows no method; leave 'methods' out to allow any");
                }
            }
        }
        if (const auto* v = find(keys, "resolves_to")) {
            if (net != nullptr) {
                error(*v, path + ".resolves_to", "applies only to 'host' rules");
            } else {
                load_resolves_to(*v, path + ".resolves_to", r.resolves_to);
            }
        }
        return errors_.size() == errors_before;
    }

    void load_ports(const YAML::Node& n, const std::string& path,
                    std::vector<std::uint16_t>& out) {
        if (!expect_list(n, path, "ports")) {
            return;
        }
        if (n.size() == 0) {
            error(n, path, "empty: list at least one port (ports are never implied)");
            return;
        }
        for (std::size_t i = 0; i < n.size(); ++i) {
            const std::string pp = path + "[" + std::to_string(i) + "]";
            if (auto v = get_int(n[i], pp, 1, 65535, "a port")) {
                const auto port = static_cast<std::uint16_t>(*v);
                if (std::find(out.begin(), out.end(), port) != out.end()) {
                    error(n[i], pp, "port " + std::to_string(port) + " listed twice");
                } else {
                    out.push_back(port);
                }
            }
        }
        std::sort(out.begin(), out.end());
    }

    void load_resolves_to(const YAML::Node& n, const std::string& path,
                          std::vector<cidr>& out) {
        const std::vector<cidr> nets = get_cidrs(n, path);
        if (!n.IsSequence()) {
            return;
        }
        if (nets.size() != n.size()) {
            return;  // a bad entry was reported
        }
        for (std::size_t i = 0; i < nets.size(); ++i) {
            // resolves_to only widens a rule into non-public space; public addresses need
            // no permission, and a prefix such as 0.0.0.0/0 would silently open loopback and
            // metadata too.
            const classification c = classify(nets[i].network);
            const std::string ip = path + "[" + std::to_string(i) + "]";
            if (c.is_public()) {
                error(n[i], ip, nets[i].to_string() + " is public address space; resolves_to "
                                "lists only the non-public ranges a name may resolve into");
            } else if (!c.range.contains(nets[i])) {
                error(n[i], ip, nets[i].to_string() + " reaches beyond the " +
                                    std::string(to_string(c.cls)) + " range " +
                                    c.range.to_string() + "; resolves_to lists only "
                                    "non-public ranges, one entry per range");
            } else if (!refuse_unspecified(n[i], ip, nets[i])) {
                out.push_back(nets[i]);
            }
        }
    }

    // 0.0.0.0/8 and :: (and their IPv6 images) are not a place on the network: Linux
    // connects 0.0.0.0 to 127.0.0.1, so a rule opening them reaches this host, cordon's
    // own admin API included. True (after the error) when `p` would open them.
    bool refuse_unspecified(const YAML::Node& n, const std::string& path, const cidr& p) {
        const std::optional<cidr> range = opened_unspecified_range(p);
        if (range) {
            error(n, path, p.to_string() + " opens the unspecified range " +
                               range->to_string() + ", which the kernel connects to this "
                               "host (cordon's own listeners): it is never egress");
        }
        return range.has_value();
    }

    void load_limits(const YAML::Node& n, const std::string& path, job_limits& out) {
        if (!expect_map(n, path)) {
            return;
        }
        const auto keys = check_keys(n, path, {"max_tunnels", "max_bytes_up"});
        if (const auto* v = find(keys, "max_tunnels")) {
            if (auto t = get_int(*v, path + ".max_tunnels", 1, max_tunnels_limit, "a count")) {
                out.max_tunnels = static_cast<std::uint32_t>(*t);
            }
        }
        if (const auto* v = find(keys, "max_bytes_up")) {
            if (auto s = get_string(*v, path + ".max_bytes_up")) {
                auto size = parse_size(*s);
                if (!size || *size == 0) {
                    error(*v, path + ".max_bytes_up",
                          "expected a size above 0 such as 500MB or 1GiB, got '" + *s + "'");
                } else {
                    out.max_bytes_up = *size;
                }
            }
        }
    }

    void load_identity(const YAML::Node& n, const std::string& path, identity_spec& out) {
        if (!expect_map(n, path)) {
            return;
        }
        const auto keys = check_keys(n, path, {"ttl", "mint", "revoke"});
        if (const auto* v = find(keys, "ttl")) {
            if (auto s = get_string(*v, path + ".ttl")) {
                auto d = parse_duration(*s);
                if (!d) {
                    error(*v, path + ".ttl", "expected a duration such as 30m or 2h, got '" +
                                                 *s + "'");
                } else if (*d < min_ttl || *d > max_ttl) {
                    error(*v, path + ".ttl", "'" + *s + "' is outside 1m..24h (tokens are "
                                             "short-lived)");
                } else {
                    out.ttl = *d;
                }
            }
        }
        if (const auto* v = find(keys, "mint")) {
            if (v->IsMap()) {
                // {command: CMD, env: NAME} or {command: CMD, file: NAME-in-scratch}
                const std::string mp = path + ".mint";
                const auto mk = check_keys(*v, mp, {"command", "env", "file"});
                if (const auto* c = find(mk, "command")) {
                    out.mint = get_string(*c, mp + ".command");
                } else {
                    error(*v, mp, "missing key 'command'");
                }
                if (const auto* e = find(mk, "env")) {
                    out.mint_env = get_string(*e, mp + ".env");
                    if (out.mint_env && !valid_env_name(*out.mint_env)) {
                        error(*e, mp + ".env", "'" + *out.mint_env + "' is not a variable name");
                    }
                }
                if (const auto* f = find(mk, "file")) {
                    out.mint_file = get_string(*f, mp + ".file");
                    if (out.mint_file && (out.mint_file->empty() ||
                                          out.mint_file->find('/') != std::string::npos ||
                                          *out.mint_file == "." || *out.mint_file == "..")) {
                        error(*f, mp + ".file", "expected a file name inside scratch (no '/')");
                    }
                }
                if (find(mk, "env") != nullptr && find(mk, "file") != nullptr) {
                    error(*v, mp, "give env or file, not both");
                }
            } else {
                out.mint = get_string(*v, path + ".mint");
            }
        }
        if (const auto* v = find(keys, "revoke")) {
            out.revoke = get_string(*v, path + ".revoke");
        }
    }

    void load_filesystem(const YAML::Node& n, const std::string& path, filesystem_spec& out) {
        if (!expect_map(n, path)) {
            return;
        }
        const auto keys = check_keys(n, path, {"scratch", "never_write", "landlock"});
        if (const auto* v = find(keys, "landlock")) {
            if (auto s = get_string(*v, path + ".landlock")) {
                if (*s == "optional") {
                    out.landlock_optional = true;
                } else if (*s != "required") {
                    error(*v, path + ".landlock", "expected required or optional, got '" + *s +
                                                      "'");
                }
            }
        }
        if (const auto* v = find(keys, "scratch")) {
            out.scratch = get_path(*v, path + ".scratch");
            if (out.scratch && !plain_path(*out.scratch)) {
                error(*v, path + ".scratch", "'" + *out.scratch + "' " + not_plain);
                out.scratch.reset();
            } else if (out.scratch && *out.scratch == "/") {
                error(*v, path + ".scratch", "the scratch dir cannot be / (it is wiped)");
                out.scratch.reset();
            }
        }
        if (const auto* v = find(keys, "never_write")) {
            if (expect_list(*v, path + ".never_write", "absolute paths")) {
                for (std::size_t i = 0; i < v->size(); ++i) {
                    const std::string pp = path + ".never_write[" + std::to_string(i) + "]";
                    if (auto s = get_path((*v)[i], pp)) {
                        if (!plain_path(*s)) {
                            error((*v)[i], pp, "'" + *s + "' " + not_plain);
                            continue;
                        }
                        if (out.scratch && path_within(*out.scratch, *s)) {
                            error((*v)[i], pp, "scratch dir " + *out.scratch + " lies in "
                                               "never_write path " + *s);
                        }
                        out.never_write.push_back(std::move(*s));
                    }
                }
            }
        }
    }

    // A client address must belong to at most one job; overlapping `sources` would make
    // the job a client gets depend on rule order.
    void check_sources(const policy& p) {
        for (std::size_t a = 0; a < p.jobs.size(); ++a) {
            for (std::size_t b = a + 1; b < p.jobs.size(); ++b) {
                for (const auto& x : p.jobs[a].sources) {
                    for (const auto& y : p.jobs[b].sources) {
                        if (x.contains(y) || y.contains(x)) {
                            diagnostic d;
                            d.file = file_;
                            d.line = p.jobs[b].pos.line;
                            d.column = p.jobs[b].pos.column;
                            d.message = "jobs." + p.jobs[b].name + ".sources: " + y.to_string() +
                                        " overlaps " + x.to_string() + " of job " +
                                        p.jobs[a].name + "; a client belongs to one job";
                            errors_.push_back(std::move(d));
                        }
                    }
                }
            }
        }
    }

    std::string file_;
    std::vector<diagnostic> errors_;
};

// Receives parser events and keeps none: used to count documents without building them.
class discard_events : public YAML::EventHandler {
public:
    YAML::Mark document_start = YAML::Mark::null_mark();  ///< of the last document read
    void OnDocumentStart(const YAML::Mark& m) override { document_start = m; }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

// True when every line is blank, a comment or a document marker.
bool only_comments(std::string_view text) {
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string_view::npos) {
            end = text.size();
        }
        std::string_view line = text.substr(start, end - start);
        const std::size_t first = line.find_first_not_of(" \t\r");
        if (first != std::string_view::npos) {
            line.remove_prefix(first);
            if (line[0] != '#' && !line.starts_with("---") && !line.starts_with("...")) {
                return false;
            }
        }
        start = end + 1;
    }
    return true;
}

diagnostic whole_file(std::string_view file, std::string message) {
    return diagnostic{std::string(file), 0, 0, std::move(message)};
}

}  // namespace

bool valid_http_method(std::string_view s) noexcept {
    return !s.empty() && s.size() <= 32 && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || c == '-' || c == '_';
    });
}

bool valid_job_name(std::string_view s) noexcept {
    if (s.empty() || s.size() > static_cast<std::size_t>(max_job_name)) {
        return false;
    }
    auto alnum = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    };
    if (!alnum(s.front())) {
        return false;
    }
    return std::all_of(s.begin(), s.end(),
                       [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}


load_result load_policy(std::string_view text, std::string_view file) {
    load_result result;
    if (text.size() > max_policy_bytes) {
        result.errors.push_back(whole_file(file, "policy is larger than 16 MiB; refusing to "
                                                 "read it"));
        return result;
    }
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        result.errors.push_back(whole_file(file, "policy is empty"));
        return result;
    }
    if (text.find('\0') != std::string_view::npos) {
        result.errors.push_back(whole_file(file, "policy contains NUL bytes; is it a text "
                                                 "file?"));
        return result;
    }
    // Not YAML::LoadAll: on some malformed inputs yaml-cpp 0.7's parser keeps reporting
    // empty documents without consuming input, and LoadAll then loops and allocates forever
    // (found by tests/fuzz/policy). Read one document, then ask for at most one more.
    YAML::Node root;
    bool second_document = false;
    YAML::Mark second_at = YAML::Mark::null_mark();
    try {
        const std::string owned(text);
        root = YAML::Load(owned);
        if (!root.IsNull()) {
            std::istringstream in(owned);
            YAML::Parser parser(in);
            discard_events sink;
            second_document = parser.HandleNextDocument(sink) && parser.HandleNextDocument(sink);
            second_at = sink.document_start;
        }
    } catch (const YAML::DeepRecursion& e) {
        diagnostic d = whole_file(file, "not valid YAML: nested too deeply");
        if (!e.mark.is_null()) {
            d.line = e.mark.line + 1;
            d.column = e.mark.column + 1;
        }
        result.errors.push_back(std::move(d));
        return result;
    } catch (const YAML::Exception& e) {
        diagnostic d = whole_file(file, "not valid YAML: " + e.msg);
        if (!e.mark.is_null()) {
            d.line = e.mark.line + 1;
            d.column = e.mark.column + 1;
        }
        result.errors.push_back(std::move(d));
        return result;
    }
    if (root.IsNull()) {
        result.errors.push_back(whole_file(
            file, only_comments(text) ? "policy is empty"
                                      : "not valid YAML: no document could be read from it"));
        return result;
    }
    loader l{std::string(file)};
    if (second_document) {
        l.error(second_at, "", "a policy file holds one YAML document; found more");
    }
    policy p;
    p.source = std::string(file);
    try {
        l.load(root, p);
    } catch (const YAML::Exception& e) {
        // Aliases and odd node shapes can still surprise yaml-cpp; never crash on them.
        l.error(e.mark, "", "could not read the policy: " + e.msg);
    }
    result.errors = std::move(l.errors());
    std::stable_sort(result.errors.begin(), result.errors.end(),
                     [](const diagnostic& a, const diagnostic& b) {
                         return std::tie(a.line, a.column) < std::tie(b.line, b.column);
                     });
    if (result.errors.empty()) {
        result.warnings = shadowed_rules(p, file);
        result.value = std::move(p);
    }
    return result;
}

std::vector<diagnostic> shadowed_rules(const policy& p, std::string_view file) {
    std::vector<diagnostic> out;
    // decide() walks a name's (or a prefix's) rules in file order and stops at the first
    // that allows the request, so a later rule for the same target is reached only for
    // the ports (and methods) no earlier one takes. tls and tcp both carry CONNECT.
    const auto same_target = [](const egress_rule& a, const egress_rule& b) {
        if (a.host && b.host) {
            return a.host->name == b.host->name && a.host->wildcard == b.host->wildcard;
        }
        return a.net && b.net && *a.net == *b.net;
    };
    const auto takes_requests_of = [](const egress_rule& a, const egress_rule& b) {
        if ((a.proto == protocol::http) != (b.proto == protocol::http)) {
            return false;
        }
        if (a.proto != protocol::http || a.methods.empty()) {
            return true;
        }
        if (b.methods.empty()) {
            return false;  // b allows any method, a only some
        }
        return std::all_of(b.methods.begin(), b.methods.end(), [&a](const std::string& m) {
            return std::find(a.methods.begin(), a.methods.end(), m) != a.methods.end();
        });
    };
    for (const job& j : p.jobs) {
        for (std::size_t k = 1; k < j.egress.size(); ++k) {
            const egress_rule& b = j.egress[k];
            std::vector<std::uint16_t> taken;
            std::size_t first_by = j.egress.size();
            for (std::size_t i = 0; i < k; ++i) {
                const egress_rule& a = j.egress[i];
                if (!same_target(a, b) || !takes_requests_of(a, b)) {
                    continue;
                }
                for (const std::uint16_t port : b.ports) {
                    if (a.allows_port(port) &&
                        std::find(taken.begin(), taken.end(), port) == taken.end()) {
                        taken.push_back(port);
                        first_by = std::min(first_by, i);
                    }
                }
            }
            if (taken.empty()) {
                continue;
            }
            std::sort(taken.begin(), taken.end());
            const egress_rule& a = j.egress[first_by];
            std::string msg = "jobs." + j.name + ".egress[" + std::to_string(k) + "]: ";
            if (taken.size() == b.ports.size()) {
                msg += "never matches: ";
            } else {
                msg += taken.size() == 1 ? "port " : "ports ";
                for (std::size_t i = 0; i < taken.size(); ++i) {
                    msg += (i > 0 ? "," : "") + std::to_string(taken[i]);
                }
                msg += taken.size() == 1 ? " never matches: " : " never match: ";
            }
            msg += "an earlier rule, jobs." + j.name + ".egress[" + std::to_string(first_by) +
                   "] (" + a.describe() + ", line " + std::to_string(a.pos.line) +
                   "), takes those requests first (the first matching rule wins)";
            out.push_back(diagnostic{std::string(file), b.pos.line, b.pos.column, msg});
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const diagnostic& x, const diagnostic& y) {
        return std::tie(x.line, x.column) < std::tie(y.line, y.column);
    });
    return out;
}

load_result load_policy_file(const std::string& path) {
    const auto refused = [&path](std::string message) {
        load_result r;
        r.errors.push_back(whole_file(path, std::move(message)));
        return r;
    };
    // Non-blocking open, then a regular file only: a FIFO (or a device) at the policy path
    // would block the caller in open() or read(), and a reload runs on the control thread
    // that serves the kill switch.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        return refused("cannot open: " + std::string(std::strerror(errno)));
    }
    struct fd_closer {
        int fd;
        ~fd_closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        return refused("cannot open: " + std::string(std::strerror(errno)));
    }
    if (S_ISDIR(st.st_mode)) {
        return refused("is a directory, not a policy file");
    }
    if (!S_ISREG(st.st_mode)) {
        return refused(std::string("is not a regular file (") +
                       (S_ISFIFO(st.st_mode)   ? "a FIFO"
                        : S_ISSOCK(st.st_mode) ? "a socket"
                        : S_ISCHR(st.st_mode)  ? "a character device"
                        : S_ISBLK(st.st_mode)  ? "a block device"
                                               : "not a file") +
                       "); refusing to read it");
    }
    if (static_cast<std::uint64_t>(st.st_size) > max_policy_bytes) {
        return refused("policy is larger than 16 MiB; refusing to read it");
    }
    std::string text;
    std::vector<char> buf(64 * 1024);
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return refused("read error: " + std::string(std::strerror(errno)));
        }
        if (n == 0) {
            break;
        }
        text.append(buf.data(), static_cast<std::size_t>(n));
        if (text.size() > max_policy_bytes) {
            return refused("policy is larger than 16 MiB; refusing to read it");
        }
    }
    return load_policy(text, path);
}

}  // namespace cordon::config
