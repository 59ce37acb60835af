// `cordon kill`, `cordon revive`, `cordon token revoke`: the kill switch from a terminal,
// through the admin API.

#include <boost/json.hpp>

#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "cli/admin_client.hpp"
#include "cli/verbs.hpp"
#include "common/error_text.hpp"

namespace cordon::cli {
namespace {

namespace json = boost::json;

constexpr std::string_view kill_usage = R"(usage: cordon kill --all --reason REASON [--by NAME]
       cordon kill SESSION_ID --reason REASON [--by NAME]

Network kill (--all): every live tunnel and connection of every session is closed and
every new request is refused (403 kill_switch) until `cordon revive`. Session kill:
that session's connections are closed and its tokens revoked, for good.
Both are written to cordon's state before the call returns and survive restarts.
Prints how many connections were closed and how long it took inside cordon.
Exit status 3 when the kill is in force but cordon could not persist it (the state
store failed: a restart would undo it); 0 only for a kill that is in force and persisted.

options:
  --reason REASON   why (required; it goes to the audit log and the event stream)
  --by NAME         who (default: $USER@host)
  --admin URL, --admin-token-file FILE   the admin API (env CORDON_ADMIN, CORDON_ADMIN_TOKEN_FILE)
)";

constexpr std::string_view revive_usage = R"(usage: cordon revive --reason REASON [--by NAME]

Lifts a network kill. Killed sessions stay killed: create new ones.
)";

constexpr std::string_view token_usage = R"(usage: cordon token revoke SESSION_ID [TOKEN_ID]

Credential kill: revokes one token of a session, or every token when TOKEN_ID is left
out, and closes the connections opened with them.
)";

std::string default_by() {
    const char* user = std::getenv("USER");
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return std::string(user != nullptr ? user : "unknown") + "@" + host;
}

// Takes "--name VALUE" out of `a`; false (and a message) when the value is missing.
bool take_value(std::vector<std::string_view>& a, std::string_view name, std::string& out,
                std::string_view verb) {
    for (auto it = a.begin(); it != a.end(); ++it) {
        if (*it == name) {
            if (it + 1 == a.end()) {
                std::cerr << "cordon " << verb << ": " << name << " needs a value\n";
                return false;
            }
            out = std::string(*(it + 1));
            a.erase(it, it + 2);
            return true;
        }
    }
    return true;
}

int post(const admin_target& t, std::string_view verb, const std::string& method,
         const std::string& path, const json::object& body, json::object& out) {
    try {
        const admin_response r = admin_call(t, method, path, json::serialize(body));
        if (r.status < 200 || r.status >= 300) {
            return report_failure(verb, r);
        }
        boost::system::error_code ec;
        auto v = json::parse(r.body, ec);
        if (ec || !v.is_object()) {
            std::cerr << "cordon " << verb << ": the admin API sent invalid JSON\n";
            return 1;
        }
        out = std::move(v.as_object());
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "cordon " << verb << ": " << common::without_location(e) << '\n';
        return 1;
    }
}

// A kill that cordon enforces but could not write to its state store: a restart would lift
// it. Said on stderr, with exit status 3, so no script takes it for a durable kill.
constexpr int exit_not_persisted = 3;

bool persisted(const json::object& out) {
    const auto* p = out.if_contains("persisted");
    return p != nullptr && p->is_bool() && p->as_bool();
}

int not_persisted(std::string_view what) {
    std::cerr << "cordon kill: WARNING: the " << what
              << " is in force in memory but NOT PERSISTED: cordon's state store failed (see "
                 "`cordon status`, state), so a restart of cordon would undo it; fix the "
                 "store, then kill again\n";
    return exit_not_persisted;
}

std::string num(const json::value& v) {
    if (v.is_double()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", v.as_double());
        return buf;
    }
    return json::serialize(v);
}

}  // namespace

