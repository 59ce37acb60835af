#include "shims/scratch_watch.hpp"

#include <dirent.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <array>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace cordon::shim {
namespace {

namespace net = boost::asio;

constexpr std::size_t max_watches = 8192;
constexpr std::uint32_t mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE;

struct watcher : std::enable_shared_from_this<watcher> {
    watcher(net::io_context& ioc, int fd) : sd(ioc, fd) {}
    net::posix::stream_descriptor sd;
    std::string host_root;
    std::string sandbox_root;
    std::map<int, std::string> dirs;  ///< watch descriptor -> path relative to the root
    std::function<void(std::string, std::uint64_t)> on_write;
    bool warned = false;
    std::array<char, 64 * 1024> buf{};

    void add_dir(const std::string& rel) {
        if (dirs.size() >= max_watches) {
            if (!warned) {
                warned = true;
                std::cerr << "cordon run: more than " << max_watches
                          << " directories in scratch: writes below the rest are not audited\n";
            }
            return;
        }
        const std::string p = host_root + rel;
        const int wd = ::inotify_add_watch(sd.native_handle(), p.c_str(), mask);
        if (wd < 0) {
            return;
        }
        dirs[wd] = rel;
        // What appeared before the watch did (mkdir -p, a file written at once) is
        // reported now.
        DIR* d = ::opendir(p.c_str());
        if (d == nullptr) {
            return;
        }
        std::vector<std::pair<std::string, bool>> entries;
        while (const dirent* e = ::readdir(d)) {
            const std::string_view name(e->d_name);
            if (name == "." || name == "..") {
                continue;
            }
            entries.emplace_back(std::string(name), e->d_type == DT_DIR);
        }
        ::closedir(d);
        for (const auto& [name, is_dir] : entries) {
            const std::string child = rel + "/" + name;
            if (is_dir) {
                add_dir(child);
            } else {
                report(child);
            }
        }
    }

    void report(const std::string& rel) {
        struct stat st{};
        const std::string p = host_root + rel;
        if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
            on_write(sandbox_root + rel, static_cast<std::uint64_t>(st.st_size));
        }
    }

    void read() {
        sd.async_read_some(net::buffer(buf),
                           [self = shared_from_this()](boost::system::error_code ec,
                                                       std::size_t n) {
                               if (ec) {
                                   return;
                               }
                               self->on_events(n);
                               self->read();
                           });
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
            const auto it = dirs.find(ev.wd);
            if (it == dirs.end() || ev.len == 0) {
                continue;
            }
            const std::string rel = it->second + "/" + std::string(name_ptr, ::strnlen(name_ptr, ev.len));
            if ((ev.mask & IN_ISDIR) != 0) {
                if ((ev.mask & (IN_CREATE | IN_MOVED_TO)) != 0) {
                    add_dir(rel);
                }
                continue;
            }
            if ((ev.mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) != 0) {
                report(rel);
            }
        }
    }
};

}  // namespace

bool start_scratch_watch(boost::asio::io_context& ioc, const std::string& host_path,
                         const std::string& sandbox_path,
                         std::function<void(std::string path, std::uint64_t size)> on_write) {
    const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
        std::cerr << "cordon run: inotify unavailable (" << std::strerror(errno)
                  << "): scratch writes are not audited\n";
        return false;
    }
    auto w = std::make_shared<watcher>(ioc, fd);
    w->host_root = host_path;
    w->sandbox_root = sandbox_path;
    w->on_write = std::move(on_write);
    w->add_dir("");
    if (w->dirs.empty()) {
        std::cerr << "cordon run: cannot watch " << host_path << ": scratch writes are not "
                  << "audited\n";
        return false;
    }
    w->read();
    return true;
}

}  // namespace cordon::shim
