#include "shims/sandbox.hpp"

#include <fcntl.h>
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
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <vector>

extern char** environ;

namespace cordon::shim {
namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// In the child: report a setup failure to the parent and exit.
[[noreturn]] void fail(int sock, const std::string& message) {
    const std::string m = "E" + message;
    (void)::send(sock, m.data(), m.size(), MSG_NOSIGNAL);
    ::_exit(125);
}

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

void bind_mount(int sock, const std::string& from, const std::string& to, bool read_only,
                bool devices = false) {
    if (::mount(from.c_str(), to.c_str(), nullptr, MS_BIND | MS_REC, nullptr) < 0) {
        fail(sock, errno_text("bind " + from + " on " + to));
    }
    const unsigned long nodev = devices ? 0 : MS_NODEV;
    if (read_only && ::mount(nullptr, to.c_str(), nullptr,
                             MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | nodev,
                             nullptr) < 0) {
        fail(sock, errno_text("read-only " + to));
    }
}

// Every mount read-only, recursively (mount_setattr, Linux 5.12); older kernels: each mount
// of /proc/self/mountinfo remounted read-only.
void everything_read_only(int sock) {
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID;
    if (::mount_setattr(AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof attr) == 0) {
        return;
    }
    if (errno != ENOSYS) {
        fail(sock, errno_text("mount_setattr / read-only"));
    }
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    while (std::getline(in, line)) {
        // id parent major:minor root mount-point ...
        std::size_t pos = 0;
        for (int i = 0; i < 4 && pos != std::string::npos; ++i) {
            pos = line.find(' ', pos + 1);
        }
        if (pos == std::string::npos) {
            continue;
        }
        const std::size_t end = line.find(' ', pos + 1);
        const std::string mp = line.substr(pos + 1, end - pos - 1);
        // Best effort per mount; a mount point with escaped characters is skipped.
        (void)::mount(nullptr, mp.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID,
                      nullptr);
    }
}

// A fresh /dev with only the harmless nodes (no disks: uid 0 without capabilities still
// passes the permission bits of /dev/sda).
void minimal_dev(int sock) {
    constexpr std::array<const char*, 6> nodes{"null", "zero", "full", "random", "urandom",
                                               "tty"};
    std::array<int, nodes.size()> held{};
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        held[i] = ::open((std::string("/dev/") + nodes[i]).c_str(), O_PATH | O_CLOEXEC);
    }
    if (::mount("cordon-dev", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") <
        0) {
        fail(sock, errno_text("tmpfs on /dev"));
    }
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        if (held[i] < 0) {
            continue;
        }
        const std::string to = std::string("/dev/") + nodes[i];
        const int fd = ::open(to.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
        if (fd >= 0) {
            ::close(fd);
        }
        bind_mount(sock, "/proc/self/fd/" + std::to_string(held[i]), to, false);
        ::close(held[i]);
    }
    (void)::symlink("/proc/self/fd", "/dev/fd");
    (void)::symlink("/proc/self/fd/0", "/dev/stdin");
    (void)::symlink("/proc/self/fd/1", "/dev/stdout");
    (void)::symlink("/proc/self/fd/2", "/dev/stderr");
    (void)::mkdir("/dev/shm", 01777);
    if (::mount(nullptr, "/dev", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
                "size=64k,mode=0755") < 0) {
        fail(sock, errno_text("read-only /dev"));
    }
}

void hide_path(int sock, const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) < 0) {
        return;  // nothing there to hide
    }
    if (S_ISDIR(st.st_mode)) {
        if (::mount("cordon-hidden", path.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
                    "size=4k,mode=0500") < 0) {
            fail(sock, errno_text("hiding " + path));
        }
    } else {
        bind_mount(sock, "/dev/null", path, true, true);  // reads as empty
    }
}

void setup_mounts(int sock, const sandbox_spec& s) {
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) {
        fail(sock, errno_text("making / private"));
    }
    for (const auto& h : s.hide) {
        hide_path(sock, h);
    }
    if (!s.resolv_conf.empty() && ::access("/etc/resolv.conf", F_OK) == 0) {
        bind_mount(sock, s.resolv_conf, "/etc/resolv.conf", true);
    }
    everything_read_only(sock);
    if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) < 0) {
        fail(sock, errno_text("mounting /proc"));
    }
    // uid 0 keeps the permission bits of root-owned files even without capabilities:
    // /proc/sys and /proc/sysrq-trigger would still be writable.
    for (const char* p : {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"}) {
        if (::access(p, F_OK) == 0) {
            bind_mount(sock, p, p, true);
        }
    }
    minimal_dev(sock);
    if (!s.scratch.empty()) {
        const std::string opts = "size=" + std::to_string(s.scratch_bytes) + ",mode=0700";
        if (::mount("cordon-scratch", s.scratch.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                    opts.c_str()) < 0) {
            fail(sock, errno_text("tmpfs on scratch " + s.scratch));
        }
        if (s.user && ::chown(s.scratch.c_str(), s.user->first, s.user->second) < 0) {
            fail(sock, errno_text("chown scratch"));
        }
        if (!s.scratch_file_name.empty()) {
            const std::string p = s.scratch + "/" + s.scratch_file_name;
            const int fd = ::open(p.c_str(), O_CREAT | O_WRONLY | O_EXCL | O_CLOEXEC, 0600);
            if (fd < 0 || ::write(fd, s.scratch_file_content.data(),
                                  s.scratch_file_content.size()) !=
                              static_cast<ssize_t>(s.scratch_file_content.size())) {
                fail(sock, errno_text("writing " + p));
            }
            if (s.user && ::fchown(fd, s.user->first, s.user->second) < 0) {
                fail(sock, errno_text("chown " + p));
            }
            ::close(fd);
        }
    }
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
    const std::string m = "cordon run: cannot execute " + s.argv[0] + ": " +
                          std::strerror(errno) + "\n";
    (void)::write(2, m.data(), m.size());
    ::_exit(127);
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
