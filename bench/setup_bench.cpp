// Short-connection benchmarks through a CONNECT proxy (or direct), one epoll loop per side.
//
//   setup_bench setup --sink-port P [--proxy HOST:PORT] [--target NAME:PORT] [--auth U:P]
//       each operation: connect, CONNECT target (when proxied), 200, an 8-byte request, the
//       sink's 8-byte reply, close. Direct (no --proxy): connect to the sink, request, reply,
//       close, to show the client and sink are not the bottleneck. --relay HOST:PORT: the same
//       exchange through a plain TCP relay (no CONNECT) that forwards to the sink.
//       --socks5 yes: the SOCKS5 handshake instead of CONNECT (greeting, RFC 1929 credentials
//       when --auth, CONNECT to the target's name, all sent at once), the proxy's answers
//       (method, credentials, request reply 0) read before the 8-byte request.
//   setup_bench deny --proxy HOST:PORT --target NAME:PORT
//       each operation: connect, CONNECT to a target the proxy must refuse, read the answer
//       head (403/407/other 4xx counted as a denial), close.
//
//   setup_bench https-get|https-setup ...: through TLS, see setup_bench_https.cpp.
//
//   common: --concurrency 64 --count 20000 --seconds 5
//   --no-time-wait yes: the sink closes right after its reply and the client closes with a
//       reset (SO_LINGER 0), so no side that picks an ephemeral port is left in TIME_WAIT:
//       tens of thousands of setups a minute would otherwise use up the ports (a proxy that
//       binds its upstream sockets, as dante does, then fails; bench/socks_bench).
// Prints one line: "<ops> <seconds> <ops/s> <errors>". Stops starting operations at --count
// or --seconds, whichever comes first, then waits for those in flight (hard deadline 30 s
// past --seconds). The sink runs on its own thread with its own epoll loop on 127.0.0.1.
// Loopback only.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.hpp"
#include "proxy/data/basic_auth.hpp"

namespace {

using cordon::bench::arg;

sockaddr_in addr_of(const std::string& hostport) {
    const auto a = cordon::bench::addr_of(hostport);
    if (!a) {
        std::fprintf(stderr, "setup_bench: bad address %s\n", hostport.c_str());
        std::exit(2);
    }
    return *a;
}

using steady = std::chrono::steady_clock;
constexpr char request[] = "hello!!\n";
constexpr char reply[] = "world!!\n";
constexpr std::size_t msg_len = 8;

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "setup_bench: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
}

