#pragma once
// Starts a command in new mount, PID, network, IPC and UTS namespaces (and a user namespace
// when not root), in a new session without the operator's terminal: a root of its own built
// from the host's top level (read-only, nosuid, nodev; no foreign proc, sysfs or device
// filesystems; its own /proc and a minimal /dev) with a fresh tmpfs on the scratch dir,
// never_write enforced again by Landlock, no_new_privs, no capabilities, only loopback, and
// three listeners on that loopback (the proxy relay and the DNS relay over UDP and TCP)
// handed to the caller, which relays them out from the host side (shims/relay.hpp).

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shims/confine.hpp"

namespace cordon::shim {

struct sandbox_spec {
    std::vector<std::string> argv;  ///< argv[0] is looked up in the sandbox's PATH
    std::vector<std::string> env;   ///< NAME=VALUE, the whole environment
    std::string scratch;            ///< absolute; "" = nothing writable
    std::uint64_t scratch_bytes = 1ull << 30;
    std::vector<std::string> never_write;
    /// Host paths the agent may not even read: an empty tmpfs over a directory, /dev/null
    /// over a file (the admin token file, say).
    std::vector<std::string> hide;
    std::string resolv_conf;  ///< host file bind-mounted read-only onto /etc/resolv.conf
    /// Host file bind-mounted read-only onto /etc/ssl/certs/ca-certificates.crt: the system's
    /// roots plus cordon's inspection CA ("" = the host's own bundle, untouched).
    std::string ca_bundle;
    /// A file written into scratch before the command starts (the minted identity).
    std::string scratch_file_name;
    std::string scratch_file_content;
    bool landlock_required = true;  ///< false: run without Landlock on a kernel lacking it
    /// Run the command as this uid/gid (no supplementary groups); scratch is theirs. Unset:
    /// uid 0 without capabilities.
    std::optional<std::pair<uid_t, gid_t>> user;
    /// The seccomp filter refuses socket(AF_UNIX) unless this is set (`--allow-unix-sockets`):
    /// a read-only mount does not stop connect() to a host socket such as docker.sock.
    bool allow_unix_sockets = false;
    /// The sandbox's stdin, stdout and stderr (pipes or a pty's slave that the shim relays:
    /// never the operator's own terminal or files, which the command could reopen through
    /// /proc/self/fd and write through the host's mount). -1: /dev/null's place is left
    /// closed. The caller closes its copies after start_sandbox.
    std::array<int, 3> stdio{-1, -1, -1};
    /// stdio[0] is a pty slave: the command gets it as its controlling terminal (in a new
    /// session of its own either way, so it never has the operator's).
    bool controlling_tty = false;
    std::uint16_t proxy_port = 3128;  ///< the relay listeners inside the namespace
    std::uint16_t dns_port = 53;
};

/// What the parent gets back: the namespace's init and the relay listeners (inside its
/// network namespace). The caller owns the fds.
struct sandbox {
    pid_t init = -1;  ///< PID 1 of the sandbox; killing it kills every process in it
    int proxy_listener = -1;
    int dns_udp = -1;
    int dns_tcp = -1;
    int lifeline = -1;  ///< closing it (or the caller dying) kills the sandbox too
    int control = -1;   ///< release_sandbox() sends the go over it
    bool landlock = false;
    std::string warning;  ///< set when running degraded (no Landlock where allowed)
};

/// Lets the command start (the sandbox waits for this after handing over its listeners,
/// so the caller can watch scratch first). Closes `control`.
bool release_sandbox(sandbox& s);

/// Starts the sandbox. Must be called while the process is single-threaded (it forks with
/// raw clone). On failure returns nullopt and sets `error`; nothing is left running.
/// The init's exit status is the command's (128+N when killed by signal N; 127 when it
/// cannot be executed; 125 when the sandbox could not be set up, after the parent got
/// its fds).
std::optional<sandbox> start_sandbox(const sandbox_spec& spec, std::string& error);

}  // namespace cordon::shim
