// The sandbox's filesystem: the new root, its /dev and /proc, hidden inodes, read-only paths.
#include "shims/sandbox_internal.hpp"

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

namespace cordon::shim {
namespace detail {
namespace {

void bind_mount(int sock, const std::string& from, const std::string& to, bool read_only,
                bool devices = false) {
    if (::mount(from.c_str(), to.c_str(), nullptr, MS_BIND | MS_REC, nullptr) < 0) {
        fail(sock, errno_text("bind " + from + " on " + to));
    }
    const unsigned long nodev = devices ? 0 : MS_NODEV;
    if (read_only && ::mount(nullptr, to.c_str(), nullptr,
                             MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | nodev, nullptr) < 0) {
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
        struct stat st {};
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
    struct stat st {};
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
    struct stat st {};
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
        struct stat other {};
        if (::stat(p.c_str(), &other) == 0 && other.st_dev == st.st_dev &&
            other.st_ino == st.st_ino) {
            cover(sock, p);
        }
    }
}

void hide_path(int sock, const std::string& path) {
    struct stat st {};
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

}  // namespace

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
    if (!s.ca_bundle.empty() && ::access("/etc/ssl/certs/ca-certificates.crt", F_OK) == 0) {
        bind_mount(sock, s.ca_bundle, "/etc/ssl/certs/ca-certificates.crt", true);
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
            if (fd < 0 ||
                ::write(fd, s.scratch_file_content.data(), s.scratch_file_content.size()) !=
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

}  // namespace detail
}  // namespace cordon::shim
