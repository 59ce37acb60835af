#pragma once
// The TLS of an inspected tunnel's two sides (inspected.cpp), without Asio's ssl::stream and
// its four buffers per stream (17 KiB in, 17 KiB out, a 2 x 17 KiB BIO pair): OpenSSL reads
// and writes the connection's socket itself, through a BIO over its descriptor
// (non-blocking per call), and an operation that cannot go on waits for the socket
// (async_wait). With SSL_MODE_RELEASE_BUFFERS an idle session holds no record buffers, so an
// idle inspected connection is its two SSL objects and a suspended coroutine.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/asio.hpp"

using SSL = struct ssl_st;

namespace cordon::proxy::data {

/// What one call into OpenSSL leaves to do: wait for the socket, or nothing (`ec` says how
/// it ended, `bytes` how much it moved).
struct tls_step {
    enum class want : std::uint8_t { done, read, write };
    want next = want::done;
    error_code ec;
    std::size_t bytes = 0;
};

/// How an OpenSSL call that did not succeed ended, as Asio's ssl::stream reported it (so the
/// callers' checks hold): SSL_ERROR_WANT_READ/WRITE a wait; the peer's close_notify
/// (SSL_ERROR_ZERO_RETURN) net::error::eof; the socket's own error (`sys_errno`, from the BIO)
/// as a system error (connection_reset, broken_pipe, bad_descriptor once closed); an end of
/// stream (`eof`: this call's read saw it) without close_notify (`close_notify`: received
/// before this call) ssl::error::stream_truncated; otherwise the error queue's first entry
/// (`queue`) in Asio's ssl category, or ssl::error::unspecified_system_error (a syscall
/// failure without errno), ssl::error::unexpected_result. Pure.
tls_step tls_failure(int ssl_error, unsigned long queue, int sys_errno, bool eof,
                     bool close_notify);

/// One TLS session over a connection's socket, which the stream uses but does not own:
/// closing the socket (a kill, give_up) ends pending operations with operation_aborted, and
/// later ones fail with bad_descriptor. Operations are Asio-style (any completion token);
/// one read-side operation (handshake, read, shutdown) and one write may be pending at once,
/// like ssl::stream's. Deadlines work as beast::tcp_stream's: `expires_after` applies, per
/// direction, to operations started after it, and one that passes closes the socket and
/// ends the operation with beast::error::timeout; only a wait on the socket arms the timer.
/// Threads: one, the connection's worker, drives it; the SSL object is touched nowhere else.
class tls_stream {
public:
    using executor_type = tcp::socket::executor_type;
    using clock = std::chrono::steady_clock;
    enum class role : std::uint8_t { client, server };

    /// Takes `ssl` (SSL_free'd with the stream) and sets its I/O and modes (buffers released
    /// when idle, partial and moving writes, read-ahead). Not movable: the BIO points into it.
    tls_stream(tcp::socket& socket, SSL* ssl);
    ~tls_stream();
    tls_stream(const tls_stream&) = delete;
    tls_stream& operator=(const tls_stream&) = delete;

    executor_type get_executor() { return socket_.get_executor(); }
    tcp::socket& socket() noexcept { return socket_; }
    SSL* native_handle() const noexcept { return ssl_; }

    void expires_after(clock::duration d);
    void expires_never();

    /// The handshake, as `r`. `already_read`: bytes of the peer's read from the socket before
    /// (the ClientHello check_sni saw), given to OpenSSL first (copied).
    template <class Token>
    auto async_handshake(role r, net::const_buffer already_read, Token&& token);
    template <class Token>
    auto async_handshake(role r, Token&& token) {
        return async_handshake(r, net::const_buffer(), std::forward<Token>(token));
    }
    /// Application data into the first non-empty buffer: what OpenSSL has decrypted first,
    /// the socket only when it has none. void(error_code, std::size_t).
    template <class MutableBuffers, class Token>
    auto async_read_some(const MutableBuffers& buffers, Token&& token);
    /// Writes from `buffers`: small ones gathered into one record (up to 16 KiB), a large
    /// first one alone. void(error_code, std::size_t).
    template <class ConstBuffers, class Token>
    auto async_write_some(const ConstBuffers& buffers, Token&& token);
    /// Completes when a read would find something: application data OpenSSL holds already,
    /// or bytes (or the end) on the socket. Reads nothing, so a caller idle until its peer
    /// speaks holds no read buffer meanwhile, neither its own nor OpenSSL's. A read-side
    /// operation (deadline of reads). void(error_code).
    template <class Token>
    auto async_wait_readable(Token&& token);
    /// close_notify sent, then the peer's awaited (as ssl::stream does); bound it with
    /// expires_after. void(error_code).
    template <class Token>
    auto async_shutdown(Token&& token);

    // The steps the operations loop on (tls_stream.cpp). Each clears the error queue first.
    static constexpr std::size_t max_gather = 8;
    struct gather {
        std::array<net::const_buffer, max_gather> parts;
        std::size_t count = 0;
    };
    tls_step do_handshake();
    tls_step do_read(net::mutable_buffer b);
    tls_step do_write(const gather& g);
    tls_step do_shutdown();
    bool has_pending() const noexcept;

    // The deadline bookkeeping around a wait on the socket (0: reads, 1: writes).
    void begin_op(int dir) noexcept;
    void end_op(int dir) noexcept;
    /// Before a wait: arms the timer for the direction's deadline; an error (timeout) when
    /// it has passed already.
    error_code begin_wait(int dir);
    /// After a wait: what its error means (the deadline's timeout, or the error itself).
    error_code end_wait(int dir, const error_code& ec);
    void set_role(role r);
    void drop_prefix() noexcept;

