#pragma once
// Pure helpers for the sandbox's root (shims/sandbox.cpp): /proc/self/mountinfo parsed, which
// mounts are data (kept) and which are foreign kernel interfaces (removed: a chroot's proc,
// sysfs, devtmpfs, ...), and where one file of a filesystem is visible through the mounts
// (to hide a file by inode, whichever bind mount shows it). No system calls.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::shim {

/// One line of /proc/PID/mountinfo (proc(5)); paths unescaped (\040 is a space).
struct mount_entry {
    int id = 0;
    int parent = 0;
    unsigned major = 0;
    unsigned minor = 0;
    std::string root;         ///< the mount's root within its filesystem
    std::string mount_point;  ///< relative to the reading process's root
    std::string fstype;
};

/// Every well-formed line of `text`; malformed lines are skipped.
std::vector<mount_entry> parse_mountinfo(std::string_view text);

/// Whether a filesystem of this type holds data a sandbox may read (ext4, xfs, btrfs, tmpfs,
/// overlay, nfs, fuse.*, ...). Everything else is a kernel interface or a trigger (proc,
/// sysfs, devtmpfs, devpts, debugfs, tracefs, securityfs, cgroup, bpf, configfs, mqueue,
/// binfmt_misc, autofs, efivarfs, pstore, hugetlbfs, ...), which the sandbox never gets
/// from the host: it has its own /proc and /dev, and no /sys.
bool is_data_fstype(std::string_view fstype);

/// Whether `path` is `prefix` or below it ("/dev" covers "/dev" and "/dev/pts", not
/// "/devices").
bool path_within(std::string_view path, std::string_view prefix);

/// The mount points of foreign (non-data) mounts, excluding those within any of `keep`
/// (the sandbox's own /proc and /dev), deepest first so that each can be unmounted before
/// its parent.
std::vector<std::string> foreign_mounts(const std::vector<mount_entry>& mounts,
                                        const std::vector<std::string>& keep);

/// Where the file at `fs_path` (its path within the filesystem `major:minor`) is visible:
/// one path per mount of that filesystem whose root contains it. A deeper mount may still
/// cover some of them: the caller checks each with stat().
std::vector<std::string> visible_paths(const std::vector<mount_entry>& mounts, unsigned major,
                                       unsigned minor, std::string_view fs_path);

/// The path of `path` within its filesystem: the mount with the longest mount point that
/// contains `path` and is of `major:minor`, its root joined with the rest of `path`. Empty
/// when no such mount is found. `path` must be absolute and free of symlinks and "..".
std::string filesystem_path(const std::vector<mount_entry>& mounts, unsigned major, unsigned minor,
                            std::string_view path);

}  // namespace cordon::shim
