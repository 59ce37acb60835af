#pragma once
// A cgroup v2 of the sandbox's own, used for `cgroup.kill` (Linux 5.14) where the host
// offers it: a second way to kill every process of the sandbox at once, besides killing the
// PID namespace's init (which alone suffices: see docs/shim.md). Detected at run time;
// without cgroup v2, without cgroup.kill or without the right to create a cgroup, the shim
// runs without it.

#include <sys/types.h>

#include <optional>
#include <string>

namespace cordon::shim {

/// A cgroup below the shim's own in the cgroup v2 hierarchy, removed on destruction.
class kill_cgroup {
public:
    /// Creates `cordon-run-PID` and moves `pid` into it; nullopt (and `why`) when the host
    /// has no cgroup v2 with cgroup.kill or refuses.
    static std::optional<kill_cgroup> create(pid_t pid, std::string& why);

    kill_cgroup(kill_cgroup&& other) noexcept : path_(std::move(other.path_)) {
        other.path_.clear();
    }
    kill_cgroup& operator=(kill_cgroup&&) = delete;
    kill_cgroup(const kill_cgroup&) = delete;
    ~kill_cgroup();

    /// Writes 1 to cgroup.kill: SIGKILL to every process in it. False when that failed.
    bool kill() const;
    const std::string& path() const { return path_; }

private:
    explicit kill_cgroup(std::string path) : path_(std::move(path)) {}
    std::string path_;
};

/// The mount point of the cgroup v2 hierarchy (from /proc/self/mountinfo), "" when none.
std::string cgroup2_mount();

}  // namespace cordon::shim
