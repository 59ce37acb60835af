#pragma once
// What the C++ bench tools (tunnel_bench, setup_bench, kill_bench) share: `--name value`
// options, IPv4 HOST:PORT parsing and the descriptor limit raised to its hard maximum.

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

}  // namespace cordon::bench
