// Rendering a suggestion: the YAML job card (with its comments) and the JSON form
// (`--json`). The analysis that builds the suggestion is suggest.cpp.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_string.hpp"
#include "config/learn/suggest.hpp"

namespace cordon::learn {
namespace {
std::string counts_text(const seen_counts& c, bool tool_calls = false) {
    std::string out = std::to_string(c.total()) +
                      (tool_calls ? (c.total() == 1 ? " tool call" : " tool calls")
                                  : (c.total() == 1 ? " request" : " requests"));
    std::string parts;
    const auto part = [&parts](std::uint64_t n, std::string_view what) {
        if (n > 0) {
            parts += (parts.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(what);
        }
    };
    part(c.allowed, "allowed");
    part(c.would_deny, "would-deny");
    part(c.denied, "denied");
    return parts.empty() ? out : out + " (" + parts + ")";
}

template <typename T>
std::string list_text(const std::vector<T>& v, bool quote) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i > 0) {
            out += ", ";
        }
        if constexpr (std::is_same_v<T, std::string>) {
            out += quote ? "\"" + v[i] + "\"" : v[i];
        } else {
            out += std::to_string(v[i]);
        }
    }
    return out + "]";
}

// A value read from outside (the job name given on the command line) in a YAML comment:
// no control character may end the comment line.
std::string comment_safe(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
            c = '?';
        }
    }
    return out;
}

bool needs_quotes(std::string_view s) { return s.find_first_of(":*") != std::string_view::npos; }

// A YAML double-quoted scalar. Learned paths hold only letters, digits, "-._~:@+,=", '/'
// and '*'; anything else is escaped all the same.
std::string yaml_quoted(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20 || u >= 0x7f) {
            static constexpr char digits[] = "0123456789ABCDEF";
            out += "\\x";
            out += digits[u >> 4];
            out += digits[u & 15];
        } else {
            out += c;
        }
    }
    return out + "\"";
}

// A recorded request in a comment: the path is the agent's, bounded and made printable.
std::string request_comment(const path_request& q) {
    constexpr std::size_t max_shown = 96;
    std::string path = comment_safe(q.path.substr(0, max_shown));
    if (q.path.size() > max_shown) {
        path += "...";
    } else if (q.cut) {
        path += "/**";
    }
    return comment_safe(q.method.substr(0, 32)) + " " + path + " " + std::to_string(q.count);
}

// A secret's name as recorded, in a comment: letters, digits, '-', '_', '.' only.
std::string secret_comment(std::string_view name) {
    std::string out(name.substr(0, 64));
    for (char& c : out) {
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.')) {
            c = '?';
        }
    }
    return out;
}

std::string requests_text(std::uint64_t n) {
    return std::to_string(n) + (n == 1 ? " request" : " requests");
}

std::string calls_text(std::uint64_t n) {
    return std::to_string(n) + (n == 1 ? " call" : " calls");
}

