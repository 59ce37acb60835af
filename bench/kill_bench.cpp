// Kill-switch latency: from the kill call to the last tunnel closed, as the clients see it.
//
//   kill_bench --proxy HOST:PORT[,HOST:PORT...] --admin HOST:PORT --admin-token-file F --sessions
//   FILE
//              --tunnels N [--pumping K] [--scope network|session|session-end|sigkill]
//              [--others M] [--others-pumping L] [--sink-port P] [--target-name localhost]
//              [--concurrency 500] [--warmup-ms 300] [--pid PID]
//
// Several proxies (a fleet's instances, bench/fleet_bench): tunnel i goes through the
// (i mod count)-th. FILE holds one `SESSION_ID:TOKEN` per line. The tool starts its own sink on
// 127.0.0.1:P (a forked process, one epoll loop: it accepts every connection, reads and
// discards, and answers each '?' byte with '!'), then in its own epoll loop:
//
//   1. opens the tunnels, at most --concurrency connect attempts in flight: TCP connect to
//      the proxy, `CONNECT localhost:P` with Proxy-Authorization Basic, expects `200`, then
//      one '?' -> '!' round trip through the tunnel to the sink;
//      scope network: N tunnels round-robin over every session of FILE, all expected to close;
//      scope session: N tunnels in the first session (expected to close) and M in the other
//      sessions, round-robin (expected to stay open);
//   2. starts pumping (sending continuously, as fast as the loop can) on K of the expected
//      tunnels and L of the others, for --warmup-ms;
//   3. takes t0 just before writing the kill request to the admin API (HTTP/1.1, Bearer):
//      network: POST /v1/kill; session: POST /v1/sessions/ID/kill; session-end (what exists
//      before the kill endpoints): DELETE /v1/sessions/ID; sigkill --pid PID (a reference,
//      no admin call): SIGKILL the proxy, so the kernel closes all its sockets as the process
//      exits, in one thread: what closing that many loopback sockets costs on this machine;
//   4. keeps the loop running (pumping included) until every expected tunnel has seen EOF or
//      ECONNRESET and the answer is read; closing times are taken in the loop, per event;
//   5. scope session: watches the others for 300 ms more, stops pumping and checks that each
//      still carries a '?' -> '!' round trip.
//
// Prints one line of key=value (times in ms from t0):
//   scope=network tunnels=N pumping=K closed_seen=N last_close_ms=T p50_ms=T p99_ms=T
//   first_close_ms=T reply_ms=T closed_before_reply=C cordon_elapsed_ms=T (from the answer)
//   connections_closed=C (from the answer) [others=M others_pumping=L others_open=M]
//   client_busy_ms=T loop_max_ms=T pumped_mib=B setup_s=S
// and exits 0 only if every expected tunnel closed (and, for session, every other survived).
//
// Bounded: every loop has a count bound and the whole run a 120 s deadline. The process
// raises RLIMIT_NOFILE to its hard limit; the sink being a separate process, each side holds
// one descriptor per tunnel.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
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
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_args.hpp"
#include "bench/kill_bench.hpp"
#include "proxy/data/basic_auth.hpp"

namespace cordon::bench::kill_bench {

int bench::run() {
    load_sessions();
    // --proxy A,B,C: the tunnels round-robin over several proxies (a fleet's instances).
    for (std::size_t from = 0; from <= o_.proxy.size();) {
        const std::size_t comma = std::min(o_.proxy.find(',', from), o_.proxy.size());
        proxies_.push_back(addr_of(o_.proxy.substr(from, comma - from)));
        from = comma + 1;
    }
    const sockaddr_in admin = addr_of(o_.admin);
    std::string admin_token;
    {
        std::ifstream in(o_.token_file);
        if (!in || !std::getline(in, admin_token) || admin_token.empty()) {
            fail("cannot read an admin token from " + o_.token_file);
        }
    }
    bool network = o_.scope == "network";
    const bool session_end = o_.scope == "session-end";
    const bool sigkill = o_.scope == "sigkill";
    if (sigkill && o_.pid <= 0) {
        fail("--scope sigkill needs --pid");
    }
    if (!network && !sigkill && o_.scope != "session" && !session_end) {
        fail("--scope must be network, session, session-end or sigkill");
    }
    network = network || sigkill;  // every tunnel is expected to close
    const auto total = static_cast<std::size_t>(o_.tunnels) +
                       (network ? 0 : static_cast<std::size_t>(o_.others));
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < total + 64) {
        fail("RLIMIT_NOFILE " + std::to_string(rl.rlim_cur) + " is too low for " +
             std::to_string(total) + " tunnels");
    }

