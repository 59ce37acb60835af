#pragma once
// MCP's JSON-RPC 2.0 messages as cordon sees them on the wire (docs/mcp.md): the requests a
// client POSTs (one message or a batch), decided call by call, and the error answers cordon
// gives in the server's place. Pure: no sockets; Boost.JSON stays in the .cpp.

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "config/decide.hpp"
#include "config/policy.hpp"

namespace cordon::proxy::mcp {

/// Nesting a message may have; deeper is refused (the parser's stack is bounded by it).
inline constexpr std::size_t max_depth = 64;
/// Messages in one batch.
inline constexpr std::size_t max_batch = 128;

/// One JSON-RPC message of a client's body.
struct message {
    /// The id as JSON text, to answer with exactly what was sent ("7", "-1", "1.5",
    /// "\"abc\"", "null"); empty for a notification (no "id" member).
    std::string id;
    std::string method;  ///< "" for a response (to a server's request: "result" or "error")
    /// tools/call only: params.name, and params.arguments as compact JSON text ("" if absent),
    /// redacted for the audit log as the body was read (audit::argument_redactor: secrets
    /// hidden, numbers as spelled).
    std::string tool;
    std::string arguments;
    bool is_call() const noexcept { return method == "tools/call"; }
    bool has_id() const noexcept { return !id.empty(); }
};

/// A client's POST body, parsed.
struct request_body {
    bool batch = false;
    std::vector<message> messages;
};

/// Parses a POST body of an MCP rule: a JSON-RPC 2.0 request, notification or response, or a
/// non-empty batch (array) of them. Strict, since what cordon decides on must be what the
/// server reads: one JSON text, UTF-8, no duplicate member names anywhere (servers disagree on
/// which one wins), "jsonrpc": "2.0", a string "method" or a "result"/"error" with an "id",
/// an id that is a string, a number or null, params an object or array, and for tools/call a
/// params object with a string "name". On failure returns false and sets `error` to a
/// message for the client (a 400 answer).
bool parse_request_body(std::string_view body, request_body& out, std::string& error);

/// True when `text` is one JSON text cordon reads as any server would: no duplicate member
/// names anywhere, nested at most max_depth; otherwise false with the reason in `error`.
bool well_formed_json(std::string_view text, std::string& error);

/// The one of `names` that `key` is to a reader matching member names without regard to
/// case (Go's encoding/json: ASCII case, U+017F and U+212A) but does not equal; "" when it
/// is one of them exactly or none.
std::string_view case_folded_name(std::string_view key,
                                  std::initializer_list<std::string_view> names);

/// How a tools/call is decided: the tool named, against the rule and the session's pins.
struct call_verdict {
    config::deny_reason reason = config::deny_reason::none;      ///< none: forwarded
    config::deny_reason would_deny = config::deny_reason::none;  ///< report mode: let through
};

/// `changed(tool)`: true when the session's pin of `tool` at this server no longer holds.
template <class Changed>
call_verdict judge_call(const message& m, const config::mcp_spec& spec, bool report,
                        Changed&& changed) {
    call_verdict v;
    config::deny_reason r = config::deny_reason::none;
    if (!spec.allows_tool(m.tool)) {
        r = config::deny_reason::mcp_tool;
    } else if (changed(m.tool)) {
        r = config::deny_reason::mcp_tool_changed;
    }
    (report ? v.would_deny : v.reason) = r;
    return v;
}

/// A JSON-RPC error answer for the request `id` (JSON text): code -32001, a message for the
/// agent's model that names the tool and why, and data {reason, tool}.
std::string error_object(std::string_view id, config::deny_reason reason, std::string_view tool,
                         std::string_view job);

/// The body cordon answers in the server's place when a body holds a refused call: the one
/// message's error, or for a batch an array with an error for every message that has an id
/// (the refused calls their own reason, the others "mcp_batch": not forwarded). `verdicts`
/// is parallel to `body.messages` (reason none for messages that are not refused).
std::string refusal_answer(const request_body& body, const std::vector<call_verdict>& verdicts,
                           std::string_view job);

/// The head of that answer: HTTP 200 (a JSON-RPC error is a normal answer to an MCP client),
/// JSON, X-Cordon-Deny with the first refusal's reason, Connection: close.
std::string refusal_head(config::deny_reason reason, std::size_t body_size);

/// Whether a Content-Type value names JSON (application/json, any +json) or an event stream.
bool is_json_type(std::string_view content_type) noexcept;
bool is_event_stream_type(std::string_view content_type) noexcept;
/// True when the value has no charset parameter or charset=utf-8 (any case, quoted or not):
/// what cordon reads is UTF-8, and a server that decodes another charset (utf-7 turns
/// "+ACI-" into a quote) would read another message.
bool utf8_charset(std::string_view content_type) noexcept;
/// Why a client's body of this Content-Type and Content-Encoding is not read as JSON-RPC
/// (a 415), or "" when it is: JSON in UTF-8, not encoded.
std::string_view request_type_refusal(std::string_view content_type,
                                      std::string_view content_encoding) noexcept;

}  // namespace cordon::proxy::mcp
