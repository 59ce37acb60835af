#include "proxy/data/tls_stream.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <boost/asio/ssl/error.hpp>

#include <cerrno>
#include <climits>
#include <cstring>

namespace cordon::proxy::data {
namespace {

namespace ssl_error = boost::asio::ssl::error;
using io_state = tls_stream::io_state;

io_state& state_of(BIO* b) { return *static_cast<io_state*>(BIO_get_data(b)); }

// The socket's descriptor, or -1 once it is closed: never a number cached from before a
// close, which the kernel may have given to another connection since.
int descriptor(const io_state& io) {
    return io.socket->is_open() ? io.socket->native_handle() : -1;
}

int bio_read(BIO* b, char* out, int len) {
    io_state& io = state_of(b);
    BIO_clear_retry_flags(b);
    if (len <= 0) {
        return 0;
    }
    if (io.prefix_at < io.prefix.size()) {
        const std::size_t n = std::min(static_cast<std::size_t>(len),
                                       io.prefix.size() - io.prefix_at);
        std::memcpy(out, io.prefix.data() + io.prefix_at, n);
        io.prefix_at += n;
        return static_cast<int>(n);
    }
    const int fd = descriptor(io);
    if (fd < 0) {
        io.sys_errno = EBADF;
        return -1;
    }
    for (;;) {
        const ssize_t n = ::recv(fd, out, static_cast<std::size_t>(len), MSG_DONTWAIT);
        if (n > 0) {
            return static_cast<int>(n);
        }
        if (n == 0) {
            io.eof = true;
            return 0;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            BIO_set_retry_read(b);
            return -1;
        }
        io.sys_errno = errno;
        return -1;
    }
}

int bio_write(BIO* b, const char* in, int len) {
    io_state& io = state_of(b);
    BIO_clear_retry_flags(b);
    if (len <= 0) {
        return 0;
    }
    const int fd = descriptor(io);
    if (fd < 0) {
        io.sys_errno = EBADF;
        return -1;
    }
    for (;;) {
        // MSG_NOSIGNAL: a peer that reset gives EPIPE, never SIGPIPE.
        const ssize_t n = ::send(fd, in, static_cast<std::size_t>(len),
                                 MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0) {
            return static_cast<int>(n);
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            BIO_set_retry_write(b);
            return -1;
        }
        io.sys_errno = errno;
        return -1;
    }
}

long bio_ctrl(BIO* b, int cmd, long, void*) {
    switch (cmd) {
        case BIO_CTRL_FLUSH: return 1;  // nothing is buffered here
        case BIO_CTRL_EOF: return state_of(b).eof ? 1 : 0;
        default: return 0;
    }
}

int bio_create(BIO* b) {
    BIO_set_init(b, 1);
    return 1;
}

BIO_METHOD* socket_method() {
    static BIO_METHOD* const m = [] {
        BIO_METHOD* method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                                          "cordon tls_stream socket");
        if (method == nullptr || BIO_meth_set_read(method, bio_read) != 1 ||
            BIO_meth_set_write(method, bio_write) != 1 ||
            BIO_meth_set_ctrl(method, bio_ctrl) != 1 ||
            BIO_meth_set_create(method, bio_create) != 1) {
            std::abort();  // out of memory at the first inspected connection
        }
        return method;
    }();
    return m;
}

constexpr int reads = 0;
constexpr int writes = 1;

}  // namespace

tls_step tls_failure(int ssl_error, unsigned long queue, int sys_errno, bool eof,
                     bool close_notify) {
    using want = tls_step::want;
    switch (ssl_error) {
        case SSL_ERROR_WANT_READ: return {want::read, {}, 0};
        case SSL_ERROR_WANT_WRITE: return {want::write, {}, 0};
        case SSL_ERROR_ZERO_RETURN:
            // The peer's close_notify, or (SSL_OP_IGNORE_UNEXPECTED_EOF) a bare end of stream.
            return {want::done,
                    eof && !close_notify ? error_code(ssl_error::stream_truncated)
                                         : error_code(net::error::eof),
                    0};
        default: break;
    }
    if (sys_errno != 0) {
        return {want::done, error_code(sys_errno, boost::system::system_category()), 0};
    }
    if (eof) {
        return {want::done,
                close_notify ? error_code(net::error::eof)
                             : error_code(ssl_error::stream_truncated),
                0};
    }
    if (queue != 0 && (ssl_error == SSL_ERROR_SSL || ssl_error == SSL_ERROR_SYSCALL)) {
        return {want::done, error_code(static_cast<int>(queue), net::error::get_ssl_category()), 0};
    }
    if (ssl_error == SSL_ERROR_SYSCALL) {
        return {want::done, ssl_error::unspecified_system_error, 0};
    }
    return {want::done, ssl_error::unexpected_result, 0};
}

