#pragma once
// MCP rules on the wire (docs/mcp.md), for both paths that carry HTTP: plain forwarding
// (forward.cpp) and inspected tunnels (inspected.cpp). A request body on an MCP rule is read
// whole (bounded by the rule's max_body) and decided call by call before any of it goes
// upstream; a JSON answer is read whole and filtered, an event stream filtered event by
// event as it streams (tools/list results keep the allowed tools whose pins hold). Generic
// over the streams, as stream_pump.hpp. Internal to proxy/data/.

#include <functional>
#include <string>
#include <string_view>

#include "common/asio.hpp"
#include "proxy/data/client_conn_impl.hpp"
#include "proxy/data/credentials.hpp"
#include "proxy/data/http_head.hpp"
#include "proxy/data/response_reader.hpp"
#include "proxy/data/stream_pump.hpp"
#include "proxy/mcp/sse.hpp"
#include "proxy/mcp/tools.hpp"

namespace cordon::proxy::data {

enum class whole_end { done, too_large, read_error };

/// Reads the body of the message whose head `p` parsed, whole, into `out` (appended): at most
/// `max` bytes, framing enforced by the parser, each wait bounded by `idle`; `window` is the
/// connection's body window.
template <class From, class Parser>
awaitable<whole_end> read_whole_body(From& from, beast::flat_buffer& fb, Parser& p,
                                     http::buffer_body::value_type& body, std::size_t max,
                                     std::chrono::milliseconds idle, std::string& out,
                                     char* window) {
    p.eager(true);
    for (;;) {
        body.data = window;
        body.size = body_window_size;
        while (!p.is_done() && body.size > 0) {
            if (fb.size() > 0) {
                error_code ec;
                const std::size_t n = p.put(fb.data(), ec);
                fb.consume(n);
                if (ec == http::error::need_buffer) {
                    break;
                }
                if (ec && ec != http::error::need_more) {
                    co_return whole_end::read_error;
                }
                if (!ec && n > 0) {
                    continue;
                }
            }
            const std::size_t room = std::min<std::size_t>(16 * 1024, fb.max_size() - fb.size());
            if (room == 0) {
                co_return whole_end::read_error;
            }
            from.expires_after(idle);
            auto [ec, n] = co_await from.async_read_some(fb.prepare(room), use_nothrow);
            from.expires_never();
            if (end_of_stream(ec)) {
                error_code eec;
                p.put_eof(eec);
                if (eec) {
                    co_return whole_end::read_error;
                }
                break;
            }
            if (ec) {
                co_return whole_end::read_error;
            }
            fb.commit(n);
        }
        out.append(window, body_window_size - body.size);
        if (out.size() > max) {
            co_return whole_end::too_large;
        }
        if (p.is_done()) {
            co_return whole_end::done;
        }
    }
}

/// How an answer on an MCP rule is carried.
enum class mcp_answer_mode {
    pass,     ///< no body cordon reads (no body, or an error status): as any answer
    json,     ///< application/json: read whole, filtered, sent with its new length
    events,   ///< text/event-stream: filtered event by event as it streams
    refused,  ///< a 2xx body that is neither, or encoded: not passed on (`why`)
};
mcp_answer_mode mcp_mode_of(const response_reader& rp, std::string_view& why);

/// A server's messages on their way to the client: tools/list results filtered and pinned
/// (mcp::filter_server_message), the pins that broke reported to `on_change`; in an event
/// stream, as the body_rewriter pump() runs it through, then the secret replaced by the
/// placeholder where the upstream connection carried one.
class mcp_answer_filter final : public body_rewriter {
public:
    using change_sink = std::function<void(const std::vector<mcp::change>&)>;
    mcp_answer_filter(const mcp::filter_context& ctx, std::size_t max_message, change_sink sink,
                      stream_replacer* redact);
    /// A whole JSON answer: false (with `error`) when it is not JSON cordon can read;
    /// otherwise `body` holds what goes to the client.
    bool filter_json(std::string& body, std::string& error);
    void feed(std::string_view chunk, std::string& out) override;
    void finish(std::string& out) override;
    bool failed() const noexcept override { return events_.failed(); }
    const std::string& error() const noexcept { return events_.error(); }

private:
    mcp::sse_filter::verdict on_event(std::string_view data, std::string& replacement);

