#include "proxy/report/worksheet_render.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cstdio>

namespace cordon::proxy::report {
namespace {

namespace json = boost::json;

// Escapes text for Markdown: the characters that make markup mid-line (emphasis, code,
// links, HTML, entities, strikethrough, table cells); text never starts a line here, so
// "#", "-" and "1." cannot either. Line breaks become spaces: a value stays on its line.
std::string text(std::string_view s) {
    static constexpr std::string_view special = "\\`*_[]<>|~&";
    std::string out;
    out.reserve(s.size() + 8);
    for (const char c : s) {
        if (c == '\n' || c == '\r' || c == '\t') {
            out += ' ';
        } else if (special.find(c) != std::string_view::npos) {
            out += '\\';
            out += c;
        } else {
            out += c;
        }
    }
    return out;
}

// A code span: a fence longer than any run of backticks inside; `|` escaped for tables
// (GFM splits cells on it even in code; the escape is removed there).
std::string code(std::string_view s) {
    std::size_t longest = 0;
    std::size_t run = 0;
    std::string body;
    for (const char c : s) {
        run = c == '`' ? run + 1 : 0;
        longest = std::max(longest, run);
        if (c == '\n' || c == '\r' || c == '\t') {
            body += ' ';
        } else if (c == '|') {
            body += "\\|";
        } else {
            body += c;
        }
    }
    const std::string fence(longest + 1, '`');
    const bool pad = !body.empty() && (body.front() == '`' || body.back() == '`');
    return fence + (pad ? " " : "") + body + (pad ? " " : "") + fence;
}

std::string number(double d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", d);
    return buf;
}

std::string md_value(const value& v, bool as_code) {
    const auto one = [as_code](const std::string& s) { return as_code ? code(s) : text(s); };
    if (const auto* s = std::get_if<std::string>(&v)) {
        return one(*s);
    }
    if (const auto* i = std::get_if<std::int64_t>(&v)) {
        return std::to_string(*i);
    }
    if (const auto* d = std::get_if<double>(&v)) {
        return number(*d);
    }
    if (const auto* b = std::get_if<bool>(&v)) {
        return *b ? "yes" : "no";
    }
    if (const auto* list = std::get_if<std::vector<std::string>>(&v)) {
        if (list->empty()) {
            return "none";
        }
        std::string out;
        for (std::size_t i = 0; i < list->size(); ++i) {
            out += (i == 0 ? "" : ", ") + one((*list)[i]);
        }
        return out;
    }
    return "none";
}

json::value json_value(const value& v) {
    if (const auto* s = std::get_if<std::string>(&v)) {
        return json::value(*s);
    }
    if (const auto* i = std::get_if<std::int64_t>(&v)) {
        return json::value(*i);
    }
    if (const auto* d = std::get_if<double>(&v)) {
        return json::value(*d);
    }
    if (const auto* b = std::get_if<bool>(&v)) {
        return json::value(*b);
    }
    if (const auto* list = std::get_if<std::vector<std::string>>(&v)) {
        json::array a;
        for (const auto& s : *list) {
            a.emplace_back(s);
        }
        return a;
    }
    return nullptr;
}

// Columns shown as code: what an operator copies (a host, a command, a tool name).
bool code_column(std::string_view key) {
    return key == "target" || key == "command" || key == "mcp_tools";
}

// Lists that read best as code: paths, hosts, commands, names.
bool code_fact(std::string_view key) {
    return key == "scratch" || key == "never_write" || key == "mint" || key == "revoke" ||
           key == "env" || key == "sources" || key == "webhook" || key == "stop_authority";
}

}  // namespace

std::string to_markdown(const model& m) {
    std::string out;
    if (!m.notice.empty()) {
        out += "**" + text(m.notice) + "**\n\n";
    }
    out += "# Containment worksheet: " + code(m.job) + "\n\n";
    out += "Policy " + code(m.policy_source) + ", job " + code(m.job) + ", mode " + text(m.mode) +
           "; generated " + text(m.generated_at) + "; running state: " +
           (m.state_source.empty() ? std::string("not read (no running cordon)")
                                   : text(m.state_source)) +
           ".\n";
    for (const auto& s : m.sections) {
        out += "\n## " + text(s.title) + "\n\n";
        for (const auto& f : s.facts) {
            // "*" for facts, "-" for checks: two lists, not one merged across the blank line.
            out += "* **" + text(f.label) + "**: " + md_value(f.v, code_fact(f.key)) + "\n";
        }
        if (s.rows) {
            const table& t = *s.rows;
            if (!s.facts.empty()) {
                out += "\n";
            }
            if (t.rows.empty()) {
                out += "*None: nothing is reachable.*\n";
            } else {
                out += "|";
                for (const auto& h : t.headers) {
                    out += " " + text(h) + " |";
                }
                out += "\n|";
                for (std::size_t i = 0; i < t.headers.size(); ++i) {
                    out += "---|";
                }
                out += "\n";
                for (const auto& row : t.rows) {
                    out += "|";
                    for (std::size_t i = 0; i < row.size(); ++i) {
                        const bool as_code = i < t.keys.size() && code_column(t.keys[i]);
                        const bool empty = std::holds_alternative<std::monostate>(row[i]);
                        out += " " + (empty ? std::string("-") : md_value(row[i], as_code)) + " |";
                    }
                    out += "\n";
                }
            }
        }
        if (!s.checks.empty()) {
            out += "\n";
            for (const auto& c : s.checks) {
                out += std::string(c.ticked ? "- [x] " : "- [ ] ") + "**" + text(c.text) +
                       "**: " + text(c.why) + "\n";
            }
        }
    }
    return out;
}

std::string to_json(const model& m) {
    json::object sections;
    for (const auto& s : m.sections) {
        json::object facts;
        for (const auto& f : s.facts) {
            facts[f.key] = json_value(f.v);
        }
        json::object checks;
        for (const auto& c : s.checks) {
            checks[c.key] = json::object{{"text", c.text}, {"ticked", c.ticked}, {"why", c.why}};
        }
        json::object o{{"title", s.title}, {"facts", std::move(facts)}};
        if (s.rows) {
            json::array rows;
            for (const auto& row : s.rows->rows) {
                json::object r;
                for (std::size_t i = 0; i < row.size() && i < s.rows->keys.size(); ++i) {
                    r[s.rows->keys[i]] = json_value(row[i]);
                }
                rows.push_back(std::move(r));
            }
            o["table"] = std::move(rows);
        }
        o["checks"] = std::move(checks);
        sections[s.key] = std::move(o);
    }
    json::object root{
        {"job", m.job},
        {"mode", m.mode},
        {"enforced", m.enforced},
        {"notice", m.notice.empty() ? json::value() : json::value(m.notice)},
        {"policy_source", m.policy_source},
        {"generated_at", m.generated_at},
        {"state_source", m.state_source.empty() ? json::value() : json::value(m.state_source)},
        {"sections", std::move(sections)}};
    return json::serialize(root) + "\n";
}

}  // namespace cordon::proxy::report
