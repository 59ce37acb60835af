// Kill-switch latency: from the kill call to the last tunnel closed, as the clients see it.
//
//   kill_bench --proxy HOST:PORT --admin HOST:PORT --admin-token-file F --sessions FILE
//              --tunnels N [--pumping K] [--scope network|session|session-end|sigkill]
//              [--others M] [--others-pumping L] [--sink-port P] [--target-name localhost]
//              [--concurrency 500] [--warmup-ms 300] [--pid PID]
//
// FILE holds one `SESSION_ID:TOKEN` per line. The tool starts its own sink on
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
#include "proxy/data/basic_auth.hpp"

namespace {

using cordon::bench::arg;


using steady = std::chrono::steady_clock;
const auto deadline = steady::now() + std::chrono::seconds(120);
pid_t sink_pid = -1;

void stop_sink() {
    if (sink_pid > 0) {
        ::kill(sink_pid, SIGKILL);
        ::waitpid(sink_pid, nullptr, 0);
        sink_pid = -1;
    }
}

[[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "kill_bench: %s\n", what.c_str());
    stop_sink();
    std::exit(1);
}

[[noreturn]] void die(const std::string& what) { fail(what + ": " + std::strerror(errno)); }

sockaddr_in addr_of(const std::string& hostport) {
    const auto a = cordon::bench::addr_of(hostport);
    if (!a) {
        fail("expected IPv4 HOST:PORT, got " + hostport);
    }
    return *a;
}

void check_deadline(const char* phase) {
    if (steady::now() > deadline) {
        fail(std::string("over the 120 s deadline while ") + phase);
    }
}

double ms_since(steady::time_point t0, steady::time_point t) {
    return std::chrono::duration<double, std::milli>(t - t0).count();
}


void set_nodelay(int fd) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// ---- sink: a forked process, one epoll loop ------------------------------------------------

int listen_on(int port) {
    const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lfd < 0) {
        die("socket");
    }
    const int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 4096) != 0) {
        die("sink listen on 127.0.0.1:" + std::to_string(port));
    }
    return lfd;
}

[[noreturn]] void run_sink(int lfd) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = lfd;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    static char buf[64 * 1024];
    std::vector<epoll_event> events(1024);
    std::vector<int> dead;
    auto first_dead = steady::now();
    // Bounded by the deadline (and killed by the parent, or by PDEATHSIG if it dies).
    while (steady::now() < deadline + std::chrono::seconds(5)) {
        const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 50);
        for (int i = 0; i < n; ++i) {
            const int fd = events[static_cast<std::size_t>(i)].data.fd;
            if (fd == lfd) {
                for (int k = 0; k < 1024; ++k) {  // accept a burst, bounded
                    const int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
                    if (c < 0) {
                        break;  // EAGAIN, or EMFILE: the listener stays readable, retry later
                    }
                    set_nodelay(c);
                    epoll_event cev{};
                    cev.events = EPOLLIN | EPOLLRDHUP;
                    cev.data.fd = c;
                    ::epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            bool closed = false;
            for (int k = 0; k < 4; ++k) {  // read and discard; bounded per event for fairness
                const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                    closed = true;
                    break;
                }
                if (r < 0) {
                    break;
                }
                // Each '?' is a ping: answer '!' (pumped data is all 'x').
                std::size_t pings = 0;
                for (const char* p = buf; (p = static_cast<const char*>(std::memchr(
                                               p, '?', static_cast<std::size_t>(buf + r - p)))) !=
                                          nullptr;
                     ++p) {
                    ++pings;
                }
                if (pings > 0) {
                    const std::string bangs(pings, '!');
                    (void)::send(fd, bangs.data(), bangs.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
                }
                if (r < static_cast<ssize_t>(sizeof buf)) {
                    break;
                }
            }
            if (closed) {
                ::epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
                if (dead.empty()) {
                    first_dead = steady::now();
                }
                dead.push_back(fd);
            }
        }
        // Close what the proxy closed when idle or after a second: not while the clients time
        // the kill, on the same two cores.
        if (!dead.empty() && (n == 0 || steady::now() - first_dead > std::chrono::seconds(1))) {
            for (const int fd : dead) {
                ::close(fd);
            }
            dead.clear();
        }
    }
    std::_Exit(0);
}

// ---- clients: one epoll loop ---------------------------------------------------------------

enum class state : std::uint8_t { idle, connecting, head, ping, open, closed, failed };

struct tunnel {
    int fd = -1;
    state st = state::idle;
    std::uint32_t session = 0;
    bool expected = false;  // the kill should close it
    bool pump = false;      // sends continuously during the kill
    bool pumping = false;   // pump currently on
    bool ping_owed = false; // survivor check: '?' not yet written
    bool pong = false;      // survivor check: '!' received
    double close_ms = -1;
    std::string head;
};

