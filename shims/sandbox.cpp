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
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "shims/mounts.hpp"

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

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<mount_entry> my_mounts() { return parse_mountinfo(read_text("/proc/self/mountinfo")); }

// The new root is built on a tmpfs mounted over /dev (every Linux has /dev, the sandbox gets
// a /dev of its own anyway, and the host's /tmp, where scratch often lives, stays visible
// while the root is built), then made the root.
constexpr const char* root_base = "/dev";
// In the new root: an empty read-only file bound over hidden files (reads as empty, on a
// filesystem that has no devices).
constexpr const char* empty_file = "/.cordon-empty";

// The nodes of the sandbox's /dev: opened (O_PATH) before the host's /dev is covered.
constexpr std::array<const char*, 6> dev_nodes{"null", "zero", "full", "random", "urandom", "tty"};

// A fresh /dev with only the harmless nodes (no disks: uid 0 without capabilities still
// passes the permission bits of /dev/sda), at `dir`.
void minimal_dev(int sock, const std::string& dir, const std::array<int, 6>& held) {
    if (::mount("cordon-dev", dir.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") <
        0) {
        fail(sock, errno_text("tmpfs on /dev"));
    }
    for (std::size_t i = 0; i < dev_nodes.size(); ++i) {
        if (held[i] < 0) {
            continue;
        }
        const std::string to = dir + "/" + dev_nodes[i];
        const int fd = ::open(to.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
        if (fd >= 0) {
            ::close(fd);
        }
        bind_mount(sock, "/proc/self/fd/" + std::to_string(held[i]), to, false);
        ::close(held[i]);
    }
    (void)::symlink("/proc/self/fd", (dir + "/fd").c_str());
    (void)::symlink("/proc/self/fd/0", (dir + "/stdin").c_str());
    (void)::symlink("/proc/self/fd/1", (dir + "/stdout").c_str());
    (void)::symlink("/proc/self/fd/2", (dir + "/stderr").c_str());
    (void)::mkdir((dir + "/shm").c_str(), 01777);
    if (::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
                "size=64k,mode=0755") < 0) {
        fail(sock, errno_text("read-only /dev"));
    }
}

// The sandbox's own /proc at `dir`, with what uid 0 could still write through the permission
// bits of root-owned files made read-only (/proc/sys, /proc/sysrq-trigger, ...).
void own_proc(int sock, const std::string& dir) {
    if (::mount("proc", dir.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) < 0) {
        fail(sock, errno_text("mounting /proc"));
    }
    for (const char* p : {"/sys", "/sysrq-trigger", "/irq", "/bus"}) {
        const std::string path = dir + p;
        if (::access(path.c_str(), F_OK) == 0) {
            bind_mount(sock, path, path, true);
        }
    }
}

// The host's top level in the new root at `root`: every directory (recursively bound, with
// its mounts), file and symlink of "/" but /proc, /sys and /dev, which the sandbox never
// gets from the host. Returns the names bound (made read-only later).
std::vector<std::string> mirror_top_level(int sock, const std::string& root) {
    std::vector<std::string> bound;
    DIR* d = ::opendir("/");
    if (d == nullptr) {
        fail(sock, errno_text("reading /"));
    }
    while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name == "." || name == ".." || name == "proc" || name == "sys" || name == "dev") {
            continue;
        }
        const std::string from = "/" + name;
        const std::string to = root + "/" + name;
        struct stat st{};
        if (::lstat(from.c_str(), &st) < 0) {
            continue;
        }
        if (S_ISLNK(st.st_mode)) {
            std::array<char, 4096> target{};
            const ssize_t n = ::readlink(from.c_str(), target.data(), target.size() - 1);
            if (n > 0 && ::symlink(std::string(target.data(), static_cast<std::size_t>(n)).c_str(),
                                   to.c_str()) < 0) {
                fail(sock, errno_text("symlink " + to));
            }
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (::mkdir(to.c_str(), 0755) < 0) {
                fail(sock, errno_text("mkdir " + to));
            }
        } else if (S_ISREG(st.st_mode)) {
            const int fd = ::open(to.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0444);
            if (fd < 0) {
                fail(sock, errno_text("creating " + to));
            }
            ::close(fd);
        } else {
            continue;  // a socket or device node at the top level: not given
        }
        bind_mount(sock, from, to, false);
        bound.push_back("/" + name);
    }
    ::closedir(d);
    return bound;
}

