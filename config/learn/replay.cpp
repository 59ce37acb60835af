#include "config/learn/replay.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <tuple>

#include "common/json_string.hpp"
#include "config/host.hpp"
#include "config/http_rules.hpp"
#include "config/learn/suggest.hpp"

namespace cordon::learn {
namespace {

std::string_view outcome_name(seen_outcome o) {
    switch (o) {
        case seen_outcome::allowed: return "allowed";
        case seen_outcome::would_deny: return "would_deny";
        case seen_outcome::denied: return "denied";
    }
    return "denied";
}

std::string request_text(const replay_row& r) {
    if (!r.tool.empty()) {
        return "tools/call " + r.tool + " (" +
               (r.kind == config::request_kind::inspected ? "https " : "http ") + r.target + ")";
    }
    switch (r.kind) {
        case config::request_kind::http:
            return r.method + " http " + r.target + (r.path.empty() ? "" : " " + r.path);
        case config::request_kind::inspected:
            return r.method + " https " + r.target + (r.path.empty() ? "" : " " + r.path);
        case config::request_kind::connect: break;
    }
    return "CONNECT " + r.target;
}

std::string_view kind_name(config::request_kind k) {
    switch (k) {
        case config::request_kind::http: return "http";
        case config::request_kind::inspected: return "inspected";
        case config::request_kind::connect: break;
    }
    return "connect";
}

std::string was_text(const replay_row& r) {
    if (r.was == seen_outcome::allowed) {
        return "allowed";
    }
    return std::string(r.was == seen_outcome::would_deny ? "would-deny " : "denied ") +
           std::string(known_reason(r.was_reason));
}

std::string now_text(const replay_row& r) {
    if (r.now_allowed) {
        return "allowed by " + r.now_rule;
    }
    return "denied " + r.now_reason;
}

void sort_rows(std::vector<replay_row>& rows) {
    std::stable_sort(rows.begin(), rows.end(), [](const replay_row& a, const replay_row& b) {
        return a.count != b.count ? a.count > b.count : a.target < b.target;
    });
}

void rows_json(std::string& out, const std::vector<replay_row>& rows) {
    out.push_back('[');
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const replay_row& r = rows[i];
        out += i > 0 ? ",{\"target\":" : "{\"target\":";
        common::append_json_string(out, r.target);
        if (!r.tool.empty()) {
            out += ",\"kind\":\"tool_call\",\"via\":\"";
            out += kind_name(r.kind);
            out += "\",\"tool\":";
            common::append_json_string(out, r.tool);
            out += ",\"calls\":" + std::to_string(r.count);
        } else {
            out += ",\"kind\":\"";
            out += kind_name(r.kind);
            out += "\"";
            if (r.kind != config::request_kind::connect) {
                out += ",\"method\":";
                common::append_json_string(out, r.method);
            }
            if (!r.path.empty()) {
                out += ",\"path\":";
                common::append_json_string(out, r.path);
            }
            out += ",\"requests\":" + std::to_string(r.count);
        }
        out += ",\"was\":\"" + std::string(outcome_name(r.was)) + "\"";
        if (!r.was_reason.empty()) {
            out += ",\"was_reason\":";
            common::append_json_string(out, known_reason(r.was_reason));
        }
        out += ",\"now\":\"";
        out += r.now_allowed ? "allowed" : "denied";
        out += "\"";
        if (r.now_allowed) {
            out += ",\"rule\":";
            common::append_json_string(out, r.now_rule);
        } else {
            out += ",\"reason\":";
            common::append_json_string(out, r.now_reason);
        }
        out += "}";
    }
    out.push_back(']');
}

void rows_table(std::string& out, std::string_view title, const std::vector<replay_row>& rows) {
    std::uint64_t targets = 0;
    std::uint64_t total = 0;
    std::uint64_t tools = 0;
    std::uint64_t calls = 0;
    for (const replay_row& r : rows) {
        (r.tool.empty() ? targets : tools) += 1;
        (r.tool.empty() ? total : calls) += r.count;
    }
    out += std::string(title) + ": " + std::to_string(targets) +
           (targets == 1 ? " target, " : " targets, ") + std::to_string(total) +
           (total == 1 ? " request" : " requests");
    if (tools > 0) {
        out += ", " + std::to_string(calls) + (calls == 1 ? " tool call" : " tool calls") + " (" +
               std::to_string(tools) + (tools == 1 ? " tool)" : " tools)");
    }
    out += "\n";
    if (rows.empty()) {
        return;
    }
    const std::size_t shown = std::min(rows.size(), max_table_rows);
    std::size_t w1 = 7;
    std::size_t w2 = 3;
    for (std::size_t i = 0; i < shown; ++i) {
        w1 = std::max(w1, request_text(rows[i]).size());
        w2 = std::max(w2, was_text(rows[i]).size());
    }
    char buf[32];
    const auto line = [&](std::string_view n, const std::string& a, const std::string& b,
                          const std::string& c) {
        std::snprintf(buf, sizeof buf, "%10.*s", static_cast<int>(n.size()), n.data());
        out += "  " + std::string(buf) + "  " + a + std::string(w1 - a.size(), ' ') + "  " + b +
               std::string(w2 - b.size(), ' ') + "  " + c + "\n";
    };
    line("REQUESTS", "REQUEST", "WAS", "NOW");
    for (std::size_t i = 0; i < shown; ++i) {
        line(std::to_string(rows[i].count), request_text(rows[i]), was_text(rows[i]),
             now_text(rows[i]));
    }
    if (shown < rows.size()) {
        out += "  and " + std::to_string(rows.size() - shown) +
               " more rows (--format json lists them all)\n";
    }
}

// The requests that carried MCP calls to a server, as the calls are decided again: how they
// came (inside an inspected tunnel, or plain HTTP), the path of the POSTs most seen there
// (tool.call records name none), and the non-public addresses recorded for it.
struct carrier {
    config::request_kind kind = config::request_kind::http;
    std::string path;
    bool path_cut = false;
    std::string address;
};

carrier carrier_of(const seen_traffic& seen, const seen_tool_call& c) {
    carrier out;
    std::uint64_t best = 0;
    bool inspected = false;
    for (const seen_request& r : seen.requests) {
        if (r.host != c.host || r.port != c.port) {
            continue;
        }
        inspected = inspected || r.kind == config::request_kind::inspected || r.https_rule;
        if (out.address.empty() && !r.address.empty() && r.outcome != seen_outcome::denied) {
            out.address = r.address;
        }
        if (r.kind != config::request_kind::connect && r.method == "POST" && !r.path.empty() &&
            r.count > best) {
            best = r.count;
            out.path = r.path;
            out.path_cut = r.path_cut;
        }
    }
    out.kind = inspected ? config::request_kind::inspected : config::request_kind::http;
    return out;
}

// The calls of one tool decided under `p`: allowed, or why not (`undetermined` set when the
// new rule's request rules need a path no record gave).
struct tool_verdict {
    config::request_kind kind = config::request_kind::http;  ///< how the calls were carried
    bool allowed = false;
    std::string reason;
    std::string rule;
    std::string_view undetermined;
};

tool_verdict decide_tool_call(const seen_traffic& seen, const seen_tool_call& c,
                              const config::compiled_policy& p) {
    const carrier car = carrier_of(seen, c);
    config::decide_args a;
    a.job = seen.job;
    a.host = c.host;
    a.port = c.port;
    a.kind = car.kind;
    a.method = "POST";
    const config::normal_path np = config::normalise_path(car.path.empty() ? "/" : car.path);
    a.path = np.path;
    a.path_refused = !np.ok();
    config::decision d = config::decide(a, p);
    tool_verdict v;
    v.kind = car.kind;
    if ((car.path.empty() || car.path_cut) && d.rule != nullptr && !d.rule->http.empty()) {
        v.undetermined = "http_rule?";
    }
    if (d.allowed() && !c.ip_literal && !car.address.empty()) {
        if (const auto addrs = recorded_addresses(car.address)) {
            d = config::check_addresses(d, *addrs);
        }
    }
    if (!d.allowed()) {
        v.reason = std::string(config::to_string(d.reason));
        return v;
    }
    const config::egress_rule& rule = *d.rule;
    if (!rule.mcp) {
        v.allowed = true;
        v.rule = rule.describe() + " (no mcp: calls not decided)";
    } else if (!rule.mcp->allows_tool(c.tool)) {
        v.reason = "mcp_tool";
    } else if (c.reason == "mcp_tool_changed") {
        v.reason = "mcp_tool_changed";  // its server's change stands
    } else {
        v.allowed = true;
        v.rule = rule.describe();
    }
    return v;
}

}  // namespace