    const mcp::filter_context& ctx_;
    change_sink sink_;
    stream_replacer* redact_;
    mcp::sse_filter events_;
    std::string passed_;  // what the event filter let through, before the redaction
};

/// Forwards an answer in mode json or events (mcp_mode_of) to the client: `out` receives the
/// head built from `rp` (its framing replaced), then the body. A json answer over
/// `max_message`, cut short, or not readable is not passed on: nothing is written and
/// `refused_before_head` says so (the caller answers 502 with `error`).
struct mcp_answer_result {
    pump_end end = pump_end::done;
    std::uint64_t written = 0;
    bool keep = false;
    bool refused_before_head = false;
    std::string error;
};
struct mcp_answer_io {
    std::string& out;
    char* window;
    std::string& scratch;
    std::chrono::milliseconds idle;
    std::size_t max_message;
    unsigned client_version;  ///< 10 or 11
    bool client_keep_alive;
    stream_replacer* redact;  ///< the secret by the placeholder in the body, or null
    std::string_view secret;  ///< and in the head ("" when none went out)
    std::string_view placeholder;
};

template <class From, class To>
awaitable<mcp_answer_result> forward_mcp_answer(From& from, beast::flat_buffer& fb,
                                                response_reader& rp, To& to, mcp_answer_mode mode,
                                                mcp_answer_filter& filter,
                                                const mcp_answer_io& io) {
    mcp_answer_result r;
    std::string& out = io.out;
    std::string body;
    if (mode == mcp_answer_mode::json) {
        const whole_end e = co_await read_whole_body(from, fb, rp, rp.body, io.max_message, io.idle,
                                                     body, io.window);
        if (e != whole_end::done) {
            r.refused_before_head = true;
            r.error = e == whole_end::too_large
                          ? "the MCP server's answer is larger than the rule's max_body"
                          : "the MCP server's answer ended early";
            co_return r;
        }
        if (!filter.filter_json(body, r.error)) {
            r.refused_before_head = true;
            co_return r;
        }
        if (io.redact != nullptr) {
            io.redact->feed(body, io.scratch);
            io.redact->finish(io.scratch);
            body.swap(io.scratch);
            io.scratch.clear();
        }
    }
    const bool chunked = mode == mcp_answer_mode::events && io.client_version >= 11;
    r.keep = io.client_keep_alive && rp.keep_alive() && (mode == mcp_answer_mode::json || chunked);
    out.clear();
    out.append(rp.status_line());
    field_filter f;
    f.drop_content_length = true;
    append_end_to_end_lines(out, rp.field_lines(), f);
    drop_fields(out, {"transfer-encoding"});
    if (mode == mcp_answer_mode::json) {
        out.append("Content-Length: ");
        out.append(std::to_string(body.size()));
        out.append("\r\n");
    } else if (chunked) {
        out.append("Transfer-Encoding: chunked\r\n");
    }
    if (const std::string_view c = response_connection(rp.version(), r.keep, false); !c.empty()) {
        out.append("Connection: ");
        out.append(c);
        out.append("\r\n");
    }
    out.append("\r\n");
    if (!io.secret.empty()) {
        replace_all(out, io.secret, io.placeholder);
    }
    if (mode == mcp_answer_mode::json) {
        const std::array<net::const_buffer, 2> both = {net::buffer(out), net::buffer(body)};
        to.expires_after(io.idle);
        auto [wec, wn] = co_await net::async_write(to, both, use_nothrow);
        to.expires_never();
        r.written = wn;
        r.end = wec ? pump_end::write_error : pump_end::done;
        co_return r;
    }
    const std::function<bool(std::string_view)> no_limit;
    const pump_result p = co_await pump(from, fb, rp, rp.body, to, out, chunked, io.idle, no_limit,
                                        io.window, &filter, io.scratch);
    r.written = p.written;
    r.end = p.end;
    if (p.end == pump_end::refused) {
        r.error = filter.error();
        r.keep = false;
    }
    co_return r;
}

}  // namespace cordon::proxy::data