// The deadlines (see the class comment). The timer lives here, owned by the stream; its
// handler holds a weak reference, so a stream gone meanwhile is never touched.
struct tls_stream::watch {
    watch(const executor_type& ex, tcp::socket& s) : timer(ex), socket(&s) {}
    static constexpr clock::time_point never = clock::time_point::max();
    net::steady_timer timer;
    tcp::socket* socket;
    std::array<clock::time_point, 2> deadline{never, never};
    std::array<bool, 2> busy{};       // an operation in that direction is under way
    std::array<bool, 2> waiting{};    // it waits on the socket
    std::array<bool, 2> timed_out{};  // its deadline closed the socket
    clock::time_point armed = never;  // when the timer fires (it re-checks then)

    // Lazily: a timer set for an earlier time stays; it re-arms when it fires.
    static void arm(const std::shared_ptr<watch>& w, clock::time_point t) {
        if (t == never || (w->armed != never && w->armed <= t)) {
            return;
        }
        w->armed = t;
        w->timer.expires_at(t);
        w->timer.async_wait([weak = std::weak_ptr<watch>(w)](const error_code& ec) {
            if (ec == net::error::operation_aborted) {
                return;
            }
            if (const auto alive = weak.lock()) {
                alive->fired();
            }
        });
    }
    void fired() {
        armed = never;
        const auto now = clock::now();
        bool expired = false;
        clock::time_point next = never;
        for (int d : {reads, writes}) {
            if (!waiting[d]) {
                continue;
            }
            if (deadline[d] <= now) {
                timed_out[d] = true;
                expired = true;
            }
            next = std::min(next, deadline[d]);
        }
        if (expired) {
            error_code ignored;
            socket->close(ignored);  // as beast::tcp_stream: ends every pending operation
            return;
        }
        if (next != never) {
            arm(self.lock(), next);
        }
    }
    std::weak_ptr<watch> self;
};

tls_stream::tls_stream(tcp::socket& socket, SSL* ssl)
    : socket_(socket), ssl_(ssl), watch_(std::make_shared<watch>(socket.get_executor(), socket)) {
    watch_->self = watch_;
    io_.socket = &socket_;
    BIO* bio = BIO_new(socket_method());
    if (bio == nullptr) {
        std::abort();
    }
    BIO_set_data(bio, &io_);
    SSL_set_bio(ssl_, bio, bio);  // one reference, for both directions
    // Asio's ssl::stream set these too; read-ahead lets one recv take what has come (not a
    // record header, then its body) and is released with the buffer when drained.
    SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                           SSL_MODE_RELEASE_BUFFERS);
    SSL_set_read_ahead(ssl_, 1);
    // A peer's end of stream without close_notify is no fatal error to OpenSSL (which would
    // answer it with a decode_error alert on the socket, where ssl::stream's memory BIO
    // never saw the end): it reads as SSL_ERROR_ZERO_RETURN, which tls_failure tells from a
    // close_notify by the end of stream this call saw (stream_truncated, as before).
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF  // OpenSSL 3; 1.1 reports a bare end as SSL_ERROR_SYSCALL
    SSL_set_options(ssl_, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
}

tls_stream::~tls_stream() {
    SSL_free(ssl_);  // and the BIO
}

void tls_stream::expires_after(clock::duration d) {
    const auto t = clock::now() + d;
    for (int dir : {reads, writes}) {
        if (!watch_->busy[dir]) {
            watch_->deadline[dir] = t;
        }
    }
}

void tls_stream::expires_never() {
    for (int dir : {reads, writes}) {
        if (!watch_->busy[dir]) {
            watch_->deadline[dir] = watch::never;
        }
    }
}

void tls_stream::begin_op(int dir) noexcept { watch_->busy[dir] = true; }

void tls_stream::end_op(int dir) noexcept { watch_->busy[dir] = false; }

error_code tls_stream::begin_wait(int dir) {
    const auto deadline = watch_->deadline[dir];
    if (deadline != watch::never && deadline <= clock::now()) {
        error_code ignored;
        socket_.close(ignored);
        return beast::error::timeout;
    }
    watch_->waiting[dir] = true;
    watch::arm(watch_, deadline);
    return {};
}

error_code tls_stream::end_wait(int dir, const error_code& ec) {
    watch_->waiting[dir] = false;
    if (watch_->timed_out[dir]) {
        watch_->timed_out[dir] = false;
        return beast::error::timeout;
    }
    return ec;
}