// Makes the root built at `root` the process's root: pivot_root, and the old root detached
// (nothing of it stays reachable).
void switch_root(int sock, const std::string& root) {
    if (::chdir(root.c_str()) < 0) {
        fail(sock, errno_text("chdir " + root));
    }
    const std::string old = root + "/.oldroot";
    if (::mkdir(old.c_str(), 0700) < 0) {
        fail(sock, errno_text("mkdir " + old));
    }
    if (::syscall(SYS_pivot_root, root.c_str(), old.c_str()) < 0) {
        fail(sock, errno_text("pivot_root"));
    }
    if (::chdir("/") < 0 || ::umount2("/.oldroot", MNT_DETACH) < 0 || ::rmdir("/.oldroot") < 0) {
        fail(sock, errno_text("detaching the old root"));
    }
}

// Covers `path` (a mount that could not be unmounted, or a hidden one) with nothing: an
// empty read-only tmpfs over a directory, the empty file over anything else.
void cover(int sock, const std::string& path) {
    struct stat st{};
    if (::lstat(path.c_str(), &st) < 0) {
        return;  // nothing there
    }
    if (S_ISDIR(st.st_mode)) {
        if (::mount("cordon-hidden", path.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
                    "size=4k,mode=0500") < 0) {
            fail(sock, errno_text("hiding " + path));
        }
    } else if (!S_ISLNK(st.st_mode)) {
        bind_mount(sock, empty_file, path, true);
    }
}

// Foreign kernel interfaces that came with the host's mounts (a chroot's proc, sysfs, dev,
// devpts, debugfs, cgroup, ...): unmounted, or covered where they cannot be (a locked
// mount of a user namespace).
void drop_foreign_mounts(int sock) {
    for (const auto& mp : foreign_mounts(my_mounts(), {"/proc", "/dev"})) {
        if (mp == "/" || ::umount2(mp.c_str(), MNT_DETACH) == 0) {
            continue;
        }
        cover(sock, mp);
    }
}

// The hard links of one inode, found by walking every mount of its filesystem (each within
// that filesystem), bounded in entries and time.
struct link_search {
    bool complete = true;
    std::string why;
    std::vector<std::string> paths;
};

struct link_walk {
    dev_t dev = 0;
    ino_t ino = 0;
    std::size_t entries = 0;
    std::chrono::steady_clock::time_point deadline;
    link_search* out = nullptr;
};
link_walk* walk = nullptr;  // nftw's callback takes no context; init is single-threaded

constexpr std::size_t link_walk_entries = 4'000'000;
constexpr auto link_walk_time = std::chrono::seconds(20);

int on_walk_entry(const char* path, const struct stat* st, int type, FTW*) {
    if (++walk->entries > link_walk_entries) {
        walk->out->complete = false;
        walk->out->why = "more than " + std::to_string(link_walk_entries) + " files";
        return 1;
    }
    if ((walk->entries & 4095) == 0 && std::chrono::steady_clock::now() > walk->deadline) {
        walk->out->complete = false;
        walk->out->why = "the search took longer than 20 s";
        return 1;
    }
    if (type == FTW_F && st->st_dev == walk->dev && st->st_ino == walk->ino) {
        walk->out->paths.emplace_back(path);
    }
    return 0;
}

link_search find_links(const std::vector<mount_entry>& mounts, dev_t dev, ino_t ino) {
    link_search out;
    link_walk w{dev, ino, 0, std::chrono::steady_clock::now() + link_walk_time, &out};
    walk = &w;
    for (const auto& m : mounts) {
        if (m.major != major(dev) || m.minor != minor(dev)) {
            continue;
        }
        if (::nftw(m.mount_point.c_str(), on_walk_entry, 64, FTW_PHYS | FTW_MOUNT) != 0 &&
            out.complete) {
            out.complete = false;
            out.why = errno_text("walking " + m.mount_point);
        }
        if (!out.complete) {
            break;
        }
    }
    walk = nullptr;
    return out;
}