// A tool name in `mcp.tools`: plain when YAML reads it back as that string, else quoted.
// (Learned names are letters, digits and "_-./" only: config::valid_mcp_tool_name.)
std::string tool_yaml(std::string_view name) {
    const bool letter = !name.empty() &&
                        ((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z'));
    const bool plain = letter && name.find_first_of("./") == std::string_view::npos &&
                       name != "null" && name != "Null" && name != "NULL";
    return plain ? std::string(name) : yaml_quoted(name);
}

std::string mcp_yaml(const learned_mcp& m) {
    std::string out = "mcp: { tools: [";
    for (std::size_t i = 0; i < m.tools.size(); ++i) {
        out += (i == 0 ? "" : ", ") + tool_yaml(m.tools[i].name);
    }
    return out + "] }";
}

// Comments above an MCP server's rule: the tools called, and those to look at twice.
void mcp_notes(std::string& out, const learned_mcp& m) {
    std::string called;
    std::string refused;
    std::string changed;
    const auto add = [](std::string& list, const std::string& item) {
        list += (list.empty() ? "" : ", ") + item;
    };
    for (const learned_tool& t : m.tools) {
        std::string parts;
        if (t.counts.would_deny > 0) {
            add(parts, std::to_string(t.counts.would_deny) + " would-deny");
        }
        if (t.counts.denied > 0) {
            add(parts, std::to_string(t.counts.denied) + " refused");
            add(refused, t.name);
        }
        if (t.changed > 0) {
            add(parts, std::to_string(t.changed) + " changed");
            add(changed, t.name);
        }
        add(called, t.name + " " + std::to_string(t.counts.total() + t.changed) +
                        (parts.empty() ? "" : " (" + parts + ")"));
    }
    out += "  # MCP tools called: " + (called.empty() ? std::string("none listable") : called) +
           "\n";
    if (!refused.empty()) {
        out += "  # refused by the rule's mcp.tools (mcp_tool), learned as denied requests are: " +
               refused +
               "\n  # (tools/list hid them from the agent: keep them only if it needs them)\n";
    }
    if (!changed.empty()) {
        out += "  # refused as changed (mcp_tool_changed: redefined by the server within a "
               "session): " +
               changed + "\n  # (check the server before keeping them)\n";
    }
    if (m.unlisted > 0) {
        out += "  # " + calls_text(m.unlisted) +
               " naming a tool no policy can list (1-128 letters, digits, '_', '-', '.', '/'): "
               "not learned\n";
    }
}

// Comments above a rule with request rules: credentials injected, what was kept out.
void request_notes(std::string& out, const suggested_rule& r) {
    for (const std::string& c : r.credentials) {
        const std::string name = secret_comment(c);
        out += "  # cordon injected the credential of secret " + name +
               " on these requests: add\n  #   credential: { secret: " + name +
               ", header: ..., format: \"...\" }\n  # (header and format are not recorded)\n";
    }
    const auto examples = [&out](const std::vector<path_request>& v) {
        for (std::size_t i = 0; i < v.size(); ++i) {
            out += (i == 0 ? ": " : ", ") + request_comment(v[i]);
        }
        out += "\n";
    };
    if (r.refused > 0) {
        out += "  # " + requests_text(r.refused) +
               " refused by the policy's request rules (http_rule), kept out";
        examples(r.refused_examples);
    }
    if (r.paths_not_learned > 0) {
        out += "  # " + requests_text(r.paths_not_learned) +
               " not learned (no path pattern takes them without letting a refused request "
               "through, or past the bound on patterns or methods per rule)";
        examples(r.paths_not_learned_examples);
    }
    if (r.paths_unknown > 0 && !r.http.empty()) {
        out += "  # " + requests_text(r.paths_unknown) +
               " recorded without their path: not in the request rules\n";
    }
}

// A rule with request rules, in block style: one line per entry (flow style) or, with many
// paths, one per path.
void block_rule(std::string& out, const suggested_rule& r) {
    out += "  - host: " + (needs_quotes(r.host) ? yaml_quoted(r.host) : r.host) + "\n";
    out += "    ports: " + list_text(r.ports, false) + "\n";
    out += "    protocol: " + std::string(config::to_string(r.proto)) + "\n";
    if (!r.resolves_to.empty()) {
        out += "    resolves_to: " + list_text(r.resolves_to, true) + "\n";
    }
    if (r.mcp) {
        out += "    " + mcp_yaml(*r.mcp) + "\n";
    }
    out += "    http:\n";
    for (const learned_entry& e : r.http) {
        out += "      # " + requests_text(e.requests) + "\n";
        if (e.paths.size() <= 3) {
            out += "      - { methods: " + list_text(e.methods, false) + ", paths: [";
            for (std::size_t i = 0; i < e.paths.size(); ++i) {
                out += (i == 0 ? "" : ", ") + yaml_quoted(e.paths[i]);
            }
            out += "] }\n";
            continue;
        }
        out += "      - methods: " + list_text(e.methods, false) + "\n        paths:\n";
        for (const std::string& p : e.paths) {
            out += "          - " + yaml_quoted(p) + "\n";
        }
    }
}

}  // namespace

std::string render_yaml(const suggestion& s) {
    std::string out;
    out += "# Learned by `cordon policy suggest` for job " + comment_safe(s.job) + "\n# from " +
           counts_text(s.counts) +
           (s.tool_calls.total() > 0 ? " and " + counts_text(s.tool_calls, true) : std::string()) +
           " of " + std::to_string(s.sessions) + (s.sessions == 1 ? " session" : " sessions");
    if (!s.first_ts.empty()) {
        out += ",\n# " + s.first_ts + " .. " + s.last_ts;
    }
    out += ".\n# Names collapse into a wildcard when more than " + std::to_string(s.siblings) +
           " share a parent, never above the\n# registrable domain. Review before use; check "
           "it with `cordon check-config`.\n";
    if (std::any_of(s.rules.begin(), s.rules.end(),
                    [](const auto& r) { return r.proto == config::protocol::https; })) {
        out += "# protocol: https rules need the policy's `inspect` section (docs/inspect.md).\n";
    }
    out += s.rules.empty() ? "egress: []\n" : "egress:\n";
    for (const suggested_rule& r : s.rules) {
        out += "  # " + counts_text(r.counts);
        if (!r.names.empty()) {
            out += ", " + std::to_string(r.names.size()) + " names:";
            const std::size_t shown = std::min<std::size_t>(r.names.size(), 5);
            for (std::size_t i = 0; i < shown; ++i) {
                out += (i == 0 ? " " : ", ") + r.names[i].first + " " +
                       std::to_string(r.names[i].second);
            }
            if (shown < r.names.size()) {
                out += ", and " + std::to_string(r.names.size() - shown) + " more";
            }
        }
        out += '\n';
        if (!r.resolves_to.empty()) {
            out += "  # non-public addresses seen (your current rule's resolves_to let it in); "
                   "widen to the range you mean\n";
        }
        if (r.mcp) {
            mcp_notes(out, *r.mcp);
        }
        request_notes(out, r);
        if (!r.http.empty()) {
            block_rule(out, r);
            continue;
        }
        out += "  - { ";
        if (!r.host.empty()) {
            out += "host: " + (needs_quotes(r.host) ? "\"" + r.host + "\"" : r.host);
        } else {
            out += "cidr: " + (needs_quotes(r.cidr) ? "\"" + r.cidr + "\"" : r.cidr);
        }
        out += ", ports: " + list_text(r.ports, false);
        if (r.proto != config::protocol::tls) {
            out += ", protocol: " + std::string(config::to_string(r.proto));
        }
        if (!r.methods.empty()) {
            out += ", methods: " + list_text(r.methods, false);
        }
        if (!r.resolves_to.empty()) {
            out += ", resolves_to: " + list_text(r.resolves_to, true);
        }
        if (r.mcp) {
            out += ", " + mcp_yaml(*r.mcp);
        }
        out += " }\n";
    }
    if (!s.left_out.empty()) {
        out += "# Not learned:\n";
        for (const not_learned& n : s.left_out) {
            out += "#   " + n.target + ", " + counts_text(n.counts, n.tool_calls) + ": " + n.why +
                   "\n";
        }
    }
    if (!s.not_policy.empty()) {
        out += "# Denied for reasons no rule changes (not learned):";
        bool first = true;
        for (const auto& [reason, n] : s.not_policy) {
            out += (first ? " " : ", ") + std::string(known_reason(reason)) + " " +
                   std::to_string(n);
            first = false;
        }
        out += "\n";
    }
    if (!s.dns_only.empty()) {
        out += "# Names resolved through cordon's DNS but never requested through the proxy "
               "(ports\n# unknown, so no rule):";
        const std::size_t shown = std::min<std::size_t>(s.dns_only.size(), 20);
        for (std::size_t i = 0; i < shown; ++i) {
            const seen_name& n = s.dns_only[i];
            out += "\n#   " + n.name + ": " + std::to_string(n.answered + n.denied) + " queries";
            if (n.denied > 0) {
                out += " (" + std::to_string(n.denied) + " denied)";
            }
        }
        if (shown < s.dns_only.size()) {
            out += "\n#   and " + std::to_string(s.dns_only.size() - shown) + " more";
        }
        out += "\n";
    }
    return out;
}

namespace {

void counts_json(std::string& out, const seen_counts& c) {
    out += "{\"requests\":" + std::to_string(c.total()) +
           ",\"allowed\":" + std::to_string(c.allowed) +
           ",\"would_deny\":" + std::to_string(c.would_deny) +
           ",\"denied\":" + std::to_string(c.denied) + "}";
}

void strings_json(std::string& out, const std::vector<std::string>& v) {
    out.push_back('[');
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i > 0) {
            out.push_back(',');
        }
        common::append_json_string(out, v[i]);
    }
    out.push_back(']');
}

}  // namespace

