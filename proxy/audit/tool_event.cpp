#include "proxy/audit/tool_event.hpp"

#include <boost/json.hpp>

#include <array>

#include "common/time.hpp"
#include "config/target.hpp"
#include "proxy/audit/redact.hpp"

namespace cordon::proxy::audit {
namespace {

namespace json = boost::json;

constexpr std::string_view truncated_mark = "...(truncated)";

char lower(char c) noexcept {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}
bool is_alnum(char c) noexcept {
    return (c >= '0' && c <= '9') || (lower(c) >= 'a' && lower(c) <= 'z');
}
bool url_end(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '"' || c == '\'' || c == '<' ||
           c == '>' || c == '\\' || c == '`';
}
bool starts_nocase(std::string_view s, std::size_t at, std::string_view p) noexcept {
    if (s.size() - at < p.size()) {
        return false;
    }
    for (std::size_t k = 0; k < p.size(); ++k) {
        if (lower(s[at + k]) != p[k]) {
            return false;
        }
    }
    return true;
}

// True when `s` may hold a URL redact_urls_in_text() would change: "http" in any case.
bool may_hold_url(std::string_view s) noexcept {
    for (std::size_t i = 0; i + 4 <= s.size(); ++i) {
        if (lower(s[i]) == 'h' && starts_nocase(s, i, "http")) {
            return true;
        }
    }
    return false;
}

std::string redact_string(std::string_view s) {
    return may_hold_url(s) ? redact_text(redact_urls_in_text(s)) : redact_text(s);
}

bool empty_value(const json::value& v) {
    return v.is_null() || (v.is_string() && v.as_string().empty());
}

// A secret named by its sibling rather than its key: {"name": "Authorization", "value": ...},
// {"key": "DB_PASSWORD", "value": ...} (headers and environments as name/value lists).
bool names_a_secret(const json::object& o) {
    for (const std::string_view k : {"name", "key", "header", "field", "variable"}) {
        const json::value* n = o.if_contains(k);
        if (n != nullptr && n->is_string() && secret_field_name(std::string_view(n->as_string()))) {
            return true;
        }
    }
    return false;
}

bool is_value_key(std::string_view k) {
    return k == "value" || k == "val" || k == "content" || k == "data";
}

void redact_value(json::value& v) {
    if (v.is_string()) {
        std::string clean = redact_string(std::string_view(v.as_string()));
        if (clean != std::string_view(v.as_string())) {
            v = json::string(clean, v.storage());
        }
    } else if (v.is_array()) {
        json::array& a = v.as_array();
        // ["X-Api-Key", "..."]: a pair whose first names a secret.
        if (a.size() == 2 && a[0].is_string() &&
            secret_field_name(std::string_view(a[0].as_string())) && !empty_value(a[1])) {
            a[1] = redacted;
        }
        for (auto& e : a) {
            redact_value(e);
        }
    } else if (v.is_object()) {
        const bool sibling_secret = names_a_secret(v.as_object());
        const auto redacts_value = [sibling_secret](std::string_view k, const json::value& val) {
            return (secret_field_name(k) || (sibling_secret && is_value_key(k))) &&
                   !empty_value(val);
        };
        // Names redaction leaves as they are (the usual case): the values change in place.
        bool names_kept = true;
        for (const auto& kv : v.as_object()) {
            if (redact_string(std::string_view(kv.key())) != std::string_view(kv.key())) {
                names_kept = false;
                break;
            }
        }
        if (names_kept) {
            for (auto& kv : v.as_object()) {
                if (redacts_value(std::string_view(kv.key()), kv.value())) {
                    kv.value() = redacted;
                } else {
                    redact_value(kv.value());
                }
            }
            return;
        }
        json::object out(v.storage());
        out.reserve(v.as_object().size());
        for (auto& [key, val] : v.as_object()) {
            const std::string_view k(key);
            if (redacts_value(k, val)) {
                out[redact_string(k)] = redacted;
            } else {
                redact_value(val);
                out[redact_string(k)] = std::move(val);
            }
        }
        v = std::move(out);
    }
}

// Cuts `s` to at most `max` bytes, not inside a UTF-8 sequence, and marks the cut.
void cut(std::string& s, std::size_t max) {
    std::size_t at = max - truncated_mark.size();
    while (at > 0 && (static_cast<unsigned char>(s[at]) & 0xc0) == 0x80) {
        --at;
    }
    s.resize(at);
    s.append(truncated_mark);
}

bool printable(std::string_view s) {
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u == 0x7f) {
            return false;
        }
    }
    return true;
}

}  // namespace

