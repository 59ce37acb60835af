#pragma once
// Heads of forwarded HTTP messages, rewritten as bytes: the fields of a head the parser has
// already validated are copied across with the hop-by-hop ones cut out, instead of being
// parsed into a field container and serialised again. Pure (no sockets, no Beast); appends
// to a caller's buffer, so a reused buffer means no allocation per request.

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::proxy::data {

/// What a head loses and keeps when it crosses the proxy.
struct field_filter {
    bool keep_upgrade = false;  ///< an upgrade: Upgrade stays (Connection is set by the caller)
    bool drop_host = false;     ///< the request: Host is written again from the URL
    bool drop_expect = false;   ///< the request: cordon answered Expect: 100-continue itself
    bool drop_content_length = false;  ///< the response: re-framed (inspected, redacted)
};

/// True for the names that never cross a proxy (RFC 9110 7.6.1) and cordon's own:
/// Connection, Keep-Alive, Proxy-Connection, Proxy-Authorization, Proxy-Authenticate, TE,
/// Trailer, Upgrade. ASCII case-insensitive.
bool hop_by_hop_name(std::string_view name) noexcept;

/// Calls `fn(name, value)` for each field line of `fields` ("name:OWS value OWS\r\n" lines,
/// as a parser accepted them: CRLF line ends, no obsolete folding); the value has its
/// surrounding spaces and tabs trimmed. A line without a colon is skipped.
template <class Fn>
void for_each_field(std::string_view fields, Fn&& fn) {
    while (!fields.empty()) {
        const std::size_t eol = fields.find("\r\n");
        const std::string_view line = fields.substr(0, eol);
        fields.remove_prefix(eol == std::string_view::npos ? fields.size() : eol + 2);
        const std::size_t colon = line.find(':');
        if (colon == std::string_view::npos) {
            continue;
        }
        std::string_view value = line.substr(colon + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
            value.remove_prefix(1);
        }
        while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) {
            value.remove_suffix(1);
        }
        fn(line.substr(0, colon), value);
    }
}

/// ASCII case-insensitive equality. Inline: header filtering calls it a dozen times a field,
/// and most calls end at the size check.
inline bool ascii_iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        char x = a[i];
        char y = b[i];
        x = (x >= 'A' && x <= 'Z') ? static_cast<char>(x + 32) : x;
        y = (y >= 'A' && y <= 'Z') ? static_cast<char>(y + 32) : y;
        if (x != y) {
            return false;
        }
    }
    return true;
}

/// ASCII case-insensitive ordering (for sorted lookups consistent with ascii_iequals).
bool ascii_iless(std::string_view a, std::string_view b) noexcept;

/// Calls `fn(token)` for each element of a comma-separated list (a Connection value),
/// trimmed of spaces and tabs; empty elements are skipped.
template <class Fn>
void for_each_token(std::string_view list, Fn&& fn) {
    while (!list.empty()) {
        const std::size_t comma = list.find(',');
        std::string_view t = list.substr(0, comma);
        list.remove_prefix(comma == std::string_view::npos ? list.size() : comma + 1);
        while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) {
            t.remove_prefix(1);
        }
        while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) {
            t.remove_suffix(1);
        }
        if (!t.empty()) {
            fn(t);
        }
    }
}

/// Appends to `out`, as "name: value\r\n" lines in their order, the fields that cross the
/// proxy: not hop_by_hop_name() (Upgrade kept when keep_upgrade), not named by a Connection
/// or Proxy-Connection token (except Content-Length and Transfer-Encoding, which frame the
/// body, and Upgrade when keep_upgrade), and not Host / Expect when the filter drops them.
/// `fields(fn)` calls fn(name, value) for each field of the message, and may be called
/// more than once. These are the fields strip_hop_by_hop removed from a parsed message
/// before heads were forwarded as bytes.
template <class Fields>
void append_end_to_end_fields(std::string& out, Fields&& fields, const field_filter& f) {
    // The names Connection / Proxy-Connection list, gathered once and sorted: each field is
    // then looked up in log time, whatever a client packs into its head. Names cut anyway
    // (hop-by-hop) or never cut (the body's framing) are left out, so the usual
    // "keep-alive" or "close" lists nothing and costs no allocation.
    std::vector<std::string_view> listed;
    fields([&](std::string_view n, std::string_view v) {
        if (ascii_iequals(n, "connection") || ascii_iequals(n, "proxy-connection")) {
            for_each_token(v, [&](std::string_view t) {
                if (!hop_by_hop_name(t) && !ascii_iequals(t, "transfer-encoding") &&
                    !ascii_iequals(t, "content-length")) {
                    listed.push_back(t);
                }
            });
        }
    });
    std::sort(listed.begin(), listed.end(), ascii_iless);
    fields([&](std::string_view n, std::string_view v) {
        const bool upgrade = f.keep_upgrade && ascii_iequals(n, "upgrade");
        if (!upgrade) {
            if (hop_by_hop_name(n) || (f.drop_host && ascii_iequals(n, "host")) ||
                (f.drop_expect && ascii_iequals(n, "expect")) ||
                (f.drop_content_length && ascii_iequals(n, "content-length"))) {
                return;
            }
            if (!listed.empty() &&
                std::binary_search(listed.begin(), listed.end(), n, ascii_iless)) {
                return;
            }
        }
        out.append(n);
        out.append(": ");
        out.append(v);
        out.append("\r\n");
    });
}

/// append_end_to_end_fields over the "name: value\r\n" lines of `lines` (see
/// for_each_field).
void append_end_to_end_lines(std::string& out, std::string_view lines, const field_filter& f);

/// The Connection value of a response cordon forwards, as Beast's keep_alive(keep) leaves it
/// after the hop-by-hop fields were removed (and "upgrade" set for a 101): HTTP/1.1 "close"
/// when not kept ("upgrade, close" for a 101), HTTP/1.0 "keep-alive" when kept ("upgrade"
/// for a 101); empty: no Connection field.
std::string_view response_connection(unsigned version, bool keep, bool upgrade) noexcept;

/// The fields part of a raw head ("start-line\r\nfields...\r\n\r\n"): from after the first
/// CRLF to before the final CRLF (each line still ends with its CRLF). Empty if none.
std::string_view head_fields(std::string_view head) noexcept;

/// Why the start of a request head is not HTTP/1.1 at all, or "": checks `have[from,
/// size)` for NUL and other control bytes (HTAB aside), line ends that are not CRLF (a bare
/// LF or CR), and the start of the request line (after any empty lines) for a method token
/// followed by a space (a TLS ClientHello sent to the proxy port is named as such). Pass
/// only the bytes of the head (up to its blank line, not a body behind it), growing, with
/// `from` the size checked before: a client that sends no HTTP is refused as soon as its
/// first bytes arrive, not at the header timeout.
std::string_view head_prefix_refusal(std::string_view have, std::size_t from) noexcept;

/// Why a request's framing and Host fields are refused (RFC 9112 3.2 and 6.3), or "": more
/// than one Host, more than one Content-Length, both Content-Length and Transfer-Encoding,
/// or a Transfer-Encoding other than a single "chunked" (`te_value`: the one field's value).
std::string_view framing_refusal(std::size_t host_fields, std::size_t content_length_fields,
                                 std::size_t transfer_encoding_fields,
                                 std::string_view te_value) noexcept;

}  // namespace cordon::proxy::data
