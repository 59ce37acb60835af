// Loading a policy's jobs: task, mode, egress rules, limits, sources, identity, filesystem, env.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/classify.hpp"
#include "config/load.hpp"
#include "config/load_internal.hpp"
#include "config/units.hpp"

namespace cordon::config::detail {

namespace {

constexpr std::uint32_t max_tunnels_limit = 1'000'000;
constexpr auto min_ttl = std::chrono::minutes(1);
constexpr auto max_ttl = std::chrono::hours(24);

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
constexpr const char* not_plain = "is not a plain path: write it without '//', '.' or '..' parts";

// True when path `inner` is `outer` or lies below it.
bool path_within(std::string_view inner, std::string_view outer) {
    while (outer.size() > 1 && outer.back() == '/') {
        outer.remove_suffix(1);
    }
    if (outer == "/") {
        return true;
    }
    return inner == outer ||
           (inner.starts_with(outer) && inner.size() > outer.size() && inner[outer.size()] == '/');
}

}  // namespace

bool valid_env_name(std::string_view s) {
    if (s.empty() || (s[0] >= '0' && s[0] <= '9')) {
        return false;
    }
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_';
    });
}

void loader::load_jobs(const YAML::Node& n, policy& p) {
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
            error(key, path,
                  "job names are 1-64 characters of [A-Za-z0-9._-], starting "
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

void loader::load_job(const YAML::Node& n, const std::string& path, job& j) {
    if (!expect_map(n, path)) {
        return;
    }
    const auto keys = check_keys(n, path,
                                 {"task", "inputs", "outputs", "mode", "egress", "limits",
                                  "sources", "identity", "filesystem", "env", "credentials"});
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
    if (const auto* v = find(keys, "credentials")) {
        load_job_credentials(*v, path + ".credentials", j);
    }
}

// Returns false when the rule is unusable; errors are reported either way.
bool loader::load_rule(const YAML::Node& n, const std::string& path, egress_rule& r) {
    if (!expect_map(n, path)) {
        return false;
    }
    r.pos = {n.Mark().line + 1, n.Mark().column + 1};
    const std::size_t errors_before = errors_.size();
    const auto keys = check_keys(n, path,
                                 {"host", "cidr", "ports", "protocol", "methods", "http",
                                  "resolves_to", "credential", "mcp"});
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
            } else if (*s == "https") {
                r.proto = protocol::https;
            } else if (*s == "ssh") {
                r.proto = protocol::ssh;
            } else {
                error(*proto, path + ".protocol",
                      "unknown protocol '" + *s + "' (expected tls, tcp, ssh, http or https)");
            }
        }
    }
    if (net != nullptr) {
        if (proto == nullptr) {
            error(n, path,
                  "a 'cidr' rule must name its protocol: tcp, ssh or http (tls needs "
                  "a host name for the SNI check)");
        } else if ((r.proto == protocol::tls && proto->IsScalar() && proto->Scalar() == "tls") ||
                   r.proto == protocol::https) {
            error(*proto, path + ".protocol",
                  std::string(to_string(r.proto)) +
                      " needs a host name to check the SNI against; use tcp for a 'cidr' "
                      "rule");
        }
    }
    const auto* methods = find(keys, "methods");
    if (methods != nullptr) {
        if (!r.per_request()) {
            error(*methods, path + ".methods",
                  "'methods' applies only to protocol: http and https (cordon sees no request "
                  "inside a tls or tcp tunnel)");
        } else {
            load_methods(*methods, path + ".methods", r.methods);
        }
    }
    if (const auto* v = find(keys, "http")) {
        if (!r.per_request()) {
            error(*v, path + ".http",
                  "'http' request rules apply only to protocol: http and https (cordon sees "
                  "no request inside a tls or tcp tunnel)");
        } else if (methods != nullptr) {
            error(*v, path + ".http",
                  "give either 'methods' or 'http', not both: write the methods in the "
                  "request rules (`http: [{methods: [GET], paths: [\"/**\"]}]`)");
        } else {
            load_http_rules(*v, path + ".http", r.http);
        }
    }
    if (const auto* v = find(keys, "credential")) {
        if (r.proto != protocol::https) {
            error(*v, path + ".credential",
                  "a credential is injected only on protocol: https rules (cordon must see "
                  "inside the TLS, and never sends a secret in plain text)");
        } else {
            load_credential(*v, path + ".credential", r);
        }
    }
    if (const auto* v = find(keys, "mcp")) {
        load_mcp(*v, path + ".mcp", r);
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

void loader::load_methods(const YAML::Node& n, const std::string& path,
                          std::vector<std::string>& out) {
    if (!expect_list(n, path, "HTTP methods")) {
        return;
    }
    for (std::size_t i = 0; i < n.size(); ++i) {
        const std::string mp = path + "[" + std::to_string(i) + "]";
        auto s = get_string(n[i], mp);
        if (!s) {
            continue;
        }
        if (!valid_http_method(*s)) {
            error(n[i], mp,
                  "'" + *s + "' is not an HTTP method (write it in upper case, e.g. GET)");
        } else if (*s == "CONNECT") {
            error(n[i], mp, "CONNECT is not forwarded by http rules; use a tls or tcp rule");
        } else if (std::find(out.begin(), out.end(), *s) != out.end()) {
            error(n[i], mp, "'" + *s + "' listed twice");
        } else {
            out.push_back(std::move(*s));
        }
    }
    if (n.size() == 0) {
        error(n, path, "an empty list allows no method; leave 'methods' out to allow any");
    }
}

void loader::load_http_rules(const YAML::Node& n, const std::string& path,
                             std::vector<http_rule>& out) {
    if (!expect_list(n, path, "request rules ({methods, paths})")) {
        return;
    }
    if (n.size() == 0) {
        error(n, path, "an empty list allows no request; leave 'http' out to allow any");
        return;
    }
    for (std::size_t i = 0; i < n.size(); ++i) {
        const std::string rp = path + "[" + std::to_string(i) + "]";
        if (!expect_map(n[i], rp)) {
            continue;
        }
        const auto keys = check_keys(n[i], rp, {"methods", "paths"});
        http_rule h;
        const auto* m = find(keys, "methods");
        const auto* ps = find(keys, "paths");
        if (m == nullptr && ps == nullptr) {
            error(n[i], rp,
                  "give 'methods', 'paths' or both (e.g. `{methods: [GET], paths: [/v1/**]}`)");
            continue;
        }
        if (m != nullptr) {
            load_methods(*m, rp + ".methods", h.methods);
        }
        if (ps != nullptr && expect_list(*ps, rp + ".paths", "path patterns")) {
            if (ps->size() == 0) {
                error(*ps, rp + ".paths",
                      "an empty list allows no path; leave 'paths' out to allow any");
            }
            for (std::size_t k = 0; k < ps->size(); ++k) {
                const std::string pp = rp + ".paths[" + std::to_string(k) + "]";
                const auto text = get_string((*ps)[k], pp);
                if (!text) {
                    continue;
                }
                std::string why;
                if (auto g = path_glob::parse(*text, why)) {
                    h.paths.push_back(std::move(*g));
                } else {
                    error((*ps)[k], pp, "'" + *text + "': " + why);
                }
            }
        }
        out.push_back(std::move(h));
    }
}

void loader::load_ports(const YAML::Node& n, const std::string& path,
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

void loader::load_resolves_to(const YAML::Node& n, const std::string& path,
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
            error(n[i], ip,
                  nets[i].to_string() + " is public address space; resolves_to "
                                        "lists only the non-public ranges a name may resolve into");
        } else if (!c.range.contains(nets[i])) {
            error(n[i], ip,
                  nets[i].to_string() + " reaches beyond the " + std::string(to_string(c.cls)) +
                      " range " + c.range.to_string() +
                      "; resolves_to lists only "
                      "non-public ranges, one entry per range");
        } else if (!refuse_unspecified(n[i], ip, nets[i])) {
            out.push_back(nets[i]);
        }
    }
}

