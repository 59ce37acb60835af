// kill_bench's client loop: opening tunnels through the proxy, pumping, the admin exchange.
#include "bench/kill_bench.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <string_view>

#include "proxy/data/basic_auth.hpp"

namespace cordon::bench::kill_bench {

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
    const sockaddr_in& proxy = proxies_[i % proxies_.size()];
    const int rc = ::connect(t.fd, reinterpret_cast<const sockaddr*>(&proxy), sizeof proxy);
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
                setup_failed(i, "proxy answered: " +
                                    t.head.substr(0, std::min<std::size_t>(t.head.size(), 300)));
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
        default: return;
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

}  // namespace cordon::bench::kill_bench
