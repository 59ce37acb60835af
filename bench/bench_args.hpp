#pragma once
// What the C++ bench tools (tunnel_bench, setup_bench, kill_bench) share: `--name value`
// options, IPv4 HOST:PORT parsing, the descriptor limit raised to its hard maximum and a
// SOCKS5 client's handshake bytes.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>

#include <cstdint>
#include <optional>
#include <string>

namespace cordon::bench {

/// The value after `name` on the command line, or `def`.
inline std::string arg(int argc, char** argv, const std::string& name,
                       const std::string& def = "") {
    for (int i = 1; i + 1 < argc; ++i) {
        if (argv[i] == name) {
            return argv[i + 1];
        }
    }
    return def;
}

/// "127.0.0.1:8080" as a sockaddr_in; nullopt when it is not an IPv4 address and a port.
inline std::optional<sockaddr_in> addr_of(const std::string& hostport) {
    const auto colon = hostport.rfind(':');
    if (colon == std::string::npos || colon + 1 == hostport.size()) {
        return std::nullopt;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    try {
        const int port = std::stoi(hostport.substr(colon + 1));
        if (port < 0 || port > 65535) {
            return std::nullopt;
        }
        a.sin_port = htons(static_cast<std::uint16_t>(port));
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (inet_pton(AF_INET, hostport.substr(0, colon).c_str(), &a.sin_addr) != 1) {
        return std::nullopt;
    }
    return a;
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (thousands of tunnels, two fds each).
inline void raise_fd_limit() {
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
}

/// A SOCKS5 client's whole handshake, to be sent at once (a client that does not wait
/// between messages): the greeting, RFC 1929 credentials when `auth` ("user:password") is
/// given (else "no authentication", for a client admitted by address), CONNECT to the name
/// `host` (ATYP 3) and `port`. The answers are 2 (method) + 2 when `auth` (credentials) + 10
/// (the reply, an IPv4 bound address) bytes.
inline std::string socks5_handshake(const std::string& host, int port, const std::string& auth) {
    std::string g = auth.empty() ? std::string("\x05\x01\x00", 3) : std::string("\x05\x01\x02", 3);
    if (!auth.empty()) {
        const auto colon = auth.find(':');
        const std::string u = auth.substr(0, colon);
        const std::string p = colon == std::string::npos ? std::string() : auth.substr(colon + 1);
        g += '\x01';
        g += static_cast<char>(u.size());
        g += u;
        g += static_cast<char>(p.size());
        g += p;
    }
    g += std::string("\x05\x01\x00\x03", 4);
    g += static_cast<char>(host.size());
    g += host;
    g += static_cast<char>(port >> 8);
    g += static_cast<char>(port & 0xff);
    return g;
}

/// The answers socks5_handshake's bytes get when all goes well.
inline std::size_t socks5_answers_size(const std::string& auth) {
    return 2 + (auth.empty() ? 0 : 2) + 10;
}

}  // namespace cordon::bench
