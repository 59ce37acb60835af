#include "shims/cgroup.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace cordon::shim {
namespace {

bool write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
    out.flush();
    return static_cast<bool>(out);
}

}  // namespace

std::string cgroup2_mount() {
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    while (std::getline(in, line)) {
        // ... mount-point ... - fstype source options
        const auto dash = line.find(" - ");
        if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) {
            continue;
        }
        std::istringstream fields(line.substr(0, dash));
        std::string f;
        for (int i = 0; i < 5 && fields >> f; ++i) {
        }
        return f;  // the fifth field
    }
    return {};
}

std::optional<kill_cgroup> kill_cgroup::create(pid_t pid, std::string& why) {
    const std::string mount = cgroup2_mount();
    if (mount.empty()) {
        why = "no cgroup v2 hierarchy";
        return std::nullopt;
    }
    std::ifstream self("/proc/self/cgroup");
    std::string line;
    std::string own;
    while (std::getline(self, line)) {
        if (line.starts_with("0::")) {
            own = line.substr(3);
        }
    }
    if (own.empty()) {
        why = "not in the cgroup v2 hierarchy";
        return std::nullopt;
    }
    if (own == "/") {
        own.clear();
    }
    const std::string path = mount + own + "/cordon-run-" + std::to_string(pid);
    if (::mkdir(path.c_str(), 0755) != 0) {
        why = "cannot create " + path;
        return std::nullopt;
    }
    kill_cgroup cg(path);
    if (::access((path + "/cgroup.kill").c_str(), W_OK) != 0) {
        why = "the kernel has no cgroup.kill";
        return std::nullopt;
    }
    if (!write_text(path + "/cgroup.procs", std::to_string(pid))) {
        why = "cannot move the sandbox into " + path;
        return std::nullopt;
    }
    return cg;
}

bool kill_cgroup::kill() const { return !path_.empty() && write_text(path_ + "/cgroup.kill", "1"); }

kill_cgroup::~kill_cgroup() {
    if (path_.empty()) {
        return;
    }
    // The cgroup empties as its last processes are reaped; bounded wait.
    for (int i = 0; i < 50 && ::rmdir(path_.c_str()) != 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

}  // namespace cordon::shim
