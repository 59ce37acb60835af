#pragma once
// tool.call events an agent framework posts into a session's audit timeline: the body's
// parsing and bounds, the redaction of the tool's arguments, and the audit record. Pure: no
// sockets (the admin API and the proxy's reserved name both call it). Boost.JSON stays in
// the .cpp.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/time.hpp"
#include "proxy/audit/audit.hpp"

namespace cordon::proxy::audit {

/// The reserved name through which sandboxes (which cannot reach the admin API) post events:
/// `POST http://cordon.events/v1/events` through the proxy, authenticated by the request's
/// Proxy-Authorization. Never resolved, never forwarded upstream.
inline constexpr std::string_view reserved_events_host = "cordon.events";
inline constexpr std::string_view reserved_events_path = "/v1/events";

/// Bounds of a posted event. A body above max_body_bytes is refused (413); a tool name is
/// 1..max_tool_bytes printable characters; the redacted, serialised arguments are cut at
/// max_arguments_bytes (and the record says so with "arguments_truncated": true).
inline constexpr std::size_t max_event_body_bytes = 64 * 1024;
inline constexpr std::size_t max_tool_bytes = 128;
inline constexpr std::size_t max_arguments_bytes = 8 * 1024;

/// A parsed, redacted tool.call.
struct tool_event {
    std::string tool;
    /// Compact JSON text, redacted, at most max_arguments_bytes; "" when absent.
    std::string arguments;
    bool truncated = false;
};

/// Parses the body `{"event":"tool.call","tool":"NAME","arguments":{...} | "..." | [...]}`.
/// "event" and "tool" are required; "arguments" may be absent or null; no other keys. On
/// failure returns nullopt and sets `error` to a message for the client (a 400 answer).
/// Nesting deeper than 32 levels is refused. Redacts the arguments (redact_tool_arguments).
std::optional<tool_event> parse_tool_event(std::string_view body, std::string& error);

/// A tool call seen on the wire (an MCP tools/call, proxy/mcp/): its arguments, already
/// redacted (argument_redactor; "" when absent), cut as a posted event's are.
tool_event tool_event_of(std::string_view tool, std::string_view redacted_arguments);

/// Redacts a JSON text of tool arguments and serialises it compactly: the value of every
/// member whose name passes secret_field_name() becomes "REDACTED" (whatever its type;
/// null and "" stay), and so does the "value" (or "val", "content", "data") of an object whose
/// "name" (or "key", "header", "field", "variable") is a string that passes it, and the second
/// of a two-element array whose first does ({"name": "Authorization", "value": ...},
/// ["X-Api-Key", "..."]); every string (member names too) goes through redact_urls_in_text()
/// and redact_text(). Numbers keep their spelling. Members whose names redact to the same
/// text are all kept. `json` must be valid JSON (parse_tool_event checked it).
std::string redact_tool_arguments(std::string_view json);

/// The same redaction fed by a JSON reader's events as it meets them (the MCP reader of a
/// request body, proxy/mcp/, so a body is parsed once): one value's events, then finish().
/// Strings and names are given whole and unescaped, numbers as spelled. The events must
/// make one well-formed value (the caller's parser checked it).
class argument_redactor {
public:
    void begin_object() { open(token::kind::object); }
    void begin_array() { open(token::kind::array); }
    void end();  ///< of the innermost object or array
    void key(std::string_view name);
    void string(std::string_view value);
    void literal(std::string_view text);  ///< a number as spelled, true or false
    void null();
    /// The value fed since the last finish() or clear(), redacted, as compact JSON text;
    /// the redactor is ready for another value.
    std::string finish();
    /// Forgets what was fed (a large value's memory is given back).
    void clear();

private:
    // One event. Strings, names and literals are kept in the arena.
    struct token {
        enum class kind : std::uint8_t { object, array, end, key, string, literal };
        kind k = kind::literal;
        // object: a member's string value names a secret for its siblings; array: a
        // [name, value] pair whose name is secret and whose value is not empty.
        bool secret = false;
        std::uint32_t at = 0;    // key, string, literal: where its text is in the arena
        std::uint32_t size = 0;  // its length; object, array: the index of its end token
    };
    struct open_container {
        std::size_t token;
        bool object;
        bool naming = false;        // object: the member being read is "name", "key", ...
        std::size_t elements = 0;   // array: values met so far
        bool first_secret = false;  // array: its first value is a string naming a secret
        bool last_empty = false;    // the value just met is null or ""
        bool secret = false;
    };
    void open(token::kind k);
    void element(bool empty, const std::string_view* string = nullptr);
    void add(token::kind k, std::string_view text);
    std::string_view text(const token& t) const noexcept;
    bool empty(const token& t) const noexcept;
    std::size_t skip(std::size_t i) const noexcept;
    std::size_t write_value(std::size_t i, std::string& out);
    std::size_t write_object(std::size_t i, std::string& out);
    std::size_t write_array(std::size_t i, std::string& out);

    std::vector<token> tokens_;
    std::string arena_;
    std::vector<open_container> open_;
    std::string scratch_;  // a string's redacted copy, while it is written
};

/// redact_url() applied to each http:// or https:// URL (case-insensitive scheme, up to the
/// next whitespace, quote, '<', '>' or backslash) inside free text, so query values whose
/// names look secret and userinfo are hidden wherever a URL appears.
std::string redact_urls_in_text(std::string_view text);

/// Who posted the event, as the audit record names it.
struct tool_event_source {
    std::string_view session;
    std::string_view job;
    std::string_view token_id;  ///< "" when the admin token was used
    std::string_view client;    ///< "ip:port" of the caller
    std::string_view via;       ///< "admin" or "proxy"
};

/// The `tool.call` audit record: session, job, client, via, token_id (when known), tool,
/// arguments (the JSON text, as a string) and arguments_truncated.
audit_record tool_call_record(const tool_event& e, const tool_event_source& from,
                              common::wall_clock::time_point ts);

/// True when a proxied request names the reserved events host: the host of an absolute-form
/// target or of a CONNECT authority, compared case-insensitively without a trailing dot.
bool targets_reserved_host(std::string_view target, bool is_connect);
/// The same test on a host already parsed out of its target.
bool is_reserved_host(std::string_view host);

}  // namespace cordon::proxy::audit
