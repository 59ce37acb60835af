#include "shims/scratch_watch.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "common/utf8.hpp"

namespace cordon::shim {
namespace {

constexpr std::size_t max_watches = 8192;
constexpr std::uint32_t mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_ONLYDIR;
// Directory entries walked per second (new directories' contents) and files reported per
// second: an agent's storm of writes costs the shim a bounded share of one core.
constexpr double walk_rate = 20'000;
constexpr double report_rate = 500;
constexpr std::size_t max_depth = 512;
// cordon takes file.write paths of at most 4096 bytes (proxy/audit/shim_event.cpp).
constexpr std::size_t max_reported_path = 4096;

using clock = std::chrono::steady_clock;

class bucket {
public:
    bucket(double rate, double burst) : rate_(rate), burst_(burst), tokens_(burst) {}
    bool take() {
        const auto now = clock::now();
        tokens_ = std::min(burst_,
                           tokens_ + rate_ * std::chrono::duration<double>(now - last_).count());
        last_ = now;
        if (tokens_ < 1) {
            return false;
        }
        tokens_ -= 1;
        return true;
    }

private:
    double rate_, burst_, tokens_;
    clock::time_point last_ = clock::now();
};

// openat2 beneath `root` with no symlink (nor magic link) anywhere in `rel`.
int open_beneath(int root, const std::string& rel, std::uint64_t flags) {
    open_how how{};
    how.flags = flags | O_CLOEXEC | O_NOFOLLOW;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    const std::string p = rel.empty() ? std::string(".") : rel;
    return static_cast<int>(::syscall(SYS_openat2, root, p.c_str(), &how, sizeof how));
}

}  // namespace

std::string printable_path(std::string_view path) {
    std::string out;
    out.reserve(path.size());
    while (!path.empty()) {
        const auto s = common::utf8::next(path);
        if (s.valid) {
            out.append(path.substr(0, s.length));
        } else {
            for (std::size_t i = 0; i < s.length; ++i) {
                std::array<char, 5> b{};
                std::snprintf(b.data(), b.size(), "\\x%02X",
                              static_cast<unsigned>(static_cast<unsigned char>(path[i])));
                out.append(b.data());
            }
        }
        path.remove_prefix(s.length);
    }
    return out;
}

struct scratch_watch::impl {
    struct node {
        int parent = -1;  // -1: the scratch root
        std::string name;
    };
    int ifd = -1;
    int root = -1;  // scratch, opened once before the command starts
    int stop_r = -1, stop_w = -1;
    std::string sandbox_root;
    on_write_fn on_write;
    std::map<int, node> nodes;  // watch descriptor -> where it is
    bucket walks{walk_rate, walk_rate};
    bucket reports{report_rate, 2 * report_rate};
    std::atomic<std::uint64_t> dropped{0};
    bool warned_cap = false;
    bool warned_rate = false;
    std::thread thread;
    std::array<char, 64 * 1024> buf{};

    ~impl() {
        for (int fd : {ifd, root, stop_r, stop_w}) {
            if (fd >= 0) {
                ::close(fd);
            }
        }
    }

    // The path of directory `wd` relative to scratch ("" for scratch), or nullopt.
    std::optional<std::string> rel_of(int wd) const {
        std::vector<const std::string*> parts;
        for (std::size_t depth = 0; wd != -1; ++depth) {
            const auto it = nodes.find(wd);
            if (it == nodes.end() || depth > max_depth) {
                return std::nullopt;
            }
            if (it->second.parent != -1 || !it->second.name.empty()) {
                parts.push_back(&it->second.name);
            }
            wd = it->second.parent;
        }
        std::string rel;
        for (auto p = parts.rbegin(); p != parts.rend(); ++p) {
            rel += (rel.empty() ? "" : "/") + **p;
        }
        return rel;
    }

    void lost(std::uint64_t n, const char* why) {
        dropped += n;
        if (!warned_rate) {
            warned_rate = true;
            std::cerr << "cordon run: scratch changes faster than they can be audited (" << why
                      << "): some writes are not audited (counted)\n";
        }
    }

