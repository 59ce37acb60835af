#pragma once
// kill_bench's shared parts: the deadline and failure exits, the sink, the client loop's types.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_args.hpp"

namespace cordon::bench::kill_bench {

using steady = std::chrono::steady_clock;
inline const auto deadline = steady::now() + std::chrono::seconds(120);
inline pid_t sink_pid = -1;

inline void stop_sink() {
    if (sink_pid > 0) {
        ::kill(sink_pid, SIGKILL);
        ::waitpid(sink_pid, nullptr, 0);
        sink_pid = -1;
    }
}

[[noreturn]] inline void fail(const std::string& what) {
    std::fprintf(stderr, "kill_bench: %s\n", what.c_str());
    stop_sink();
    std::exit(1);
}

[[noreturn]] inline void die(const std::string& what) { fail(what + ": " + std::strerror(errno)); }

inline sockaddr_in addr_of(const std::string& hostport) {
    const auto a = cordon::bench::addr_of(hostport);
    if (!a) {
        fail("expected IPv4 HOST:PORT, got " + hostport);
    }
    return *a;
}

inline void check_deadline(const char* phase) {
    if (steady::now() > deadline) {
        fail(std::string("over the 120 s deadline while ") + phase);
    }
}

inline double ms_since(steady::time_point t0, steady::time_point t) {
    return std::chrono::duration<double, std::milli>(t - t0).count();
}

inline void set_nodelay(int fd) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// ---- sink: a forked process, one epoll loop (kill_bench_sink.cpp) ----

/// A non-blocking listener on 127.0.0.1:`port` (0: any free port).
int listen_on(int port);
/// The sink's loop, in the forked child: accepts, discards, answers each '?' with '!'.
[[noreturn]] void run_sink(int lfd);

// ---- clients: one epoll loop ---------------------------------------------------------------

enum class state : std::uint8_t { idle, connecting, head, ping, open, closed, failed };

struct tunnel {
    int fd = -1;
    state st = state::idle;
    std::uint32_t session = 0;
    bool expected = false;   // the kill should close it
    bool pump = false;       // sends continuously during the kill
    bool pumping = false;    // pump currently on
    bool ping_owed = false;  // survivor check: '?' not yet written
    bool pong = false;       // survivor check: '!' received
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
    std::vector<sockaddr_in> proxies_;  // tunnel i goes through proxies_[i % size]
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
    std::vector<int> dead_;   // seen closed; closed for real after the timing
    double waited_ms_ = 0;    // in epoll_wait between t0 and the last expected close
    double loop_max_ms_ = 0;  // longest batch of events handled then: the observation lag
};

/// A number after "key": in a JSON text, or "n/a".
std::string json_number(const std::string& body, const std::string& key);

}  // namespace cordon::bench::kill_bench
