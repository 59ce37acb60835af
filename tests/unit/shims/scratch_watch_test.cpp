#include "shims/scratch_watch.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using cordon::shim::scratch_watch;

namespace {

struct seen {
    std::mutex m;
    std::vector<std::pair<std::string, std::uint64_t>> writes;
    scratch_watch::on_write_fn fn() {
        return [this](std::string p, std::uint64_t size) {
            std::lock_guard<std::mutex> l(m);
            writes.emplace_back(std::move(p), size);
        };
    }
    std::size_t count() {
        std::lock_guard<std::mutex> l(m);
        return writes.size();
    }
    bool has(const std::string& path) {
        std::lock_guard<std::mutex> l(m);
        for (const auto& [p, s] : writes) {
            if (p == path) {
                return true;
            }
        }
        return false;
    }
    bool any_containing(const std::string& text) {
        std::lock_guard<std::mutex> l(m);
        for (const auto& [p, s] : writes) {
            if (p.find(text) != std::string::npos) {
                return true;
            }
        }
        return false;
    }
};

void write_file(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

template <typename F>
bool eventually(F f) {
    for (int i = 0; i < 200; ++i) {
        if (f()) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return f();
}

struct temp_dir {
    fs::path path;
    temp_dir() {
        std::string t = (fs::temp_directory_path() / "cordon-watch-XXXXXX").string();
        path = ::mkdtemp(t.data());
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

}  // namespace

TEST_CASE("scratch watch: a missing directory is refused", "[shim][scratch_watch]") {
    CHECK(scratch_watch::start("/nonexistent/cordon-scratch", "/s",
                               [](const std::string&, std::uint64_t) {}) == nullptr);
}

TEST_CASE("scratch watch: writes are reported as the sandbox sees them", "[shim][scratch_watch]") {
    temp_dir t;
    seen s;
    auto w = scratch_watch::start(t.path.string(), "/scratch", s.fn());
    REQUIRE(w != nullptr);
    write_file(t.path / "out.txt", "hello");
    fs::create_directories(t.path / "a" / "b");
    REQUIRE(eventually([&] {
        write_file(t.path / "a" / "b" / "deep.txt", "x");
        return s.has("/scratch/a/b/deep.txt");
    }));
    CHECK(s.has("/scratch/out.txt"));
    // A name that is not UTF-8 is reported, its bytes escaped.
    write_file(t.path / "evil-\xff\xfe.sh", "x");
    CHECK(eventually([&] { return s.has("/scratch/evil-\\xFF\\xFE.sh"); }));
    w->stop();
    CHECK(w->not_audited() == 0);
}

TEST_CASE("scratch watch: a moved directory costs no new walk", "[shim][scratch_watch]") {
    temp_dir t;
    seen s;
    auto w = scratch_watch::start(t.path.string(), "/scratch", s.fn());
    REQUIRE(w != nullptr);
    fs::create_directories(t.path / "A");
    REQUIRE(eventually([&] {
        write_file(t.path / "A" / "probe", "x");
        return s.has("/scratch/A/probe");
    }));
    for (int i = 0; i < 50; ++i) {
        write_file(t.path / "A" / ("f" + std::to_string(i)), "x");
    }
    REQUIRE(eventually([&] { return s.has("/scratch/A/f49"); }));
    const std::size_t before = s.count();
    for (int i = 0; i < 200; ++i) {
        fs::rename(t.path / (i % 2 == 0 ? "A" : "B"), t.path / (i % 2 == 0 ? "B" : "A"));
    }
    // The directory's place is followed: a write after the moves has its current path.
    write_file(t.path / "A" / "after", "x");
    REQUIRE(eventually([&] { return s.has("/scratch/A/after"); }));
    CHECK(s.count() == before + 1);  // the 51 files were not reported again, 200 times
    w->stop();
}

TEST_CASE("scratch watch: a symlink in scratch is never followed", "[shim][scratch_watch]") {
    temp_dir t;
    temp_dir host;  // a host directory the sandbox must not learn of
    write_file(host.path / "passwords-for-prod.txt", "secret");
    fs::create_directories(t.path / "s");
    seen s;
    auto w = scratch_watch::start((t.path / "s").string(), "/scratch", s.fn());
    REQUIRE(w != nullptr);
    // The race the agent runs: a directory appears (the watch is told), and becomes a
    // symlink to a host directory before the watch gets to it.
    for (int i = 0; i < 300; ++i) {
        const fs::path x = t.path / "s" / ("x" + std::to_string(i));
        fs::create_directory(x);
        fs::remove(x);
        fs::create_directory_symlink(host.path, x);
    }
    write_file(t.path / "s" / "done", "x");
    REQUIRE(eventually([&] { return s.has("/scratch/done"); }));
    w->stop();
    CHECK_FALSE(s.any_containing("passwords-for-prod"));
}

TEST_CASE("scratch watch: what it cannot report is counted, never silent",
          "[shim][scratch_watch]") {
    temp_dir t;
    seen s;
    auto w = scratch_watch::start(t.path.string(), "/scratch", s.fn());
    REQUIRE(w != nullptr);
    // Directories nested through descriptors far beyond PATH_MAX (no path names them), a
    // file written at the bottom.
    int fd = ::open(t.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const std::string name(250, 'd');
    for (int i = 0; i < 40; ++i) {
        REQUIRE(::mkdirat(fd, name.c_str(), 0700) == 0);
        const int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ::close(fd);
        REQUIRE(next >= 0);
        fd = next;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const int f = ::openat(fd, "exfil.bin", O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    REQUIRE(f >= 0);
    REQUIRE(::write(f, "xxxx", 4) == 4);
    ::close(f);
    ::close(fd);
    write_file(t.path / "short.txt", "x");
    REQUIRE(eventually([&] { return s.has("/scratch/short.txt"); }));
    w->stop();
    CHECK_FALSE(s.any_containing("exfil.bin"));
    CHECK(w->not_audited() >= 1);
}

TEST_CASE("printable_path: valid UTF-8 kept, invalid bytes escaped", "[shim][scratch_watch]") {
    using cordon::shim::printable_path;
    CHECK(printable_path("/s/a b/\xc3\xa9t\xc3\xa9.txt") == "/s/a b/\xc3\xa9t\xc3\xa9.txt");
    CHECK(printable_path("/s/\xff") == "/s/\\xFF");
    CHECK(printable_path("/s/\xc3") == "/s/\\xC3");                    // truncated sequence
    CHECK(printable_path("/s/\xed\xa0\x80") == "/s/\\xED\\xA0\\x80");  // a surrogate
    CHECK(printable_path("") == "");
}
