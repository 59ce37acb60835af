#pragma once
// Audits writes in the sandbox's scratch dir: inotify on the scratch tmpfs (reached from
// the host through /proc/INIT/root), every subdirectory watched as it appears; each file
// closed after writing, or moved in, is reported with its size.
//
// It runs on a thread of its own, so no amount of work in scratch delays the shim's kill
// path, and its work is bounded: a moved directory costs one update (not a new walk), walks
// of new directories and reports are rate-limited (what is left out is counted), and every
// path is opened beneath scratch without following a symlink (an agent's symlink in scratch
// never makes the root shim watch, list or stat a host directory).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace cordon::shim {

/// `path` as JSON can carry it: valid UTF-8 kept, each invalid byte written as "\xNN".
std::string printable_path(std::string_view path);

class scratch_watch {
public:
    using on_write_fn = std::function<void(std::string path, std::uint64_t size)>;

    /// Starts watching `host_path` (e.g. /proc/1234/root/scratch), reporting paths as the
    /// sandbox sees them (`sandbox_path` + the relative name, printable_path()). At most
    /// 8192 directories are watched (bounded kernel memory). nullptr (and why, on stderr)
    /// when inotify or the directory is unavailable. `on_write` runs on the watch's thread.
    static std::unique_ptr<scratch_watch> start(const std::string& host_path,
                                                const std::string& sandbox_path,
                                                on_write_fn on_write);

    ~scratch_watch();
    scratch_watch(const scratch_watch&) = delete;
    scratch_watch& operator=(const scratch_watch&) = delete;

    /// Stops the thread (idempotent).
    void stop();

    /// Writes that were not reported: over the rate, below an unwatched directory, or lost
    /// in an inotify queue overflow (counted as one). After stop().
    std::uint64_t not_audited() const;

    struct impl;

private:
    explicit scratch_watch(std::unique_ptr<impl> p);
    std::unique_ptr<impl> p_;
};

}  // namespace cordon::shim