// 0.0.0.0/8 and :: (and their IPv6 images) are not a place on the network: Linux
// connects 0.0.0.0 to 127.0.0.1, so a rule opening them reaches this host, cordon's
// own admin API included. True (after the error) when `p` would open them.
bool loader::refuse_unspecified(const YAML::Node& n, const std::string& path, const cidr& p) {
    const std::optional<cidr> range = opened_unspecified_range(p);
    if (range) {
        error(n, path,
              p.to_string() + " opens the unspecified range " + range->to_string() +
                  ", which the kernel connects to this "
                  "host (cordon's own listeners): it is never egress");
    }
    return range.has_value();
}

void loader::load_limits(const YAML::Node& n, const std::string& path, job_limits& out) {
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

void loader::load_identity(const YAML::Node& n, const std::string& path, identity_spec& out) {
    if (!expect_map(n, path)) {
        return;
    }
    const auto keys = check_keys(n, path, {"ttl", "mint", "revoke"});
    if (const auto* v = find(keys, "ttl")) {
        if (auto s = get_string(*v, path + ".ttl")) {
            auto d = parse_duration(*s);
            if (!d) {
                error(*v, path + ".ttl", "expected a duration such as 30m or 2h, got '" + *s + "'");
            } else if (*d < min_ttl || *d > max_ttl) {
                error(*v, path + ".ttl",
                      "'" + *s +
                          "' is outside 1m..24h (tokens are "
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
                if (out.mint_file &&
                    (out.mint_file->empty() || out.mint_file->find('/') != std::string::npos ||
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

void loader::load_filesystem(const YAML::Node& n, const std::string& path, filesystem_spec& out) {
    if (!expect_map(n, path)) {
        return;
    }
    const auto keys = check_keys(n, path, {"scratch", "never_write", "landlock"});
    if (const auto* v = find(keys, "landlock")) {
        if (auto s = get_string(*v, path + ".landlock")) {
            if (*s == "optional") {
                out.landlock_optional = true;
            } else if (*s != "required") {
                error(*v, path + ".landlock", "expected required or optional, got '" + *s + "'");
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
                        error((*v)[i], pp,
                              "scratch dir " + *out.scratch +
                                  " lies in "
                                  "never_write path " +
                                  *s);
                    }
                    out.never_write.push_back(std::move(*s));
                }
            }
        }
    }
}

// A client address must belong to at most one job; overlapping `sources` would make
// the job a client gets depend on rule order.
void loader::check_sources(const policy& p) {
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
                                    " overlaps " + x.to_string() + " of job " + p.jobs[a].name +
                                    "; a client belongs to one job";
                        errors_.push_back(std::move(d));
                    }
                }
            }
        }
    }
}

}  // namespace cordon::config::detail
