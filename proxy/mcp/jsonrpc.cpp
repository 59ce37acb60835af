#include "proxy/mcp/jsonrpc.hpp"

#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "common/json_string.hpp"
#include "proxy/audit/tool_event.hpp"

namespace cordon::proxy::mcp {
namespace json = boost::json;
using namespace std::string_view_literals;
namespace {

// The memory a thread's reader keeps between bodies, per buffer (a larger body's is freed).
constexpr std::size_t kept_capacity = 16 * 1024;

// Duplicate member names: an object's first names compared with each other as they come (the
// members of a JSON-RPC message: few), a larger object's whole list sorted when it closes, so
// a hostile object of many members costs n log n, and nothing is hashed or allocated per name.
class member_names {
public:
    static constexpr std::size_t compared = 8;

    void open() { levels_.push_back(refs_.size()); }
    void clear() {
        if (arena_.capacity() > kept_capacity) {
            std::string().swap(arena_);
        }
        if (refs_.capacity() > kept_capacity / sizeof(ref)) {
            std::vector<ref>().swap(refs_);
        }
        arena_.clear();
        refs_.clear();
        levels_.clear();
    }
    // False (with the name in `twice`) when `name` is already among the innermost object's
    // first `compared` names.
    bool add(std::string_view name, std::string& twice) {
        const std::size_t first = levels_.back();
        if (refs_.size() - first < compared) {
            for (std::size_t i = first; i < refs_.size(); ++i) {
                if (at(refs_[i]) == name) {
                    twice = name;
                    return false;
                }
            }
        }
        refs_.push_back(
            {static_cast<std::uint32_t>(arena_.size()), static_cast<std::uint32_t>(name.size())});
        arena_.append(name);
        return true;
    }
    // Closes the innermost object: false (with the name in `twice`) when a name appears twice.
    bool close(std::string& twice) {
        const std::size_t first = levels_.back();
        levels_.pop_back();
        bool ok = true;
        if (refs_.size() - first > compared) {
            const auto begin = refs_.begin() + static_cast<std::ptrdiff_t>(first);
            std::sort(begin, refs_.end(),
                      [this](const ref& a, const ref& b) { return at(a) < at(b); });
            const auto same = std::adjacent_find(
                begin, refs_.end(), [this](const ref& a, const ref& b) { return at(a) == at(b); });
            if (same != refs_.end()) {
                twice = at(*same);
                ok = false;
            }
        }
        if (first < refs_.size()) {
            // The names were added in order: this object's begin where its first did (a
            // sort moved the entries, not the bytes).
            std::uint32_t lowest = refs_[first].at;
            for (std::size_t i = first; i < refs_.size(); ++i) {
                lowest = std::min(lowest, refs_[i].at);
            }
            arena_.resize(lowest);
        }
        refs_.resize(first);
        return ok;
    }

private:
    struct ref {
        std::uint32_t at;
        std::uint32_t size;
    };
    std::string_view at(const ref& r) const noexcept {
        return std::string_view(arena_).substr(r.at, r.size);
    }
    std::string arena_;                // the names of every open object, one after another
    std::vector<ref> refs_;            // where each is in arena_
    std::vector<std::size_t> levels_;  // per open object: its first name in refs_
};

// The name `key` would be to a reader that matches member names without regard to case
// (Go's encoding/json: ASCII case, and U+017F LATIN SMALL LETTER LONG S and U+212A KELVIN SIGN,
// which fold to 's' and 'k'): the one of `names` it folds to but does not equal, or "".
std::string_view folds_to(std::string_view key, std::initializer_list<std::string_view> names) {
    for (const std::string_view name : names) {
        if (key == name) {
            return {};  // the usual case: the name itself
        }
    }
    std::array<char, 16> folded{};
    std::size_t n = 0;
    for (std::size_t i = 0; i < key.size(); ++i) {
        if (n == folded.size()) {
            return {};  // longer than any name of ours
        }
        const auto c = static_cast<unsigned char>(key[i]);
        if (c == 0xc5 && i + 1 < key.size() && static_cast<unsigned char>(key[i + 1]) == 0xbf) {
            folded[n++] = 's';
            i += 1;
        } else if (c == 0xe2 && i + 2 < key.size() &&
                   static_cast<unsigned char>(key[i + 1]) == 0x84 &&
                   static_cast<unsigned char>(key[i + 2]) == 0xaa) {
            folded[n++] = 'k';
            i += 2;
        } else if (c >= 0x80) {
            return {};  // nothing else folds to ASCII
        } else {
            folded[n++] = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a')
                                               : static_cast<char>(c);
        }
    }
    const std::string_view f(folded.data(), n);
    for (const std::string_view name : names) {
        if (f == name && key != name) {
            return name;
        }
    }
    return {};
}

// What one message of a body held, as the reader met it; validate() judges it afterwards in
// a fixed order, so the error a client sees does not depend on the order of its members.
struct seen_message {
    enum class kind : std::uint8_t { absent, string, number, null, container, other };
    bool object = false;
    kind version = kind::absent;
    bool version_ok = false;  // "2.0"
    kind id = kind::absent;
    kind method = kind::absent;
    kind params = kind::absent;  // container: an object or an array; other: a scalar
    bool params_object = false;
    bool result = false;
    bool error = false;
    kind name = kind::absent;
    bool arguments = false;  // present and not null
    message m;
};

// One pass over a body: the JSON checked as any server would read it (no duplicate member
// names anywhere, depth bounded by the parser) and each message's members taken as they
// pass, ids as the text sent (a number keeps its spelling: 1.50 stays 1.50) and a tools/call's
// arguments given to a redactor as they pass, so the audit's copy needs no second parse. No
// DOM is built.
class reader {
public:
    static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
    static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
    static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);
    static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);

