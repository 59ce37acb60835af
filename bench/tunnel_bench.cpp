// Tunnel benchmarks against a loopback sink, direct or through a CONNECT proxy.
//
//   tunnel_bench throughput --bytes N [--proxy HOST:PORT --auth USER:PASS | --relay HOST:PORT]
//       one connection sends N bytes to a sink it starts on 127.0.0.1; prints MiB/s.
//       --relay: connect to a plain TCP relay (no CONNECT) that forwards to the sink.
//   tunnel_bench idle --tunnels N --proxy HOST:PORT --auth USER:PASS --pid PID
//   --socks5 yes: SOCKS5 (a name target, --target-name) instead of CONNECT, in either mode
//       opens N CONNECT tunnels to the sink, each with one small exchange, leaves them idle
//       and prints the proxy's RSS growth per tunnel (from /proc/PID/status).
//
// Plain POSIX sockets and one thread per role, so the load generator is not the bottleneck:
// large writes, MSG_WAITALL-free reads into a 1 MiB buffer. Loopback only; every loop is
// bounded by --bytes or --tunnels and by a 120 s deadline.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.hpp"
#include "proxy/data/basic_auth.hpp"

namespace {

using cordon::bench::arg;

using steady = std::chrono::steady_clock;
const auto deadline = steady::now() + std::chrono::seconds(120);

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "tunnel_bench: %s: %s\n", what.c_str(), std::strerror(errno));
    std::exit(1);
}

sockaddr_in addr_of(const std::string& hostport) {
    const auto a = cordon::bench::addr_of(hostport);
    if (!a) {
        std::fprintf(stderr, "tunnel_bench: bad address %s (want IPv4:PORT)\n", hostport.c_str());
        std::exit(1);
    }
    return *a;
}

void check_deadline() {
    if (steady::now() > deadline) {
        std::fprintf(stderr, "tunnel_bench: over the 120 s deadline\n");
        std::exit(1);
    }
}

int connect_to(const sockaddr_in& a) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        die("socket");
    }
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
        die("connect");
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

// Sends CONNECT and reads the proxy's answer head; exits unless it is 200.
void proxy_connect(int fd, const std::string& target, const std::string& auth) {
    std::string req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n";
    if (!auth.empty()) {  // none for a client the proxy admits by address
        req += "Proxy-Authorization: Basic " + cordon::proxy::data::base64_encode(auth) + "\r\n";
    }
    req += "\r\n";
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
        die("send CONNECT");
    }
    std::string head;
    char c = 0;
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 4096) {
        if (::recv(fd, &c, 1, 0) != 1) {
            die("CONNECT answer");
        }
        head += c;
    }
    // tinyproxy answers CONNECT with HTTP/1.0.
    if (head.rfind("HTTP/1.1 200", 0) != 0 && head.rfind("HTTP/1.0 200", 0) != 0) {
        std::fprintf(stderr, "tunnel_bench: proxy answered: %s\n", head.c_str());
        std::exit(1);
    }
}

// The SOCKS5 handshake instead (--socks5), sent at once (both proxies take it): see
// cordon::bench::socks5_handshake.
void socks5_connect(int fd, const std::string& host, int port, const std::string& auth) {
    const std::string g = cordon::bench::socks5_handshake(host, port, auth);
    if (::send(fd, g.data(), g.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(g.size())) {
        die("send SOCKS5 handshake");
    }
    const std::size_t want = cordon::bench::socks5_answers_size(auth);
    char r[16];
    if (::recv(fd, r, want, MSG_WAITALL) != static_cast<ssize_t>(want) || r[want - 9] != 0) {
        die("SOCKS5 answer");
    }
}

// Throughput mode sends this header first ("L" and the payload length in 20 digits), so the
// sink answers when the payload is in without waiting for a half-close (squid and tinyproxy
// close the whole tunnel on one).
constexpr std::size_t header_len = 21;

// A sink on 127.0.0.1:0: each connection is read to EOF or to the header's length (or
// answered "!" per 1-byte "?" ping),
// then gets back the byte count. Returns the listening port.
int start_sink(std::atomic<bool>& stop, int port) {
    const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 4096) != 0) {
        die("sink listen");
    }
    socklen_t len = sizeof a;
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    std::thread([lfd, &stop] {
        while (!stop) {
            const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) {
                continue;
            }
            std::thread([fd] {
                std::vector<char> buf(64 * 1024);
                unsigned long long total = 0;
                std::string head;                   // "L" + 20 digits: the length that follows
                unsigned long long expect = ~0ULL;  // bytes in all, header included
                for (;;) {
                    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
                    if (n <= 0) {
                        break;
                    }
                    total += static_cast<unsigned long long>(n);
                    if (head.size() < header_len && (head.size() > 0 || buf[0] == 'L')) {
                        head.append(buf.data(), std::min<std::size_t>(static_cast<std::size_t>(n),
                                                                      header_len - head.size()));
                        if (head.size() == header_len) {
                            expect = header_len + std::stoull(head.substr(1));
                        }
                    }
                    if (total >= expect) {  // length mode: no half-close needed
                        total -= header_len;
                        break;
                    }
                    if (n == 1 && buf[0] == '?') {
                        ::send(fd, "!", 1, MSG_NOSIGNAL);  // idle mode ping
                        total = 0;
                    }
                }
                const std::string reply = std::to_string(total);
                ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
                ::close(fd);
            }).detach();
        }
    }).detach();
    return ntohs(a.sin_port);
}