    // Which tunnel goes where, and who pumps.
    t_.resize(total);
    for (std::size_t i = 0; i < total; ++i) {
        tunnel& t = t_[i];
        if (network) {
            t.session = static_cast<std::uint32_t>(i % ids_.size());
            t.expected = true;
            t.pump = i < static_cast<std::size_t>(o_.pumping);
        } else if (i < static_cast<std::size_t>(o_.tunnels)) {
            t.session = 0;
            t.expected = true;
            t.pump = i < static_cast<std::size_t>(o_.pumping);
        } else {
            const std::size_t j = i - static_cast<std::size_t>(o_.tunnels);
            t.session = static_cast<std::uint32_t>(1 + j % (ids_.size() - 1));
            t.pump = j < static_cast<std::size_t>(o_.others_pumping);
        }
        expected_total_ += t.expected ? 1 : 0;
    }

    ep_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) {
        die("epoll_create1");
    }

    // 1. Open every tunnel, bounded concurrency.
    const auto setup_start = steady::now();
    auto last_progress = steady::now();
    std::size_t last_done = 0;
    for (std::size_t iter = 0; opened_ + failed_ < total; ++iter) {
        check_deadline("opening tunnels");
        while (in_flight_ < static_cast<std::size_t>(o_.concurrency) && next_ < total &&
               failed_ == 0) {
            start_tunnel(next_++);
        }
        if (failed_ > 0 && in_flight_ == 0) {
            break;
        }
        poll(100);
        if (opened_ + failed_ != last_done) {
            last_done = opened_ + failed_;
            last_progress = steady::now();
        } else if (steady::now() - last_progress > std::chrono::seconds(15)) {
            fail("no tunnel progressed for 15 s: " + std::to_string(opened_) + " open, " +
                 std::to_string(in_flight_) + " in flight of " + std::to_string(total));
        }
        if (iter > 100'000'000) {
            fail("setup loop bound");
        }
    }
    if (failed_ > 0) {
        fail(std::to_string(failed_) + " tunnel(s) failed to open (" + std::to_string(opened_) +
             " opened); first: " + first_failure_);
    }
    const double setup_s = ms_since(setup_start, steady::now()) / 1000.0;
    std::fprintf(stderr, "kill_bench: %zu tunnels open in %.1f s\n", total, setup_s);

    // 2. Pump for the warm-up: the kill lands mid-transfer.
    for (std::size_t i = 0; i < total; ++i) {
        if (t_[i].pump) {
            t_[i].pumping = true;
            modify(i, EPOLLIN | EPOLLOUT | EPOLLRDHUP);
        }
    }
    const auto warm_end = steady::now() + std::chrono::milliseconds(o_.warmup_ms);
    for (std::size_t iter = 0; steady::now() < warm_end && iter < 10'000'000; ++iter) {
        check_deadline("warming up");
        poll(10);
    }
    if (expected_closed_ + others_closed_ > 0) {
        fail(std::to_string(expected_closed_ + others_closed_) +
             " tunnel(s) closed before the kill");
    }
    const std::uint64_t warm_bytes = pumped_bytes_;

    // 3. The kill call: connect first, take t0 just before writing the request.
    std::string method = "POST";
    std::string path = "/v1/kill";
    if (sigkill) {
        // A reference: the kernel closes every socket of the dead proxy as it exits.
        t0_ = steady::now();
        if (::kill(o_.pid, SIGKILL) != 0) {
            die("kill " + std::to_string(o_.pid));
        }
        admin_done_ = true;
        admin_in_ = "HTTP/1.1 200 (SIGKILL)\r\n\r\n";
    } else {
        admin_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (admin_fd_ < 0 ||
            ::connect(admin_fd_, reinterpret_cast<const sockaddr*>(&admin), sizeof admin) != 0) {
            die("connect to the admin API " + o_.admin);
        }
        set_nodelay(admin_fd_);
        const std::string body = R"({"reason":"bench","by":"kill_bench"})";
        if (o_.scope == "session") {
            path = "/v1/sessions/" + ids_[0] + "/kill";
        } else if (session_end) {
            method = "DELETE";
            path = "/v1/sessions/" + ids_[0];
        }
        std::string req = method + " " + path + " HTTP/1.1\r\nHost: " + o_.admin +
                          "\r\nAuthorization: Bearer " + admin_token + "\r\nConnection: close\r\n";
        if (!session_end) {
            req += "Content-Type: application/json\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body;
        } else {
            req += "\r\n";
        }
        {
            epoll_event ev{};
            ev.events = EPOLLIN | EPOLLRDHUP;
            ev.data.u64 = admin_tag;
            ::epoll_ctl(ep_, EPOLL_CTL_ADD, admin_fd_, &ev);
        }
        ::fcntl(admin_fd_, F_SETFL, O_NONBLOCK);
        t0_ = steady::now();
        if (::send(admin_fd_, req.data(), req.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(req.size())) {
            die("send the kill request");
        }
    }

    // 4. Until every expected tunnel has closed and the answer is in.
    for (std::size_t iter = 0;
         (expected_closed_ < expected_total_ || !admin_done_) && iter < 100'000'000; ++iter) {
        if (steady::now() > deadline) {
            break;
        }
        poll(10);
        if (admin_done_ && admin_in_.rfind("HTTP/1.1 200", 0) != 0 &&
            admin_in_.rfind("HTTP/1.0 200", 0) != 0) {
            fail(method + " " + path +
                 " answered: " + admin_in_.substr(0, std::min<std::size_t>(admin_in_.size(), 600)));
        }
        if (ms_since(t0_, steady::now()) > 30'000) {
            break;  // reported below as closed_seen < tunnels
        }
    }
    double last_ms = 0;
    std::vector<double> closes;
    for (const auto& t : t_) {
        if (t.expected && t.st == state::closed) {
            closes.push_back(t.close_ms);
            last_ms = std::max(last_ms, t.close_ms);
        }
    }
    std::sort(closes.begin(), closes.end());
    const auto pct = [&](double q) {
        return closes.empty() ? -1.0
                              : closes[std::min(closes.size() - 1,
                                                static_cast<std::size_t>(q * closes.size()))];
    };

    // 5. The others: still open 300 ms later, and still carrying data.
    std::size_t others = total - expected_total_;
    if (others > 0) {
        const auto watch_end = steady::now() + std::chrono::milliseconds(300);
        for (std::size_t iter = 0; steady::now() < watch_end && iter < 10'000'000; ++iter) {
            poll(10);
        }
        for (std::size_t i = 0; i < total; ++i) {
            tunnel& t = t_[i];
            if (!t.expected && t.st == state::open) {
                t.pumping = false;
                t.ping_owed = true;
                modify(i, EPOLLIN | EPOLLOUT | EPOLLRDHUP);
            }
        }
        const auto ping_end = steady::now() + std::chrono::seconds(10);
        for (std::size_t iter = 0;
             pongs_ + others_closed_ < others && steady::now() < ping_end && iter < 10'000'000;
             ++iter) {
            check_deadline("checking the other sessions' tunnels");
            poll(10);
        }
    }

    const std::string answer_body = admin_in_.find("\r\n\r\n") == std::string::npos
                                        ? std::string()
                                        : admin_in_.substr(admin_in_.find("\r\n\r\n") + 4);
    std::printf("scope=%s tunnels=%zu pumping=%d closed_seen=%zu last_close_ms=%.1f "
                "p50_ms=%.1f p99_ms=%.1f first_close_ms=%.1f reply_ms=%.1f "
                "closed_before_reply=%zu cordon_elapsed_ms=%s connections_closed=%s",
                o_.scope.c_str(), expected_total_, o_.pumping, expected_closed_, last_ms, pct(0.50),
                pct(0.99), pct(0.0), reply_ms_, closed_before_reply_,
                json_number(answer_body, "elapsed_ms").c_str(),
                json_number(answer_body, "connections_closed").c_str());
    if (others > 0) {
        std::printf(" others=%zu others_pumping=%d others_open=%zu", others, o_.others_pumping,
                    pongs_);
    }
    // How much of the timed window this loop spent working rather than waiting for events
    // (with pumping it is always busy), and the longest batch: a close is seen at most about
    // that late.
    std::printf(" client_busy_ms=%.1f loop_max_ms=%.1f pumped_mib=%.0f setup_s=%.1f\n",
                std::max(0.0, last_ms - waited_ms_), loop_max_ms_,
                static_cast<double>(pumped_bytes_) / (1 << 20), setup_s);
    std::fflush(stdout);
    if (warm_bytes == 0 && (o_.pumping + o_.others_pumping) > 0) {
        std::fprintf(stderr, "kill_bench: warning: nothing was pumped before the kill\n");
    }
    for (auto& t : t_) {
        if (t.fd >= 0) {
            ::close(t.fd);
        }
    }
    for (const int fd : dead_) {
        ::close(fd);
    }
    stop_sink();
    const bool ok = expected_closed_ == expected_total_ && admin_done_ && others_closed_ == 0 &&
                    pongs_ == others;
    if (!ok) {
        std::fprintf(stderr,
                     "kill_bench: FAILED: %zu/%zu expected closed, answer %s, %zu other(s) "
                     "closed, %zu/%zu other(s) answered the ping\n",
                     expected_closed_, expected_total_, admin_done_ ? "read" : "missing",
                     others_closed_, pongs_, others);
    }
    return ok ? 0 : 1;
}

}  // namespace cordon::bench::kill_bench

