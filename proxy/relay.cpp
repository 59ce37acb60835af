#include "proxy/relay.hpp"

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

// One direction. `up` is client -> upstream.
awaitable<void> pump(worker& w, tcp::socket& from, tcp::socket& to, bool up,
                     const relay_hooks& hooks, relay_state& st) {
    for (;;) {
        auto [wec] = co_await from.async_wait(tcp::socket::wait_read, use_nothrow);
        if (wec) {
            if (!quiet_error(wec) && !st.result.error) {
                st.result.error = wec;
            }
            break;
        }
        error_code ec;
        std::size_t n = from.read_some(net::buffer(w.relay_buffer), ec);
        if (ec == net::error::would_block || ec == net::error::try_again) {
            continue;
        }
        if (ec == net::error::eof) {
            // Pass the half-close on; the other direction keeps running.
            error_code ignored;
            to.shutdown(tcp::socket::shutdown_send, ignored);
            break;
        }
        if (ec) {
            if (!quiet_error(ec) && !st.result.error) {
                st.result.error = ec;
            }
            // A reset on one side ends both.
            error_code ignored;
            to.close(ignored);
            from.close(ignored);
            break;
        }
        std::size_t pass = n;
        if (up && hooks.allow_up) {
            pass = hooks.allow_up(n);
        }
        st.last_activity = steady::now();
        if (pass > 0) {
            const error_code wr = co_await write_all(to, w.relay_buffer.data(), pass);
            if (wr) {
                if (!quiet_error(wr) && !st.result.error) {
                    st.result.error = wr;
                }
                error_code ignored;
                from.close(ignored);
                to.close(ignored);
                break;
            }
            (up ? st.result.bytes_up : st.result.bytes_down) += pass;
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