std::string render_json(const suggestion& s) {
    std::string out = "{\"job\":";
    common::append_json_string(out, s.job);
    out += ",\"egress\":[";
    for (std::size_t i = 0; i < s.rules.size(); ++i) {
        const suggested_rule& r = s.rules[i];
        out += i > 0 ? ",{" : "{";
        out += r.host.empty() ? "\"cidr\":" : "\"host\":";
        common::append_json_string(out, r.host.empty() ? r.cidr : r.host);
        out += ",\"ports\":[";
        for (std::size_t k = 0; k < r.ports.size(); ++k) {
            out += (k > 0 ? "," : "") + std::to_string(r.ports[k]);
        }
        out += "],\"protocol\":\"" + std::string(config::to_string(r.proto)) + "\"";
        if (!r.methods.empty()) {
            out += ",\"methods\":";
            strings_json(out, r.methods);
        }
        if (!r.http.empty()) {
            out += ",\"http\":[";
            for (std::size_t k = 0; k < r.http.size(); ++k) {
                out += k > 0 ? ",{\"methods\":" : "{\"methods\":";
                strings_json(out, r.http[k].methods);
                out += ",\"paths\":";
                strings_json(out, r.http[k].paths);
                out += ",\"requests\":" + std::to_string(r.http[k].requests) + "}";
            }
            out += "]";
        }
        if (!r.resolves_to.empty()) {
            out += ",\"resolves_to\":";
            strings_json(out, r.resolves_to);
        }
        if (r.mcp) {
            out += ",\"mcp\":{\"tools\":[";
            for (std::size_t k = 0; k < r.mcp->tools.size(); ++k) {
                out += k > 0 ? "," : "";
                common::append_json_string(out, r.mcp->tools[k].name);
            }
            out += "]}";
        }
        if (!r.credentials.empty()) {
            out += ",\"credentials_injected\":";
            strings_json(out, r.credentials);
        }
        out += ",\"seen\":";
        counts_json(out, r.counts);
        if (r.mcp) {
            // The calls behind each tool: {"search": {"calls", "allowed", "would_deny",
            // "denied", "changed"}}, and those naming no listable tool.
            out.pop_back();
            out += ",\"tools\":{";
            for (std::size_t k = 0; k < r.mcp->tools.size(); ++k) {
                const learned_tool& t = r.mcp->tools[k];
                out += k > 0 ? "," : "";
                common::append_json_string(out, t.name);
                out += ":{\"calls\":" + std::to_string(t.counts.total() + t.changed) +
                       ",\"allowed\":" + std::to_string(t.counts.allowed) +
                       ",\"would_deny\":" + std::to_string(t.counts.would_deny) +
                       ",\"denied\":" + std::to_string(t.counts.denied) +
                       ",\"changed\":" + std::to_string(t.changed) + "}";
            }
            out += "},\"tools_unlisted\":" + std::to_string(r.mcp->unlisted) + "}";
        }
        if (r.refused > 0 || r.paths_not_learned > 0 || r.paths_unknown > 0) {
            out.pop_back();
            out += ",\"refused_by_request_rules\":" + std::to_string(r.refused) +
                   ",\"paths_not_learned\":" + std::to_string(r.paths_not_learned) +
                   ",\"paths_unknown\":" + std::to_string(r.paths_unknown) + "}";
        }
        if (!r.names.empty()) {
            out.pop_back();
            out += ",\"names\":{";
            for (std::size_t k = 0; k < r.names.size(); ++k) {
                if (k > 0) {
                    out.push_back(',');
                }
                common::append_json_string(out, r.names[k].first);
                out += ":" + std::to_string(r.names[k].second);
            }
            out += "}}";
        }
        out += "}";
    }
    out += "],\"not_learned\":[";
    for (std::size_t i = 0; i < s.left_out.size(); ++i) {
        out += i > 0 ? ",{\"target\":" : "{\"target\":";
        common::append_json_string(out, s.left_out[i].target);
        out += ",\"why\":";
        common::append_json_string(out, s.left_out[i].why);
        out += ",\"seen\":";
        counts_json(out, s.left_out[i].counts);
        out += s.left_out[i].tool_calls ? ",\"tool_calls\":true}" : "}";
    }
    out += "],\"not_policy\":{";
    bool first = true;
    for (const auto& [reason, n] : s.not_policy) {
        if (!first) {
            out.push_back(',');
        }
        first = false;
        common::append_json_string(out, known_reason(reason));
        out += ":" + std::to_string(n);
    }
    out += "},\"dns_only\":[";
    for (std::size_t i = 0; i < s.dns_only.size(); ++i) {
        out += i > 0 ? ",{\"name\":" : "{\"name\":";
        common::append_json_string(out, s.dns_only[i].name);
        out += ",\"answered\":" + std::to_string(s.dns_only[i].answered) +
               ",\"denied\":" + std::to_string(s.dns_only[i].denied) + "}";
    }
    out += "],\"requests\":";
    counts_json(out, s.counts);
    out += ",\"tool_calls\":";
    counts_json(out, s.tool_calls);
    out += ",\"sessions\":" + std::to_string(s.sessions) + ",\"first_ts\":";
    common::append_json_string(out, s.first_ts);
    out += ",\"last_ts\":";
    common::append_json_string(out, s.last_ts);
    out += ",\"siblings\":" + std::to_string(s.siblings) + "}\n";
    return out;
}

}  // namespace cordon::learn
