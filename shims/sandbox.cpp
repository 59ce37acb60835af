// The sandbox: the child process in its namespaces, its listeners, exec, and the parent's side.
#include "shims/sandbox.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "shims/mounts.hpp"
#include "shims/sandbox_internal.hpp"

extern char** environ;

namespace cordon::shim {
namespace {

using detail::errno_text;
using detail::fail;
using detail::setup_mounts;

bool write_file(const std::string& path, const std::string& text) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    return ok;
}

void loopback_up(int sock) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fail(sock, errno_text("socket"));
    }
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (::ioctl(fd, SIOCGIFFLAGS, &ifr) < 0) {
        fail(sock, errno_text("SIOCGIFFLAGS lo"));
    }
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    if (::ioctl(fd, SIOCSIFFLAGS, &ifr) < 0) {
        fail(sock, errno_text("bringing up lo"));
    }
    ::close(fd);
}

int listener(int sock, int type, std::uint16_t port) {
    const int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fail(sock, errno_text("socket"));
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) < 0) {
        fail(sock, errno_text("bind 127.0.0.1:" + std::to_string(port)));
    }
    if (type == SOCK_STREAM && ::listen(fd, 128) < 0) {
        fail(sock, errno_text("listen"));
    }
    return fd;
}

[[noreturn]] void exec_command(const sandbox_spec& s) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) {
        ::signal(sig, SIG_DFL);
    }
    if (::chdir(s.scratch.empty() ? "/" : s.scratch.c_str()) < 0) {
        ::_exit(125);
    }
    // A session of its own: no controlling terminal of the operator's (TIOCSTI on it would
    // type into the operator's shell), or the sandbox's own pty as its terminal.
    if (::setsid() < 0 || (s.controlling_tty && ::ioctl(0, TIOCSCTTY, 0) < 0)) {
        ::_exit(125);
    }
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        ::_exit(125);
    }
    std::string why;
    if (!apply_landlock(s.scratch, why)) {
        const std::string m =
            s.landlock_required
                ? "cordon run: Landlock is required by the job and unavailable: " + why + "\n"
                : "cordon run: warning: running without Landlock (the job allows it): " + why +
                      "\n";
        (void)::write(2, m.data(), m.size());
        if (s.landlock_required) {
            ::_exit(125);
        }
    }
    drop_privileges(s.user);
    // Only stdin, stdout and stderr reach the command (an inherited socket is a way out).
    (void)::syscall(SYS_close_range, 3U, ~0U, 0U);
    if (!apply_seccomp(s.allow_unix_sockets)) {
        const std::string m = errno_text("cordon run: seccomp") + "\n";
        (void)::write(2, m.data(), m.size());
        ::_exit(125);
    }
    std::vector<char*> argv;
    for (const auto& a : s.argv) {
        argv.push_back(const_cast<char*>(a.c_str()));
    }
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (const auto& e : s.env) {
        envp.push_back(const_cast<char*>(e.c_str()));
    }
    envp.push_back(nullptr);
    environ = envp.data();  // execvp searches the sandbox's PATH
    ::execvp(argv[0], argv.data());
    const std::string m = "cordon run: cannot execute " + s.argv[0] + ": " + std::strerror(errno) +
                          "\n";
    (void)::write(2, m.data(), m.size());
    ::_exit(127);
}

// Closes every descriptor from 3 up but those in `keep` (negative entries are ignored).
void close_all_but(std::vector<int> keep) {
    std::erase_if(keep, [](int fd) { return fd < 3; });
    std::sort(keep.begin(), keep.end());
    unsigned from = 3;
    for (const int k : keep) {
        if (static_cast<unsigned>(k) > from) {
            (void)::syscall(SYS_close_range, from, static_cast<unsigned>(k) - 1, 0U);
        }
        from = static_cast<unsigned>(k) + 1;
    }
    (void)::syscall(SYS_close_range, from, ~0U, 0U);
}

int exit_code(int status) {
    if (WIFEXITED(status)) {
        return WEXITSTATUS(status);
    }
    if (WIFSIGNALED(status)) {
        return 128 + WTERMSIG(status);
    }
    return 125;
}