replay_result replay(const seen_traffic& seen, const config::compiled_policy& p) {
    replay_result out;
    out.job = seen.job;
    out.first_ts = seen.first_ts;
    out.last_ts = seen.last_ts;
    if (const config::job* j = p.source().find_job(seen.job)) {
        out.job_in_report_mode = j->mode == config::job_mode::report;
    }
    using key = std::tuple<std::string, int, std::string, std::string, int, std::string, bool,
                           std::string, std::string>;
    std::map<key, replay_row> changed;
    std::map<std::string, bool> same_allowed;  // target -> seen
    std::map<std::string, bool> same_denied;
    for (const seen_request& r : seen.requests) {
        out.requests += r.count;
        config::decide_args a;
        a.job = seen.job;
        a.host = r.host;
        a.port = r.port;
        a.kind = r.kind;
        a.method = r.method;
        const config::normal_path np = config::normalise_path(r.path.empty() ? "/" : r.path);
        a.path = np.path;
        a.path_refused = !np.ok();
        config::decision d = config::decide(a, p);
        // Which of "allowed" and "private_address?" / "http_rule?" replay cannot tell.
        std::string_view undetermined_reason;
        if (r.kind != config::request_kind::connect && (r.path.empty() || r.path_cut) &&
            d.rule != nullptr && !d.rule->http.empty()) {
            // Recorded where no request rules judged it (the path was not written), or with
            // its path cut: the new rule's request rules need the whole path.
            undetermined_reason = "http_rule?";
        }
        // A literal is decided by its rules alone, as the proxy does (no resolution, no
        // resolves_to); a name's recorded addresses (every one it resolved to) are checked as
        // after a resolution: one the new rule does not cover refuses them all, as in serve.
        const auto addrs = r.ip_literal || r.address.empty() ? std::nullopt
                                                             : recorded_addresses(r.address);
        if (d.allowed() && addrs) {
            d = config::check_addresses(d, *addrs);
        } else if (d.allowed() && r.reason == "private_address" && !r.ip_literal) {
            // Refused before for its (unrecorded) non-public address: still refused unless
            // the new rule opens some non-public range, and then it depends on the address.
            if (d.rule == nullptr || d.rule->resolves_to.empty()) {
                d.reason = config::deny_reason::private_address;
            } else {
                undetermined_reason = "private_address?";
            }
        }
        const bool was_allowed = r.outcome == seen_outcome::allowed;
        const std::string target = config::host_port(r.host, r.port);
        const bool undetermined = !undetermined_reason.empty();
        if (!undetermined && d.allowed() == was_allowed) {
            (was_allowed ? out.same_allowed : out.same_denied) += r.count;
            (was_allowed ? same_allowed : same_denied)[target] = true;
            continue;
        }
        replay_row row;
        row.target = target;
        row.kind = r.kind;
        row.method = r.kind != config::request_kind::connect ? r.method : std::string();
        if (!r.path.empty()) {
            row.path = r.path_cut ? (r.path == "/" ? "/**" : r.path + "/**") : r.path;
        }
        row.was = r.outcome;
        row.was_reason = r.reason;
        row.now_allowed = d.allowed();
        row.now_reason = d.allowed() ? std::string() : std::string(config::to_string(d.reason));
        row.now_rule = d.allowed() && d.rule != nullptr ? d.rule->describe() : std::string();
        if (undetermined) {
            row.now_allowed = false;
            row.now_reason = std::string(undetermined_reason);
            row.now_rule.clear();
        }
        const int bucket = undetermined ? 2 : (d.allowed() ? 1 : 0);
        key k{row.target,      static_cast<int>(row.kind),    row.method,
              row.path,        static_cast<int>(row.was),     row.was_reason,
              row.now_allowed, row.now_reason + row.now_rule, std::to_string(bucket)};
        auto [it, fresh] = changed.try_emplace(std::move(k), row);
        if (!fresh) {
            it->second.count += r.count;
        } else {
            it->second.count = r.count;
        }
    }
    for (const seen_tool_call& c : seen.tool_calls) {
        out.tool_calls += c.count;
        const tool_verdict v = decide_tool_call(seen, c, p);
        const bool was_allowed = c.outcome == seen_outcome::allowed;
        const bool undetermined = !v.undetermined.empty();
        if (!undetermined && v.allowed == was_allowed) {
            (was_allowed ? out.same_tools_allowed : out.same_tools_denied) += c.count;
            continue;
        }
        replay_row row;
        row.target = config::host_port(c.host, c.port);
        row.kind = v.kind;
        row.tool = c.tool;
        row.was = c.outcome;
        row.was_reason = c.reason;
        row.now_allowed = v.allowed && !undetermined;
        row.now_reason = undetermined ? std::string(v.undetermined) : v.reason;
        row.now_rule = undetermined ? std::string() : v.rule;
        const int bucket = undetermined ? 2 : (v.allowed ? 1 : 0);
        key k{row.target,      static_cast<int>(row.kind),    "tools/call " + row.tool,
              row.path,        static_cast<int>(row.was),     row.was_reason,
              row.now_allowed, row.now_reason + row.now_rule, std::to_string(bucket)};
        auto [it, fresh] = changed.try_emplace(std::move(k), row);
        it->second.count = fresh ? c.count : it->second.count + c.count;
    }
    for (auto& [k, row] : changed) {
        const std::string& bucket = std::get<8>(k);
        (bucket == "2" ? out.undetermined : (bucket == "1" ? out.newly_allowed : out.newly_denied))
            .push_back(std::move(row));
    }
    sort_rows(out.newly_denied);
    sort_rows(out.newly_allowed);
    sort_rows(out.undetermined);
    out.same_allowed_targets = same_allowed.size();
    out.same_denied_targets = same_denied.size();
    return out;
}

