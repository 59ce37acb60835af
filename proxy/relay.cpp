#include "proxy/relay.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <vector>

namespace cordon::proxy {
namespace {

using namespace net::experimental::awaitable_operators;
using steady = std::chrono::steady_clock;

struct relay_state {
    relay_result result;
    steady::time_point last_activity = steady::now();
    bool done_up = false;
    bool done_down = false;
};

bool quiet_error(const error_code& ec) {
    return ec == net::error::operation_aborted || ec == net::error::bad_descriptor ||
           ec == net::error::eof || ec == net::error::connection_reset ||
           ec == net::error::broken_pipe || ec == net::error::not_connected;
}

// Writes `data` to `to`: at once while the socket takes it, then (only if it would block)
// from a private copy, so the shared read buffer is free again when this returns.
awaitable<error_code> write_all(tcp::socket& to, const char* data, std::size_t size) {
    error_code ec;
    std::size_t done = 0;
    while (done < size) {
        const std::size_t n = to.write_some(net::buffer(data + done, size - done), ec);
        if (ec == net::error::would_block || ec == net::error::try_again) {
            ec = {};
            break;
        }
        if (ec) {
            co_return ec;
        }
        done += n;
    }
    if (done < size) {
        std::vector<char> rest(data + done, data + size);
        auto [wec, n] = co_await net::async_write(to, net::buffer(rest), use_nothrow);
        (void)n;
        co_return wec;
    }
    co_return ec;
}

// Yields to the other connections of this thread every so often, so a bulk transfer that
// always finds data waiting cannot starve them.
constexpr int chunks_per_turn = 4;

bool retry(const error_code& ec) {
    return ec == net::error::would_block || ec == net::error::try_again;
}

// A pipe for splice(2): bytes move socket -> pipe -> socket inside the kernel, with no copy
// through user space. Opened while data flows and closed whenever the direction goes idle,
// so an idle tunnel holds neither the pipe's descriptors nor its kernel buffer.
class splice_pipe {
public:
    splice_pipe() = default;
    splice_pipe(const splice_pipe&) = delete;
    splice_pipe& operator=(const splice_pipe&) = delete;
    ~splice_pipe() { close(); }