// The sink: accepts, answers the reply once it has the request's 8 bytes, closes on EOF.
void run_sink(int lfd, const std::atomic<bool>& stop, bool close_after_reply) {
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = lfd;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    std::vector<unsigned> got(1 << 20, 0);  // bytes received per fd (fds stay < 1 Mi)
    epoll_event events[256];
    char buf[4096];
    while (!stop) {
        const int n = ::epoll_wait(ep, events, 256, 100);
        for (int i = 0; i < n; ++i) {
            const int fd = events[i].data.fd;
            if (fd == lfd) {
                for (int k = 0; k < 64; ++k) {
                    const int c = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
                    if (c < 0) {
                        break;
                    }
                    if (static_cast<std::size_t>(c) >= got.size()) {
                        ::close(c);
                        continue;
                    }
                    got[static_cast<std::size_t>(c)] = 0;
                    epoll_event cev{};
                    cev.events = EPOLLIN;
                    cev.data.fd = c;
                    ::epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
            if (r > 0) {
                auto& g = got[static_cast<std::size_t>(fd)];
                const bool before = g >= msg_len;
                g += static_cast<unsigned>(r);
                if (!before && g >= msg_len) {
                    ::send(fd, reply, msg_len, MSG_NOSIGNAL);
                    if (close_after_reply) {
                        ::close(fd);  // the sink closes first: its listening port's TIME_WAIT
                    }
                }
                continue;
            }
            if (r < 0 && errno == EAGAIN) {
                continue;
            }
            ::close(fd);  // EOF or error; closing removes it from the epoll set
        }
    }
    ::close(ep);
}

enum class State { connecting, head, socks_answer, awaiting_reply };

// Greeting, credentials (when `auth` is "user:password") and a CONNECT request to
// `target` ("name:port"), as one write: a client that does not wait between messages.
struct Conn {
    int fd = -1;
    State state = State::connecting;
    std::string in;
};

}  // namespace

int run_https(int argc, char** argv, const std::string& mode);  // setup_bench_https.cpp

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(
            stderr, "usage: setup_bench setup|deny|https-get|https-setup [options] (see source)\n");
        return 2;
    }
    cordon::bench::raise_fd_limit();

    const std::string mode = argv[1];
    if (mode == "https-get" || mode == "https-setup") {
        return run_https(argc, argv, mode);
    }
    if (mode != "setup" && mode != "deny") {
        std::fprintf(stderr, "setup_bench: unknown mode %s\n", mode.c_str());
        return 2;
    }
    const bool deny = mode == "deny";
    const std::string proxy = arg(argc, argv, "--proxy");
    if (deny && proxy.empty()) {
        std::fprintf(stderr, "setup_bench: deny needs --proxy\n");
        return 2;
    }
    const int concurrency = std::stoi(arg(argc, argv, "--concurrency", "64"));
    const long count = std::stol(arg(argc, argv, "--count", "20000"));
    const double seconds = std::stod(arg(argc, argv, "--seconds", "5"));
    const std::string auth = arg(argc, argv, "--auth");
    const bool no_time_wait = arg(argc, argv, "--no-time-wait", "no") != "no";

    std::atomic<bool> stop{false};
    std::thread sink;
    int sink_port = std::stoi(arg(argc, argv, "--sink-port", "0"));
    if (!deny) {
        const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<std::uint16_t>(sink_port));
        const int one = 1;
        ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::listen(lfd, 4096) != 0) {
            die("sink listen");
        }
        socklen_t len = sizeof a;
        ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
        sink_port = ntohs(a.sin_port);
        sink = std::thread(run_sink, lfd, std::cref(stop), no_time_wait);
    }
    const std::string target = arg(argc, argv, "--target",
                                   "localhost:" + std::to_string(sink_port));
    std::string connect_req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n";
    if (!auth.empty()) {
        connect_req += "Proxy-Authorization: Basic " + cordon::proxy::data::base64_encode(auth) +
                       "\r\n";
    }
    connect_req += "\r\n";
    const bool socks = arg(argc, argv, "--socks5", "no") != "no";
    if (socks) {
        const auto colon = target.rfind(':');
        connect_req = cordon::bench::socks5_handshake(target.substr(0, colon),
                                                      std::stoi(target.substr(colon + 1)), auth);
    }
    // The SOCKS5 answers: method (2), credentials (2, when sent), request reply (10, IPv4).
    const std::size_t socks_answer_len = cordon::bench::socks5_answers_size(auth);
    // --relay: a plain TCP relay (no CONNECT) in front of the sink, e.g. haproxy in TCP mode.
    const std::string relay = arg(argc, argv, "--relay");
    const sockaddr_in dest = !relay.empty()  ? addr_of(relay)
                             : proxy.empty() ? addr_of("127.0.0.1:" + std::to_string(sink_port))
                                             : addr_of(proxy);

    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    std::vector<Conn> conns(static_cast<std::size_t>(concurrency));
    long started = 0;
    long done = 0;
    long errors = 0;
    int in_flight = 0;
    const auto t0 = steady::now();
    const auto stop_at = t0 + std::chrono::duration<double>(seconds);
    const auto hard_stop = stop_at + std::chrono::seconds(30);

    auto start = [&](std::size_t slot) {
        Conn& c = conns[slot];
        c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c.fd < 0) {
            die("socket");
        }
        const int one = 1;
        ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c.state = State::connecting;
        c.in.clear();
        if (::connect(c.fd, reinterpret_cast<const sockaddr*>(&dest), sizeof dest) != 0 &&
            errno != EINPROGRESS) {
            die("connect");
        }
        epoll_event ev{};
        ev.events = EPOLLOUT | EPOLLIN;
        ev.data.u64 = slot;
        ::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
        ++started;
        ++in_flight;
    };
    auto finish = [&](std::size_t slot, bool ok) {
        Conn& c = conns[slot];
        if (no_time_wait) {
            const linger reset{1, 0};
            ::setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
        }
        ::close(c.fd);
        c.fd = -1;
        --in_flight;
        ok ? ++done : ++errors;
        if (started < count && steady::now() < stop_at) {
            start(slot);
        }
    };
    auto send_all = [](int fd, const char* p, std::size_t n) {
        // Small writes into an empty socket buffer: complete or the connection failed.
        return ::send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
    };

    for (std::size_t i = 0; i < conns.size() && started < count; ++i) {
        start(i);
    }
    epoll_event events[256];
    char buf[4096];
    while (in_flight > 0 && steady::now() < hard_stop) {
        const int n = ::epoll_wait(ep, events, 256, 100);
        for (int i = 0; i < n; ++i) {
            const auto slot = static_cast<std::size_t>(events[i].data.u64);
            Conn& c = conns[slot];
            if (c.fd < 0) {
                continue;
            }
            if (c.state == State::connecting) {
                int err = 0;
                socklen_t len = sizeof err;
                ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err != 0) {
                    finish(slot, false);
                    continue;
                }
                const bool sent = proxy.empty()
                                      ? send_all(c.fd, request, msg_len)
                                      : send_all(c.fd, connect_req.data(), connect_req.size());
                if (!sent) {
                    finish(slot, false);
                    continue;
                }
                c.state = proxy.empty() ? State::awaiting_reply
                          : socks       ? State::socks_answer
                                        : State::head;
                epoll_event ev{};
                ev.events = EPOLLIN;
                ev.data.u64 = slot;
                ::epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
                continue;
            }
            const ssize_t r = ::recv(c.fd, buf, sizeof buf, 0);
            if (r < 0 && errno == EAGAIN) {
                continue;
            }
            if (r <= 0) {
                finish(slot, false);
                continue;
            }
            c.in.append(buf, static_cast<std::size_t>(r));
            if (c.state == State::socks_answer) {
                if (c.in.size() < socks_answer_len) {
                    continue;
                }
                // The reply code is the request answer's second byte.
                if (c.in[0] != 5 || c.in[socks_answer_len - 9] != 0) {
                    finish(slot, deny);
                    continue;
                }
                if (deny) {
                    finish(slot, false);
                    continue;
                }
                c.in.erase(0, socks_answer_len);
                c.state = State::awaiting_reply;
                if (!send_all(c.fd, request, msg_len)) {
                    finish(slot, false);
                    continue;
                }
            }
            if (c.state == State::head) {
                const auto end = c.in.find("\r\n\r\n");
                if (end == std::string::npos) {
                    if (c.in.size() > 16384) {
                        finish(slot, false);
                    }
                    continue;
                }
                // "HTTP/1.x NNN": tinyproxy answers CONNECT with HTTP/1.0.
                const int status = c.in.size() > 12 ? std::atoi(c.in.c_str() + 9) : 0;
                if (deny) {
                    finish(slot, status == 403 || status == 407);
                    continue;
                }
                if (status != 200) {
                    finish(slot, false);
                    continue;
                }
                c.in.erase(0, end + 4);
                c.state = State::awaiting_reply;
                if (!send_all(c.fd, request, msg_len)) {
                    finish(slot, false);
                    continue;
                }
            }
            if (c.state == State::awaiting_reply && c.in.size() >= msg_len) {
                finish(slot, c.in.compare(0, msg_len, reply) == 0);
            }
        }
    }
    const double s = std::chrono::duration<double>(steady::now() - t0).count();
    stop = true;
    if (sink.joinable()) {
        sink.join();
    }
    if (in_flight > 0) {
        std::fprintf(stderr, "setup_bench: %d operations still in flight at the deadline\n",
                     in_flight);
        errors += in_flight;
    }
    std::printf("%ld %.3f %.0f %ld\n", done, s, static_cast<double>(done) / s, errors);
    return 0;
}
