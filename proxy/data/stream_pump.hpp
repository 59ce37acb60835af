#pragma once
// Bodies through an inspected tunnel (inspected.cpp): `pump` forwards one HTTP message's
// body through the connection's window, streaming, with a check per chunk and an optional
// rewrite; `copy_stream` relays an upgraded (WebSocket) connection one way. Generic over the
// streams (tls_stream on both sides there), which bound their own waits (expires_after, as
// beast::tcp_stream's) and name their socket(). Internal to proxy/data/.

#include <boost/asio/ssl/error.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/asio.hpp"
#include "proxy/data/client_conn_impl.hpp"
#include "proxy/data/credentials.hpp"

namespace cordon::proxy::data {

// A read that ends the stream: the peer's close_notify or a close without one (which
// HTTP/1.1 framing makes harmless: a body cut short fails its framing, not this check).
inline bool end_of_stream(const error_code& ec) {
    return ec == net::error::eof || ec == boost::asio::ssl::error::stream_truncated;
}

enum class pump_end { done, read_error, write_error, refused };

struct pump_result {
    pump_end end = pump_end::done;
    std::uint64_t written = 0;  ///< bytes written to `to`, head and framing included
};

// Forwards a message whose head `p` has parsed: `head`, then the body read through the
// parser (framing enforced, chunking undone) one window at a time and written as it came
// (re-chunked when `chunked`). Memory stays flat whatever the size. `accept`, when set, may
// refuse a chunk before it is written (the upload budget, the credential scans); `rewrite`,
// when set, replaces what it is made for in the stream (the secret by the placeholder on the
// way back; `scratch` holds its output). Each wait is bounded by `idle`.
template <class From, class Parser, class To>
awaitable<pump_result> pump(From& from, beast::flat_buffer& fb, Parser& p,
                            http::buffer_body::value_type& body, To& to, std::string_view head,
                            bool chunked, std::chrono::milliseconds idle,
                            const std::function<bool(std::string_view)>& accept, char* window,
                            body_rewriter* rewrite, std::string& scratch) {
    pump_result r;
    chunked = chunked && !p.is_done();
    p.eager(true);
    for (;;) {
        body.data = window;
        body.size = body_window_size;
        bool failed = false;
        while (!p.is_done() && body.size > 0) {
            if (fb.size() > 0) {
                error_code ec;
                const std::size_t n = p.put(fb.data(), ec);
                fb.consume(n);
                if (ec == http::error::need_buffer) {
                    break;
                }
                if (ec && ec != http::error::need_more) {
                    failed = true;
                    break;
                }
                if (!ec && n > 0) {
                    continue;
                }
            }
            if (body.size < body_window_size) {
                break;  // pass on what came before waiting for more
            }
            const std::size_t room = std::min<std::size_t>(16 * 1024, fb.max_size() - fb.size());
            if (room == 0) {
                failed = true;
                break;
            }
            from.expires_after(idle);
            auto [ec, n] = co_await from.async_read_some(fb.prepare(room), use_nothrow);
            from.expires_never();
            if (end_of_stream(ec)) {
                error_code eec;
                p.put_eof(eec);
                failed = static_cast<bool>(eec);
                break;
            }
            if (ec) {
                failed = true;
                break;
            }
            fb.commit(n);
        }
        if (failed) {
            r.end = pump_end::read_error;
            break;
        }
        std::size_t got = body_window_size - body.size;
        if (got > 0 && accept && !accept(std::string_view(window, got))) {
            r.end = pump_end::refused;
            break;
        }
        const char* data = window;
        if (rewrite != nullptr) {
            scratch.clear();
            rewrite->feed(std::string_view(window, got), scratch);
            if (p.is_done()) {
                rewrite->finish(scratch);
            }
            data = scratch.data();
            got = scratch.size();
            if (rewrite->failed()) {
                // What came before the failure still goes; then the body ends, and the
                // caller closes the connection.
                r.end = pump_end::refused;
            }
        }
        char size_line[24];
        std::size_t size_len = 0;
        if (chunked && got > 0) {
            const auto [end, ec] = std::to_chars(size_line, size_line + 20, got, 16);
            (void)ec;
            end[0] = '\r';
            end[1] = '\n';
            size_len = static_cast<std::size_t>(end + 2 - size_line);
        }
        static constexpr std::string_view crlf = "\r\n";
        static constexpr std::string_view last_chunk = "0\r\n\r\n";
        const std::array<net::const_buffer, 5> out = {
            net::buffer(head), net::buffer(size_line, size_len), net::buffer(data, got),
            net::buffer(crlf.data(), size_len > 0 ? crlf.size() : 0),
            net::buffer(last_chunk.data(), chunked && p.is_done() ? last_chunk.size() : 0)};
        if (net::buffer_size(out) > 0) {
            to.expires_after(idle);
            auto [wec, wn] = co_await net::async_write(to, out, use_nothrow);
            to.expires_never();
            r.written += wn;
            head = {};
            if (wec) {
                r.end = pump_end::write_error;
                break;
            }
        }
        if (p.is_done() || r.end == pump_end::refused) {
            break;
        }
    }
    co_return r;
}

// One direction of an upgraded (WebSocket) connection: bytes as they come, until either
// side ends or nothing moves for `idle`.
template <class Stream>
awaitable<std::uint64_t> copy_stream(Stream& from, Stream& to, beast::flat_buffer& pending,
                                     std::chrono::milliseconds idle,
                                     const std::function<bool(std::string_view)>& accept) {
    std::uint64_t total = 0;
    std::array<char, 16 * 1024> buf{};
    if (pending.size() > 0) {
        if (accept && !accept(std::string_view(static_cast<const char*>(pending.data().data()),
                                               pending.size()))) {
            co_return total;
        }
        to.expires_after(idle);
        auto [ec, n] = co_await net::async_write(to, pending.data(), use_nothrow);
        to.expires_never();
        total += n;
        pending.consume(pending.size());
        if (ec) {
            co_return total;
        }
    }
    for (;;) {
        from.expires_after(idle);
        auto [ec, n] = co_await from.async_read_some(net::buffer(buf), use_nothrow);
        from.expires_never();
        if (ec || n == 0) {
            break;
        }
        if (accept && !accept(std::string_view(buf.data(), n))) {
            break;
        }
        to.expires_after(idle);
        auto [wec, wn] = co_await net::async_write(to, net::buffer(buf.data(), n), use_nothrow);
        to.expires_never();
        total += wn;
        if (wec) {
            break;
        }
    }
    // Either side's end ends both: the other direction's read fails at once.
    error_code ignored;
    from.socket().shutdown(tcp::socket::shutdown_both, ignored);
    to.socket().shutdown(tcp::socket::shutdown_both, ignored);
    co_return total;
}

}  // namespace cordon::proxy::data