std::string render_table(const replay_result& r, std::string_view source) {
    std::string out = "cordon policy replay: job " + r.job + ", " + std::string(source) +
                      " against " + std::to_string(r.requests) + " recorded requests" +
                      (r.tool_calls > 0 ? " and " + std::to_string(r.tool_calls) + " tool calls"
                                        : std::string());
    if (!r.first_ts.empty()) {
        out += " (" + r.first_ts + " .. " + r.last_ts + ")";
    }
    out += "\n";
    if (r.job_in_report_mode) {
        out += "note: the job is in report mode in " + std::string(source) +
               "; verdicts are what enforcing it would do\n";
    }
    out += "\n";
    rows_table(out, "newly denied", r.newly_denied);
    out += "\n";
    rows_table(out, "newly allowed", r.newly_allowed);
    if (!r.undetermined.empty()) {
        out += "\n";
        rows_table(out,
                   "undetermined (denied for a non-public address that was not recorded, "
                   "which the new rule's resolves_to may cover; or a path not recorded whole, "
                   "which the new rule's request rules need)",
                   r.undetermined);
    }
    const auto targets = [](std::uint64_t n) {
        return std::to_string(n) + (n == 1 ? " target" : " targets");
    };
    out += "\nunchanged: " + std::to_string(r.same_allowed) +
           (r.same_allowed == 1 ? " request" : " requests") + " allowed (" +
           targets(r.same_allowed_targets) + "), " + std::to_string(r.same_denied) + " denied (" +
           targets(r.same_denied_targets) + ")";
    if (r.tool_calls > 0) {
        out += "; tool calls: " + std::to_string(r.same_tools_allowed) + " allowed, " +
               std::to_string(r.same_tools_denied) + " denied";
    }
    out += "\n";
    return out;
}