    /// The socket as OpenSSL's BIO sees it.
    struct io_state {
        tcp::socket* socket = nullptr;
        std::vector<unsigned char> prefix;  // bytes read before the handshake, not yet taken
        std::size_t prefix_at = 0;
        int sys_errno = 0;                 // the last recv/send failure
        bool eof = false;                  // the call's recv saw the end of stream
        bool close_notify_before = false;  // the peer's close_notify came before the call
    };

private:
    struct watch;
    void begin_call() noexcept;
    tls_step failure(int ret, bool keep_queue);
    void release_buffers() noexcept;

    tcp::socket& socket_;
    SSL* ssl_;
    io_state io_;
    std::shared_ptr<watch> watch_;
};

namespace tls_detail {

// One operation: calls `step` until it is done, waiting on the socket whenever OpenSSL
// asks; completes through a post when no wait happened (never inside the initiation).
template <class Step, class Result>
class op {
public:
    op(tls_stream& s, int dir, Step step) : s_(s), dir_(dir), step_(std::move(step)) {}

    template <class Self>
    void operator()(Self& self, error_code ec = {}) {
        switch (state_) {
            case state::start:
                state_ = state::run;
                s_.begin_op(dir_);
                break;
            case state::wait:
                if (ec = s_.end_wait(dir_, ec); ec) {
                    finish(self, tls_step{tls_step::want::done, ec, 0}, true);
                    return;
                }
                break;
            case state::posted: complete(self); return;
            case state::run: break;
        }
        const tls_step st = step_(s_);
        if (st.next == tls_step::want::done) {
            finish(self, st, waited_);
            return;
        }
        if (error_code wec = s_.begin_wait(dir_); wec) {
            finish(self, tls_step{tls_step::want::done, wec, 0}, waited_);
            return;
        }
        state_ = state::wait;
        waited_ = true;
        s_.socket().async_wait(st.next == tls_step::want::read ? tcp::socket::wait_read
                                                               : tcp::socket::wait_write,
                               std::move(self));
    }

private:
    enum class state : std::uint8_t { start, run, wait, posted };

    template <class Self>
    void finish(Self& self, const tls_step& st, bool waited) {
        s_.end_op(dir_);
        result_ = st;
        if (waited) {
            complete(self);
            return;
        }
        state_ = state::posted;
        net::post(std::move(self));
    }
    template <class Self>
    void complete(Self& self) {
        if constexpr (std::is_same_v<Result, void(error_code)>) {
            self.complete(result_.ec);
        } else {
            self.complete(result_.ec, result_.bytes);
        }
    }

    tls_stream& s_;
    int dir_;
    Step step_;
    state state_ = state::start;
    bool waited_ = false;
    tls_step result_;
};

template <class Result, class Token, class Step>
auto start(tls_stream& s, int dir, Step step, Token&& token) {
    return net::async_compose<Token, Result>(op<Step, Result>(s, dir, std::move(step)), token,
                                             s.socket());
}

}  // namespace tls_detail

template <class Token>
auto tls_stream::async_handshake(role r, net::const_buffer already_read, Token&& token) {
    set_role(r);
    if (already_read.size() > 0) {
        const auto* p = static_cast<const unsigned char*>(already_read.data());
        io_.prefix.assign(p, p + already_read.size());
        io_.prefix_at = 0;
    }
    return tls_detail::start<void(error_code)>(
        *this, 0, [](tls_stream& s) { return s.do_handshake(); }, std::forward<Token>(token));
}

template <class MutableBuffers, class Token>
auto tls_stream::async_read_some(const MutableBuffers& buffers, Token&& token) {
    net::mutable_buffer first;
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
         ++it) {
        if (net::mutable_buffer b(*it); b.size() > 0) {
            first = b;
            break;
        }
    }
    return tls_detail::start<void(error_code, std::size_t)>(
        *this, 0, [first](tls_stream& s) { return s.do_read(first); }, std::forward<Token>(token));
}

template <class ConstBuffers, class Token>
auto tls_stream::async_write_some(const ConstBuffers& buffers, Token&& token) {
    // One record's worth at most (16 KiB of plaintext): a head, a chunk's size line, its
    // data and CRLF go out as one record and one send, not four.
    constexpr std::size_t record = 16 * 1024;
    gather g;
    std::size_t total = 0;
    for (auto it = net::buffer_sequence_begin(buffers);
         it != net::buffer_sequence_end(buffers) && g.count < max_gather; ++it) {
        const net::const_buffer b(*it);
        if (b.size() == 0) {
            continue;
        }
        // The first buffer whole (a large one goes alone); the rest up to the record's end.
        const std::size_t take = g.count == 0 ? b.size() : std::min(b.size(), record - total);
        g.parts[g.count++] = net::const_buffer(b.data(), take);
        total += take;
        if (total >= record) {
            break;
        }
    }
    return tls_detail::start<void(error_code, std::size_t)>(
        *this, 1, [g](tls_stream& s) { return s.do_write(g); }, std::forward<Token>(token));
}

template <class Token>
auto tls_stream::async_wait_readable(Token&& token) {
    return tls_detail::start<void(error_code)>(
        *this, 0,
        [waited = false](tls_stream& s) mutable {
            if (waited || s.has_pending()) {
                return tls_step{};
            }
            waited = true;
            return tls_step{tls_step::want::read, {}, 0};
        },
        std::forward<Token>(token));
}

template <class Token>
auto tls_stream::async_shutdown(Token&& token) {
    return tls_detail::start<void(error_code)>(
        *this, 0, [](tls_stream& s) { return s.do_shutdown(); }, std::forward<Token>(token));
}

}  // namespace cordon::proxy::data
