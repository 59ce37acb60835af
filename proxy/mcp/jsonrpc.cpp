#include "proxy/mcp/jsonrpc.hpp"

#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>

#include <algorithm>
#include <string>
#include <unordered_set>

#include "common/json_string.hpp"
#include "proxy/audit/tool_event.hpp"

namespace cordon::proxy::mcp {
namespace json = boost::json;
namespace {

// A SAX pass over the text before the DOM parse: duplicate member names anywhere refused,
// depth bounded, and the ids of the messages captured as the text sent (a DOM number is a
// double or an integer: 1.50 would come back as 1.5E0).
class checker {
public:
    static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
    static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
    static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
    static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);

    std::vector<std::string>* ids = nullptr;  // raw number ids, by message ("" otherwise)
    std::string error;

    bool on_document_begin(json::error_code&) { return true; }
    bool on_document_end(json::error_code&) { return true; }
    bool on_array_begin(json::error_code&) {
        if (depth_ == 0) {
            batch_ = true;
        }
        ++depth_;
        keys_.emplace_back();
        keys_.back().array = true;
        return true;
    }
    bool on_array_end(std::size_t, json::error_code&) {
        --depth_;
        keys_.pop_back();
        value_done();
        return true;
    }
    bool on_object_begin(json::error_code&) {
        if (ids != nullptr && depth_ == (batch_ ? 1u : 0u)) {
            ids->emplace_back();
        }
        ++depth_;
        keys_.emplace_back();
        return true;
    }
    bool on_object_end(std::size_t, json::error_code&) {
        --depth_;
        keys_.pop_back();
        value_done();
        return true;
    }
    bool on_string_part(json::string_view, std::size_t, json::error_code&) { return true; }
    bool on_string(json::string_view, std::size_t, json::error_code&) {
        value_done();
        return true;
    }
    bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
        key_.append(s.data(), s.size());
        return true;
    }
    bool on_key(json::string_view s, std::size_t, json::error_code& ec) {
        key_.append(s.data(), s.size());
        level& l = keys_.back();
        if (!l.names.insert(key_).second) {
            error = "the member ";
            common::append_json_string_ascii(error, key_.substr(0, 64));
            error += " appears twice in one object";
            ec = json::error::syntax;
            key_.clear();
            return false;
        }
        at_id_ = ids != nullptr && depth_ == (batch_ ? 2u : 1u) && key_ == "id";
        key_.clear();
        return true;
    }
    bool on_number_part(json::string_view s, json::error_code&) {
        number_.append(s.data(), s.size());
        return true;
    }
    bool on_int64(std::int64_t, json::string_view s, json::error_code&) { return number(s); }
    bool on_uint64(std::uint64_t, json::string_view s, json::error_code&) { return number(s); }
    bool on_double(double, json::string_view s, json::error_code&) { return number(s); }
    bool on_bool(bool, json::error_code&) {
        value_done();
        return true;
    }
    bool on_null(json::error_code&) {
        value_done();
        return true;
    }
    bool on_comment_part(json::string_view, json::error_code&) { return true; }
    bool on_comment(json::string_view, json::error_code&) { return true; }

private:
    struct level {
        bool array = false;
        std::unordered_set<std::string> names;
    };
    bool number(json::string_view s) {
        number_.append(s.data(), s.size());
        if (at_id_ && !ids->empty()) {
            ids->back() = number_;
        }
        number_.clear();
        value_done();
        return true;
    }
    void value_done() { at_id_ = false; }

    std::size_t depth_ = 0;
    bool batch_ = false;
    bool at_id_ = false;
    std::string key_;
    std::string number_;
    std::vector<level> keys_;
};

bool check_text(std::string_view text, std::vector<std::string>* ids, std::string& error) {
    json::parse_options opt;
    opt.max_depth = max_depth;
    json::basic_parser<checker> p(opt);
    p.handler().ids = ids;
    json::error_code ec;
    const std::size_t n = p.write_some(false, text.data(), text.size(), ec);
    if (ec || n != text.size()) {
        error = !p.handler().error.empty() ? p.handler().error
                : ec == json::error::too_deep
                    ? "nested deeper than " + std::to_string(max_depth) + " levels"
                    : "not a JSON text (" + ec.message() + ")";
        return false;
    }
    return true;
}

std::string id_text(const json::value& id, const std::string& raw_number) {
    if (id.is_number()) {
        return raw_number.empty() ? json::serialize(id) : raw_number;
    }
    return json::serialize(id);  // a string (escaped as JSON) or null
}

