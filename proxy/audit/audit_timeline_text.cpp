// The text form of `cordon audit timeline` (audit_timeline.hpp): one line per event, and
// the connections that carried MCP tool calls labelled so that a call, the requests it rode
// on and the connection's close can be read together.

#include <boost/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "proxy/audit/audit_timeline.hpp"

namespace cordon::proxy::audit {
namespace {

namespace json = boost::json;

std::string str_of(const json::object& o, std::string_view key) {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) {
        return {};
    }
    if (v->is_string()) {
        return std::string(v->as_string());
    }
    return json::serialize(*v);
}

std::uint64_t u64_of(const json::object& o, std::string_view key) {
    const json::value* v = o.if_contains(key);
    if (v == nullptr) {
        return 0;
    }
    if (v->is_uint64()) {
        return v->as_uint64();
    }
    if (v->is_int64()) {
        return v->as_int64() < 0 ? 0 : static_cast<std::uint64_t>(v->as_int64());
    }
    if (v->is_double()) {
        return v->as_double() < 0 ? 0 : static_cast<std::uint64_t>(v->as_double());
    }
    return 0;
}

// Control characters shown escaped: a value cannot move the cursor or forge a line.
std::string safe(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", u);
            out += buf;
        } else {
            out.push_back(c);
        }
    }
    return out;
}

std::string clip(std::string s, std::size_t max) {
    if (s.size() > max) {
        std::size_t at = max;
        while (at > 0 && (static_cast<unsigned char>(s[at]) & 0xc0) == 0x80) {
            --at;
        }
        s.resize(at);
        s += "...";
    }
    return s;
}

std::string seconds_text(std::uint64_t ms) {
    char buf[32];
    if (ms < 1000) {
        std::snprintf(buf, sizeof buf, "%llu ms", static_cast<unsigned long long>(ms));
    } else {
        std::snprintf(buf, sizeof buf, "%.2f s", static_cast<double>(ms) / 1000);
    }
    return buf;
}

bool skip_in_rest(std::string_view key) {
    return key == "ts" || key == "event" || key == "session" || key == "job" || key == "client";
}

// key=value of every field the event's own format did not use.
std::string rest_of(const json::object& o, std::initializer_list<std::string_view> used) {
    std::string out;
    for (const auto& kv : o) {
        const std::string_view k = kv.key();
        if (skip_in_rest(k) || std::find(used.begin(), used.end(), k) != used.end()) {
            continue;
        }
        if (!out.empty()) {
            out += ' ';
        }
        out += std::string(k) + "=" +
               (kv.value().is_string() ? std::string(kv.value().as_string())
                                       : json::serialize(kv.value()));
    }
    return out;
}

// A tool call: the tool and its arguments, then where it came from in brackets. One seen on
// the wire (via mcp) names its server, its JSON-RPC id and its connection (`conn`, when
// labelled), then what became of it.
std::string tool_call_text(const json::object& o, const std::string& conn) {
    const auto s = [&o](std::string_view k) { return str_of(o, k); };
    std::string out = s("tool");
    if (const std::string a = s("arguments"); !a.empty()) {
        out += " " + clip(a, 200);
    }
    const std::string via = s("via");
    if (via != "mcp") {
        return out + "  [via " + via + "]";
    }
    const std::string target = s("target");
    out += "  [via mcp, server " + (target.empty() ? s("server") : target);
    if (const std::string id = s("id"); !id.empty()) {
        out += ", id " + clip(id, 64);
    }
    if (!conn.empty()) {
        out += ", " + conn;
    }
    out += "]";
    if (const std::string r = s("reason"); r == "mcp_batch") {
        out += " not forwarded: another call of its batch was refused (mcp_batch)";
    } else if (!r.empty()) {
        out += " refused: " + r;
    }
    if (const std::string w = s("would_deny"); !w.empty()) {
        out += " would deny: " + w;
    }
    return out;
}

// A request inside an inspected tunnel.
std::string http_request_text(const json::object& o) {
    const auto s = [&o](std::string_view k) { return str_of(o, k); };
    std::string out = s("method") + " " + s("target") + s("path");
    if (const std::string st = s("status"); !st.empty()) {
        out += " -> " + st;
    }
    out += ", up " + human_bytes(u64_of(o, "bytes_up")) + ", down " +
           human_bytes(u64_of(o, "bytes_down"));
    std::string notes;
    const auto note = [&notes](const std::string& what, const std::string& v) {
        if (!v.empty()) {
            notes += (notes.empty() ? "" : "; ") + what + v;
        }
    };
    note("refused: ", s("reason"));
    note("would deny: ", s("would_deny"));
    note("credential ", s("credential"));
    out += notes.empty() ? notes : " (" + notes + ")";
    if (const std::string m = s("message"); !m.empty()) {
        out += ": " + m;
    }
    return out;
}

