// setup_bench's HTTPS modes: an OpenSSL client, one epoll loop for every connection (bench/run
// rows 10 and 11: TLS inspection against squid's ssl-bump and mitmproxy; row 12: MCP calls).
//
//   setup_bench https-get   --target NAME:PORT --ca FILE [--proxy HOST:PORT] [--post FILE]
//       keep-alive: each of --concurrency connections does (CONNECT, 200,) one TLS handshake,
//       then GETs one after the other, each answer read whole (Content-Length) before the
//       next request is written. Latency per request: from SSL_write to the answer's last
//       byte. A connection that fails is counted and opened again. With --post FILE each
//       request is a POST of FILE's bytes instead (Content-Type: application/json, Accept:
//       application/json, text/event-stream, as an MCP client sends a JSON-RPC message), the
//       head and body in one SSL_write.
//   setup_bench https-setup --target NAME:PORT --ca FILE [--proxy HOST:PORT]
//       each operation: connect, (CONNECT, 200,) a full TLS handshake (no resumption), one
//       GET, its answer read whole, close_notify, close. Latency: the whole operation.
//
// Without --proxy the client connects to 127.0.0.1 at the target's port (the origin direct).
// The server's certificate is verified against --ca and for NAME (ALPN http/1.1, SNI NAME).
// common: --concurrency 64 --count 20000 (operations) --seconds 5 --path /
// Prints one line: "<ops> <seconds> <ops/s> <errors> <p99 µs>". Stops starting operations at
// --count or --seconds, whichever comes first, then finishes those in flight (hard deadline
// 30 s past --seconds). Loopback only. When an answer was not a 200, the last such status
// line goes to stderr.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "bench/bench_args.hpp"

namespace {

using cordon::bench::arg;
using steady = std::chrono::steady_clock;

enum class Phase { connecting, connect_head, handshake, writing, reading };

struct Conn {
    int fd = -1;
    SSL* ssl = nullptr;
    Phase phase = Phase::connecting;
    std::uint32_t events = 0;  // what epoll waits for now
    std::string in;
    steady::time_point op_start;  // https-setup: the connect; https-get: the request
};

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "setup_bench: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
}

// The answer's length when `in` holds a whole 200 answer with a Content-Length body: 0 when
// more is needed, -1 when it is not such an answer.
long complete_answer(const std::string& in) {
    const auto end = in.find("\r\n\r\n");
    if (end == std::string::npos) {
        return in.size() > 16384 ? -1 : 0;
    }
    if (in.compare(0, 9, "HTTP/1.1 ") != 0 || in.compare(9, 3, "200") != 0) {
        return -1;
    }
    std::string head = in.substr(0, end + 2);
    std::transform(head.begin(), head.end(), head.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    const auto cl = head.find("\r\ncontent-length:");
    if (cl == std::string::npos) {
        return -1;
    }
    const long body = std::strtol(head.c_str() + cl + 17, nullptr, 10);
    const auto total = static_cast<long>(end + 4) + body;
    return static_cast<long>(in.size()) >= total ? total : 0;
}

}  // namespace

