#include "proxy/report/worksheet.hpp"

#include <algorithm>
#include <cstdio>

#include "common/time.hpp"
#include "config/classify.hpp"
#include "config/http_url.hpp"
#include "config/units.hpp"

namespace cordon::proxy::report {
namespace {

using strings = std::vector<std::string>;
constexpr std::string_view no_state =
    "not verified: no running cordon was read (run cordon worksheet against the admin API, "
    "--admin)";

std::string join(const strings& v, std::string_view sep) {
    std::string out;
    for (std::size_t i = 0; i < v.size(); ++i) {
        out += i == 0 ? "" : std::string(sep);
        out += v[i];
    }
    return out;
}

std::string bytes_text(std::uint64_t n) {
    static constexpr std::pair<std::uint64_t, const char*> units[] = {
        {1ull << 40, "TiB"}, {1ull << 30, "GiB"}, {1ull << 20, "MiB"}, {1ull << 10, "KiB"}};
    for (const auto& [size, name] : units) {
        if (n >= size && n % size == 0) {
            return std::to_string(n / size) + name;
        }
    }
    return std::to_string(n) + " bytes";
}

std::string ms_text(double ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f ms", ms);
    return buf;
}

check tick(std::string key, std::string text, bool ticked, std::string why) {
    return check{std::move(key), std::move(text), ticked, std::move(why)};
}

// Where this job may reach non-public space (decide.cpp, check_addresses): each host rule's
// resolves_to, for the addresses its name resolves to; and each cidr rule inside one
// non-public range, for IP literals in it (a wider cidr rule, e.g. 0.0.0.0/0, opens none).
// Everything else non-public is refused in every mode; cordon's own listeners always.
std::string private_address_why(const config::job& j) {
    strings open;
    for (const auto& r : j.egress) {
        if (r.host && !r.resolves_to.empty()) {
            strings nets;
            for (const auto& c : r.resolves_to) {
                nets.push_back(c.to_string());
            }
            open.push_back(r.describe() + " may resolve into " + join(nets, ", "));
        } else if (r.net) {
            const config::classification c = config::classify(r.net->network);
            if (!c.is_public() && c.range.contains(*r.net)) {
                open.push_back(r.describe() + " (a cidr rule inside the " +
                               std::string(config::to_string(c.cls)) + " range " +
                               c.range.to_string() + ")");
            }
        }
    }
    std::string why =
        "loopback, private, link-local, metadata, CGNAT and their IPv6 forms are refused with "
        "private_address, in every mode; ";
    if (open.empty()) {
        return why + "exceptions: none: this job names no resolves_to (and no cidr rule in "
                     "non-public space)";
    }
    return why + "this job's exceptions: " + join(open, "; ") +
           " (cordon's own listeners are refused even there)";
}

section job_card(const config::job& j) {
    section s{"job_card", "1. Job card", {}, {}, {}};
    s.facts.push_back({"task", "Task", j.task.empty() ? value{} : value{j.task}});
    s.facts.push_back({"inputs", "Inputs", j.inputs});
    s.facts.push_back({"outputs", "Outputs", j.outputs});
    s.facts.push_back({"mode", "Mode", std::string(config::to_string(j.mode))});
    s.facts.push_back({"egress_rules", "Egress rules", static_cast<std::int64_t>(j.egress.size())});
    s.facts.push_back({"max_tunnels", "Tunnels per session",
                       j.limits.max_tunnels ? value{std::int64_t{*j.limits.max_tunnels}}
                                            : value{std::string("unlimited")}});
    s.facts.push_back({"max_bytes_up", "Upload per session",
                       j.limits.max_bytes_up ? value{bytes_text(*j.limits.max_bytes_up)}
                                             : value{std::string("unlimited")}});
    s.facts.push_back({"env", "Environment passed in", j.env});
    strings sources;
    for (const auto& c : j.sources) {
        sources.push_back(c.to_string());
    }
    s.facts.push_back({"sources", "Clients attributed without a token", sources});
    return s;
}

bool has_mcp(const config::job& j) {
    return std::any_of(j.egress.begin(), j.egress.end(), [](const auto& r) { return r.mcp; });
}

// The MCP servers of a job (its rules with `mcp`): what cordon decides in their traffic.
check mcp_check(const config::job& j) {
    strings servers;
    for (const auto& r : j.egress) {
        if (r.mcp) {
            servers.push_back(
                r.describe() + " (tools: " +
                (r.mcp->tools.empty() ? std::string("none") : join(r.mcp->tools, ", ")) +
                "; messages up to " + bytes_text(r.mcp->max_body) + ")");
        }
    }
    const bool enforce = j.mode == config::job_mode::enforce;
    std::string why = "cordon reads the JSON-RPC messages to and from " + join(servers, ", ") +
                      " on the wire; ";
    if (enforce) {
        why += "a tools/call of a tool not listed is refused (answered with a JSON-RPC error in "
               "the server's place, never forwarded: mcp_tool); tools/list answers are "
               "filtered to the listed tools; each tool's definition is pinned per session, "
               "and a tool whose definition changes is refused from then on "
               "(mcp_tool_changed, an mcp.tool_changed record and the CordonMcpToolChanged "
               "alert); every call is "
               "recorded as tool.call with via mcp (server, tool, id, redacted arguments, "
               "the reason when refused)";
    } else {
        why = "NOT ENFORCED: mode report forwards every tool call and passes tools/list "
              "unfiltered; " +
              why +
              "each call is recorded as tool.call with via mcp, and one enforce mode would "
              "refuse carries would_deny (mcp_tool, or mcp_tool_changed for a tool whose "
              "definition changed within the session)";
    }
    return tick("mcp_tools", "MCP tool calls decided and recorded by cordon", enforce, why);
}

section egress(const config::policy& p, const config::job& j) {
    section s{"egress", "2. Egress allowlist", {}, {}, {}};
    table t{{"target", "ports", "protocol", "methods", "resolves_to"},
            {"Host / CIDR", "Ports", "Protocol", "Methods", "May resolve to (non-public)"},
            {}};
    // MCP rules: a column of their allowed tools, only for a job that has one.
    const bool mcp = has_mcp(j);
    if (mcp) {
        t.keys.emplace_back("mcp_tools");
        t.headers.emplace_back("MCP tools allowed");
    }
    for (const auto& r : j.egress) {
        strings ports;
        for (const auto port : r.ports) {
            ports.push_back(std::to_string(port));
        }
        strings resolves;
        for (const auto& c : r.resolves_to) {
            resolves.push_back(c.to_string());
        }
        const std::string target = r.host ? r.host->to_string() : r.net ? r.net->to_string() : "?";
        // http and https rules decide each request: their methods, or their request rules.
        const value methods = !r.per_request()    ? value{}
                              : !r.http.empty()   ? value{std::string("per request rules")}
                              : r.methods.empty() ? value{std::string("any")}
                                                  : value{r.methods};
        t.rows.push_back(
            {target, ports, std::string(config::to_string(r.proto)), methods, resolves});
        if (mcp) {
            t.rows.back().push_back(r.mcp ? value{r.mcp->tools} : value{});
        }
    }
    s.rows = std::move(t);
    const bool enforce = j.mode == config::job_mode::enforce;
    s.checks.push_back(tick(
        "default_deny", "Default: zero outbound; only the targets above are reachable", enforce,
        enforce ? (j.egress.empty() ? "mode enforce, and the job card has no egress rule: "
                                      "nothing is reachable"
                                    : "mode enforce: any other host, port, protocol or method "
                                      "is refused (403 with X-Cordon-Deny)")
                : "NOT ENFORCED: mode report lets other targets through and logs them as "
                  "conn.open with would_deny"));
    std::string dns_why;
    if (!enforce) {
        dns_why = "NOT ENFORCED: in report mode other names resolve too (dns.query with "
                  "would_deny)";
    } else if (p.listen.dns) {
        dns_why = "cordon's resolver on " + p.listen.dns->to_string() +
                  " answers only these names for this job; others get " +
                  std::string(config::to_string(p.dns.deny));
    } else {
        dns_why = "no resolver is offered (no listen.dns): the proxy resolves names itself, "
                  "only for allowed requests";
    }
    s.checks.push_back(tick("dns_limited", "DNS limited to these names", enforce, dns_why));
    s.checks.push_back(tick("private_addresses",
                            "Non-public addresses refused unless resolves_to names them", true,
                            private_address_why(j)));
    s.checks.push_back(tick("denials_counted", "Denied attempts audited and counted", true,
                            std::string("conn.deny and dns.deny in the audit log") +
                                (mcp ? " (refused tool calls: tool.call with their reason)" : "") +
                                "; cordon_denied_total{job,reason} on /metrics"));
    if (mcp) {
        s.checks.push_back(mcp_check(j));
    }
    strings rules;
    for (const auto& r : denial_alert_rules()) {
        if (!r.mcp || mcp) {
            rules.push_back(r.name + " (" + r.severity + "): " + r.what);
        }
    }
    s.facts.push_back({"alert_rules", "Alert rules (dashboards/alerts.yaml)", rules});
    s.checks.push_back(tick("alert_rules_loaded", "Prometheus alert rules loaded", false,
                            "cordon cannot see Prometheus: load dashboards/alerts.yaml "
                            "(rule_files) and check it there"));
    if (p.alerts.webhook) {
        const auto url = config::parse_http_url(p.alerts.webhook->url);
        // The URL may itself be a secret (its path or query): only the origin is shown.
        const std::string where = url.value ? url.value->origin() : std::string("(configured)");
        s.facts.push_back({"webhook", "Alert webhook (origin only)", where});
        s.checks.push_back(
            tick("webhook", "Denials POSTed to an alert webhook", true,
                 "alerts.webhook " + where + ", coalesced per session every " +
                     config::format_duration(p.alerts.webhook->interval) + ", at most " +
                     std::to_string(p.alerts.webhook->max_per_minute) + " a minute"));
    } else {
        s.facts.push_back({"webhook", "Alert webhook (origin only)", value{}});
        s.checks.push_back(tick("webhook", "Denials POSTed to an alert webhook", false,
                                "no alerts.webhook in the policy"));
    }
    return s;
}

section filesystem(const config::job& j) {
    section s{"filesystem", "3. Filesystem", {}, {}, {}};
    const auto& fs = j.filesystem;
    s.facts.push_back({"scratch", "Scratch (the only writable place)",
                       fs.scratch ? value{*fs.scratch} : value{}});
    s.facts.push_back({"never_write", "Never written", fs.never_write});
    s.facts.push_back(
        {"landlock", "Landlock", std::string(fs.landlock_optional ? "optional" : "required")});
    s.checks.push_back(tick(
        "read_only", "Read-only everywhere except scratch", true,
        std::string("cordon run mounts everything read-only in the sandbox's mount namespace, "
                    "with Landlock on top (") +
            (fs.landlock_optional ? "optional: without it the mounts alone" : "required") + ")"));
    s.checks.push_back(tick("scratch_wiped", "Scratch wiped at session end", fs.scratch.has_value(),
                            fs.scratch ? "a fresh tmpfs at " + *fs.scratch +
                                             ", empty at start, gone when the sandbox ends"
                                       : std::string("no scratch: nothing is writable")));
    s.checks.push_back(tick(
        "never_write", "Never-write paths refused twice", !fs.never_write.empty(),
        fs.never_write.empty() ? std::string("no never_write paths in the job card")
                               : "read-only mount and Landlock: " + join(fs.never_write, ", ")));
    return s;
}

section identity(const config::job& j, const std::optional<running_state>& st) {
    section s{"identity", "4. Identity", {}, {}, {}};
    const auto& id = j.identity;
    s.facts.push_back({"ttl", "Token TTL", config::format_duration(id.ttl)});
    s.facts.push_back({"mint", "Mint hook", id.mint ? value{*id.mint} : value{}});
    s.facts.push_back({"revoke", "Revoke hook", id.revoke ? value{*id.revoke} : value{}});
    if (st) {
        s.facts.push_back({"active_sessions", "Active sessions now",
                           static_cast<std::int64_t>(st->active_sessions)});
    }
    s.checks.push_back(tick("per_instance", "Per-instance identity", true,
                            "each session (cordon run, cordon session create) gets its own "
                            "id and token; nothing is shared between sessions"));
    s.checks.push_back(
        tick("short_lived", "Tokens minted at session start, revoked at end", true,
             "expire by themselves after " + config::format_duration(id.ttl) +
                 "; revoked at session end, by a session kill and by cordon token revoke"));
    s.checks.push_back(tick("mint_hook", "Credential minted per session by a hook",
                            id.mint.has_value(),
                            id.mint ? "identity.mint runs at session start; never logged"
                                    : std::string("no identity.mint in the job card")));
    s.checks.push_back(tick("revoke_hook", "Credential revoked by a hook at end and on kill",
                            id.revoke.has_value(),
                            id.revoke ? "identity.revoke runs at session end and on a kill"
                                      : std::string("no identity.revoke in the job card")));
    // The credential broker: which secrets the sandbox holds only as placeholders.
    std::vector<std::string> brokered;
    for (const auto& [var, secret] : j.credentials) {
        brokered.push_back(var + " -> " + secret);
    }
    s.facts.push_back({"brokered_secrets", "Brokered secrets (variable -> secret)", brokered});
    std::vector<std::string> injected;
    for (const auto& r : j.egress) {
        if (r.credential) {
            injected.push_back(r.credential->secret + " on " + r.describe() + " (" +
                               r.credential->header + ")");
        }
    }
    s.checks.push_back(tick(
        "no_key_in_sandbox", "No real API key enters the sandbox", !j.credentials.empty(),
        j.credentials.empty()
            ? std::string("no credentials in the job card: keys the agent needs would have to "
                          "be passed in its environment")
            : "the sandbox holds placeholders bound to its session; cordon injects the real "
              "value only on " +
                  join(injected, ", ") +
                  " and refuses a placeholder anywhere else (credential_misuse) and a secret's "
                  "bytes going out (secret_leak)"));
    const bool refused = j.env_allow_long_lived.empty();
    s.checks.push_back(
        tick("long_lived_refused", "Long-lived keys refused", refused,
             refused ? "cordon run refuses to start when a passed variable "
                       "looks like a long-lived key"
                     : "passed anyway (allow_long_lived): " + join(j.env_allow_long_lived, ", ")));
    return s;
}

section kill_switch(const config::policy& p, const std::optional<running_state>& st) {
    section s{"kill_switch", "5. Kill switch", {}, {}, {}};
    s.rows = table{
        {"layer", "command", "effect"},
        {"Layer", "Command", "Effect"},
        {{std::string("network kill"), std::string("cordon kill --all --reason R"),
          std::string("every connection of every session closed; all egress and DNS "
                      "refused until cordon revive --reason R")},
         {std::string("session kill"), std::string("cordon kill SESSION --reason R"),
          std::string("the session's connections closed, its tokens revoked for "
                      "good; cordon run kills its process tree")},
         {std::string("credential kill"), std::string("cordon token revoke SESSION [TOKEN_ID]"),
          std::string("the token refused and its connections closed; identity."
                      "revoke runs")},
         {std::string("firewall kill"),
          std::string("cordon firewall --policy FILE --sandbox-cidr C --apply --kill"),
          std::string("the host's nftables drop every packet from the sandboxes, "
                      "cordon included; holds even when cordon is down "
                      "(docs/deploy.md)")}}};
    s.facts.push_back({"stop_authority", "Stop authority", p.kill.stop_authority});
    s.facts.push_back({"max_stop_seconds", "Promised stop time (max_stop_seconds)",
                       std::int64_t{p.kill.max_stop_seconds}});
    std::string measured;
    bool within = false;
    std::string within_why;
    if (!st) {
        measured = "not read: no running cordon";
        within_why = std::string(no_state);
    } else if (st->kills.empty()) {
        measured = "not yet measured";
        within_why = "not yet measured: no kill has been made on this cordon";
    } else {
        // A kill that closed no connection measured nothing (its elapsed time is only the
        // bookkeeping): it cannot tick the box, though one beyond the promise still unticks it.
        strings parts;
        strings empty;
        bool beyond = false;
        for (const auto& k : st->kills) {
            parts.push_back(k.scope + " kill: " + ms_text(k.elapsed_ms) + " (" +
                            std::to_string(k.connections_closed) + " connections closed) at " +
                            common::format_rfc3339(k.at));
            if (k.connections_closed == 0) {
                empty.push_back(k.scope);
            }
            beyond = beyond || !(k.elapsed_ms <= p.kill.max_stop_seconds * 1000.0);
        }
        measured = join(parts, "; ");
        const bool one = empty.size() == 1;
        const std::string which = join(empty, " and ") + (one ? " kill" : " kills");
        if (empty.size() == st->kills.size()) {
            within_why = "last " + which + " closed no connection: nothing measured (" + measured +
                         ")";
        } else {
            within = !beyond;
            within_why = measured +
                         ", from the kill call to every connection closed, inside cordon";
            if (!empty.empty()) {
                within_why += "; the last " + which + " closed no connection and " +
                              (one ? "proves" : "prove") + " nothing";
            }
        }
    }
    s.facts.push_back({"last_measured", "Last measured stop-to-stopped", measured});
    if (st) {
        s.facts.push_back({"network_kill_now", "Network kill now",
                           st->network_killed
                               ? "ENGAGED: " + st->kill_reason + " (by " + st->kill_by + ")"
                               : std::string("not engaged")});
    }
    s.checks.push_back(
        tick("stop_authority", "People with stop authority named", !p.kill.stop_authority.empty(),
             p.kill.stop_authority.empty() ? std::string("kill.stop_authority is empty")
                                           : join(p.kill.stop_authority, ", ")));
    s.checks.push_back(
        tick("measured_within_promise",
             "Measured stop time within " + std::to_string(p.kill.max_stop_seconds) + " s", within,
             within_why));
    s.checks.push_back(tick("kills_persist", "Kills survive a restart", st && st->state_store_ok,
                            !st ? std::string(no_state)
                            : st->state_store_ok
                                ? "kept in the state store under " + p.state.path
                                : std::string("the state store is not open: cordon runs with "
                                              "the network kill engaged")));
    return s;
}

section audit(const config::policy& p, const config::job& j,
              const std::optional<running_state>& st) {
    section s{"audit", "6. Audit log", {}, {}, {}};
    strings logged{"conn.open / conn.close (target, ip, bytes up and down, duration)",
                   "conn.deny (reason)",
                   "dns.query / dns.deny",
                   "session.create, token.mint, token.revoke",
                   "kill.session, kill.network, revive, config.reload",
                   "tool.call, file.write, identity.mint, identity.revoke (from cordon run)"};
    if (has_mcp(j)) {
        logged.push_back("tool.call with via mcp (each tools/call on an MCP rule: server, tool, "
                         "JSON-RPC id, redacted arguments, the reason when refused), "
                         "mcp.tool_changed");
    }
    if (j.mode == config::job_mode::report) {
        logged.push_back("would_deny on conn.open and dns.query: what enforce mode would refuse");
    }
    s.facts.push_back({"logged", "What is logged", logged});
    s.facts.push_back({"path", "Where",
                       p.audit.path + "/cordon-YYYY-MM-DD.jsonl (JSON lines, "
                                      "one file a day)"});
    s.facts.push_back({"retention_days", "Retention (days)", std::int64_t{p.audit.retention_days}});
    s.checks.push_back(tick("secrets_redacted", "Secrets redacted before writing", true,
                            "tokens, credentials, Authorization values and secret-looking query "
                            "values"));
    s.checks.push_back(tick("fail_closed", "Fails closed when the log cannot be written", true,
                            "requests and DNS queries are refused (audit_unavailable)"));
    s.checks.push_back(tick("writable_now", "Audit log writable now", st && st->audit_healthy,
                            !st                 ? std::string(no_state)
                            : st->audit_healthy ? "the running cordon writes it"
                                                : std::string("the running cordon cannot write "
                                                              "it: it refuses traffic")));
    return s;
}

}  // namespace

const std::vector<alert_rule>& denial_alert_rules() {
    static const std::vector<alert_rule> rules{
        {"CordonEgressDenied", "warning", "cordon_denied_total",
         "any denied attempt of the job within 5 minutes"},
        {"CordonDenialBurst", "critical", "cordon_denial_bursts_total",
         "a session hammering on denied targets"},
        {"CordonMcpToolChanged", "critical", "cordon_denied_total",
         "an MCP server redefined a tool a session had been shown", true},
    };
    return rules;
}

model build(const config::policy& p, const config::job& j,
            const std::optional<running_state>& state, const origin& o) {
    model m;
    m.job = j.name;
    m.mode = std::string(config::to_string(j.mode));
    m.enforced = j.mode == config::job_mode::enforce;
    if (!m.enforced) {
        m.notice = "NOT ENFORCED: job " + j.name +
                   " is in report mode: requests its allowlist would deny are let through and "
                   "logged as would_deny (never non-public addresses, kills or bad "
                   "credentials)";
    }
    m.policy_source = o.policy_source;
    m.generated_at = common::format_rfc3339(o.generated);
    if (state) {
        m.state_source = state->source;
    }
    m.sections.push_back(job_card(j));
    m.sections.push_back(egress(p, j));
    m.sections.push_back(filesystem(j));
    m.sections.push_back(identity(j, state));
    m.sections.push_back(kill_switch(p, state));
    m.sections.push_back(audit(p, j, state));
    return m;
}

}  // namespace cordon::proxy::report
