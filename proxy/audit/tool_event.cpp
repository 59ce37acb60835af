#include "proxy/audit/tool_event.hpp"

#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>

#include <cstdint>
#include <optional>
#include <vector>

#include "common/json_string.hpp"
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

// What redact_tool_arguments writes for a string: `s` itself when nothing in it can be a
// secret (the usual case: no copy), else its redacted copy in `scratch`.
std::string_view clean_string(std::string_view s, std::string& scratch) {
    if (!may_redact_text(s)) {
        return s;  // a URL has a ':', so none is in here either
    }
    scratch = may_hold_url(s) ? redact_text(redact_urls_in_text(s)) : redact_text(s);
    return scratch;
}

bool is_value_key(std::string_view k) {
    return k == "value" || k == "val" || k == "content" || k == "data";
}
// The members whose string value may name a secret for its siblings: {"name": "Authorization",
// "value": ...}, {"key": "DB_PASSWORD", "value": ...} (headers and environments as lists).
bool is_naming_key(std::string_view k) {
    return k == "name" || k == "key" || k == "header" || k == "field" || k == "variable";
}

// The SAX handler of redact_tool_arguments: a text's events, pieces joined, given to the
// redactor.
class arg_reader {
public:
    static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
    static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
    static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
    static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);

    argument_redactor redactor;
    bool any = false;  // a value was met

    void reset() {
        redactor.clear();
        any = false;
        if (part_.capacity() > 16 * 1024) {
            std::string().swap(part_);
        }
        part_.clear();
    }

    bool on_document_begin(json::error_code&) { return true; }
    bool on_document_end(json::error_code&) { return true; }
    bool on_object_begin(json::error_code&) {
        return met([&] { redactor.begin_object(); });
    }
    bool on_object_end(std::size_t, json::error_code&) {
        return met([&] { redactor.end(); });
    }
    bool on_array_begin(json::error_code&) {
        return met([&] { redactor.begin_array(); });
    }
    bool on_array_end(std::size_t, json::error_code&) {
        return met([&] { redactor.end(); });
    }
    bool on_key_part(json::string_view s, std::size_t, json::error_code&) { return part(s); }
    bool on_key(json::string_view s, std::size_t, json::error_code&) {
        return met([&] { redactor.key(whole(s)); });
    }
    bool on_string_part(json::string_view s, std::size_t, json::error_code&) { return part(s); }
    bool on_string(json::string_view s, std::size_t, json::error_code&) {
        return met([&] { redactor.string(whole(s)); });
    }
    bool on_number_part(json::string_view s, json::error_code&) { return part(s); }
    bool on_int64(std::int64_t, json::string_view s, json::error_code&) { return number(s); }
    bool on_uint64(std::uint64_t, json::string_view s, json::error_code&) { return number(s); }
    bool on_double(double, json::string_view s, json::error_code&) { return number(s); }
    bool on_bool(bool b, json::error_code&) {
        return met([&] { redactor.literal(b ? "true" : "false"); });
    }
    bool on_null(json::error_code&) {
        return met([&] { redactor.null(); });
    }
    bool on_comment_part(json::string_view, json::error_code&) { return true; }
    bool on_comment(json::string_view, json::error_code&) { return true; }

private:
    template <class F>
    bool met(F&& f) {
        any = true;
        f();
        return true;
    }
    bool part(json::string_view s) {
        part_.append(s.data(), s.size());
        return true;
    }
    // The whole string or number: its last piece `s` after those before it.
    std::string_view whole(json::string_view s) {
        if (part_.empty()) {
            return {s.data(), s.size()};
        }
        part_.append(s.data(), s.size());
        last_ = std::move(part_);
        part_.clear();
        return last_;
    }
    bool number(json::string_view s) {
        return met([&] { redactor.literal(whole(s)); });
    }

    std::string part_;  // the pieces of a string or number so far
    std::string last_;  // the last one that came in pieces, whole
};

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

void argument_redactor::open(token::kind k) {
    element(false);
    tokens_.push_back({k, false, 0, 0});
    open_.push_back({tokens_.size() - 1, k == token::kind::object});
}

void argument_redactor::end() {
    const open_container c = open_.back();
    open_.pop_back();
    tokens_.push_back({token::kind::end, false, 0, 0});  // may move the tokens: index after
    token& t = tokens_[c.token];
    t.secret = c.object ? c.secret : c.elements == 2 && c.first_secret && !c.last_empty;
    t.size = static_cast<std::uint32_t>(tokens_.size() - 1);
}

void argument_redactor::key(std::string_view name) {
    add(token::kind::key, name);
    if (!open_.empty()) {
        open_.back().naming = is_naming_key(name);
    }
}

void argument_redactor::string(std::string_view value) {
    add(token::kind::string, value);
    element(value.empty(), &value);
}

void argument_redactor::literal(std::string_view text) {
    add(token::kind::literal, text);
    element(false);
}

void argument_redactor::null() {
    add(token::kind::literal, "null");
    element(true);  // null, like "", is left as it is
}