    bool take = false;  // false: only the duplicate check (well_formed_json)
    std::string error;
    bool batch = false;
    std::size_t count = 0;  // messages met (only the first max_batch + 1 are kept)
    std::vector<seen_message> messages;

    // Ready for another text; buffers keep their memory.
    void reset(bool take_values) {
        take = take_values;
        error.clear();
        batch = false;
        count = 0;
        messages.clear();
        depth_ = 0;
        capture_ = 0;
        redactor_.clear();
        in_params_ = false;
        member_ = member::none;
        param_ = param::none;
        scalar_ = {};
        value_ = {};
        // What a large body left is given back; the usual message's sizes are kept.
        for (std::string* b : {&key_, &text_, &number_}) {
            if (b->capacity() > kept_capacity) {
                std::string().swap(*b);
            }
            b->clear();
        }
        if (messages.capacity() > max_batch + 1) {
            std::vector<seen_message>().swap(messages);
        }
        names_.clear();
    }

    bool on_document_begin(json::error_code&) { return true; }
    bool on_document_end(json::error_code&) { return true; }

    bool on_object_begin(json::error_code&) {
        if (take) {
            if (capturing()) {
                redactor_.begin_object();
            } else if (depth_ == top()) {
                start_message(true);
            } else if (depth_ == top() + 1) {
                seen_message* sm = current();
                if (sm != nullptr && member_ == member::params) {
                    sm->params_object = true;
                    sm->params = seen_message::kind::container;
                    in_params_ = true;
                    member_ = member::none;
                } else {
                    member_value(seen_message::kind::other);
                }
            } else if (in_params() && param_ == param::arguments) {
                start_capture(true);
            } else if (in_params()) {
                param_value(seen_message::kind::other);
            }
        }
        ++depth_;
        names_.open();
        return true;
    }
    bool on_object_end(std::size_t, json::error_code& ec) {
        --depth_;
        if (std::string twice; !names_.close(twice)) {
            return twice_error(twice, ec);
        }
        if (take) {
            end_container();
        }
        return true;
    }
    bool on_array_begin(json::error_code&) {
        if (depth_ == 0) {
            batch = true;
        }
        if (take) {
            if (capturing()) {
                redactor_.begin_array();
            } else if (depth_ == 0 && batch) {
                // the batch itself
            } else if (depth_ == top()) {
                start_message(false);
            } else if (depth_ == top() + 1) {
                seen_message* sm = current();
                if (sm != nullptr && member_ == member::params) {
                    sm->params = seen_message::kind::container;
                    member_ = member::none;
                } else {
                    member_value(seen_message::kind::other);
                }
            } else if (in_params() && param_ == param::arguments) {
                start_capture(false);
            } else if (in_params()) {
                param_value(seen_message::kind::other);
            }
        }
        ++depth_;
        return true;
    }
    bool on_array_end(std::size_t, json::error_code&) {
        --depth_;
        if (take) {
            end_container();
        }
        return true;
    }

    bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
        if (take && wants_text()) {
            text_.append(s.data(), s.size());
        }
        return true;
    }
    bool on_string(json::string_view s, std::size_t, json::error_code&) {
        if (take) {
            // A string that came in one piece is read where the parser has it.
            if (text_.empty()) {
                value_ = std::string_view(s.data(), s.size());
            } else {
                text_.append(s.data(), s.size());
                value_ = text_;
            }
            string_value();
            text_.clear();
            value_ = {};
        }
        return true;
    }
    bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
        key_.append(s.data(), s.size());
        return true;
    }
    bool on_key(json::string_view s, std::size_t, json::error_code& ec) {
        std::string_view key(s.data(), s.size());
        if (!key_.empty()) {
            key_.append(s.data(), s.size());
            key = key_;
        }
        if (std::string twice; !names_.add(key, twice)) {
            key_.clear();
            return twice_error(twice, ec);
        }
        // A name that only a case-blind reader takes for one of JSON-RPC's or MCP's ("Method",
        // "paramſ", "Name"): such a server would read another message than cordon decided on.
        if (!capturing()) {
            const std::string_view like =
                depth_ == top() + 1
                    ? folds_to(key, {"jsonrpc", "id", "method", "params", "result", "error"})
                : in_params() ? folds_to(key, {"name", "arguments", "_meta"})
                              : std::string_view();
            if (!like.empty()) {
                error = "the member ";
                common::append_json_string_ascii(error, key.substr(0, 64));
                error += " is \"";
                error.append(like);
                error += "\" to servers that read names without regard to case";
                key_.clear();
                ec = json::error::syntax;
                return false;
            }
        }
        if (take) {
            if (capturing()) {
                redactor_.key(key);
            } else if (depth_ == top() + 1) {
                member_ = key == "jsonrpc"sv  ? member::jsonrpc
                          : key == "id"sv     ? member::id
                          : key == "method"sv ? member::method
                          : key == "params"sv ? member::params
                                              : member::other;
                if (seen_message* sm = current()) {
                    sm->result = sm->result || key == "result"sv;
                    sm->error = sm->error || key == "error"sv;
                }
            } else if (in_params()) {
                param_ = key == "name"sv        ? param::name
                         : key == "arguments"sv ? param::arguments
                                                : param::other;
            }
        }
        key_.clear();
        return true;
    }
    bool on_number_part(json::string_view s, json::error_code&) {
        if (take) {
            number_.append(s.data(), s.size());
        }
        return true;
    }
    bool on_int64(std::int64_t, json::string_view s, json::error_code&) { return number(s); }
    bool on_uint64(std::uint64_t, json::string_view s, json::error_code&) { return number(s); }
    bool on_double(double, json::string_view s, json::error_code&) { return number(s); }
    bool on_bool(bool b, json::error_code&) {
        if (take) {
            scalar(b ? std::string_view("true") : std::string_view("false"),
                   seen_message::kind::other);
        }
        return true;
    }
    bool on_null(json::error_code&) {
        if (take) {
            scalar("null", seen_message::kind::null);
        }
        return true;
    }
    bool on_comment_part(json::string_view, json::error_code&) { return true; }
    bool on_comment(json::string_view, json::error_code&) { return true; }