bool parse_message(const json::value& v, const std::string& raw_id, message& m,
                   std::string& error) {
    const json::object* o = v.if_object();
    if (o == nullptr) {
        error = "a JSON-RPC message is an object";
        return false;
    }
    const json::value* version = o->if_contains("jsonrpc");
    if (version == nullptr || !version->is_string() || version->get_string() != "2.0") {
        error = "not JSON-RPC 2.0 (\"jsonrpc\": \"2.0\" is required)";
        return false;
    }
    const json::value* id = o->if_contains("id");
    if (id != nullptr) {
        if (!id->is_string() && !id->is_number() && !id->is_null()) {
            error = "a JSON-RPC id is a string, a number or null";
            return false;
        }
        m.id = id_text(*id, raw_id);
    }
    const json::value* method = o->if_contains("method");
    if (method == nullptr) {
        // A response to a request of the server's (sampling, elicitation): passed on.
        if (id == nullptr ||
            (o->if_contains("result") == nullptr) == (o->if_contains("error") == nullptr)) {
            error = "a JSON-RPC message is a request (\"method\") or a response (an \"id\" and "
                    "one of \"result\" and \"error\")";
            return false;
        }
        return true;
    }
    if (!method->is_string() || method->get_string().empty()) {
        error = "a JSON-RPC \"method\" is a non-empty string";
        return false;
    }
    m.method = method->get_string();
    const json::value* params = o->if_contains("params");
    if (params != nullptr && !params->is_object() && !params->is_array()) {
        error = "JSON-RPC \"params\" are an object or an array";
        return false;
    }
    if (!m.is_call()) {
        return true;
    }
    const json::value* name = params != nullptr && params->is_object()
                                  ? params->get_object().if_contains("name")
                                  : nullptr;
    if (name == nullptr || !name->is_string() || name->get_string().empty() ||
        name->get_string().size() > audit::max_tool_bytes) {
        error = "a tools/call names its tool: params.name, a string of 1-" +
                std::to_string(audit::max_tool_bytes) + " bytes";
        return false;
    }
    m.tool = name->get_string();
    if (const json::value* args = params->get_object().if_contains("arguments");
        args != nullptr && !args->is_null()) {
        m.arguments = json::serialize(*args);
    }
    return true;
}

std::string_view reason_message(config::deny_reason r) {
    return r == config::deny_reason::mcp_tool_changed
               ? "its definition changed within this session (the server redefined it after "
                 "it was listed)"
               : "the job card does not allow it";
}

}  // namespace

bool well_formed_json(std::string_view text, std::string& error) {
    return check_text(text, nullptr, error);
}

bool parse_request_body(std::string_view body, request_body& out, std::string& error) {
    out = {};
    std::vector<std::string> raw_ids;
    if (!check_text(body, &raw_ids, error)) {
        return false;
    }
    json::parse_options opt;
    opt.max_depth = max_depth;
    json::error_code ec;
    const json::value v = json::parse(json::string_view(body.data(), body.size()), ec, {}, opt);
    if (ec) {
        error = "not a JSON text (" + ec.message() + ")";
        return false;
    }
    const auto raw = [&raw_ids](std::size_t i) -> const std::string& {
        static const std::string none;
        return i < raw_ids.size() ? raw_ids[i] : none;
    };
    if (const json::array* a = v.if_array()) {
        if (a->empty()) {
            error = "an empty batch (JSON-RPC: an array of at least one message)";
            return false;
        }
        if (a->size() > max_batch) {
            error = "a batch of more than " + std::to_string(max_batch) + " messages";
            return false;
        }
        out.batch = true;
        for (std::size_t i = 0; i < a->size(); ++i) {
            message m;
            if (!parse_message((*a)[i], raw(i), m, error)) {
                error = "message " + std::to_string(i + 1) + " of the batch: " + error;
                return false;
            }
            out.messages.push_back(std::move(m));
        }
        return true;
    }
    message m;
    if (!parse_message(v, raw(0), m, error)) {
        return false;
    }
    out.messages.push_back(std::move(m));
    return true;
}

std::string error_object(std::string_view id, config::deny_reason reason, std::string_view tool,
                         std::string_view job) {
    std::string out = R"({"jsonrpc":"2.0","id":)";
    out.append(id.empty() ? std::string_view("null") : id);
    out.append(R"(,"error":{"code":-32001,"message":)");
    std::string text;
    if (reason == config::deny_reason::none) {
        text = "cordon did not forward this request: its batch holds a tool call that job '" +
               std::string(job) + "' does not allow";
    } else {
        text = "cordon refused the tool call '" + std::string(tool) +
               "': " + std::string(reason_message(reason)) + " (job '" + std::string(job) + "')";
    }
    common::append_json_string(out, text);
    out.append(R"(,"data":{"reason":)");
    common::append_json_string(out, reason == config::deny_reason::none
                                        ? std::string_view("mcp_batch")
                                        : config::to_string(reason));
    if (!tool.empty()) {
        out.append(R"(,"tool":)");
        common::append_json_string(out, tool);
    }
    out.append("}}}");
    return out;
}