// utime + stime of a process, in seconds.
double cpu_seconds(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = stat.rfind(')');
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    double ticks = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14 || i == 15) {
            ticks += std::stod(field);
        }
    }
    return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

long rss_kib(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("VmRSS:", 0) == 0) {
            return std::stol(line.substr(6));
        }
    }
    return -1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: tunnel_bench throughput|idle [options] (see source)\n");
        return 2;
    }
    cordon::bench::raise_fd_limit();

    const std::string mode = argv[1];
    const std::string proxy = arg(argc, argv, "--proxy");
    const std::string auth = arg(argc, argv, "--auth");
    const bool socks = arg(argc, argv, "--socks5", "no") != "no";
    std::atomic<bool> stop{false};
    const int sink_port = start_sink(stop, std::stoi(arg(argc, argv, "--sink-port", "0")));
    const std::string target = "127.0.0.1:" + std::to_string(sink_port);
    const std::string target_name = arg(argc, argv, "--target-name", "localhost") + ":" +
                                    std::to_string(sink_port);

    if (mode == "throughput") {
        const unsigned long long bytes = std::stoull(arg(argc, argv, "--bytes", "1073741824"));
        std::vector<char> buf(1 << 20, 'x');
        const auto t0 = steady::now();
        const std::string relay = arg(argc, argv, "--relay");
        const int fd = connect_to(addr_of(!relay.empty() ? relay : proxy.empty() ? target : proxy));
        if (!proxy.empty()) {
            if (socks) {
                socks5_connect(fd, arg(argc, argv, "--target-name", "localhost"), sink_port, auth);
            } else {
                proxy_connect(fd, target_name, auth);
            }
        }
        char header[header_len + 1];
        std::snprintf(header, sizeof header, "L%020llu", bytes);
        if (::send(fd, header, header_len, MSG_NOSIGNAL) != static_cast<ssize_t>(header_len)) {
            die("send header");
        }
        unsigned long long sent = 0;
        while (sent < bytes) {
            check_deadline();
            const std::size_t chunk = static_cast<std::size_t>(
                std::min<unsigned long long>(buf.size(), bytes - sent));
            const ssize_t n = ::send(fd, buf.data(), chunk, MSG_NOSIGNAL);
            if (n <= 0) {
                die("send");
            }
            sent += static_cast<unsigned long long>(n);
        }
        char reply[64] = {};
        const ssize_t n = ::recv(fd, reply, sizeof reply - 1, MSG_WAITALL);
        const double s = std::chrono::duration<double>(steady::now() - t0).count();
        if (n <= 0 || std::stoull(reply) != bytes) {
            std::fprintf(stderr, "tunnel_bench: sink got %s bytes, sent %llu\n", reply, bytes);
            return 1;
        }
        std::printf("%.1f\n", static_cast<double>(bytes) / (1 << 20) / s);  // MiB/s
        return 0;
    }
    if (mode == "idle") {
        const int tunnels = std::stoi(arg(argc, argv, "--tunnels", "5000"));
        const int pid = std::stoi(arg(argc, argv, "--pid", "0"));
        const long before = rss_kib(pid);
        const double cpu_before = cpu_seconds(pid);
        std::vector<int> fds;
        fds.reserve(static_cast<std::size_t>(tunnels));
        const auto t0 = steady::now();
        for (int i = 0; i < tunnels; ++i) {
            check_deadline();
            const int fd = connect_to(addr_of(proxy));
            if (socks) {
                socks5_connect(fd, arg(argc, argv, "--target-name", "localhost"), sink_port, auth);
            } else {
                proxy_connect(fd, target_name, auth);
            }
            char c = 0;
            if (::send(fd, "?", 1, MSG_NOSIGNAL) != 1 || ::recv(fd, &c, 1, 0) != 1 || c != '!') {
                die("ping through tunnel " + std::to_string(i));
            }
            fds.push_back(fd);
        }
        const double cpu = cpu_seconds(pid) - cpu_before;
        const double wall = std::chrono::duration<double>(steady::now() - t0).count();
        std::this_thread::sleep_for(std::chrono::seconds(1));
        const long after = rss_kib(pid);
        std::printf("%d tunnels opened: proxy CPU %.1f us per tunnel setup (%s, auth, "
                    "decide, resolve, connect, one exchange); %.0f setups/s from one client\n",
                    tunnels, cpu * 1e6 / tunnels, socks ? "SOCKS5" : "CONNECT", tunnels / wall);
        std::printf("%d tunnels: proxy RSS %ld KiB -> %ld KiB, %.2f KiB per idle tunnel\n", tunnels,
                    before, after,
                    static_cast<double>(after - before) / static_cast<double>(tunnels));
        for (const int fd : fds) {
            ::close(fd);
        }
        return 0;
    }
    std::fprintf(stderr, "tunnel_bench: unknown mode %s\n", mode.c_str());
    return 2;
}