// PID 1 of the sandbox: sets it up, hands the listeners over, starts the command, reaps
// orphans, and exits with the command's status (the kernel then kills what is left).
[[noreturn]] void init_main(const sandbox_spec& s, int sock, int lifeline, int userns_sync) {
    // Its memory holds the shim's (the admin token): no core dumps, no ptrace, no
    // /proc/1/mem for the command (which the capability check refuses already: the init has
    // capabilities the command lacks). Only for a root shim: an unprivileged one writes the
    // init's uid_map and reads its /proc/PID/root, which a non-dumpable init's /proc refuses.
    if (userns_sync < 0) {
        (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    // The sandbox's stdio in place of the operator's, and every other inherited descriptor
    // closed (the host ends of the relays among them: the command must see EOF on stdin).
    for (int fd = 0; fd < 3; ++fd) {
        const int from = s.stdio[static_cast<std::size_t>(fd)];
        if (from >= 0 ? ::dup2(from, fd) < 0 : ::close(fd) < 0 && errno != EBADF) {
            ::_exit(125);
        }
    }
    close_all_but({sock, lifeline, userns_sync});
    (void)::setsid();  // no controlling terminal for the init either
    if (userns_sync >= 0) {
        char c = 0;
        if (::read(userns_sync, &c, 1) != 1) {
            ::_exit(125);
        }
        ::close(userns_sync);
    }
    loopback_up(sock);
    const int fds[3] = {listener(sock, SOCK_STREAM, s.proxy_port),
                        listener(sock, SOCK_DGRAM, s.dns_port),
                        listener(sock, SOCK_STREAM, s.dns_port)};
    setup_mounts(sock, s);
    const std::string host = "cordon-sandbox";
    (void)::sethostname(host.data(), host.size());

    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &chld, nullptr);
    const int sfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);

    // The fds and "ok" go together: the parent relays from here on.
    char ok = 'O';
    iovec iov{&ok, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)]{};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    std::memcpy(CMSG_DATA(c), fds, sizeof fds);
    if (::sendmsg(sock, &msg, MSG_NOSIGNAL) < 0) {
        ::_exit(125);
    }
    for (const int fd : fds) {
        ::close(fd);
    }
    // Wait for the parent's go: it watches scratch before the command can write there.
    char go = 0;
    if (::read(sock, &go, 1) != 1 || go != 'G') {
        ::_exit(125);
    }

    const pid_t cmd = ::fork();
    if (cmd < 0) {
        ::_exit(125);
    }
    if (cmd == 0) {
        ::close(lifeline);
        ::close(sfd);
        exec_command(s);
    }
    ::close(sock);
    for (;;) {
        int status = 0;
        pid_t p = 0;
        while ((p = ::waitpid(-1, &status, WNOHANG)) > 0) {
            if (p == cmd) {
                ::_exit(exit_code(status));
            }
        }
        pollfd pf[2] = {{lifeline, POLLIN, 0}, {sfd, POLLIN, 0}};
        if (::poll(pf, 2, 1000) > 0) {
            if (pf[0].revents != 0) {
                ::_exit(137);  // the shim is gone: fail closed
            }
            signalfd_siginfo si{};
            while (::read(sfd, &si, sizeof si) > 0) {
            }
        }
    }
}

}  // namespace

bool release_sandbox(sandbox& s) {
    const char go = 'G';
    const bool ok = ::write(s.control, &go, 1) == 1;
    ::close(s.control);
    s.control = -1;
    return ok;
}

std::optional<sandbox> start_sandbox(const sandbox_spec& spec, std::string& error) {
    if (spec.argv.empty()) {
        error = "no command";
        return std::nullopt;
    }
    sandbox out;
    const landlock_plan plan = plan_landlock(landlock_abi(), spec.landlock_required);
    if (!plan.run) {
        error = plan.message;
        return std::nullopt;
    }
    out.landlock = plan.use_landlock;
    out.warning = plan.message;
    int sp[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
        error = errno_text("socketpair");
        return std::nullopt;
    }
    int life[2];
    if (::pipe2(life, O_CLOEXEC) < 0) {
        error = errno_text("pipe");
        ::close(sp[0]);
        ::close(sp[1]);
        return std::nullopt;
    }
    const bool userns = ::geteuid() != 0;
    if (userns && spec.user && spec.user->first != 0) {
        error = "--user needs root: without it only uid 0 exists in the sandbox";
        return std::nullopt;
    }
    int sync[2] = {-1, -1};
    if (userns && ::pipe2(sync, O_CLOEXEC) < 0) {
        error = errno_text("pipe");
        return std::nullopt;
    }
    const unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                                CLONE_NEWUTS | (userns ? CLONE_NEWUSER : 0) | SIGCHLD;
    const uid_t uid = ::geteuid();
    const gid_t gid = ::getegid();
    const long pid = ::syscall(SYS_clone, flags, nullptr, nullptr, nullptr, nullptr);
    if (pid < 0) {
        error = errno_text("clone (namespaces unavailable?)");
        return std::nullopt;
    }
    if (pid == 0) {
        ::close(sp[0]);
        ::close(life[1]);
        if (sync[1] >= 0) {
            ::close(sync[1]);
        }
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        init_main(spec, sp[1], life[0], sync[0]);
    }
    ::close(sp[1]);
    ::close(life[0]);
    out.init = static_cast<pid_t>(pid);
    out.lifeline = life[1];
    const auto abandon = [&](const std::string& why) {
        error = why;
        ::kill(out.init, SIGKILL);
        ::waitpid(out.init, nullptr, 0);
        ::close(sp[0]);
        ::close(out.lifeline);
        return std::nullopt;
    };
    if (userns) {
        ::close(sync[0]);
        const std::string base = "/proc/" + std::to_string(pid);
        const bool mapped = write_file(base + "/setgroups", "deny") &&
                            write_file(base + "/uid_map", "0 " + std::to_string(uid) + " 1") &&
                            write_file(base + "/gid_map", "0 " + std::to_string(gid) + " 1");
        const char go = 'g';
        const bool sent = ::write(sync[1], &go, 1) == 1;
        ::close(sync[1]);
        if (!mapped || !sent) {
            return abandon("cannot map the user namespace");
        }
    }
    pollfd pf{sp[0], POLLIN, 0};
    if (::poll(&pf, 1, 20'000) <= 0) {
        return abandon("the sandbox did not start within 20 s");
    }
    char buf[1024];
    int fds[3] = {-1, -1, -1};
    iovec iov{buf, sizeof buf - 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)]{};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(sp[0], &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0) {
        return abandon("the sandbox's setup failed before it could say why");
    }
    if (buf[0] != 'O') {
        return abandon("sandbox setup: " + std::string(buf + 1, static_cast<std::size_t>(n - 1)));
    }
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    if (c == nullptr || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof fds)) {
        return abandon("the sandbox sent no listeners");
    }
    std::memcpy(fds, CMSG_DATA(c), sizeof fds);
    out.control = sp[0];
    out.proxy_listener = fds[0];
    out.dns_udp = fds[1];
    out.dns_tcp = fds[2];
    return out;
}

}  // namespace cordon::shim
