#include "proxy/data/relay.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace cordon::proxy::data {
namespace {

using steady = std::chrono::steady_clock;

bool quiet_error(const error_code& ec) {
    return ec == net::error::operation_aborted || ec == net::error::bad_descriptor ||
           ec == net::error::eof || ec == net::error::connection_reset ||
           ec == net::error::broken_pipe || ec == net::error::not_connected;
}

bool retry(const error_code& ec) {
    return ec == net::error::would_block || ec == net::error::try_again;
}

error_code last_error() { return error_code(errno, boost::system::system_category()); }

// The relay's own reads and writes: MSG_DONTWAIT on the descriptor, so neither socket needs
// Asio's user-level non-blocking mode (setting it is an ioctl per socket per tunnel, and
// Asio's synchronous calls would poll without it).
std::size_t recv_some(tcp::socket& s, char* data, std::size_t size, error_code& ec) {
    for (;;) {
        const ssize_t r = ::recv(s.native_handle(), data, size, MSG_DONTWAIT);
        if (r > 0) {
            ec = {};
            return static_cast<std::size_t>(r);
        }
        if (r == 0) {
            ec = net::error::eof;
            return 0;
        }
        if (errno != EINTR) {
            ec = last_error();
            return 0;
        }
    }
}

std::size_t send_some(tcp::socket& s, const char* data, std::size_t size, error_code& ec) {
    for (;;) {
        const ssize_t r = ::send(s.native_handle(), data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r >= 0) {
            ec = {};
            return static_cast<std::size_t>(r);
        }
        if (errno != EINTR) {
            ec = last_error();
            return 0;
        }
    }
}

// splice(2) has no per-call flag for the socket's side: the descriptor itself must be
// non-blocking. It already is when Asio ran an asynchronous operation on it (every relayed
// socket has: the client's first read, the upstream's connect); this costs a call only
// when it has not.
void ensure_non_blocking(tcp::socket& s) {
    if (!s.native_non_blocking()) {
        error_code ignored;
        s.native_non_blocking(true, ignored);
    }
}

// The idle wait's operation is allocated at its own size. Asio's default (per-thread
// recycling) hands it any larger cached block, and what a connection's handshake freed
// last is large (a coroutine's read or write: 300-400 bytes), so each idle tunnel would
// hold two such blocks for waits that need about a third of that.
template <class T>
struct exact_allocator {
    using value_type = T;
    exact_allocator() = default;
    template <class U>
    exact_allocator(const exact_allocator<U>&) noexcept {}  // NOLINT: rebinding converts
    T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T))); }
    void deallocate(T* p, std::size_t) noexcept { ::operator delete(p); }
    template <class U>
    bool operator==(const exact_allocator<U>&) const noexcept {
        return true;
    }
};

// Yields to the other connections of this thread every so often, so a bulk transfer that
// always finds data waiting cannot starve them.
constexpr int chunks_per_turn = 4;
constexpr std::size_t splice_chunk = 256 * 1024;
constexpr std::size_t bulk_read = 64 * 1024;

}  // namespace

tunnel_relay::tunnel_relay(control::worker& w, tcp::socket& client, tcp::socket& upstream,
                           relay_hooks hooks)
    : w_(w), client_(client), upstream_(upstream), hooks_(std::move(hooks)) {
    up_.from = &client_;
    up_.to = &upstream_;
    up_.up = true;
    down_.from = &upstream_;
    down_.to = &client_;
}

tunnel_relay::~tunnel_relay() {
    unlink();
    close_pipe(up_);
    close_pipe(down_);
}

bool tunnel_relay::open_pipe(direction& d) { return d.pipe[0] >= 0 || w_.pipes.take(d.pipe); }

// Gives the pipe back whenever the direction goes idle, so an idle tunnel holds neither its
// descriptors nor its kernel buffer. Only an empty pipe goes back to the pool.
void tunnel_relay::close_pipe(direction& d) {
    if (d.held == 0) {
        w_.pipes.give(d.pipe);
        return;
    }
    w_.pipes.discard(d.pipe);
    d.held = 0;
}