    void report(int dir_fd, const std::string& rel_dir, const std::string& name) {
        struct stat st {};
        if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode)) {
            return;
        }
        if (!reports.take()) {
            lost(1, "report rate");
            return;
        }
        const std::string rel = rel_dir.empty() ? name : rel_dir + "/" + name;
        std::string path = printable_path(sandbox_root + "/" + rel);
        if (path.size() > max_reported_path) {
            lost(1, "a path longer than the audit takes");
            return;
        }
        on_write(std::move(path), static_cast<std::uint64_t>(st.st_size));
    }

    // Watches directory `name` in `parent` (a new one: its contents so far are reported, its
    // subdirectories watched too; a known one moved: its place updated, nothing walked).
    void add_dir(int parent, const std::string& name) {
        std::vector<std::pair<int, std::string>> todo{{parent, name}};
        while (!todo.empty()) {
            auto [p, n] = std::move(todo.back());
            todo.pop_back();
            const auto prel = p == -1 && n.empty() ? std::optional<std::string>("") : rel_of(p);
            if (!prel) {
                continue;
            }
            const std::string rel = n.empty() ? *prel : (prel->empty() ? n : *prel + "/" + n);
            const int fd = open_beneath(root, rel, O_RDONLY | O_DIRECTORY);
            if (fd < 0) {
                // Gone again: nothing to audit. Anything else (a path beyond PATH_MAX, a
                // symlink put in a directory's place, no descriptor left) leaves what is
                // below unwatched: counted.
                if (errno != ENOENT) {
                    lost(1, "a directory that cannot be opened beneath scratch");
                }
                continue;
            }
            const std::string via = "/proc/self/fd/" + std::to_string(fd);
            const int wd = ::inotify_add_watch(ifd, via.c_str(), mask);
            if (wd < 0) {
                ::close(fd);
                continue;
            }
            if (const auto known = nodes.find(wd); known != nodes.end()) {
                known->second = node{p, n};  // moved within scratch
                ::close(fd);
                continue;
            }
            if (nodes.size() >= max_watches) {
                (void)::inotify_rm_watch(ifd, wd);
                ::close(fd);
                lost(1, "directory cap");
                if (!warned_cap) {
                    warned_cap = true;
                    std::cerr << "cordon run: more than " << max_watches
                              << " directories in scratch: writes below the rest are not "
                                 "audited\n";
                }
                continue;
            }
            nodes[wd] = node{p, n};
            // What appeared before the watch did (mkdir -p, a file written at once).
            DIR* d = ::fdopendir(fd);
            if (d == nullptr) {
                ::close(fd);
                continue;
            }
            while (const dirent* e = ::readdir(d)) {
                const std::string entry(e->d_name);
                if (entry == "." || entry == "..") {
                    continue;
                }
                if (!walks.take()) {
                    lost(1, "walk rate");
                    break;
                }
                if (e->d_type == DT_DIR) {
                    todo.emplace_back(wd, entry);
                } else if (e->d_type == DT_REG || e->d_type == DT_UNKNOWN) {
                    report(::dirfd(d), rel, entry);
                }
            }
            ::closedir(d);
        }
    }

    void on_events(std::size_t n) {
        std::size_t off = 0;
        while (off + sizeof(inotify_event) <= n) {
            inotify_event ev{};
            std::memcpy(&ev, buf.data() + off, sizeof ev);
            const char* name_ptr = buf.data() + off + sizeof(inotify_event);
            off += sizeof(inotify_event) + ev.len;
            if (off > n) {
                break;
            }
            if ((ev.mask & IN_Q_OVERFLOW) != 0) {
                lost(1, "inotify queue overflow");
                continue;
            }
            if ((ev.mask & IN_IGNORED) != 0) {
                nodes.erase(ev.wd);  // the directory is gone
                continue;
            }
            if (ev.len == 0 || !nodes.contains(ev.wd)) {
                continue;
            }
            const std::string name(name_ptr, ::strnlen(name_ptr, ev.len));
            if ((ev.mask & IN_ISDIR) != 0) {
                if ((ev.mask & (IN_CREATE | IN_MOVED_TO)) != 0) {
                    add_dir(ev.wd, name);
                }
                continue;
            }
            if ((ev.mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) != 0) {
                const auto rel = rel_of(ev.wd);
                const int dfd = rel ? open_beneath(root, *rel, O_PATH | O_DIRECTORY) : -1;
                if (dfd >= 0) {
                    report(dfd, *rel, name);
                    ::close(dfd);
                } else if (!rel || errno != ENOENT) {
                    lost(1, "a directory that cannot be opened beneath scratch");
                }
            }
        }
    }

    void loop() {
        for (;;) {
            pollfd pf[2] = {{ifd, POLLIN, 0}, {stop_r, POLLIN, 0}};
            if (::poll(pf, 2, -1) < 0) {
                if (errno == EINTR) {
                    continue;
                }
                return;
            }
            if (pf[1].revents != 0) {
                return;
            }
            const ssize_t r = ::read(ifd, buf.data(), buf.size());
            if (r < 0 && (errno == EINTR || errno == EAGAIN)) {
                continue;
            }
            if (r <= 0) {
                return;
            }
            on_events(static_cast<std::size_t>(r));
        }
    }
};

std::unique_ptr<scratch_watch> scratch_watch::start(const std::string& host_path,
                                                    const std::string& sandbox_path,
                                                    on_write_fn on_write) {
    auto p = std::make_unique<impl>();
    p->ifd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (p->ifd < 0) {
        std::cerr << "cordon run: inotify unavailable (" << std::strerror(errno)
                  << "): scratch writes are not audited\n";
        return nullptr;
    }
    p->root = ::open(host_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int stop[2];
    if (p->root < 0 || ::pipe2(stop, O_CLOEXEC) < 0) {
        std::cerr << "cordon run: cannot watch " << host_path << ": scratch writes are not "
                  << "audited\n";
        return nullptr;
    }
    p->stop_r = stop[0];
    p->stop_w = stop[1];
    p->sandbox_root = sandbox_path;
    p->on_write = std::move(on_write);
    p->add_dir(-1, "");
    if (p->nodes.empty()) {
        std::cerr << "cordon run: cannot watch " << host_path << ": scratch writes are not "
                  << "audited\n";
        return nullptr;
    }
    impl* raw = p.get();
    p->thread = std::thread([raw] { raw->loop(); });
    return std::unique_ptr<scratch_watch>(new scratch_watch(std::move(p)));
}

scratch_watch::scratch_watch(std::unique_ptr<impl> p) : p_(std::move(p)) {}

scratch_watch::~scratch_watch() { stop(); }

void scratch_watch::stop() {
    if (p_->thread.joinable()) {
        const char c = 'x';
        (void)::write(p_->stop_w, &c, 1);
        p_->thread.join();
    }
}

std::uint64_t scratch_watch::not_audited() const { return p_->dropped.load(); }

}  // namespace cordon::shim