// Hides the file at `path` wherever the mounts show its inode: every bind mount of its
// filesystem that contains it, and every hard link to it (searched on that filesystem when
// it has more than one; refused when they cannot all be found within the budget).
void hide_inode(int sock, const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) < 0) {
        return;  // nothing there to hide
    }
    std::array<char, PATH_MAX> real{};
    if (::realpath(path.c_str(), real.data()) == nullptr) {
        fail(sock, errno_text("resolving " + path));
    }
    const auto mounts = my_mounts();
    const unsigned maj = major(st.st_dev);
    const unsigned min = minor(st.st_dev);
    std::vector<std::string> paths{real.data()};
    if (const std::string fs = filesystem_path(mounts, maj, min, real.data()); !fs.empty()) {
        for (auto& p : visible_paths(mounts, maj, min, fs)) {
            paths.push_back(std::move(p));
        }
    }
    if (st.st_nlink > 1) {
        const auto found = find_links(mounts, st.st_dev, st.st_ino);
        if (!found.complete) {
            fail(sock, path + " has " + std::to_string(st.st_nlink) +
                           " hard links and not all of them could be found to hide them (" +
                           found.why + "): remove the extra links of the admin token");
        }
        paths.insert(paths.end(), found.paths.begin(), found.paths.end());
    }
    for (const auto& p : paths) {
        struct stat other{};
        if (::stat(p.c_str(), &other) == 0 && other.st_dev == st.st_dev &&
            other.st_ino == st.st_ino) {
            cover(sock, p);
        }
    }
}

void hide_path(int sock, const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) < 0) {
        return;  // nothing there to hide
    }
    if (S_ISDIR(st.st_mode)) {
        cover(sock, path);
    } else {
        hide_inode(sock, path);
    }
}

// Every mount read-only, nosuid and nodev (mount_setattr, Linux 5.12; older kernels: each
// mount remounted).
void read_only(int sock, const std::string& path) {
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (::mount_setattr(AT_FDCWD, path.c_str(), AT_RECURSIVE | AT_SYMLINK_NOFOLLOW, &attr,
                        sizeof attr) == 0) {
        return;
    }
    if (errno != ENOSYS) {
        fail(sock, errno_text("mount_setattr " + path + " read-only"));
    }
    for (const auto& m : my_mounts()) {
        if (path_within(m.mount_point, path) &&
            ::mount(nullptr, m.mount_point.c_str(), nullptr,
                    MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) < 0) {
            fail(sock, errno_text("read-only " + m.mount_point));
        }
    }
}

void setup_mounts(int sock, const sandbox_spec& s) {
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) < 0) {
        fail(sock, errno_text("making / private") +
                       (errno == EINVAL ? " (is / a chroot's directory rather than a mount? "
                                          "bind-mount the chroot onto itself first)"
                                        : ""));
    }
    std::array<int, dev_nodes.size()> held{};
    for (std::size_t i = 0; i < dev_nodes.size(); ++i) {
        held[i] = ::open((std::string("/dev/") + dev_nodes[i]).c_str(), O_PATH | O_CLOEXEC);
    }
    // 1. The new root, built from an allow list: the host's top level but /proc, /sys and
    //    /dev; the sandbox's own /proc and /dev; an empty /sys.
    const std::string root = root_base;
    if (::mount("cordon-root", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") <
        0) {
        fail(sock, errno_text("tmpfs for the sandbox root"));
    }
    const std::vector<std::string> bound = mirror_top_level(sock, root);
    for (const char* d : {"/proc", "/dev", "/sys"}) {
        if (::mkdir((root + d).c_str(), 0555) < 0) {
            fail(sock, errno_text(std::string("mkdir ") + d));
        }
    }
    if (const int fd = ::open((root + empty_file).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0444);
        fd >= 0) {
        ::close(fd);
    } else {
        fail(sock, errno_text("creating the empty file"));
    }
    own_proc(sock, root + "/proc");
    minimal_dev(sock, root + "/dev", held);
    switch_root(sock, root);
    // 2. No foreign kernel interfaces; what must not be read, hidden; the DNS relay's
    //    resolv.conf.
    drop_foreign_mounts(sock);
    for (const auto& h : s.hide) {
        hide_path(sock, h);
    }
    if (!s.resolv_conf.empty() && ::access("/etc/resolv.conf", F_OK) == 0) {
        bind_mount(sock, s.resolv_conf, "/etc/resolv.conf", true);
    }
    // 3. Read-only, nosuid, nodev everywhere; then the one writable place.
    for (const auto& b : bound) {
        read_only(sock, b);
    }
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
    if (::mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                nullptr) < 0) {
        fail(sock, errno_text("read-only root"));
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
    const std::string m = "cordon run: cannot execute " + s.argv[0] + ": " +
                          std::strerror(errno) + "\n";
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