std::string refusal_answer(const request_body& body, const std::vector<call_verdict>& verdicts,
                           std::string_view job) {
    std::string out;
    if (!body.batch) {
        const message& m = body.messages.front();
        return error_object(m.id, verdicts.front().reason, m.tool, job);
    }
    out.push_back('[');
    bool first = true;
    for (std::size_t i = 0; i < body.messages.size(); ++i) {
        const message& m = body.messages[i];
        if (!m.has_id() || m.method.empty()) {
            continue;  // notifications and responses are answered by nobody
        }
        if (!first) {
            out.push_back(',');
        }
        first = false;
        const config::deny_reason r = verdicts[i].reason;
        out.append(error_object(m.id, r, r == config::deny_reason::none ? "" : m.tool, job));
    }
    out.push_back(']');
    return out;
}

std::string refusal_head(config::deny_reason reason, std::size_t body_size) {
    std::string h = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Cordon-Deny: ";
    h.append(config::to_string(reason));
    h.append("\r\nCache-Control: no-store\r\nContent-Length: ");
    h.append(std::to_string(body_size));
    h.append("\r\nConnection: close\r\n\r\n");
    return h;
}

namespace {

// The media type of a Content-Type value, lower case, parameters and blanks cut.
std::string media_type(std::string_view v) {
    v = v.substr(0, std::min(v.find(';'), v.size()));
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) {
        v.remove_prefix(1);
    }
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) {
        v.remove_suffix(1);
    }
    std::string out(v);
    std::transform(out.begin(), out.end(), out.begin(), [](char c) {
        return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    });
    return out;
}

}  // namespace

bool is_json_type(std::string_view content_type) noexcept {
    try {
        const std::string t = media_type(content_type);
        return t == "application/json" || (t.starts_with("application/") && t.ends_with("+json"));
    } catch (...) {
        return false;
    }
}

bool is_event_stream_type(std::string_view content_type) noexcept {
    try {
        return media_type(content_type) == "text/event-stream";
    } catch (...) {
        return false;
    }
}

bool utf8_charset(std::string_view v) noexcept {
    // Parameters after the media type: ";" name "=" value, value maybe quoted.
    std::size_t at = v.find(';');
    while (at != std::string_view::npos) {
        std::string_view p = v.substr(at + 1);
        const std::size_t next = p.find(';');
        p = p.substr(0, next);
        while (!p.empty() && (p.front() == ' ' || p.front() == '\t')) {
            p.remove_prefix(1);
        }
        while (!p.empty() && (p.back() == ' ' || p.back() == '\t')) {
            p.remove_suffix(1);
        }
        const std::size_t eq = p.find('=');
        std::string_view name = p.substr(0, eq);
        while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) {
            name.remove_suffix(1);
        }
        if (name.size() == 7 && (name[0] | 0x20) == 'c' && (name[1] | 0x20) == 'h' &&
            (name[2] | 0x20) == 'a' && (name[3] | 0x20) == 'r' && (name[4] | 0x20) == 's' &&
            (name[5] | 0x20) == 'e' && (name[6] | 0x20) == 't') {
            std::string_view value = eq == std::string_view::npos ? "" : p.substr(eq + 1);
            while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
                value.remove_prefix(1);
            }
            if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
                value = value.substr(1, value.size() - 2);
            }
            const bool utf8 = value.size() == 5 && (value[0] | 0x20) == 'u' &&
                              (value[1] | 0x20) == 't' && (value[2] | 0x20) == 'f' &&
                              value[3] == '-' && value[4] == '8';
            if (!utf8) {
                return false;
            }
        }
        if (next == std::string_view::npos) {
            break;
        }
        at += 1 + next;
    }
    return true;
}

std::string_view request_type_refusal(std::string_view content_type,
                                      std::string_view content_encoding) noexcept {
    if (!is_json_type(content_type)) {
        return "an MCP request body is JSON (Content-Type: application/json)";
    }
    if (!utf8_charset(content_type)) {
        return "an MCP request body is UTF-8: no charset but utf-8";
    }
    while (!content_encoding.empty() &&
           (content_encoding.front() == ' ' || content_encoding.front() == '\t')) {
        content_encoding.remove_prefix(1);
    }
    if (!content_encoding.empty() &&
        !(content_encoding.size() == 8 && (content_encoding[0] | 0x20) == 'i' &&
          content_encoding.substr(1) == "dentity")) {
        return "an MCP request body is not encoded (no Content-Encoding)";
    }
    return {};
}

}  // namespace cordon::proxy::mcp
