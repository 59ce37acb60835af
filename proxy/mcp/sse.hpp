#pragma once
// An MCP server's event stream (text/event-stream), read event by event as it streams
// (docs/mcp.md): each event is held until the blank line that ends it (bounded), its data
// (one JSON-RPC message) handed to the caller, and the event passed on as it came or as the
// caller rewrote it. Bytes split anywhere across reads are the same stream. Pure.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace cordon::proxy::mcp {

class sse_filter {
public:
    /// What the caller makes of one event's data: `pass` (as it came), `rewrite` (its data
    /// replaced by `replacement`, the other fields kept), or `refuse` (the stream ends here).
    enum class verdict { pass, rewrite, refuse };
    using handler = std::function<verdict(std::string_view data, std::string& replacement)>;

    /// `max_event`: the most bytes one event may take (its raw lines); more ends the stream.
    sse_filter(std::size_t max_event, handler h) : max_event_(max_event), on_event_(std::move(h)) {}

    /// Appends to `out` what of `chunk` (and what came before it) may go on: whole events
    /// only. False once the stream is refused (by the handler, or an event over the bound):
    /// nothing more is passed on.
    bool feed(std::string_view chunk, std::string& out);
    /// The stream ended: an event without its blank line is dropped, as a client drops it.
    void finish(std::string& out) { (void)out; }
    bool failed() const noexcept { return failed_; }
    /// Why it failed: "event over the bound", or the handler's refusal.
    const std::string& error() const noexcept { return error_; }
    std::size_t events() const noexcept { return events_; }

private:
    bool line_done(std::size_t begin, std::size_t end);
    bool event_done(std::string& out);

    std::size_t max_event_;
    handler on_event_;
    std::string pending_;      // the current event's raw bytes, from its first line
    std::size_t scanned_ = 0;  // bytes of pending_ already split into lines
    std::size_t line_ = 0;     // where the line being read began
    bool skip_lf_ = false;     // the last line ended with CR: a LF next belongs to it
    bool started_ = false;     // past the stream's start (its byte order mark)
    std::size_t skip_ = 0;     // the byte order mark's length, until the first event ends
    std::string data_;         // the event's data, lines joined by LF
    bool has_data_ = false;
    bool last_rewritten_ = false;  // the last event went out rewritten
    bool failed_ = false;
    std::string error_;
    std::size_t events_ = 0;
};

}  // namespace cordon::proxy::mcp