// A value begins in the innermost container: what the secret tests need of it (`string`:
// the value when it is one; only a "name", "key", ... member's or an array's first is tested).
void argument_redactor::element(bool empty, const std::string_view* string) {
    if (open_.empty()) {
        return;
    }
    open_container& c = open_.back();
    c.last_empty = empty;
    if (c.object) {
        c.secret = c.secret || (c.naming && string != nullptr && secret_field_name(*string));
        c.naming = false;
    } else if (++c.elements == 1) {
        c.first_secret = string != nullptr && secret_field_name(*string);
    }
}

void argument_redactor::add(token::kind k, std::string_view text) {
    tokens_.push_back({k, false, static_cast<std::uint32_t>(arena_.size()),
                       static_cast<std::uint32_t>(text.size())});
    arena_.append(text);
}

std::string_view argument_redactor::text(const token& t) const noexcept {
    return std::string_view(arena_).substr(t.at, t.size);
}

bool argument_redactor::empty(const token& t) const noexcept {
    return (t.k == token::kind::literal && text(t) == "null") ||
           (t.k == token::kind::string && t.size == 0);
}

std::size_t argument_redactor::skip(std::size_t i) const noexcept {
    const token& t = tokens_[i];
    return t.k == token::kind::object || t.k == token::kind::array ? t.size + 1 : i + 1;
}

namespace {
void write_hidden(std::string& out) {
    out.push_back('"');
    out.append(redacted);
    out.push_back('"');
}
}  // namespace

// Writes the value at tokens_[i] redacted; returns the index after it.
std::size_t argument_redactor::write_value(std::size_t i, std::string& out) {
    const token& t = tokens_[i];
    switch (t.k) {
        case token::kind::object: return write_object(i, out);
        case token::kind::array: return write_array(i, out);
        case token::kind::string:
            common::append_json_string(out, clean_string(text(t), scratch_));
            return i + 1;
        default: out.append(text(t)); return i + 1;
    }
}

std::size_t argument_redactor::write_object(std::size_t i, std::string& out) {
    const bool sibling_secret = tokens_[i].secret;
    out.push_back('{');
    std::size_t j = i + 1;
    for (bool first = true; tokens_[j].k != token::kind::end; first = false) {
        if (!first) {
            out.push_back(',');
        }
        const std::string_view name = text(tokens_[j]);
        common::append_json_string(out, clean_string(name, scratch_));
        out.push_back(':');
        if ((secret_field_name(name) || (sibling_secret && is_value_key(name))) &&
            !empty(tokens_[j + 1])) {
            write_hidden(out);
            j = skip(j + 1);
        } else {
            j = write_value(j + 1, out);
        }
    }
    out.push_back('}');
    return j + 1;
}

std::size_t argument_redactor::write_array(std::size_t i, std::string& out) {
    const bool pair = tokens_[i].secret;  // ["X-Api-Key", "..."]: the second hidden
    out.push_back('[');
    std::size_t j = i + 1;
    for (std::size_t n = 0; tokens_[j].k != token::kind::end; ++n) {
        if (n > 0) {
            out.push_back(',');
        }
        if (pair && n == 1) {
            write_hidden(out);
            j = skip(j);
        } else {
            j = write_value(j, out);
        }
    }
    out.push_back(']');
    return j + 1;
}

std::string argument_redactor::finish() {
    std::string out;
    if (!tokens_.empty() && open_.empty()) {
        out.reserve(arena_.size() + 4 * tokens_.size());
        write_value(0, out);
    } else {
        out = redacted;  // not one whole value: cannot happen for a checked text; hide it all
    }
    clear();
    return out;
}

void argument_redactor::clear() {
    constexpr std::size_t kept = 16 * 1024;  // the memory kept between values, per buffer
    if (arena_.capacity() > kept) {
        std::string().swap(arena_);
    }
    if (tokens_.capacity() > kept / sizeof(token)) {
        std::vector<token>().swap(tokens_);
    }
    arena_.clear();
    tokens_.clear();
    open_.clear();
}

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
    // The thread's parser and redactor are reused from text to text (their memory kept).
    thread_local json::basic_parser<arg_reader> p([] {
        json::parse_options opts;
        opts.max_depth = 64;  // as deep as an MCP body may nest (proxy/mcp/jsonrpc.hpp)
        return opts;
    }());
    p.reset();
    arg_reader& r = p.handler();
    r.reset();
    json::error_code ec;
    const std::size_t n = p.write_some(false, text.data(), text.size(), ec);
    std::string out = ec || n != text.size() || !r.any ? std::string(redacted)  // hide it all
                                                       : r.redactor.finish();
    r.reset();
    return out;
}

tool_event tool_event_of(std::string_view tool, std::string_view redacted_arguments) {
    tool_event e;
    e.tool = std::string(tool);
    e.arguments = std::string(redacted_arguments);
    if (e.arguments.size() > max_arguments_bytes) {
        cut(e.arguments, max_arguments_bytes);
        e.truncated = true;
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
            std::string scratch;
            error = "unknown field \"" +
                    std::string(clean_string(std::string_view(key), scratch).substr(0, 64)) +
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
        e.arguments = redact_tool_arguments(json::serialize(*av));
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