constexpr std::uint64_t admin_tag = ~std::uint64_t{0};

struct options {
    std::string proxy, admin, token_file, sessions_file, scope = "network";
    std::string target_name = "localhost";
    int tunnels = 0, pumping = 0, others = 0, others_pumping = 0, sink_port = 0;
    int concurrency = 500, warmup_ms = 300, pid = 0;
};

class bench {
public:
    explicit bench(options o) : o_(std::move(o)) {}

    int run();

private:
    void load_sessions();
    void start_tunnel(std::size_t i);
    void on_tunnel(std::size_t i, std::uint32_t events);
    void on_admin();
    void mark_closed(std::size_t i, const char* why);
    void setup_failed(std::size_t i, const std::string& why);
    void modify(std::size_t i, std::uint32_t events);
    void poll(int timeout_ms);
    bool pump(tunnel& t);

    options o_;
    int ep_ = -1;
    sockaddr_in proxy_{};
    std::vector<std::string> ids_, connect_req_;
    std::vector<tunnel> t_;
    std::size_t opened_ = 0, failed_ = 0, in_flight_ = 0, next_ = 0;
    std::size_t expected_total_ = 0, expected_closed_ = 0, others_closed_ = 0, pongs_ = 0;
    steady::time_point t0_{};
    // The admin exchange.
    int admin_fd_ = -1;
    std::string admin_in_;
    bool admin_done_ = false;
    double reply_ms_ = -1;
    std::size_t closed_before_reply_ = 0;
    std::string first_failure_;
    std::uint64_t pumped_bytes_ = 0;
    std::vector<int> dead_;  // seen closed; closed for real after the timing
    double waited_ms_ = 0;   // in epoll_wait between t0 and the last expected close
    double loop_max_ms_ = 0; // longest batch of events handled then: the observation lag
};

void bench::load_sessions() {
    std::ifstream in(o_.sessions_file);
    if (!in) {
        fail("cannot read --sessions " + o_.sessions_file);
    }
    std::string line;
    for (int n = 0; n < 100000 && std::getline(in, line); ++n) {
        if (!line.empty() && line.back() == '\r') {
            line.pop_back();
        }
        const auto colon = line.find(':');
        if (line.empty() || colon == std::string::npos) {
            continue;
        }
        ids_.push_back(line.substr(0, colon));
        const std::string target = o_.target_name + ":" + std::to_string(o_.sink_port);
        connect_req_.push_back("CONNECT " + target + " HTTP/1.1\r\nHost: " + target +
                               "\r\nProxy-Authorization: Basic " +
                               cordon::proxy::data::base64_encode(line) + "\r\n\r\n");
    }
    if (ids_.empty()) {
        fail("no SESSION_ID:TOKEN line in " + o_.sessions_file);
    }
    if (o_.scope != "network" && o_.others > 0 && ids_.size() < 2) {
        fail("--others needs a second session in " + o_.sessions_file);
    }
}

void bench::modify(std::size_t i, std::uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = i;
    if (::epoll_ctl(ep_, EPOLL_CTL_MOD, t_[i].fd, &ev) != 0) {
        die("epoll_ctl MOD");
    }
}

void bench::start_tunnel(std::size_t i) {
    tunnel& t = t_[i];
    t.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (t.fd < 0) {
        die("socket (tunnel " + std::to_string(i) + ")");
    }
    set_nodelay(t.fd);
    ++in_flight_;
    const int rc = ::connect(t.fd, reinterpret_cast<const sockaddr*>(&proxy_), sizeof proxy_);
    if (rc != 0 && errno != EINPROGRESS) {
        die("connect to the proxy (tunnel " + std::to_string(i) + ")");
    }
    t.st = state::connecting;
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = i;
    if (::epoll_ctl(ep_, EPOLL_CTL_ADD, t.fd, &ev) != 0) {
        die("epoll_ctl ADD");
    }
}

void bench::setup_failed(std::size_t i, const std::string& why) {
    tunnel& t = t_[i];
    if (first_failure_.empty()) {
        first_failure_ = "tunnel " + std::to_string(i) + " (session " + ids_[t.session] +
                         "): " + why;
    }
    ::close(t.fd);
    t.fd = -1;
    t.st = state::failed;
    ++failed_;
    --in_flight_;
}