std::string describe(const std::string& event, const json::object& o, const std::string& conn) {
    const auto s = [&o](std::string_view k) { return str_of(o, k); };
    const auto paren = [](const std::string& x) { return x.empty() ? x : " (" + x + ")"; };
    std::string out;
    if (event == "session.create") {
        out = "job " + s("job") + ", by " + s("by") + ", expires " + s("expires_at");
    } else if (event == "session.end") {
        out = "by " + s("by") + paren(rest_of(o, {"by"}));
    } else if (event == "token.mint") {
        out = "token " + s("token_id") + ", expires " + s("expires_at");
    } else if (event == "token.revoke") {
        out = "token " + s("token_id") + " by " + s("by") + ": " + s("reason") +
              paren(rest_of(o, {"token_id", "by", "reason"}));
    } else if (event == "tool.call") {
        return tool_call_text(o, conn);  // names its connection inside its brackets
    } else if (event == "mcp.tool_changed") {
        out = "ALERT: tool " + s("tool") + " of " +
              (o.contains("target") ? s("target") : s("server")) + ": " + s("message");
    } else if (event == "conn.open") {
        out = s("method") + " " + s("target") + " -> " + s("ip");
        if (const std::string r = s("rule"); !r.empty()) {
            out += " (rule " + r + ")";
        }
    } else if (event == "conn.close") {
        out = s("method") + " " + s("target") + " up " + human_bytes(u64_of(o, "bytes_up")) +
              ", down " + human_bytes(u64_of(o, "bytes_down")) + ", " +
              seconds_text(u64_of(o, "duration_ms")) + paren(s("reason"));
    } else if (event == "conn.deny") {
        out = s("target") + " denied: " + s("reason") + paren(s("status"));
    } else if (event == "conn.error") {
        out = s("target") + " " + s("status") + ": " + s("message");
    } else if (event == "http.request") {
        out = http_request_text(o);
    } else if (event == "dns.query") {
        out = s("name") + " " + s("type") + " -> " + s("rcode") +
              (s("cached") == "true" ? ", cached" : "");
    } else if (event == "dns.deny") {
        out = s("name") + " " + s("type") + " denied: " + s("reason");
    } else if (event == "file.write") {
        out = s("path") + paren(rest_of(o, {"path"}));
    } else if (event == "kill.session") {
        out = "by " + s("by") + ": " + s("reason") + " (" + s("connections_closed") +
              " connections closed, " + s("tokens_revoked") + " tokens revoked)";
    } else if (event == "kill.network") {
        out = "all egress, by " + s("by") + ": " + s("reason") + " (" + s("connections_closed") +
              " connections closed)";
    } else if (event == "revive") {
        out = "egress back, by " + s("by") + ": " + s("reason");
    } else {
        out = rest_of(o, {});
    }
    return conn.empty() ? out : out + "  [" + conn + "]";
}

std::string format_object(const json::object& o, const std::string& conn) {
    const std::string ts = str_of(o, "ts");
    const std::string event = str_of(o, "event");
    std::string head = ts + "  " + event;
    if (event.size() < 14) {
        head.append(14 - event.size(), ' ');
    }
    return safe(head + " " + describe(event, o, conn));
}

// The records of one client connection's traffic to one target: conn.open, conn.close,
// conn.deny and conn.error of its requests, http.request inside its tunnel, and the
// tool.call and mcp.tool_changed records of the MCP messages it carried.
bool connection_record(std::string_view event) {
    return event == "conn.open" || event == "conn.close" || event == "conn.deny" ||
           event == "conn.error" || event == "http.request" || event == "tool.call" ||
           event == "mcp.tool_changed";
}

bool mcp_record(std::string_view event, const json::object& o) {
    return event == "mcp.tool_changed" || (event == "tool.call" && str_of(o, "via") == "mcp");
}

}  // namespace

std::string format_timeline_event(std::string_view json_line) {
    boost::system::error_code ec;
    const json::value v = json::parse(json_line, ec);
    if (ec || !v.is_object()) {
        return safe(json_line);
    }
    return format_object(v.as_object(), {});
}

std::vector<std::string> format_timeline(const std::vector<timeline_event>& events) {
    std::vector<json::value> parsed(events.size());
    // Which connection each record belongs to: its client address and target, and how many
    // tunnels from that address to that target had closed before it (a CONNECT's conn.close
    // ends the connection; a later one from the same port is another).
    std::vector<std::string> conn_of(events.size());
    std::map<std::string, std::size_t> closed;
    std::set<std::string> carried_mcp;
    for (std::size_t i = 0; i < events.size(); ++i) {
        boost::system::error_code ec;
        parsed[i] = json::parse(events[i].line, ec);
        if (ec || !parsed[i].is_object()) {
            continue;
        }
        const json::object& o = parsed[i].as_object();
        const std::string event = str_of(o, "event");
        const std::string client = str_of(o, "client");
        const std::string target = str_of(o, "target");
        if (!connection_record(event) || client.empty() || target.empty()) {
            continue;
        }
        const std::string key = client + '\n' + target;
        std::size_t& n = closed[key];
        conn_of[i] = key + '\n' + std::to_string(n);
        if (mcp_record(event, o)) {
            carried_mcp.insert(conn_of[i]);
        }
        if (event == "conn.close" && str_of(o, "method") == "CONNECT") {
            ++n;
        }
    }
    // Only the connections that carried MCP messages are labelled, in order of first record.
    std::map<std::string, std::string> label;
    std::vector<std::string> out;
    out.reserve(events.size());
    for (std::size_t i = 0; i < events.size(); ++i) {
        if (!parsed[i].is_object()) {
            out.push_back(safe(events[i].line));
            continue;
        }
        std::string conn;
        if (!conn_of[i].empty() && carried_mcp.contains(conn_of[i])) {
            auto [it, fresh] = label.try_emplace(conn_of[i]);
            if (fresh) {
                it->second = "conn " + std::to_string(label.size());
            }
            conn = it->second;
        }
        out.push_back(format_object(parsed[i].as_object(), conn));
    }
    return out;
}

std::string human_bytes(std::uint64_t n) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (n < 1024) {
        return std::to_string(n) + " B";
    }
    auto v = static_cast<double>(n);
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

}  // namespace cordon::proxy::audit