std::string redact_urls_in_text(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    std::size_t i = 0;
    while (i < text.size()) {
        std::size_t scheme = 0;
        if (lower(text[i]) == 'h' && (i == 0 || !is_alnum(text[i - 1]))) {
            if (starts_nocase(text, i, "http://")) {
                scheme = 7;
            } else if (starts_nocase(text, i, "https://")) {
                scheme = 8;
            }
        }
        if (scheme == 0) {
            out.push_back(text[i]);
            ++i;
            continue;
        }
        std::size_t end = i + scheme;
        while (end < text.size() && !url_end(text[end])) {
            ++end;
        }
        out.append(redact_url(text.substr(i, end - i)));
        i = end;
    }
    return out;
}

std::string redact_tool_arguments(std::string_view text) {
    boost::system::error_code ec;
    json::parse_options opts;
    opts.max_depth = 64;  // as deep as an MCP body may nest (proxy/mcp/jsonrpc.hpp)
    // The value lives only here: its memory from one block (a stack buffer first), freed
    // at once.
    std::array<unsigned char, 4096> first_block;
    json::monotonic_resource mr(first_block.data(), first_block.size());
    json::value v = json::parse(text, ec, &mr, opts);
    if (ec) {
        return std::string(redacted);  // cannot happen for checked input; hide it all
    }
    redact_value(v);
    return json::serialize(v);
}

tool_event tool_event_of(std::string_view tool, std::string_view arguments_json) {
    tool_event e;
    e.tool = std::string(tool);
    if (!arguments_json.empty()) {
        e.arguments = redact_tool_arguments(arguments_json);
        if (e.arguments.size() > max_arguments_bytes) {
            cut(e.arguments, max_arguments_bytes);
            e.truncated = true;
        }
    }
    return e;
}

std::optional<tool_event> parse_tool_event(std::string_view body, std::string& error) {
    if (body.size() > max_event_body_bytes) {
        error = "the event is larger than " + std::to_string(max_event_body_bytes) + " bytes";
        return std::nullopt;
    }
    boost::system::error_code ec;
    json::parse_options opts;
    opts.max_depth = 32;
    json::value v = json::parse(body, ec, {}, opts);
    if (ec || !v.is_object()) {
        error = "the body must be a JSON object {\"event\":\"tool.call\",\"tool\":...,"
                "\"arguments\":...} (UTF-8, nesting at most 32 deep)";
        return std::nullopt;
    }
    json::object& o = v.as_object();
    for (const auto& [key, val] : o) {
        (void)val;
        if (key != "event" && key != "tool" && key != "arguments") {
            error = "unknown field \"" + redact_string(std::string_view(key)).substr(0, 64) +
                    "\" (expected event, tool, arguments)";
            return std::nullopt;
        }
    }
    const json::value* ev = o.if_contains("event");
    if (ev == nullptr || !ev->is_string() || ev->as_string() != "tool.call") {
        error = "\"event\" must be \"tool.call\"";
        return std::nullopt;
    }
    const json::value* tv = o.if_contains("tool");
    if (tv == nullptr || !tv->is_string() || tv->as_string().empty() ||
        tv->as_string().size() > max_tool_bytes || !printable(tv->as_string())) {
        error = "\"tool\" (the tool's name, 1-" + std::to_string(max_tool_bytes) +
                " printable characters) is required";
        return std::nullopt;
    }
    tool_event e;
    e.tool = std::string(tv->as_string());
    json::value* av = o.if_contains("arguments");
    if (av != nullptr && !av->is_null()) {
        if (!av->is_object() && !av->is_string() && !av->is_array()) {
            error = "\"arguments\" must be an object, an array or a string";
            return std::nullopt;
        }
        redact_value(*av);
        e.arguments = json::serialize(*av);
        if (e.arguments.size() > max_arguments_bytes) {
            cut(e.arguments, max_arguments_bytes);
            e.truncated = true;
        }
    }
    return e;
}

audit_record tool_call_record(const tool_event& e, const tool_event_source& from,
                              common::wall_clock::time_point ts) {
    audit_record r("tool.call", ts);
    r.add("session", from.session).add("job", from.job);
    if (!from.token_id.empty()) {
        r.add("token_id", from.token_id);
    }
    r.add("client", from.client).add("via", from.via).add("tool", e.tool);
    if (!e.arguments.empty()) {
        r.add_redacted("arguments", e.arguments);  // redacted string by string (tool_event)
    }
    if (e.truncated) {
        r.add("arguments_truncated", true);
    }
    return r;
}

bool targets_reserved_host(std::string_view t, bool is_connect) {
    const config::target_result parsed = is_connect ? config::parse_connect_target(t)
                                                    : config::parse_absolute_uri(t);
    if (!parsed.value) {
        return false;
    }
    return is_reserved_host(parsed.value->host);
}

bool is_reserved_host(std::string_view host) {
    if (host.ends_with('.')) {
        host.remove_suffix(1);
    }
    if (host.size() != reserved_events_host.size()) {
        return false;
    }
    return starts_nocase(host, 0, reserved_events_host);
}

}  // namespace cordon::proxy::audit