private:
    enum class member : std::uint8_t { none, jsonrpc, id, method, params, other };
    enum class param : std::uint8_t { none, name, arguments, other };

    bool twice_error(std::string_view name, json::error_code& ec) {
        error = "the member ";
        common::append_json_string_ascii(error, name.substr(0, 64));
        error += " appears twice in one object";
        ec = json::error::syntax;
        return false;
    }
    // The depth at which messages are: 0, or 1 inside a batch.
    std::size_t top() const noexcept { return batch ? 1 : 0; }
    bool in_params() const noexcept { return in_params_ && depth_ == top() + 2; }
    bool capturing() const noexcept { return capture_ != 0; }
    seen_message* current() {
        return count > 0 && count <= messages.size() ? &messages.back() : nullptr;
    }
    bool wants_text() const noexcept {
        return capturing() ||
               (depth_ == top() + 1 && (member_ == member::jsonrpc || member_ == member::id ||
                                        member_ == member::method)) ||
               (in_params() && (param_ == param::name || param_ == param::arguments));
    }

    void start_message(bool object) {
        ++count;
        member_ = member::none;
        param_ = param::none;
        in_params_ = false;
        if (messages.size() <= max_batch) {
            messages.emplace_back();
            messages.back().object = object;
        }
    }
    void member_value(seen_message::kind k) {
        seen_message* sm = current();
        const member was = member_;
        member_ = member::none;
        if (sm == nullptr) {
            return;
        }
        switch (was) {
            case member::jsonrpc:
                sm->version = k;
                sm->version_ok = k == seen_message::kind::string && value_ == "2.0"sv;
                break;
            case member::id:
                sm->id = k;
                if (k == seen_message::kind::string) {
                    sm->m.id = json::serialize(json::string_view(value_.data(), value_.size()));
                } else if (k == seen_message::kind::number) {
                    sm->m.id = number_;
                } else if (k == seen_message::kind::null) {
                    sm->m.id = "null";
                }
                break;
            case member::method:
                sm->method = k;
                if (k == seen_message::kind::string) {
                    sm->m.method = value_;
                }
                break;
            case member::params:
                sm->params = seen_message::kind::other;  // a scalar
                break;
            default: break;
        }
    }
    void param_value(seen_message::kind k) {
        seen_message* sm = current();
        const param was = param_;
        param_ = param::none;
        if (sm == nullptr) {
            return;
        }
        if (was == param::name) {
            sm->name = k;
            if (k == seen_message::kind::string) {
                sm->m.tool = value_;
            }
        } else if (was == param::arguments && k != seen_message::kind::null) {
            sm->arguments = true;
            redactor_.clear();
            if (k == seen_message::kind::string) {
                redactor_.string(value_);
            } else {
                redactor_.literal(k == seen_message::kind::number ? std::string_view(number_)
                                                                  : scalar_);
            }
            sm->m.arguments = redactor_.finish();
        }
    }
    // A value that is not a container, wherever it is.
    void scalar(std::string_view text, seen_message::kind k) {
        if (capturing()) {
            if (k == seen_message::kind::null) {
                redactor_.null();
            } else {
                redactor_.literal(text);
            }
        } else if (depth_ == top()) {
            start_message(false);
        } else if (depth_ == top() + 1) {
            member_value(k);
        } else if (in_params()) {
            scalar_ = text;
            param_value(k);
        }
    }
    void string_value() {
        if (capturing()) {
            redactor_.string(value_);
            return;
        }
        scalar({}, seen_message::kind::string);
    }
    bool number(json::string_view s) {
        if (!take) {
            return true;
        }
        number_.append(s.data(), s.size());
        scalar(number_, seen_message::kind::number);
        number_.clear();
        return true;
    }
    void start_capture(bool object) {
        param_ = param::none;
        seen_message* sm = current();
        if (sm == nullptr) {
            return;
        }
        sm->arguments = true;
        redactor_.clear();
        if (object) {
            redactor_.begin_object();
        } else {
            redactor_.begin_array();
        }
        capture_ = depth_ + 1;  // the depth inside the arguments' container
    }
    void end_container() {
        if (capturing() && depth_ + 1 >= capture_) {
            redactor_.end();
            if (depth_ + 1 == capture_) {
                capture_ = 0;  // the arguments' own container closed
                messages.back().m.arguments = redactor_.finish();
            }
            return;
        }
        if (depth_ == top() + 1 && in_params_) {
            in_params_ = false;  // params closed
            member_ = member::none;
        }
    }

    std::size_t depth_ = 0;
    std::size_t capture_ = 0;  // inside arguments: the depth inside their container; else 0
    audit::argument_redactor redactor_;  // the arguments being read, redacted at their end
    bool in_params_ = false;
    member member_ = member::none;
    param param_ = param::none;
    std::string_view scalar_;
    std::string key_;         // a name that came in pieces
    std::string text_;        // a string that came in pieces
    std::string_view value_;  // the string value being read (text_, or the parser's)
    std::string number_;
    member_names names_;
};

// Reads `text` with the thread's parser, reused from text to text (its stack and the
// reader's buffers keep their memory): the reader on success, null with `error` otherwise.
reader* read_text(std::string_view text, bool take, std::string& error) {
    thread_local json::basic_parser<reader> p([] {
        json::parse_options opt;
        opt.max_depth = max_depth;
        return opt;
    }());
    p.reset();
    reader& r = p.handler();
    r.reset(take);
    json::error_code ec;
    const std::size_t n = p.write_some(false, text.data(), text.size(), ec);
    if (ec || n != text.size()) {
        error = !r.error.empty() ? r.error
                : ec == json::error::too_deep
                    ? "nested deeper than " + std::to_string(max_depth) + " levels"
                    : "not a JSON text (" + ec.message() + ")";
        r.reset(false);  // nothing of a refused body stays in the thread's memory
        return nullptr;
    }
    return &r;
}

