// Session creation rate through the admin API, as its clients see it (bench/fleet_bench).
//
//   create_bench --admin HOST:PORT --admin-token-file F --job JOB --count N
//                [--connections C (8)] [--close yes]
//
// C threads, each with one kept-alive HTTP/1.1 connection (--close yes: a new connection per
// create, as a client without keep-alive), send POST /v1/sessions {"job": JOB} one after the
// other until N creates were made in all; each answer is read whole (Content-Length) before
// the next request. Prints one line of key=value:
//   creates=N ok=K refused=R seconds=S rate_per_s=X p50_ms=T p99_ms=T max_ms=T first_refusal=...
// and exits 0 only if every create answered 201.
//
// Bounded: every socket has a 10 s timeout, the whole run a 120 s deadline.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.hpp"

namespace {

using steady = std::chrono::steady_clock;

struct shared {
    sockaddr_in admin{};
    std::string request;
    bool close_each = false;
    std::atomic<long> left{0};
    std::atomic<long> ok{0};
    std::atomic<long> refused{0};
    steady::time_point deadline;
    std::mutex mu;
    std::vector<double> latencies_ms;
    std::string first_refusal;
};

int connect_to(const sockaddr_in& a) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

// One answer read whole: its status line and body (Content-Length). False on an error.
bool read_answer(int fd, std::string& buf, std::string& answer) {
    for (int reads = 0; reads < 10000; ++reads) {
        const auto head_end = buf.find("\r\n\r\n");
        if (head_end != std::string::npos) {
            std::size_t length = 0;
            const auto cl = buf.find("Content-Length: ");
            if (cl != std::string::npos && cl < head_end) {
                length = std::stoul(buf.substr(cl + 16, buf.find("\r\n", cl) - cl - 16));
            }
            if (buf.size() >= head_end + 4 + length) {
                answer = buf.substr(0, head_end + 4 + length);
                buf.erase(0, head_end + 4 + length);
                return true;
            }
        }
        char chunk[8192];
        const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) {
            return false;
        }
        buf.append(chunk, static_cast<std::size_t>(n));
    }
    return false;
}

void client(shared& s) {
    int fd = -1;
    std::string buf;
    std::vector<double> mine;
    while (s.left.fetch_sub(1) > 0 && steady::now() < s.deadline) {
        if (fd < 0) {
            fd = connect_to(s.admin);
            buf.clear();
        }
        const auto t0 = steady::now();
        std::string answer;
        const bool sent = fd >= 0 && ::send(fd, s.request.data(), s.request.size(), MSG_NOSIGNAL) ==
                                         static_cast<ssize_t>(s.request.size());
        const bool got = sent && read_answer(fd, buf, answer);
        mine.push_back(std::chrono::duration<double, std::milli>(steady::now() - t0).count());
        if (got && answer.rfind("HTTP/1.1 201", 0) == 0) {
            ++s.ok;
        } else {
            ++s.refused;
            std::lock_guard lock(s.mu);
            if (s.first_refusal.empty()) {
                s.first_refusal = got ? answer.substr(0, 300) : "(no answer)";
            }
        }
        if (!got || s.close_each) {
            if (fd >= 0) {
                ::close(fd);
            }
            fd = -1;
        }
    }
    if (fd >= 0) {
        ::close(fd);
    }
    std::lock_guard lock(s.mu);
    s.latencies_ms.insert(s.latencies_ms.end(), mine.begin(), mine.end());
}

}  // namespace

int main(int argc, char** argv) {
    using cordon::bench::arg;
    const std::string admin = arg(argc, argv, "--admin");
    const std::string token_file = arg(argc, argv, "--admin-token-file");
    const std::string job = arg(argc, argv, "--job", "agent");
    const long count = std::stol(arg(argc, argv, "--count", "0"));
    const int connections = std::max(1, std::stoi(arg(argc, argv, "--connections", "8")));
    const auto a = cordon::bench::addr_of(admin);
    std::string token;
    {
        std::ifstream in(token_file);
        std::getline(in, token);
    }
    if (!a || token.empty() || count <= 0) {
        std::fprintf(stderr, "usage: create_bench --admin HOST:PORT --admin-token-file F --job JOB "
                             "--count N [--connections C] [--close yes]\n");
        return 2;
    }
    shared s;
    s.admin = *a;
    s.close_each = arg(argc, argv, "--close", "no") == "yes";
    const std::string body = "{\"job\":\"" + job + "\"}";
    s.request = "POST /v1/sessions HTTP/1.1\r\nHost: " + admin + "\r\nAuthorization: Bearer " +
                token + "\r\nContent-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n" +
                (s.close_each ? "Connection: close\r\n" : "") + "\r\n" + body;
    s.left = count;
    s.deadline = steady::now() + std::chrono::seconds(120);
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(connections));
    const auto t0 = steady::now();
    for (int i = 0; i < connections; ++i) {
        threads.emplace_back([&s] { client(s); });
    }
    for (auto& t : threads) {
        t.join();
    }
    const double secs = std::chrono::duration<double>(steady::now() - t0).count();
    std::sort(s.latencies_ms.begin(), s.latencies_ms.end());
    const auto pct = [&](double q) {
        return s.latencies_ms.empty()
                   ? -1.0
                   : s.latencies_ms[std::min(s.latencies_ms.size() - 1,
                                             static_cast<std::size_t>(q * s.latencies_ms.size()))];
    };
    std::printf("creates=%ld ok=%ld refused=%ld seconds=%.2f rate_per_s=%.0f p50_ms=%.2f "
                "p99_ms=%.2f max_ms=%.2f connections=%d first_refusal=%s\n",
                count, s.ok.load(), s.refused.load(), secs, static_cast<double>(s.ok.load()) / secs,
                pct(0.5), pct(0.99), s.latencies_ms.empty() ? -1.0 : s.latencies_ms.back(),
                connections, s.first_refusal.empty() ? "-" : "see-stderr");
    if (!s.first_refusal.empty()) {
        std::fprintf(stderr, "create_bench: first refusal: %s\n", s.first_refusal.c_str());
    }
    return s.refused.load() == 0 && s.ok.load() == count ? 0 : 1;
}
