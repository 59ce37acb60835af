#include "shims/mounts.hpp"

#include <algorithm>
#include <array>
#include <charconv>

namespace cordon::shim {
namespace {

// \NNN (octal) escapes of mountinfo's path fields.
std::string unescape(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    const auto oct = [](char c) { return c >= '0' && c <= '7'; };
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 3 < s.size() && oct(s[i + 1]) && oct(s[i + 2]) && oct(s[i + 3])) {
            out.push_back(static_cast<char>(((s[i + 1] - '0') << 6) | ((s[i + 2] - '0') << 3) |
                                            (s[i + 3] - '0')));
            i += 3;
            continue;
        }
        out.push_back(s[i]);
    }
    return out;
}

std::vector<std::string_view> fields(std::string_view line) {
    std::vector<std::string_view> f;
    std::size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && line[i] == ' ') {
            ++i;
        }
        const std::size_t start = i;
        while (i < line.size() && line[i] != ' ') {
            ++i;
        }
        if (i > start) {
            f.push_back(line.substr(start, i - start));
        }
    }
    return f;
}

template <typename T>
bool number(std::string_view s, T& out) {
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
}

// "/a/b" joined with the rest "c/d" or "/c/d".
std::string join(std::string_view base, std::string_view rest) {
    while (!rest.empty() && rest.front() == '/') {
        rest.remove_prefix(1);
    }
    if (rest.empty()) {
        return std::string(base);
    }
    std::string out(base);
    if (out.empty() || out.back() != '/') {
        out.push_back('/');
    }
    out.append(rest);
    return out;
}

}  // namespace

std::vector<mount_entry> parse_mountinfo(std::string_view text) {
    std::vector<mount_entry> out;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        const std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        // id parent major:minor root mount-point options [optional...] - fstype source super
        const auto f = fields(line);
        if (f.size() < 10) {
            continue;
        }
        std::size_t dash = 6;
        while (dash < f.size() && f[dash] != "-") {
            ++dash;
        }
        if (dash + 1 >= f.size()) {
            continue;
        }
        mount_entry e;
        const auto colon = f[2].find(':');
        if (!number(f[0], e.id) || !number(f[1], e.parent) || colon == std::string_view::npos ||
            !number(f[2].substr(0, colon), e.major) || !number(f[2].substr(colon + 1), e.minor)) {
            continue;
        }
        e.root = unescape(f[3]);
        e.mount_point = unescape(f[4]);
        e.fstype = std::string(f[dash + 1]);
        if (e.mount_point.empty() || e.mount_point.front() != '/') {
            continue;
        }
        out.push_back(std::move(e));
    }
    return out;
}

bool is_data_fstype(std::string_view t) {
    static constexpr std::array<std::string_view, 38> data{
        "ext2",     "ext3",     "ext4",   "xfs",     "btrfs",   "zfs",   "f2fs",     "jfs",
        "reiserfs", "bcachefs", "nilfs2", "ocfs2",   "gfs2",    "vfat",  "msdos",    "exfat",
        "ntfs",     "ntfs3",    "hfs",    "hfsplus", "iso9660", "udf",   "squashfs", "erofs",
        "overlay",  "aufs",     "tmpfs",  "ramfs",   "nfs",     "nfs4",  "cifs",     "smb3",
        "9p",       "virtiofs", "ceph",   "fuseblk", "fuse",    "vboxsf"};
    if (t.starts_with("fuse.")) {
        return true;  // fuse.sshfs, fuse.glusterfs, ...
    }
    return std::find(data.begin(), data.end(), t) != data.end();
}

bool path_within(std::string_view path, std::string_view prefix) {
    if (prefix == "/") {
        return !path.empty() && path.front() == '/';
    }
    return path.starts_with(prefix) && (path.size() == prefix.size() || path[prefix.size()] == '/');
}

std::vector<std::string> foreign_mounts(const std::vector<mount_entry>& mounts,
                                        const std::vector<std::string>& keep) {
    std::vector<std::string> out;
    for (const auto& m : mounts) {
        if (is_data_fstype(m.fstype)) {
            continue;
        }
        const bool kept = std::any_of(keep.begin(), keep.end(), [&](const std::string& k) {
            return path_within(m.mount_point, k);
        });
        if (!kept && std::find(out.begin(), out.end(), m.mount_point) == out.end()) {
            out.push_back(m.mount_point);
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
        return std::count(a.begin(), a.end(), '/') > std::count(b.begin(), b.end(), '/');
    });
    return out;
}

std::vector<std::string> visible_paths(const std::vector<mount_entry>& mounts, unsigned major,
                                       unsigned minor, std::string_view fs_path) {
    std::vector<std::string> out;
    for (const auto& m : mounts) {
        if (m.major != major || m.minor != minor || !path_within(fs_path, m.root)) {
            continue;
        }
        std::string p = join(m.mount_point, fs_path.substr(m.root == "/" ? 0 : m.root.size()));
        if (std::find(out.begin(), out.end(), p) == out.end()) {
            out.push_back(std::move(p));
        }
    }
    return out;
}

std::string filesystem_path(const std::vector<mount_entry>& mounts, unsigned major, unsigned minor,
                            std::string_view path) {
    const mount_entry* best = nullptr;
    for (const auto& m : mounts) {
        if (m.major == major && m.minor == minor && path_within(path, m.mount_point) &&
            (best == nullptr || m.mount_point.size() >= best->mount_point.size())) {
            best = &m;
        }
    }
    if (best == nullptr) {
        return {};
    }
    return join(best->root, path.substr(best->mount_point == "/" ? 0 : best->mount_point.size()));
}

}  // namespace cordon::shim