void bench::mark_closed(std::size_t i, const char* /*why*/) {
    tunnel& t = t_[i];
    t.close_ms = ms_since(t0_, steady::now());
    // Leave the epoll set only: close(2) on loopback runs the peer's FIN handling in this
    // thread (tens of ms for 10,000 sockets), so descriptors are closed after the timing.
    ::epoll_ctl(ep_, EPOLL_CTL_DEL, t.fd, nullptr);
    dead_.push_back(t.fd);
    t.fd = -1;
    t.st = state::closed;
    if (t.expected) {
        ++expected_closed_;
        if (!admin_done_) {
            ++closed_before_reply_;
        }
    } else {
        ++others_closed_;
    }
}

// One send of up to 64 KiB; false when the peer is gone (a close seen from the writer).
bool bench::pump(tunnel& t) {
    static const std::string chunk(64 * 1024, 'x');
    const ssize_t n = ::send(t.fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n > 0) {
        pumped_bytes_ += static_cast<std::uint64_t>(n);
        return true;
    }
    return n < 0 && (errno == EAGAIN || errno == EINTR);
}

void bench::on_tunnel(std::size_t i, std::uint32_t events) {
    tunnel& t = t_[i];
    char buf[4096];
    switch (t.st) {
    case state::connecting: {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(t.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
            setup_failed(i, std::string("connect: ") + std::strerror(err));
            return;
        }
        if ((events & EPOLLOUT) == 0) {
            return;
        }
        const std::string& req = connect_req_[t.session];
        if (::send(t.fd, req.data(), req.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(req.size())) {
            setup_failed(i, std::string("send CONNECT: ") + std::strerror(errno));
            return;
        }
        t.st = state::head;
        modify(i, EPOLLIN | EPOLLRDHUP);
        return;
    }
    case state::head: {
        const ssize_t n = ::recv(t.fd, buf, sizeof buf, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            return;
        }
        if (n <= 0) {
            setup_failed(i, "proxy closed before answering CONNECT" +
                                (t.head.empty() ? std::string() : ": " + t.head));
            return;
        }
        t.head.append(buf, static_cast<std::size_t>(n));
        const auto end = t.head.find("\r\n\r\n");
        if (end == std::string::npos) {
            if (t.head.size() > 16 * 1024) {
                setup_failed(i, "CONNECT answer head over 16 KiB");
            }
            return;
        }
        if (t.head.rfind("HTTP/1.1 200", 0) != 0 && t.head.rfind("HTTP/1.0 200", 0) != 0) {
            setup_failed(i, "proxy answered: " + t.head.substr(0, std::min<std::size_t>(
                                                                      t.head.size(), 300)));
            return;
        }
        if (t.head.size() != end + 4) {
            setup_failed(i, "bytes after the CONNECT answer head");
            return;
        }
        t.head.clear();
        t.head.shrink_to_fit();
        if (::send(t.fd, "?", 1, MSG_NOSIGNAL) != 1) {
            setup_failed(i, std::string("send ping: ") + std::strerror(errno));
            return;
        }
        t.st = state::ping;
        return;
    }
    case state::ping: {
        const ssize_t n = ::recv(t.fd, buf, 1, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            return;
        }
        if (n != 1 || buf[0] != '!') {
            setup_failed(i, "no '!' back through the tunnel (is the sink reachable?)");
            return;
        }
        t.st = state::open;
        ++opened_;
        --in_flight_;
        return;
    }
    case state::open: {
        // Read to EAGAIN (bounded): EOF or an error is the close we time.
        for (int k = 0; k < 16; ++k) {
            const ssize_t n = ::recv(t.fd, buf, sizeof buf, 0);
            if (n > 0) {
                for (ssize_t j = 0; j < n; ++j) {
                    if (buf[j] == '!' && !t.pong) {
                        t.pong = true;
                        ++pongs_;
                    }
                }
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                break;
            }
            mark_closed(i, n == 0 ? "eof" : "error");
            return;
        }
        if ((events & (EPOLLERR | EPOLLHUP)) != 0) {
            mark_closed(i, "hup");
            return;
        }
        if ((events & EPOLLOUT) != 0) {
            if (t.pumping) {
                if (!pump(t)) {
                    mark_closed(i, "send");
                }
            } else if (t.ping_owed) {
                const ssize_t n = ::send(t.fd, "?", 1, MSG_NOSIGNAL);
                if (n == 1) {
                    t.ping_owed = false;
                    modify(i, EPOLLIN | EPOLLRDHUP);
                } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                    mark_closed(i, "ping send");
                }
            } else {
                modify(i, EPOLLIN | EPOLLRDHUP);
            }
        }
        return;
    }
    default:
        return;
    }
}