bool validate(seen_message& sm, std::string& error) {
    using kind = seen_message::kind;
    if (!sm.object) {
        error = "a JSON-RPC message is an object";
        return false;
    }
    if (!sm.version_ok) {
        error = "not JSON-RPC 2.0 (\"jsonrpc\": \"2.0\" is required)";
        return false;
    }
    if (sm.id == kind::other) {
        error = "a JSON-RPC id is a string, a number or null";
        return false;
    }
    if (sm.method == kind::absent) {
        // A response to a request of the server's (sampling, elicitation): passed on.
        if (sm.id == kind::absent || sm.result == sm.error) {
            error = "a JSON-RPC message is a request (\"method\") or a response (an \"id\" and "
                    "one of \"result\" and \"error\")";
            return false;
        }
        sm.m.method.clear();
        sm.m.tool.clear();
        sm.m.arguments.clear();
        return true;
    }
    if (sm.method != kind::string || sm.m.method.empty()) {
        error = "a JSON-RPC \"method\" is a non-empty string";
        return false;
    }
    if (sm.params == kind::other) {
        error = "JSON-RPC \"params\" are an object or an array";
        return false;
    }
    if (!sm.m.is_call()) {
        sm.m.tool.clear();
        sm.m.arguments.clear();
        return true;
    }
    if (!sm.params_object || sm.name != kind::string || sm.m.tool.empty() ||
        sm.m.tool.size() > audit::max_tool_bytes) {
        error = "a tools/call names its tool: params.name, a string of 1-" +
                std::to_string(audit::max_tool_bytes) + " bytes";
        return false;
    }
    if (!sm.arguments) {
        sm.m.arguments.clear();
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

std::string_view case_folded_name(std::string_view key,
                                  std::initializer_list<std::string_view> names) {
    return folds_to(key, names);
}

bool well_formed_json(std::string_view text, std::string& error) {
    reader* r = read_text(text, false, error);
    if (r == nullptr) {
        return false;
    }
    r->reset(false);
    return true;
}

bool parse_request_body(std::string_view body, request_body& out, std::string& error) {
    out = {};
    reader* read = read_text(body, true, error);
    if (read == nullptr) {
        return false;
    }
    reader& r = *read;
    if (r.batch) {
        if (r.count == 0) {
            error = "an empty batch (JSON-RPC: an array of at least one message)";
            r.reset(false);
            return false;
        }
        if (r.count > max_batch) {
            error = "a batch of more than " + std::to_string(max_batch) + " messages";
            r.reset(false);
            return false;
        }
    }
    out.batch = r.batch;
    out.messages.reserve(r.messages.size());
    for (std::size_t i = 0; i < r.messages.size(); ++i) {
        if (!validate(r.messages[i], error)) {
            if (r.batch) {
                error = "message " + std::to_string(i + 1) + " of the batch: " + error;
            }
            r.reset(false);
            return false;
        }
        out.messages.push_back(std::move(r.messages[i].m));
    }
    r.reset(false);
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

// The media type of a Content-Type value, parameters and blanks cut (its case as sent).
std::string_view media_type(std::string_view v) noexcept {
    v = v.substr(0, std::min(v.find(';'), v.size()));
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) {
        v.remove_prefix(1);
    }
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) {
        v.remove_suffix(1);
    }
    return v;
}

bool iequals_lower(std::string_view a, std::string_view lower) noexcept {
    if (a.size() != lower.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        const char c = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
        if (c != lower[i]) {
            return false;
        }
    }
    return true;
}

}  // namespace

bool is_json_type(std::string_view content_type) noexcept {
    const std::string_view t = media_type(content_type);
    constexpr std::string_view app = "application/";
    return iequals_lower(t, "application/json") ||
           (t.size() >= app.size() + 5 && iequals_lower(t.substr(0, app.size()), app) &&
            iequals_lower(t.substr(t.size() - 5), "+json"));
}

bool is_event_stream_type(std::string_view content_type) noexcept {
    return iequals_lower(media_type(content_type), "text/event-stream");
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