void tunnel_relay::start(const keep_t& keep, relay_owner& owner) {
    owner_ = &owner;
    ensure_non_blocking(client_);
    ensure_non_blocking(upstream_);
    last_activity_ = steady::now();
    link();
    pump(up_, keep);
    pump(down_, keep);
}

void tunnel_relay::note(const error_code& ec) {
    if (!quiet_error(ec) && !result_.error) {
        result_.error = ec;
    }
}

// A reset or a failed write on one side ends both.
void tunnel_relay::fail(const error_code& ec) {
    note(ec);
    error_code ignored;
    client_.close(ignored);
    upstream_.close(ignored);
}

void tunnel_relay::end(direction& d) {
    close_pipe(d);
    d.rest.clear();
    d.rest.shrink_to_fit();
    d.done = true;
    if (up_.done && down_.done && !finished_) {
        finished_ = true;
        unlink();
        owner_->relay_done(result_);
    }
}

// Reads first and waits for readability only when nothing is there: in a bulk transfer
// data is usually waiting, and a reactor round trip per chunk would halve the rate.
void tunnel_relay::pump(direction& d, const keep_t& keep) {
    for (int chunk = 0; chunk < chunks_per_turn; ++chunk) {
        if (!d.from->is_open() || !d.to->is_open()) {
            end(d);
            return;
        }
        if (w_.urgent.load(std::memory_order_relaxed) > 0) {
            break;  // a kill is waiting in this thread's queue: go behind it
        }
        std::size_t n = 0;
        error_code ec;
        bool spliced = true;
        if (d.bulk && d.use_splice && open_pipe(d)) {
            const ssize_t r = ::splice(d.from->native_handle(), nullptr, d.pipe[1], nullptr,
                                       splice_chunk, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (r < 0 && (errno == EINVAL || errno == ENOSYS)) {
                d.use_splice = false;  // not spliceable here: copy through the buffer instead
                close_pipe(d);
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
            n = recv_some(*d.from, w_.relay_buffer.data(), w_.relay_buffer.size(), ec);
            // A read this large means a backlog: bulk data, which splice moves cheaper
            // than copies. Small exchanges (a TLS handshake, an API call) stay copied.
            d.bulk = d.bulk || n >= bulk_read;
            spliced = false;
        }
        if (retry(ec)) {
            close_pipe(d);  // idle: give the pipe back
            d.from->async_wait(tcp::socket::wait_read,
                               net::bind_allocator(exact_allocator<void>{},
                                                   [this, &d, keep](const error_code& wec) {
                                                       if (wec) {
                                                           note(wec);
                                                           end(d);
                                                           return;
                                                       }
                                                       pump(d, keep);
                                                   }));
            return;
        }
        if (ec == net::error::eof) {
            // Pass the half-close on; the other direction keeps running.
            error_code ignored;
            d.to->shutdown(tcp::socket::shutdown_send, ignored);
            end(d);
            return;
        }
        if (ec) {
            fail(ec);
            end(d);
            return;
        }
        d.read = n;
        d.pass = d.up && hooks_.allow_up ? hooks_.allow_up(n) : n;
        d.spliced = spliced;
        d.held = spliced ? n : 0;
        d.left = d.pass;
        last_activity_ = steady::now();
        if (!send(d, keep) || !account(d)) {
            return;
        }
    }
    net::post(w_.ioc, [this, &d, keep] { pump(d, keep); });
}

// Passes the chunk in hand on. True when it is all written; false when a write is pending
// (its completion goes on with the direction) or the relay failed.
bool tunnel_relay::send(direction& d, const keep_t& keep) {
    if (d.spliced) {
        while (d.left > 0) {
            const ssize_t m = ::splice(d.pipe[0], nullptr, d.to->native_handle(), nullptr, d.left,
                                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
            if (m > 0) {
                d.left -= static_cast<std::size_t>(m);
                d.held -= static_cast<std::size_t>(m);
                continue;
            }
            const error_code wec = m == 0 ? error_code(net::error::broken_pipe) : last_error();
            if (!retry(wec)) {
                fail(wec);
                end(d);
                return false;
            }
            // The bytes wait in the pipe, not in user memory, until `to` drains.
            d.to->async_wait(tcp::socket::wait_write, [this, &d, keep](const error_code& aec) {
                if (aec) {
                    fail(aec);
                    end(d);
                    return;
                }
                if (send(d, keep) && account(d)) {
                    pump(d, keep);
                }
            });
            return false;
        }
        return true;
    }
    // Copy path: write at once while the socket takes it; only a remainder that would block
    // is copied out of the shared buffer, which is then free for the next chunk.
    std::size_t done = 0;
    while (done < d.pass) {
        error_code ec;
        const std::size_t n = send_some(*d.to, w_.relay_buffer.data() + done, d.pass - done, ec);
        if (retry(ec)) {
            break;
        }
        if (ec) {
            fail(ec);
            end(d);
            return false;
        }
        done += n;
    }
    if (done == d.pass) {
        return true;
    }
    d.rest.assign(w_.relay_buffer.data() + done, w_.relay_buffer.data() + d.pass);
    net::async_write(*d.to, net::buffer(d.rest),
                     [this, &d, keep](const error_code& wec, std::size_t) {
                         d.rest.clear();
                         d.rest.shrink_to_fit();
                         if (wec) {
                             fail(wec);
                             end(d);
                             return;
                         }
                         if (account(d)) {
                             pump(d, keep);
                         }
                     });
    return false;
}

// Counts the chunk just passed on; false when the budget ended the relay.
bool tunnel_relay::account(direction& d) {
    (d.up ? result_.bytes_up : result_.bytes_down) += d.pass;
    if (hooks_.bytes != nullptr) {
        hooks_.bytes->count_bytes(d.up, d.pass);
    }
    if (d.pass < d.read) {
        result_.budget = true;
        error_code ignored;
        client_.close(ignored);
        upstream_.close(ignored);
        end(d);
        return false;
    }
    return true;
}

void tunnel_relay::link() {
    next_ = w_.relays;
    if (next_ != nullptr) {
        next_->prev_ = this;
    }
    w_.relays = this;
    linked_ = true;
    arm_sweep(w_);
}

void tunnel_relay::unlink() {
    if (!linked_) {
        return;
    }
    (prev_ != nullptr ? prev_->next_ : w_.relays) = next_;
    if (next_ != nullptr) {
        next_->prev_ = prev_;
    }
    prev_ = next_ = nullptr;
    linked_ = false;
}

// Idle timeouts are minutes in practice (seconds in tests): a sweep every quarter second
// ends an idle tunnel at most that late, for one timer wake-up per worker.
constexpr auto sweep_period = std::chrono::milliseconds(250);

void tunnel_relay::arm_sweep(control::worker& w) {
    if (w.sweep_armed || w.relays == nullptr) {
        return;
    }
    w.sweep_armed = true;
    w.idle_sweep.expires_after(sweep_period);
    w.idle_sweep.async_wait([&w](const error_code& ec) {
        w.sweep_armed = false;
        if (!ec) {
            sweep(w);
        }
    });
}

// Closes both sockets of every tunnel nothing has moved on for its idle timeout; their
// directions then end as for any close. Closing completes nothing inline, so the list
// stays as it is while this walks it.
void tunnel_relay::sweep(control::worker& w) {
    const auto now = steady::now();
    for (tunnel_relay* r = w.relays; r != nullptr; r = r->next_) {
        if (!r->result_.idle && now >= r->last_activity_ + r->hooks_.idle_timeout) {
            r->result_.idle = true;
            error_code ignored;
            r->client_.close(ignored);
            r->upstream_.close(ignored);
        }
    }
    arm_sweep(w);
}

}  // namespace cordon::proxy::data