using cordon::bench::arg;
using cordon::bench::kill_bench::bench;
using cordon::bench::kill_bench::die;
using cordon::bench::kill_bench::listen_on;
using cordon::bench::kill_bench::options;
using cordon::bench::kill_bench::run_sink;
using cordon::bench::kill_bench::sink_pid;

int main(int argc, char** argv) {
    options o;
    o.proxy = arg(argc, argv, "--proxy");
    o.admin = arg(argc, argv, "--admin");
    o.token_file = arg(argc, argv, "--admin-token-file");
    o.sessions_file = arg(argc, argv, "--sessions");
    o.scope = arg(argc, argv, "--scope", "network");
    o.target_name = arg(argc, argv, "--target-name", "localhost");
    o.tunnels = std::stoi(arg(argc, argv, "--tunnels", "0"));
    o.pumping = std::stoi(arg(argc, argv, "--pumping", "0"));
    o.others = std::stoi(arg(argc, argv, "--others", "0"));
    o.others_pumping = std::stoi(arg(argc, argv, "--others-pumping", "0"));
    o.sink_port = std::stoi(arg(argc, argv, "--sink-port", "0"));
    o.concurrency = std::max(1, std::stoi(arg(argc, argv, "--concurrency", "500")));
    o.warmup_ms = std::stoi(arg(argc, argv, "--warmup-ms", "300"));
    o.pid = std::stoi(arg(argc, argv, "--pid", "0"));
    if (o.proxy.empty() || o.admin.empty() || o.token_file.empty() || o.sessions_file.empty() ||
        o.tunnels <= 0) {
        std::fprintf(
            stderr,
            "usage: kill_bench --proxy HOST:PORT --admin HOST:PORT --admin-token-file F "
            "--sessions FILE --tunnels N [--pumping K] [--scope network|session|"
            "session-end|sigkill] [--pid PID] [--others M] [--others-pumping L] [--sink-port P] "
            "[--concurrency 500] [--warmup-ms 300]\n");
        return 2;
    }
    o.pumping = std::min(o.pumping, o.tunnels);
    o.others_pumping = std::min(o.others_pumping, o.others);

    cordon::bench::raise_fd_limit();
    ::signal(SIGPIPE, SIG_IGN);

    const int lfd = listen_on(o.sink_port);
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    o.sink_port = ntohs(a.sin_port);
    sink_pid = ::fork();
    if (sink_pid < 0) {
        die("fork");
    }
    if (sink_pid == 0) {
        run_sink(lfd);
    }
    ::close(lfd);
    bench b(std::move(o));
    return b.run();
}
