#pragma once
// The sandbox's pieces shared by sandbox.cpp and sandbox_mounts.cpp (internal).

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "shims/sandbox.hpp"

namespace cordon::shim::detail {

inline std::string errno_text(const std::string& what) {
    return what + ": " + std::strerror(errno);
}

// In the child: report a setup failure to the parent and exit.
[[noreturn]] inline void fail(int sock, const std::string& message) {
    const std::string m = "E" + message;
    (void)::send(sock, m.data(), m.size(), MSG_NOSIGNAL);
    ::_exit(125);
}

/// In the child: builds the sandbox's filesystem (its own root, /dev and /proc, hidden and
/// read-only paths) and switches to it; reports a failure to the parent and exits.
void setup_mounts(int sock, const sandbox_spec& s);

}  // namespace cordon::shim::detail