    bool open() {
        if (fds_[0] >= 0) {
            return true;
        }
        if (::pipe2(fds_, O_NONBLOCK | O_CLOEXEC) != 0) {
            fds_[0] = fds_[1] = -1;
            return false;
        }
        ::fcntl(fds_[1], F_SETPIPE_SZ, 1 << 20);  // best effort; the default is 64 KiB
        return true;
    }
    void close() {
        for (int& fd : fds_) {
            if (fd >= 0) {
                ::close(fd);
                fd = -1;
            }
        }
        held = 0;
    }
    int read_end() const { return fds_[0]; }
    int write_end() const { return fds_[1]; }
    std::size_t held = 0;  ///< bytes in the pipe not yet passed on

private:
    int fds_[2] = {-1, -1};
};

error_code last_error() { return error_code(errno, boost::system::system_category()); }

// One direction. `up` is client -> upstream.
awaitable<void> pump(worker& w, tcp::socket& from, tcp::socket& to, bool up,
                     const relay_hooks& hooks, relay_state& st) {
    splice_pipe pipe;
    bool use_splice = true;
    int turn = 0;
    auto fail = [&](const error_code& ec) {
        if (!quiet_error(ec) && !st.result.error) {
            st.result.error = ec;
        }
        error_code ignored;
        from.close(ignored);
        to.close(ignored);
    };
    for (;;) {
        if (++turn % chunks_per_turn == 0) {
            co_await net::post(co_await net::this_coro::executor, net::use_awaitable);
        }
        if (!from.is_open() || !to.is_open()) {
            break;
        }
        // Read first; wait for readability only when nothing is there. In a bulk transfer
        // data is usually waiting, and a reactor round trip per chunk would halve the rate.
        std::size_t n = 0;
        error_code ec;
        if (use_splice && pipe.open()) {
            const ssize_t r = ::splice(from.native_handle(), nullptr, pipe.write_end(), nullptr,
                                       256 * 1024, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (r < 0 && (errno == EINVAL || errno == ENOSYS)) {
                use_splice = false;  // not spliceable here: copy through the buffer instead
                pipe.close();
                continue;
            }
            if (r < 0) {
                ec = last_error();
            } else if (r == 0) {
                ec = net::error::eof;
            } else {
                n = static_cast<std::size_t>(r);
            }
        } else {
            n = from.read_some(net::buffer(w.relay_buffer), ec);
        }
        if (retry(ec)) {
            pipe.close();  // idle: give the pipe back
            auto [wec] = co_await from.async_wait(tcp::socket::wait_read, use_nothrow);
            if (wec) {
                if (!quiet_error(wec) && !st.result.error) {
                    st.result.error = wec;
                }
                break;
            }
            continue;
        }
        if (ec == net::error::eof) {
            // Pass the half-close on; the other direction keeps running.
            error_code ignored;
            to.shutdown(tcp::socket::shutdown_send, ignored);
            break;
        }
        if (ec) {
            fail(ec);  // a reset on one side ends both
            break;
        }
        std::size_t pass = n;
        if (up && hooks.allow_up) {
            pass = hooks.allow_up(n);
        }
        st.last_activity = steady::now();
        if (pass > 0 && use_splice) {
            pipe.held = pass;
            while (pipe.held > 0) {
                const ssize_t m = ::splice(pipe.read_end(), nullptr, to.native_handle(), nullptr,
                                           pipe.held, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (m > 0) {
                    pipe.held -= static_cast<std::size_t>(m);
                    continue;
                }
                const error_code wec = m == 0 ? error_code(net::error::broken_pipe) : last_error();
                if (!retry(wec)) {
                    fail(wec);
                    break;
                }
                // The bytes wait in the pipe, not in user memory, until `to` drains.
                auto [aec] = co_await to.async_wait(tcp::socket::wait_write, use_nothrow);
                if (aec) {
                    fail(aec);
                    break;
                }
            }
            if (pipe.held > 0) {
                break;
            }
        } else if (pass > 0) {
            const error_code wr = co_await write_all(to, w.relay_buffer.data(), pass);
            if (wr) {
                fail(wr);
                break;
            }
        }
        (up ? st.result.bytes_up : st.result.bytes_down) += pass;
        if (hooks.bytes != nullptr) {
            hooks.bytes->count_bytes(up, pass);
        }
        if (pass < n) {
            st.result.budget = true;
            error_code ignored;
            from.close(ignored);
            to.close(ignored);
            break;
        }
    }
    (up ? st.done_up : st.done_down) = true;
}

// Closes both sockets once nothing has moved for the idle timeout.
awaitable<void> watchdog(tcp::socket& a, tcp::socket& b, std::chrono::milliseconds idle,
                         relay_state& st) {
    net::steady_timer timer(co_await net::this_coro::executor);
    for (;;) {
        const auto deadline = st.last_activity + idle;
        if (steady::now() >= deadline) {
            st.result.idle = true;
            error_code ignored;
            a.close(ignored);
            b.close(ignored);
            co_return;
        }
        timer.expires_at(deadline);
        auto [ec] = co_await timer.async_wait(use_nothrow);
        if (ec) {
            co_return;  // cancelled: the relay finished
        }
    }
}

awaitable<void> both(worker& w, tcp::socket& client, tcp::socket& upstream,
                     const relay_hooks& hooks, relay_state& st) {
    co_await (pump(w, client, upstream, true, hooks, st) &&
              pump(w, upstream, client, false, hooks, st));
}

}  // namespace

awaitable<relay_result> relay(worker& w, tcp::socket& client, tcp::socket& upstream,
                              const relay_hooks& hooks) {
    relay_state st;
    error_code ec;
    client.non_blocking(true, ec);
    upstream.non_blocking(true, ec);
    co_await (both(w, client, upstream, hooks, st) ||
              watchdog(client, upstream, hooks.idle_timeout, st));
    co_return st.result;
}

}  // namespace cordon::proxy
