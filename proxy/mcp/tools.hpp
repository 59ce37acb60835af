#pragma once
// What an MCP server says about its tools, as cordon passes it on (docs/mcp.md): tools/list
// results filtered to the tools the rule allows, and each tool's definition pinned per
// session, so a server that redefines a tool after it was listed (a "rug pull") finds it
// refused. Pure: no sockets; the pins are shared by every worker (a mutex).

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/policy.hpp"

namespace cordon::proxy::mcp {

/// SHA-256 of a tool's definition in canonical form: every member but "_meta" (name,
/// title, description, inputSchema, outputSchema, annotations, ...), object members sorted
/// by name at every depth, numbers and strings as Boost.JSON writes them.
using tool_digest = std::array<std::uint8_t, 32>;

/// The definitions each session has seen, per server and tool. A session's pins last until
/// the session ends (forget); a pin that changed stays changed.
class pin_store {
public:
    /// At most this many tools pinned per session and server (names of at most 128 bytes):
    /// a server listing more cannot grow cordon's memory, nor crowd out another server's
    /// pins; its tools past the bound are treated as changed.
    explicit pin_store(std::size_t max_per_server = 4096) : max_per_server_(max_per_server) {}

    enum class pin : std::uint8_t {
        first,        ///< not seen before in this session: pinned now
        same,         ///< as pinned
        changed,      ///< differs from the pin: it broke now
        was_changed,  ///< broke earlier in the session (a pin that changed stays changed)
        full,         ///< max_per_server pins at this server already: refused as changed
    };
    pin observe(std::string_view session, std::string_view server, std::string_view tool,
                const tool_digest& d);
    /// True when the pin of `tool` no longer holds (changed, or could not be pinned).
    bool changed(std::string_view session, std::string_view server, std::string_view tool) const;
    void forget(std::string_view session);
    std::size_t sessions() const;

private:
    struct entry {
        tool_digest digest{};
        bool changed = false;
    };
    struct server_pins {
        std::unordered_map<std::string, entry> tools;
        bool full = false;
    };
    using session_pins = std::unordered_map<std::string, server_pins>;  // by server
    mutable std::mutex m_;
    std::unordered_map<std::string, session_pins> by_session_;
    std::size_t max_per_server_;
};

/// A tool seen changed while filtering (for the mcp.tool_changed record and the alert).
struct change {
    std::string tool;
    bool full = false;  ///< not a new definition: the session had too many pins
};

/// Where a server's message goes.
struct filter_context {
    const config::mcp_spec& spec;
    bool report = false;  ///< report mode: pins observed, nothing filtered
    pin_store* pins = nullptr;
    std::string_view session;  ///< the pins' key (a session id, or "job:NAME" without one)
    std::string_view server;   ///< the rule's host
};

/// What became of one message.
struct filter_result {
    bool ok = true;               ///< false: not JSON cordon can read (`error` says why)
    bool rewritten = false;       ///< `out` holds the message to pass on instead
    std::size_t removed = 0;      ///< tools taken out of a tools/list result
    std::vector<change> changes;  ///< pins that broke with this message
    bool full_reported = false;   ///< one change of kind full per message is enough
    std::string error;
};

/// Filters one JSON-RPC message (or batch) a server sent: each response whose result
/// carries a "tools" array (a tools/list result, whichever request it answers) keeps only the
/// tools that the rule allows and whose pins hold, pinning each as it goes; any other message
/// is passed on as sent. A text with duplicate member names or not JSON is not ok.
filter_result filter_server_message(std::string_view text, const filter_context& ctx,
                                    std::string& out);

/// The digest of a definition (a JSON object's text); exposed for tests.
tool_digest digest_of_definition(std::string_view json_object);

}  // namespace cordon::proxy::mcp
