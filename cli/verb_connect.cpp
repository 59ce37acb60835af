// `cordon connect HOST PORT`: a tunnel through cordon's proxy on stdin and stdout, for ssh's
// ProxyCommand (`cordon run` gives the sandbox GIT_SSH_COMMAND with it). The proxy and the
// session's credentials come from HTTPS_PROXY (http://SESSION:TOKEN@HOST:PORT) or --proxy.

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "cli/verbs.hpp"
#include "proxy/data/basic_auth.hpp"

namespace cordon::cli {
namespace {

constexpr std::string_view usage =
    "usage: cordon connect HOST PORT [--proxy http://SESSION:TOKEN@HOST:PORT]\n"
    "  Opens a CONNECT tunnel to HOST:PORT through cordon's proxy and relays it on stdin and\n"
    "  stdout: an ssh ProxyCommand (`ProxyCommand cordon connect %h %p`). The proxy URL is\n"
    "  --proxy, else HTTPS_PROXY or https_proxy (what `cordon run` sets).\n";

struct proxy_url {
    std::string host;
    std::string port;
    std::string credentials;  // "session:token"
};

std::optional<proxy_url> parse_proxy(std::string_view u) {
    if (!u.starts_with("http://")) {
        return std::nullopt;
    }
    u.remove_prefix(7);
    while (u.ends_with("/")) {
        u.remove_suffix(1);
    }
    proxy_url p;
    if (const auto at = u.rfind('@'); at != std::string_view::npos) {
        p.credentials = std::string(u.substr(0, at));
        u.remove_prefix(at + 1);
    }
    std::string_view host = u;
    std::string_view port = "3128";
    if (u.starts_with("[")) {
        const auto close = u.find(']');
        if (close == std::string_view::npos) {
            return std::nullopt;
        }
        host = u.substr(1, close - 1);
        if (close + 1 < u.size()) {
            if (u[close + 1] != ':') {
                return std::nullopt;
            }
            port = u.substr(close + 2);
        }
    } else if (const auto colon = u.rfind(':'); colon != std::string_view::npos) {
        host = u.substr(0, colon);
        port = u.substr(colon + 1);
    }
    if (host.empty() || port.empty()) {
        return std::nullopt;
    }
    p.host = std::string(host);
    p.port = std::string(port);
    return p;
}

int dial(const proxy_url& p) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(p.host.c_str(), p.port.c_str(), &hints, &res) != 0) {
        return -1;
    }
    int fd = -1;
    for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            ::close(fd);
            fd = -1;
        }
    }
    ::freeaddrinfo(res);
    return fd;
}

bool write_all(int fd, const char* data, std::size_t n) {
    while (n > 0) {
        const ssize_t w = ::write(fd, data, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return false;
        }
        data += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

/// The proxy's answer head, read a byte at a time: what follows it is the target's.
std::optional<std::string> read_head(int fd) {
    std::string head;
    for (std::size_t i = 0; i < 16 * 1024; ++i) {
        char c = 0;
        const ssize_t r = ::read(fd, &c, 1);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return std::nullopt;
        }
        head += c;
        if (head.ends_with("\r\n\r\n")) {
            return head;
        }
    }
    return std::nullopt;
}

int relay(int sock) {
    char buf[64 * 1024];
    bool in_open = true;
    for (;;) {
        pollfd fds[2] = {{in_open ? 0 : -1, POLLIN, 0}, {sock, POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            return 1;
        }
        if (in_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
            const ssize_t r = ::read(0, buf, sizeof buf);
            if (r > 0) {
                if (!write_all(sock, buf, static_cast<std::size_t>(r))) {
                    return 1;
                }
            } else if (r == 0 || errno != EINTR) {
                in_open = false;
                ::shutdown(sock, SHUT_WR);
            }
        }
        if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
            const ssize_t r = ::read(sock, buf, sizeof buf);
            if (r > 0) {
                if (!write_all(1, buf, static_cast<std::size_t>(r))) {
                    return 1;
                }
            } else if (r == 0) {
                return 0;
            } else if (errno != EINTR) {
                return 1;
            }
        }
    }
}

}  // namespace

int connect(args a) {
    if (wants_help(a)) {
        std::cout << usage;
        return 0;
    }
    std::optional<std::string> proxy;
    std::string host;
    std::string port;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i] == "--proxy" && i + 1 < a.size()) {
            proxy = std::string(a[++i]);
        } else if (host.empty()) {
            host = std::string(a[i]);
        } else if (port.empty()) {
            port = std::string(a[i]);
        } else {
            std::cerr << usage;
            return 2;
        }
    }
    if (host.empty() || port.empty() || port.find_first_not_of("0123456789") != std::string::npos) {
        std::cerr << usage;
        return 2;
    }
    if (!proxy) {
        for (const char* name : {"HTTPS_PROXY", "https_proxy"}) {
            if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
                proxy = v;
                break;
            }
        }
    }
    const auto p = proxy ? parse_proxy(*proxy) : std::nullopt;
    if (!p) {
        std::cerr << "cordon connect: no proxy: give --proxy http://SESSION:TOKEN@HOST:PORT or "
                     "set HTTPS_PROXY\n";
        return 2;
    }
    const int sock = dial(*p);
    if (sock < 0) {
        std::cerr << "cordon connect: cannot reach the proxy at " << p->host << ":" << p->port
                  << '\n';
        return 1;
    }
    const std::string target = (host.find(':') != std::string::npos ? "[" + host + "]" : host) +
                               ":" + port;
    std::string req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n";
    if (!p->credentials.empty()) {
        req += "Proxy-Authorization: Basic " + proxy::data::base64_encode(p->credentials) + "\r\n";
    }
    req += "\r\n";
    if (!write_all(sock, req.data(), req.size())) {
        std::cerr << "cordon connect: the proxy closed the connection\n";
        return 1;
    }
    const auto head = read_head(sock);
    if (!head || !(head->starts_with("HTTP/1.1 200") || head->starts_with("HTTP/1.0 200"))) {
        // The status line and cordon's reason; never the credentials (not in the answer).
        std::string first = head ? head->substr(0, head->find("\r\n")) : "no answer";
        std::string why;
        if (head) {
            if (const auto d = head->find("X-Cordon-Deny: "); d != std::string::npos) {
                why = " (" + head->substr(d + 15, head->find("\r\n", d) - d - 15) + ")";
            }
        }
        std::cerr << "cordon connect: " << target << ": " << first << why << '\n';
        ::close(sock);
        return 1;
    }
    const int rc = relay(sock);
    ::close(sock);
    return rc;
}

}  // namespace cordon::cli
