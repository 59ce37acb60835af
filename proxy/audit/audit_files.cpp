#include "proxy/audit/audit_files.hpp"
#include "common/time.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cordon::proxy::audit {
namespace {

constexpr std::string_view prefix = "cordon-";
constexpr std::string_view suffix = ".jsonl";

template <typename T>
bool digits(std::string_view s, T& out) {
    for (const char c : s) {
        if (c < '0' || c > '9') {
            return false;
        }
    }
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && p == s.data() + s.size();
}

}  // namespace

std::int64_t audit_day_of(common::wall_clock::time_point t) noexcept {
    return std::chrono::floor<std::chrono::days>(t).time_since_epoch().count();
}

std::string audit_file_name(audit_file_id id) {
    using namespace std::chrono;
    const year_month_day ymd{sys_days{days{id.day}}};
    char buf[48];
    if (id.part == 0) {
        std::snprintf(buf, sizeof buf, "cordon-%04d-%02u-%02u.jsonl", static_cast<int>(ymd.year()),
                      static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
    } else {
        std::snprintf(buf, sizeof buf, "cordon-%04d-%02u-%02u.p%04u.jsonl",
                      static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                      static_cast<unsigned>(ymd.day()), std::min(id.part, max_audit_part));
    }
    return buf;
}

std::optional<audit_file_id> parse_audit_file_name(std::string_view name) {
    using namespace std::chrono;
    if (!name.starts_with(prefix) || !name.ends_with(suffix)) {
        return std::nullopt;
    }
    std::string_view mid = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    audit_file_id id;
    if (mid.size() == 10 + 6) {  // "YYYY-MM-DD.pNNNN"
        if (mid[10] != '.' || mid[11] != 'p' || !digits(mid.substr(12), id.part) || id.part == 0 ||
            id.part > max_audit_part) {
            return std::nullopt;
        }
        mid = mid.substr(0, 10);
    } else if (mid.size() != 10) {
        return std::nullopt;
    }
    int y = 0;
    unsigned m = 0;
    unsigned d = 0;
    if (mid[4] != '-' || mid[7] != '-' || !digits(mid.substr(0, 4), y) ||
        !digits(mid.substr(5, 2), m) || !digits(mid.substr(8, 2), d)) {
        return std::nullopt;
    }
    const year_month_day ymd{year{y}, month{m}, std::chrono::day{d}};
    if (!ymd.ok()) {
        return std::nullopt;
    }
    id.day = sys_days{ymd}.time_since_epoch().count();
    return id;
}

std::vector<audit_file> list_audit_files(const std::string& dir, std::string& error) {
    namespace fs = std::filesystem;
    std::vector<audit_file> out;
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) {
        error = "cannot read " + dir + ": " + ec.message();
        return out;
    }
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        if (ec) {
            error = "cannot read " + dir + ": " + ec.message();
            break;
        }
        const auto id = parse_audit_file_name(it->path().filename().string());
        if (!id) {
            continue;
        }
        std::error_code st_ec;
        const fs::file_status st = it->symlink_status(st_ec);
        if (st_ec || !fs::is_regular_file(st)) {
            continue;
        }
        const auto size = it->file_size(st_ec);
        out.push_back(audit_file{it->path().string(), *id, st_ec ? 0 : size});
    }
    std::sort(out.begin(), out.end(),
              [](const audit_file& a, const audit_file& b) { return a.id < b.id; });
    return out;
}

std::uint64_t map_audit_files(const std::string& dir,
                              const std::optional<common::wall_clock::time_point>& since,
                              const std::optional<common::wall_clock::time_point>& until,
                              const std::function<void(const audit_file&, std::string_view)>& fn,
                              std::string& error) {
    const std::int64_t first_day = since ? audit_day_of(*since)
                                         : std::numeric_limits<std::int64_t>::min();
    const std::int64_t last_day = until ? audit_day_of(*until)
                                        : std::numeric_limits<std::int64_t>::max();
    std::uint64_t opened = 0;
    const auto files = list_audit_files(dir, error);
    if (!error.empty()) {
        return opened;
    }
    for (const audit_file& f : files) {
        if (f.id.day < first_day || f.id.day > last_day) {
            continue;
        }
        const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0) {
            error = "cannot open " + f.path + ": " + std::strerror(errno);
            return opened;
        }
        struct stat st {};
        if (::fstat(fd, &st) != 0) {
            error = "cannot stat " + f.path + ": " + std::strerror(errno);
            ::close(fd);
            return opened;
        }
        ++opened;
        const auto size = static_cast<std::size_t>(st.st_size);
        if (size == 0) {
            ::close(fd);
            continue;
        }
        void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        ::close(fd);
        if (map == MAP_FAILED) {
            error = "cannot map " + f.path + ": " + std::strerror(errno);
            return opened;
        }
        ::madvise(map, size, MADV_SEQUENTIAL);
        fn(f, std::string_view(static_cast<const char*>(map), size));
        ::munmap(map, size);
    }
    return opened;
}

}  // namespace cordon::proxy::audit
