// `cordon session create|list|end` and `cordon status`: thin clients of the admin API.

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "cli/admin_client.hpp"
#include "cli/verbs.hpp"

namespace cordon::cli {
namespace {

namespace json = boost::json;

constexpr std::string_view session_usage =
    R"(usage: cordon session create JOB [--ttl DURATION] [--json]
       cordon session list [--json]
       cordon session end ID

Manages sessions through the admin API. `create` prints the session id, its token
and the proxy URL to give the agent, as the variables `cordon run` sets (HTTPS_PROXY,
HTTP_PROXY, ALL_PROXY and their lower-case forms); the token is shown once.

admin options (every verb that talks to the admin API):
  --admin URL              the admin API (default http://127.0.0.1:9090; env CORDON_ADMIN)
  --admin-token-file FILE  its bearer token (env CORDON_ADMIN_TOKEN_FILE)
)";

constexpr std::string_view status_usage =
    R"(usage: cordon status [--top N] [--json] [--admin URL] [--admin-token-file FILE]

Shows cordon's state through the admin API (GET /v1/status and /v1/denials):
listeners, policy, audit log health, the kill switch, active sessions, live
connections and tunnels, and per job its denials with the N most denied targets
(default 3; count, last reason, last seen UTC) and one line for the rest, so that
the rows add up to the job's DENIED. Jobs with neither tunnels nor denials are
left out. --json prints {"status": ..., "denials": ...}.
)";

// The proxy variables `cordon run` sets (shims/env.cpp), upper and lower case.
constexpr std::pair<std::string_view, std::string_view> proxy_variables[] = {
    {"HTTPS_PROXY", "https_proxy"}, {"HTTP_PROXY", "http_proxy"}, {"ALL_PROXY", "all_proxy"}};

/// `s` in single quotes for a POSIX shell ('\'' for a quote inside).
std::string shell_quote(std::string_view s) {
    std::string out = "'";
    for (const char c : s) {
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return out + "'";
}

bool take_flag(std::vector<std::string_view>& a, std::string_view flag) {
    for (auto it = a.begin(); it != a.end(); ++it) {
        if (*it == flag) {
            a.erase(it);
            return true;
        }
    }
    return false;
}

// A value for the terminal: printable ASCII only, every other byte '?' (as the denial
// table keeps its targets). A kill's reason and by are whatever the caller sent: ESC or NUL
// there must not clear the screen and print "ALL CLEAR" over an engaged kill.
std::string str(const json::value& v) {
    std::string s = v.is_string() ? std::string(v.as_string()) : json::serialize(v);
    for (char& c : s) {
        if (c < 0x20 || c > 0x7e) {
            c = '?';
        }
    }
    return s;
}

int call(const admin_target& t, std::string_view verb, std::string_view method,
         std::string_view path, std::string_view body, json::value& out) {
    try {
        const admin_response r = admin_call(t, method, path, body);
        if (r.status < 200 || r.status >= 300) {
            return report_failure(verb, r);
        }
        boost::system::error_code ec;
        out = json::parse(r.body, ec);
        if (ec) {
            std::cerr << "cordon " << verb << ": the admin API sent invalid JSON\n";
            return 1;
        }
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "cordon " << verb << ": " << e.what() << '\n';
        return 1;
    }
}

std::optional<std::size_t> parse_count(std::string_view s) {
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size()) {
        return std::nullopt;
    }
    return n;
}

// `s` cut or padded to `width` columns (the API sends printable ASCII targets).
std::string cell(std::string s, std::size_t width) {
    if (s.size() > width) {
        s.resize(width - 1);
        s += '~';
    }
    s.resize(width, ' ');
    return s;
}

std::string right(const std::string& s, std::size_t width) {
    return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

// Per job: denials and active tunnels, then its most denied targets. Fits 80 columns.
void print_jobs(const json::object& status, const json::object& denials, std::size_t top,
                std::ostream& out) {
    struct row {
        std::uint64_t denied = 0;
        std::int64_t tunnels = 0;
        const json::array* targets = nullptr;
    };
    std::map<std::string, row> jobs;
    std::int64_t tunnels_total = 0;
    if (const auto* t = status.if_contains("tunnels"); t != nullptr && t->is_object()) {
        for (const auto& [job, n] : t->as_object()) {
            jobs[std::string(job)].tunnels = n.to_number<std::int64_t>();
            tunnels_total += n.to_number<std::int64_t>();
        }
    }
    std::uint64_t denied_total = 0;
    for (const auto& j : denials.at("jobs").as_array()) {
        const auto& jo = j.as_object();
        row& r = jobs[std::string(jo.at("job").as_string())];
        r.denied = jo.at("denied").to_number<std::uint64_t>();
        r.targets = &jo.at("top").as_array();
        denied_total += r.denied;
    }
    out << "tunnels      " << tunnels_total << " active\n"
        << "denied       " << denied_total << " since start\n";
    if (jobs.empty()) {
        return;
    }
    out << "\n" << cell("JOB", 32) << right("DENIED", 10) << right("TUNNELS", 10) << '\n';
    for (const auto& [job, r] : jobs) {
        out << cell(job, 32) << right(std::to_string(r.denied), 10)
            << right(std::to_string(r.tunnels), 10) << '\n';
        if (r.targets == nullptr) {
            continue;
        }
        std::size_t shown = 0;
        std::uint64_t shown_count = 0;
        for (const auto& e : *r.targets) {
            if (shown == top) {
                break;
            }
            ++shown;
            const auto& eo = e.as_object();
            if (const auto* n = eo.if_contains("count"); n != nullptr && n->is_number()) {
                shown_count += n->to_number<std::uint64_t>();
            }
            const std::string target = str(eo.at("target"));
            const std::string seen = str(eo.at("last_seen"));
            out << "  " << right(str(eo.at("count")), 8) << "  "
                << cell(target.empty() ? "(no target)" : target, 40) << ' '
                << cell(str(eo.at("last_reason")), 17) << ' '
                << (seen.size() >= 19 ? seen.substr(11, 8) : seen) << '\n';
        }
        // The rows add up to the job's DENIED: the rest on one line, with how to see it.
        if (r.denied > shown_count) {
            const std::size_t more = r.targets->size() - shown;
            out << "  " << right(std::to_string(r.denied - shown_count), 8) << "  "
                << (more > 0 ? "to " + std::to_string(more) + " more target" +
                                   (more == 1 ? "" : "s") + " (--top " +
                                   std::to_string(std::min<std::size_t>(r.targets->size(), 32)) +
                                   " lists them)"
                             : std::string("to targets no longer in the table"))
                << '\n';
        }
    }
}

}  // namespace

int session(args in) {
    if (in.empty() || wants_help(in)) {
        std::cout << session_usage;
        return in.empty() ? 2 : 0;
    }
    std::vector<std::string_view> a(in.begin() + 1, in.end());
    const std::string_view sub = in[0];
    const bool as_json = take_flag(a, "--json");
    std::string ttl;
    for (auto it = a.begin(); it != a.end(); ++it) {
        if (*it == "--ttl" && it + 1 != a.end()) {
            ttl = std::string(*(it + 1));
            a.erase(it, it + 2);
            break;
        }
    }
    admin_target t;
    if (!parse_admin_options(a, t)) {
        return 2;
    }
    json::value v;
    if (sub == "create") {
        if (a.size() != 1) {
            std::cerr << "cordon session create: JOB is required\n" << session_usage;
            return 2;
        }
        json::object body{{"job", std::string(a[0])}};
        if (!ttl.empty()) {
            body["ttl"] = ttl;
        }
        if (int rc = call(t, "session create", "POST", "/v1/sessions", json::serialize(body), v)) {
            return rc;
        }
        if (as_json) {
            std::cout << json::serialize(v) << '\n';
            return 0;
        }
        const auto& o = v.as_object();
        const std::string url = str(o.at("proxy_url"));
        // Both cases, as `cordon run` sets them: curl reads only the lower-case http_proxy
        // for http:// URLs, other clients only the upper case. Quoted for the shell.
        std::string set_upper = "  export";
        std::string set_lower = "  export";
        for (const auto& [upper, lower] : proxy_variables) {
            set_upper += " " + std::string(upper) + "=" + shell_quote(url);
            set_lower += " " + std::string(lower) + "=" + shell_quote(url);
        }
        std::cout << "session    " << str(o.at("id")) << "\n"
                  << "token id   " << str(o.at("token_id")) << "\n"
                  << "expires at " << str(o.at("expires_at")) << "\n"
                  << "proxy url  " << url << "\n\n"
                  << "give the agent (both cases: curl reads only lower-case http_proxy):\n"
                  << set_upper << '\n'
                  << set_lower << '\n';
        // The credential broker's placeholders: what the sandbox holds instead of the keys.
        if (const auto* c = o.if_contains("credentials");
            c != nullptr && c->is_object() && !c->as_object().empty()) {
            std::string set = "  export";
            for (const auto& kv : c->as_object()) {
                set += " " + std::string(kv.key()) + "=" + shell_quote(str(kv.value()));
            }
            std::cout << "\nand its credentials (placeholders: cordon puts the real keys in on "
                         "the way to the hosts that take them; they work only through this "
                         "session):\n"
                      << set << '\n';
        }
        return 0;
    }
    if (sub == "list") {
        if (int rc = call(t, "session list", "GET", "/v1/sessions", {}, v)) {
            return rc;
        }
        if (as_json) {
            std::cout << json::serialize(v) << '\n';
            return 0;
        }
        const auto& list = v.as_object().at("sessions").as_array();
        std::cout << "ID                   JOB                  STATE    EXPIRES\n";
        for (const auto& s : list) {
            const auto& o = s.as_object();
            std::string id = str(o.at("id"));
            std::string job = str(o.at("job"));
            id.resize(std::max<std::size_t>(id.size(), 20), ' ');
            job.resize(std::max<std::size_t>(job.size(), 20), ' ');
            std::string state = str(o.at("state"));
            state.resize(std::max<std::size_t>(state.size(), 8), ' ');
            std::cout << id << ' ' << job << ' ' << state << ' ' << str(o.at("expires_at")) << '\n';
        }
        return 0;
    }
    if (sub == "end") {
        if (a.size() != 1) {
            std::cerr << "cordon session end: ID is required\n" << session_usage;
            return 2;
        }
        if (int rc = call(t, "session end", "DELETE", "/v1/sessions/" + std::string(a[0]), {}, v)) {
            return rc;
        }
        std::cout << "session " << a[0] << " ended; " << str(v.as_object().at("connections_closed"))
                  << " connections closed\n";
        return 0;
    }
    std::cerr << "cordon session: unknown subcommand '" << sub << "'\n" << session_usage;
    return 2;
}

int status(args in) {
    if (wants_help(in)) {
        std::cout << status_usage;
        return 0;
    }
    std::vector<std::string_view> a(in.begin(), in.end());
    const bool as_json = take_flag(a, "--json");
    std::size_t top = 3;
    for (auto it = a.begin(); it != a.end(); ++it) {
        if (*it == "--top") {
            const auto n = it + 1 != a.end() ? parse_count(*(it + 1)) : std::nullopt;
            if (!n || *n > 32) {
                std::cerr << "cordon status: --top takes a number 0-32\n" << status_usage;
                return 2;
            }
            top = *n;
            a.erase(it, it + 2);
            break;
        }
    }
    admin_target t;
    if (!parse_admin_options(a, t)) {
        return 2;
    }
    if (!a.empty()) {
        std::cerr << "cordon status: unexpected argument '" << a[0] << "'\n" << status_usage;
        return 2;
    }
    json::value v;
    if (int rc = call(t, "status", "GET", "/v1/status", {}, v)) {
        return rc;
    }
    json::value d;
    if (int rc = call(t, "status", "GET", "/v1/denials", {}, d)) {
        return rc;
    }
    if (as_json) {
        std::cout << json::serialize(json::object{{"status", v}, {"denials", d}}) << '\n';
        return 0;
    }
    const auto& o = v.as_object();
    const auto& pol = o.at("policy").as_object();
    const auto& aud = o.at("audit").as_object();
    std::cout << "cordon " << str(o.at("version")) << ", up " << str(o.at("uptime_s")) << "s\n"
              << "proxy        " << str(o.at("listen").as_object().at("proxy")) << '\n'
              << "policy       " << str(pol.at("source")) << " (" << str(pol.at("jobs"))
              << (str(pol.at("jobs")) == "1" ? " job, " : " jobs, ") << str(pol.at("rules"))
              << (str(pol.at("rules")) == "1" ? " rule)\n" : " rules)\n") << "audit        "
              << (aud.at("healthy").as_bool() ? "healthy" : "UNWRITABLE") << ", "
              << str(aud.at("path")) << '\n'
              << "kill switch  "
              << (o.at("kill").as_object().at("engaged").as_bool()
                      ? "ENGAGED: " + str(o.at("kill").as_object().at("reason")) + " (by " +
                            str(o.at("kill").as_object().at("by")) + ", " +
                            str(o.at("kill").as_object().at("at")) + ")"
                      : std::string("off"))
              << '\n'
              << "sessions     " << str(o.at("sessions_active")) << " active\n"
              << "connections  " << str(o.at("connections")) << " open\n";
    // Whether kills survive a restart (docs/proxy.md#state).
    if (const auto* st = o.if_contains("state"); st != nullptr && st->is_object()) {
        const auto& so = st->as_object();
        const auto* healthy = so.if_contains("healthy");
        const bool durable = healthy != nullptr && healthy->is_bool() && healthy->as_bool();
        std::cout << "state        "
                  << (durable ? "healthy" : "NOT DURABLE: kills hold in memory only") << '\n';
        // The reason, wrapped to the 80 columns of the rest.
        std::string why = !durable && so.contains("error") ? str(so.at("error")) : "";
        while (!why.empty()) {
            std::size_t cut = why.size() <= 76 ? why.size() : why.rfind(' ', 76);
            if (cut == std::string::npos || cut == 0) {
                cut = std::min<std::size_t>(why.size(), 76);
            }
            std::cout << "  " << why.substr(0, cut) << '\n';
            why.erase(0, cut);
            if (!why.empty() && why.front() == ' ') {
                why.erase(0, 1);
            }
        }
    }
    // A fleet (docs/fleet.md): the store's health and the instances in its registry.
    if (const auto* c = o.if_contains("cluster"); c != nullptr && c->is_object()) {
        const auto& co = c->as_object();
        std::cout << "fleet        instance " << str(co.at("instance")) << ", etcd "
                  << str(co.at("store"))
                  << (co.at("serving").as_bool() ? "" : " (new sessions refused)") << '\n';
        if (const auto* is = co.if_contains("instances"); is != nullptr && is->is_array()) {
            for (const auto& i : is->as_array()) {
                if (!i.is_object()) {
                    continue;
                }
                const auto& io = i.as_object();
                std::cout << "  " << str(io.at("instance")) << "  admin " << str(io.at("admin"))
                          << "  proxy " << str(io.at("proxy")) << "  since "
                          << str(io.at("started"))
                          << (io.at("self").as_bool() ? "  (this one)" : "") << '\n';
            }
        }
    }
    print_jobs(o, d.as_object(), top, std::cout);
    return 0;
}

}  // namespace cordon::cli
