// kill_bench's sink: a forked process, one epoll loop, that discards and answers pings.
#include "bench/kill_bench.hpp"

#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace cordon::bench::kill_bench {

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
                for (const char* p = buf;
                     (p = static_cast<const char*>(
                          std::memchr(p, '?', static_cast<std::size_t>(buf + r - p)))) != nullptr;
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

}  // namespace cordon::bench::kill_bench