int run_https(int argc, char** argv, const std::string& mode) {
    const bool keep_alive = mode == "https-get";
    const std::string proxy = arg(argc, argv, "--proxy");
    const std::string target = arg(argc, argv, "--target");
    const std::string ca = arg(argc, argv, "--ca");
    const auto colon = target.rfind(':');
    if (colon == std::string::npos || ca.empty()) {
        std::fprintf(stderr, "setup_bench: %s needs --target NAME:PORT and --ca FILE\n",
                     mode.c_str());
        return 2;
    }
    const std::string name = target.substr(0, colon);
    const int concurrency = std::stoi(arg(argc, argv, "--concurrency", "64"));
    const long count = std::stol(arg(argc, argv, "--count", "20000"));
    const double seconds = std::stod(arg(argc, argv, "--seconds", "5"));
    const std::string path = arg(argc, argv, "--path", "/");
    const std::string post_file = arg(argc, argv, "--post");
    std::string post_body;
    if (!post_file.empty()) {
        std::ifstream in(post_file, std::ios::binary);
        if (!in || !keep_alive) {
            std::fprintf(stderr, "setup_bench: --post needs https-get and a readable FILE\n");
            return 2;
        }
        post_body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const auto dest_opt = cordon::bench::addr_of(
        proxy.empty() ? "127.0.0.1:" + target.substr(colon + 1) : proxy);
    if (!dest_opt) {
        std::fprintf(stderr, "setup_bench: bad address\n");
        return 2;
    }
    const sockaddr_in dest = *dest_opt;
    const std::string connect_req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target +
                                    "\r\n\r\n";
    const std::string request =
        post_file.empty()
            ? "GET " + path + " HTTP/1.1\r\nHost: " + target +
                  "\r\nUser-Agent: setup_bench\r\nAccept: */*\r\n\r\n"
            : "POST " + path + " HTTP/1.1\r\nHost: " + target +
                  "\r\nUser-Agent: setup_bench\r\nAccept: application/json, text/event-stream"
                  "\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(post_body.size()) + "\r\n\r\n" + post_body;

    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == nullptr || SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
        std::fprintf(stderr, "setup_bench: cannot load CA %s\n", ca.c_str());
        return 2;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);  // every handshake a full one
    static const unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn);

    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    std::vector<Conn> conns(static_cast<std::size_t>(concurrency));
    std::vector<std::uint32_t> latencies_us;
    latencies_us.reserve(static_cast<std::size_t>(std::min(count, 10'000'000L)));
    long started = 0;  // operations begun: requests (https-get) or tunnels (https-setup)
    long done = 0;
    long errors = 0;
    int open_conns = 0;
    unsigned long last_err = 0;
    std::string last_bad;  // the status line of the last answer that was not a 200
    const auto t0 = steady::now();
    const auto stop_at = t0 + std::chrono::duration<double>(seconds);
    const auto hard_stop = stop_at + std::chrono::seconds(30);
    auto more = [&] { return started < count && steady::now() < stop_at; };

    auto want = [&](std::size_t slot, std::uint32_t events) {
        Conn& c = conns[slot];
        if (c.events != events) {
            epoll_event ev{};
            ev.events = events;
            ev.data.u64 = slot;
            ::epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
            c.events = events;
        }
    };
    auto start = [&](std::size_t slot) {
        Conn& c = conns[slot];
        c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c.fd < 0) {
            die("socket");
        }
        const int one = 1;
        ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c.phase = Phase::connecting;
        c.in.clear();
        c.op_start = steady::now();
        if (::connect(c.fd, reinterpret_cast<const sockaddr*>(&dest), sizeof dest) != 0 &&
            errno != EINPROGRESS) {
            die("connect");
        }
        epoll_event ev{};
        ev.events = c.events = EPOLLOUT;
        ev.data.u64 = slot;
        ::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
        if (!keep_alive) {
            ++started;
        }
        ++open_conns;
    };
    auto close_conn = [&](std::size_t slot, bool clean) {
        Conn& c = conns[slot];
        if (c.ssl != nullptr) {
            if (clean) {
                SSL_shutdown(c.ssl);  // close_notify, not waiting for the peer's
            }
            SSL_free(c.ssl);
            c.ssl = nullptr;
        }
        ::close(c.fd);
        c.fd = -1;
        --open_conns;
    };
    // An operation failed: the connection goes, a new one starts while there is time.
    auto fail = [&](std::size_t slot) {
        if (const unsigned long e = ERR_peek_last_error(); e != 0) {
            last_err = e;
        }
        ERR_clear_error();
        ++errors;
        close_conn(slot, false);
        if (more()) {
            start(slot);
        }
    };
    auto send_request = [&](std::size_t slot) {
        Conn& c = conns[slot];
        if (keep_alive) {
            c.op_start = steady::now();
            ++started;
        }
        c.phase = Phase::writing;
    };

    // Advances one connection as far as it goes without blocking.
    auto drive = [&](std::size_t slot) {
        Conn& c = conns[slot];
        for (;;) {
            switch (c.phase) {
                case Phase::connecting: {
                    int err = 0;
                    socklen_t len = sizeof err;
                    ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
                    if (err != 0) {
                        return fail(slot);
                    }
                    if (!proxy.empty()) {
                        if (::send(c.fd, connect_req.data(), connect_req.size(), MSG_NOSIGNAL) !=
                            static_cast<ssize_t>(connect_req.size())) {
                            return fail(slot);
                        }
                        c.phase = Phase::connect_head;
                        return want(slot, EPOLLIN);
                    }
                    c.phase = Phase::handshake;
                    break;
                }
                case Phase::connect_head: {
                    char buf[4096];
                    const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
                    if (r < 0 && errno == EAGAIN) {
                        return;
                    }
                    if (r <= 0) {
                        return fail(slot);
                    }
                    c.in.append(buf, static_cast<std::size_t>(r));
                    const auto end = c.in.find("\r\n\r\n");
                    if (end == std::string::npos) {
                        if (c.in.size() > 16384) {
                            return fail(slot);
                        }
                        return;
                    }
                    // The proxy says nothing more before our ClientHello: the head is all.
                    if (c.in.size() < 12 || std::atoi(c.in.c_str() + 9) != 200 ||
                        end + 4 != c.in.size()) {
                        return fail(slot);
                    }
                    c.in.clear();
                    c.phase = Phase::handshake;
                    break;
                }
                case Phase::handshake: {
                    if (c.ssl == nullptr) {
                        c.ssl = SSL_new(ctx);
                        SSL_set_fd(c.ssl, c.fd);
                        // SSL_set_tlsext_host_name, without the macro's C cast.
                        SSL_ctrl(c.ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                                 const_cast<char*>(name.c_str()));
                        SSL_set1_host(c.ssl, name.c_str());
                    }
                    const int r = SSL_connect(c.ssl);
                    if (r != 1) {
                        const int e = SSL_get_error(c.ssl, r);
                        if (e == SSL_ERROR_WANT_READ) {
                            return want(slot, EPOLLIN);
                        }
                        if (e == SSL_ERROR_WANT_WRITE) {
                            return want(slot, EPOLLOUT);
                        }
                        return fail(slot);
                    }
                    send_request(slot);
                    break;
                }
                case Phase::writing: {
                    const int r = SSL_write(c.ssl, request.data(),
                                            static_cast<int>(request.size()));
                    if (r <= 0) {
                        const int e = SSL_get_error(c.ssl, r);
                        if (e == SSL_ERROR_WANT_READ) {
                            return want(slot, EPOLLIN);
                        }
                        if (e == SSL_ERROR_WANT_WRITE) {
                            return want(slot, EPOLLOUT);
                        }
                        return fail(slot);
                    }
                    c.phase = Phase::reading;
                    c.in.clear();
                    break;
                }
                case Phase::reading: {
                    char buf[16384];
                    const int r = SSL_read(c.ssl, buf, sizeof buf);
                    if (r <= 0) {
                        const int e = SSL_get_error(c.ssl, r);
                        if (e == SSL_ERROR_WANT_READ) {
                            return want(slot, EPOLLIN);
                        }
                        if (e == SSL_ERROR_WANT_WRITE) {
                            return want(slot, EPOLLOUT);
                        }
                        return fail(slot);
                    }
                    c.in.append(buf, static_cast<std::size_t>(r));
                    const long n = complete_answer(c.in);
                    if (n < 0 || (n > 0 && static_cast<std::size_t>(n) != c.in.size())) {
                        if (n < 0) {
                            last_bad = c.in.substr(0,
                                                   std::min(c.in.find("\r\n"), std::size_t{200}));
                        }
                        return fail(slot);  // not a 200, or bytes past the answer
                    }
                    if (n == 0) {
                        break;
                    }
                    ++done;
                    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        steady::now() - c.op_start);
                    if (latencies_us.size() < latencies_us.capacity()) {
                        latencies_us.push_back(static_cast<std::uint32_t>(us.count()));
                    }
                    if (keep_alive && more()) {
                        send_request(slot);
                        break;
                    }
                    close_conn(slot, true);
                    if (!keep_alive && more()) {
                        start(slot);
                    }
                    return;
                }
            }
        }
    };

    for (std::size_t i = 0; i < conns.size() && more(); ++i) {
        start(i);
    }
    epoll_event events[256];
    while (open_conns > 0 && steady::now() < hard_stop) {
        const int n = ::epoll_wait(ep, events, 256, 100);
        for (int i = 0; i < n; ++i) {
            const auto slot = static_cast<std::size_t>(events[i].data.u64);
            if (conns[slot].fd >= 0) {
                drive(slot);
            }
        }
    }
    const double s = std::chrono::duration<double>(steady::now() - t0).count();
    if (open_conns > 0) {
        std::fprintf(stderr, "setup_bench: %d connections still open at the deadline\n",
                     open_conns);
        errors += open_conns;
    }
    if (last_err != 0) {
        char text[256];
        ERR_error_string_n(last_err, text, sizeof text);
        std::fprintf(stderr, "setup_bench: last TLS error: %s\n", text);
    }
    if (!last_bad.empty()) {
        std::fprintf(stderr, "setup_bench: last answer not a 200: %s\n", last_bad.c_str());
    }
    std::uint32_t p99 = 0;
    if (!latencies_us.empty()) {
        const auto k = latencies_us.size() * 99 / 100;
        std::nth_element(latencies_us.begin(), latencies_us.begin() + static_cast<long>(k),
                         latencies_us.end());
        p99 = latencies_us[k];
    }
    std::printf("%ld %.3f %.0f %ld %u\n", done, s, static_cast<double>(done) / s, errors, p99);
    SSL_CTX_free(ctx);
    return 0;
}