std::string render_json(const replay_result& r, std::string_view source) {
    std::string out = "{\"job\":";
    common::append_json_string(out, r.job);
    out += ",\"policy\":";
    common::append_json_string(out, source);
    out += ",\"report_mode\":";
    out += r.job_in_report_mode ? "true" : "false";
    out += ",\"requests\":" + std::to_string(r.requests) + ",\"newly_denied\":";
    rows_json(out, r.newly_denied);
    out += ",\"newly_allowed\":";
    rows_json(out, r.newly_allowed);
    out += ",\"undetermined\":";
    rows_json(out, r.undetermined);
    out += ",\"unchanged\":{\"allowed\":{\"requests\":" + std::to_string(r.same_allowed) +
           ",\"targets\":" + std::to_string(r.same_allowed_targets) +
           "},\"denied\":{\"requests\":" + std::to_string(r.same_denied) +
           ",\"targets\":" + std::to_string(r.same_denied_targets) +
           "}},\"tool_calls\":{\"replayed\":" + std::to_string(r.tool_calls) +
           ",\"unchanged\":{\"allowed\":" + std::to_string(r.same_tools_allowed) +
           ",\"denied\":" + std::to_string(r.same_tools_denied) + "}},\"first_ts\":";
    common::append_json_string(out, r.first_ts);
    out += ",\"last_ts\":";
    common::append_json_string(out, r.last_ts);
    out += "}\n";
    return out;
}

}  // namespace cordon::learn