void tls_stream::set_role(role r) {
    if (r == role::server) {
        SSL_set_accept_state(ssl_);
    } else {
        SSL_set_connect_state(ssl_);
    }
}

void tls_stream::drop_prefix() noexcept {
    std::vector<unsigned char>().swap(io_.prefix);
    io_.prefix_at = 0;
}

tls_step tls_stream::failure(int ret, bool keep_queue) {
    const int e = SSL_get_error(ssl_, ret);
    // A failed handshake leaves the queue for inspector::handshake_error, which says why in
    // words and clears it; every other call leaves it clean.
    const unsigned long queue = keep_queue ? ERR_peek_error() : ERR_get_error();
    if (!keep_queue) {
        ERR_clear_error();
    }
    return tls_failure(e, queue, io_.sys_errno, io_.eof, io_.close_notify_before);
}

void tls_stream::release_buffers() noexcept {
    // SSL_MODE_RELEASE_BUFFERS frees the read buffer once drained and the write buffer once
    // written, but a read sets up both (OpenSSL 3.0's ssl3_setup_buffers): a session that
    // last read, as the upstream's does after an answer, would keep a 16 KiB write buffer.
    // Only after a call that succeeded and with nothing buffered: no record is half read
    // (SSL_free_buffers on one was CVE-2024-4741 before 3.0.14), and SSL_free_buffers
    // itself refuses while a write is pending.
    if (SSL_has_pending(ssl_) == 0) {
        SSL_free_buffers(ssl_);
    }
}

void tls_stream::begin_call() noexcept {
    // The thread's error queue clean for SSL_get_error (a look first: clearing walks the
    // whole queue, and it is almost always empty).
    if (ERR_peek_error() != 0) {
        ERR_clear_error();
    }
    io_.sys_errno = 0;
    io_.eof = false;
    // Before the call: with SSL_OP_IGNORE_UNEXPECTED_EOF a bare end of stream marks the
    // session shut down too, so the mark after it cannot tell the two apart.
    io_.close_notify_before = (SSL_get_shutdown(ssl_) & SSL_RECEIVED_SHUTDOWN) != 0;
}

bool tls_stream::has_pending() const noexcept {
    return SSL_has_pending(ssl_) == 1 || io_.prefix_at < io_.prefix.size();
}

tls_step tls_stream::do_handshake() {
    begin_call();
    const int r = SSL_do_handshake(ssl_);
    if (r == 1) {
        if (io_.prefix_at >= io_.prefix.size()) {
            drop_prefix();
        }
        release_buffers();
        return {};
    }
    tls_step st = failure(r, true);
    if (st.next == tls_step::want::done) {
        drop_prefix();
    }
    return st;
}

tls_step tls_stream::do_read(net::mutable_buffer b) {
    if (b.size() == 0) {
        return {};
    }
    begin_call();
    std::size_t n = 0;
    if (SSL_read_ex(ssl_, b.data(), b.size(), &n) == 1) {
        if (!io_.prefix.empty() && io_.prefix_at >= io_.prefix.size()) {
            drop_prefix();
        }
        release_buffers();
        return {tls_step::want::done, {}, n};
    }
    return failure(0, false);
}

tls_step tls_stream::do_write(const gather& g) {
    if (g.count == 0) {
        return {};
    }
    const void* data = g.parts[0].data();
    std::size_t size = g.parts[0].size();
    // Gathered into one record: a thread's scratch. OpenSSL encrypts it at once and, when the
    // socket is full, keeps the record itself: a retry passes the same bytes again, but they
    // are not read again (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER allows the new address).
    thread_local std::array<char, 16 * 1024> scratch;
    if (g.count > 1) {
        size = 0;
        for (std::size_t i = 0; i < g.count; ++i) {
            std::memcpy(scratch.data() + size, g.parts[i].data(), g.parts[i].size());
            size += g.parts[i].size();
        }
        data = scratch.data();
    }
    begin_call();
    std::size_t n = 0;
    if (SSL_write_ex(ssl_, data, size, &n) == 1) {
        return {tls_step::want::done, {}, n};
    }
    return failure(0, false);
}

tls_step tls_stream::do_shutdown() {
    begin_call();
    // As ssl::stream: close_notify, then (0: sent, the peer's not yet seen) wait for the
    // peer's.
    int r = SSL_shutdown(ssl_);
    if (r == 0) {
        r = SSL_shutdown(ssl_);
    }
    if (r == 1) {
        return {};
    }
    return failure(r, false);
}

}  // namespace cordon::proxy::data