int kill(args in) {
    if (wants_help(in)) {
        std::cout << kill_usage;
        return 0;
    }
    std::vector<std::string_view> a(in.begin(), in.end());
    std::string reason;
    std::string by = default_by();
    if (!take_value(a, "--reason", reason, "kill") || !take_value(a, "--by", by, "kill")) {
        return 2;
    }
    bool all = false;
    for (auto it = a.begin(); it != a.end(); ++it) {
        if (*it == "--all") {
            all = true;
            a.erase(it);
            break;
        }
    }
    admin_target t;
    if (!parse_admin_options(a, t)) {
        return 2;
    }
    if (reason.empty()) {
        std::cerr << "cordon kill: --reason is required\n" << kill_usage;
        return 2;
    }
    if (all == !a.empty() || a.size() > 1) {
        std::cerr << "cordon kill: give either --all or one SESSION_ID\n" << kill_usage;
        return 2;
    }
    const json::object body{{"reason", reason}, {"by", by}};
    json::object out;
    if (all) {
        if (int rc = post(t, "kill", "POST", "/v1/kill", body, out)) {
            return rc;
        }
        std::cout << (out["already_engaged"].as_bool() ? "network kill was already engaged; "
                                                       : "network kill ENGAGED; ")
                  << num(out["connections_closed"]) << " connections closed in "
                  << num(out["elapsed_ms"]) << " ms\n";
        return persisted(out) ? 0 : not_persisted("network kill");
    }
    const std::string id(a[0]);
    if (int rc = post(t, "kill", "POST", "/v1/sessions/" + id + "/kill", body, out)) {
        return rc;
    }
    std::cout << "session " << id << " KILLED; " << num(out["connections_closed"])
              << " connections closed, " << num(out["tokens_revoked"]) << " tokens revoked in "
              << num(out["elapsed_ms"]) << " ms\n";
    return persisted(out) ? 0 : not_persisted("session kill");
}

int revive(args in) {
    if (wants_help(in)) {
        std::cout << revive_usage;
        return 0;
    }
    std::vector<std::string_view> a(in.begin(), in.end());
    std::string reason;
    std::string by = default_by();
    if (!take_value(a, "--reason", reason, "revive") || !take_value(a, "--by", by, "revive")) {
        return 2;
    }
    admin_target t;
    if (!parse_admin_options(a, t)) {
        return 2;
    }
    if (reason.empty() || !a.empty()) {
        std::cerr << "cordon revive: --reason is required and nothing else\n" << revive_usage;
        return 2;
    }
    json::object out;
    if (int rc = post(t, "revive", "POST", "/v1/revive",
                      json::object{{"reason", reason}, {"by", by}}, out)) {
        return rc;
    }
    std::cout << "network kill lifted; egress allowed by the policy again\n";
    return 0;
}

int token(args in) {
    if (in.empty() || wants_help(in)) {
        std::cout << token_usage;
        return in.empty() ? 2 : 0;
    }
    std::vector<std::string_view> a(in.begin() + 1, in.end());
    admin_target t;
    if (!parse_admin_options(a, t)) {
        return 2;
    }
    if (in[0] != "revoke" || a.empty() || a.size() > 2) {
        std::cerr << "cordon token: usage error\n" << token_usage;
        return 2;
    }
    const std::string id(a[0]);
    std::vector<std::string> tokens;
    if (a.size() == 2) {
        tokens.emplace_back(a[1]);
    } else {
        try {
            const admin_response r = admin_call(t, "GET", "/v1/sessions/" + id);
            if (r.status != 200) {
                return report_failure("token revoke", r);
            }
            const auto v = json::parse(r.body);
            for (const auto& tok : v.at("tokens").as_array()) {
                if (!tok.at("revoked").as_bool()) {
                    tokens.emplace_back(tok.at("id").as_string());
                }
            }
        } catch (const std::exception& e) {
            std::cerr << "cordon token revoke: " << common::without_location(e) << '\n';
            return 1;
        }
    }
    std::uint64_t closed = 0;
    for (const auto& tid : tokens) {
        try {
            const admin_response r = admin_call(t, "DELETE",
                                                "/v1/sessions/" + id + "/tokens/" + tid);
            if (r.status != 200) {
                return report_failure("token revoke", r);
            }
            closed += json::parse(r.body).at("connections_closed").to_number<std::uint64_t>();
        } catch (const std::exception& e) {
            std::cerr << "cordon token revoke: " << common::without_location(e) << '\n';
            return 1;
        }
    }
    std::cout << tokens.size() << (tokens.size() == 1 ? " token" : " tokens") << " of session "
              << id << " revoked; " << closed << " connections closed\n";
    return 0;
}

}  // namespace cordon::cli