void bench::on_admin() {
    char buf[4096];
    for (int k = 0; k < 64; ++k) {
        const ssize_t n = ::recv(admin_fd_, buf, sizeof buf, 0);
        if (n > 0) {
            admin_in_.append(buf, static_cast<std::size_t>(n));
            if (admin_in_.size() > 1 << 20) {
                fail("admin answer over 1 MiB");
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            break;
        }
        // EOF or error: the answer is complete (we asked for Connection: close).
        admin_done_ = true;
        break;
    }
    if (!admin_done_) {
        // Complete once Content-Length bytes of body are in.
        const auto end = admin_in_.find("\r\n\r\n");
        if (end != std::string::npos) {
            std::string head = admin_in_.substr(0, end);
            std::transform(head.begin(), head.end(), head.begin(),
                           [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
            const auto cl = head.find("content-length:");
            if (cl != std::string::npos &&
                admin_in_.size() >= end + 4 + std::strtoull(head.c_str() + cl + 15, nullptr, 10)) {
                admin_done_ = true;
            }
        }
    }
    if (admin_done_) {
        reply_ms_ = ms_since(t0_, steady::now());
        ::close(admin_fd_);
        admin_fd_ = -1;
    }
}

void bench::poll(int timeout_ms) {
    static std::vector<epoll_event> events(4096);
    const auto before = steady::now();
    const int n = ::epoll_wait(ep_, events.data(), static_cast<int>(events.size()), timeout_ms);
    const auto woke = steady::now();
    if (t0_ != steady::time_point{} && expected_closed_ < expected_total_) {
        waited_ms_ += ms_since(before, woke);  // idle share of the timed window
    }
    if (n < 0 && errno != EINTR) {
        die("epoll_wait");
    }
    for (int k = 0; k < n; ++k) {
        const auto& e = events[static_cast<std::size_t>(k)];
        if (e.data.u64 == admin_tag) {
            on_admin();
        } else if (t_[e.data.u64].fd >= 0) {
            on_tunnel(e.data.u64, e.events);
        }
    }
    if (t0_ != steady::time_point{} && expected_closed_ < expected_total_) {
        loop_max_ms_ = std::max(loop_max_ms_, ms_since(woke, steady::now()));
    }
}

// A number after "key": in a JSON text, or "n/a".
std::string json_number(const std::string& body, const std::string& key) {
    const auto at = body.find("\"" + key + "\"");
    if (at == std::string::npos) {
        return "n/a";
    }
    auto p = body.find(':', at);
    if (p == std::string::npos) {
        return "n/a";
    }
    ++p;
    while (p < body.size() && body[p] == ' ') {
        ++p;
    }
    const auto e = body.find_first_of(",}", p);
    std::string v = body.substr(p, e == std::string::npos ? std::string::npos : e - p);
    if (v.empty() || (std::isdigit(static_cast<unsigned char>(v[0])) == 0 && v[0] != '-')) {
        return "n/a";
    }
    char out[64];
    std::snprintf(out, sizeof out, "%.1f", std::strtod(v.c_str(), nullptr));
    return v.find_first_of(".eE") == std::string::npos ? v : std::string(out);
}

int bench::run() {
    load_sessions();
    proxy_ = addr_of(o_.proxy);
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
    const std::size_t total = static_cast<std::size_t>(o_.tunnels + (network ? 0 : o_.others));
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
            fail(method + " " + path + " answered: " +
                 admin_in_.substr(0, std::min<std::size_t>(admin_in_.size(), 600)));
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
        for (std::size_t iter = 0; pongs_ + others_closed_ < others &&
                                   steady::now() < ping_end && iter < 10'000'000;
             ++iter) {
            check_deadline("checking the other sessions' tunnels");
            poll(10);
        }
    }

    const std::string answer_body =
        admin_in_.find("\r\n\r\n") == std::string::npos
            ? std::string()
            : admin_in_.substr(admin_in_.find("\r\n\r\n") + 4);
    std::printf("scope=%s tunnels=%zu pumping=%d closed_seen=%zu last_close_ms=%.1f "
                "p50_ms=%.1f p99_ms=%.1f first_close_ms=%.1f reply_ms=%.1f "
                "closed_before_reply=%zu cordon_elapsed_ms=%s connections_closed=%s",
                o_.scope.c_str(), expected_total_, o_.pumping, expected_closed_, last_ms,
                pct(0.50), pct(0.99), pct(0.0), reply_ms_, closed_before_reply_,
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
    const bool ok = expected_closed_ == expected_total_ && admin_done_ &&
                    others_closed_ == 0 && pongs_ == others;
    if (!ok) {
        std::fprintf(stderr,
                     "kill_bench: FAILED: %zu/%zu expected closed, answer %s, %zu other(s) "
                     "closed, %zu/%zu other(s) answered the ping\n",
                     expected_closed_, expected_total_, admin_done_ ? "read" : "missing",
                     others_closed_, pongs_, others);
    }
    return ok ? 0 : 1;
}


}  // namespace

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
        std::fprintf(stderr,
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
