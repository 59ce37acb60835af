// The sandbox root's pure helpers: mountinfo parsing, which mounts are foreign, and where one
// file of a filesystem is visible through bind mounts.
#include "shims/mounts.hpp"

#include <catch2/catch.hpp>

using namespace cordon::shim;

namespace {
// A build host: the root, a chroot with proc, sysfs and the host's /dev bound in, a bind
// mount of /etc/cordon at /srv/view, and a path with a space.
constexpr const char* mountinfo =
    "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "23 22 0:21 / /proc rw,nosuid - proc proc rw\n"
    "24 22 0:5 / /dev rw - devtmpfs udev rw,size=10k\n"
    "30 22 254:0 /etc/cordon /srv/view rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "40 22 0:21 / /build/chroot/proc rw - proc proc rw\n"
    "41 22 0:22 / /build/chroot/sys rw - sysfs sysfs rw\n"
    "42 22 0:5 / /build/chroot/dev rw - devtmpfs udev rw\n"
    "43 42 0:24 / /build/chroot/dev/pts rw - devpts devpts rw\n"
    "44 22 0:40 / /mnt/my\\040disk rw - fuse.sshfs host:/ rw\n"
    "45 22 0:41 / /data rw master:3 unbindable - xfs /dev/vdb rw\n"
    "garbage line\n"
    "46 22 0:42 / relative rw - tmpfs t rw\n";
}  // namespace

TEST_CASE("mountinfo lines are parsed, escapes undone, malformed lines skipped", "[shim][mounts]") {
    const auto m = parse_mountinfo(mountinfo);
    REQUIRE(m.size() == 10);
    CHECK(m[0].mount_point == "/");
    CHECK(m[0].major == 254);
    CHECK(m[0].minor == 0);
    CHECK(m[0].fstype == "ext4");
    CHECK(m[3].root == "/etc/cordon");
    CHECK(m[3].mount_point == "/srv/view");
    CHECK(m[8].mount_point == "/mnt/my disk");
    CHECK(m[8].fstype == "fuse.sshfs");
    CHECK(m[9].fstype == "xfs");  // several optional fields before the separator
}

TEST_CASE("data filesystems are kept, kernel interfaces are foreign", "[shim][mounts]") {
    for (const char* t : {"ext4", "xfs", "btrfs", "tmpfs", "overlay", "nfs4", "fuse.sshfs",
                          "fuseblk", "squashfs", "9p", "virtiofs"}) {
        CAPTURE(t);
        CHECK(is_data_fstype(t));
    }
    for (const char* t :
         {"proc",     "sysfs",   "devtmpfs",  "devpts",   "debugfs", "tracefs",     "securityfs",
          "cgroup",   "cgroup2", "bpf",       "configfs", "mqueue",  "binfmt_misc", "autofs",
          "efivarfs", "pstore",  "hugetlbfs", "fusectl",  "",        "ext4x",       "fuse_"}) {
        CAPTURE(t);
        CHECK_FALSE(is_data_fstype(t));
    }
}

TEST_CASE("foreign mounts: all but the sandbox's own, deepest first", "[shim][mounts]") {
    const auto m = parse_mountinfo(mountinfo);
    const auto f = foreign_mounts(m, {"/proc", "/dev"});
    CHECK(f == std::vector<std::string>{"/build/chroot/dev/pts", "/build/chroot/proc",
                                        "/build/chroot/sys", "/build/chroot/dev"});
    // Without exclusions the root's own /proc and /dev are foreign too.
    CHECK(foreign_mounts(m, {}).size() == 6);
    CHECK(path_within("/dev/pts", "/dev"));
    CHECK(path_within("/dev", "/dev"));
    CHECK_FALSE(path_within("/devices", "/dev"));
    CHECK(path_within("/x", "/"));
}

TEST_CASE("a file is found at every bind mount that shows it", "[shim][mounts]") {
    const auto m = parse_mountinfo(mountinfo);
    const std::string fs = filesystem_path(m, 254, 0, "/etc/cordon/admin.token");
    CHECK(fs == "/etc/cordon/admin.token");
    const auto v = visible_paths(m, 254, 0, fs);
    CHECK(v == std::vector<std::string>{"/etc/cordon/admin.token", "/srv/view/admin.token"});
    // Seen through the bind mount, the same file has the same path within its filesystem.
    CHECK(filesystem_path(m, 254, 0, "/srv/view/admin.token") == "/etc/cordon/admin.token");
    // Another filesystem, or a path outside every mount of it: nothing.
    CHECK(visible_paths(m, 254, 0, "/var/x").size() == 1);
    CHECK(visible_paths(m, 9, 9, fs).empty());
    CHECK(filesystem_path(m, 9, 9, "/etc/cordon/admin.token").empty());
    // The mount's root itself.
    CHECK(visible_paths(m, 254, 0, "/etc/cordon") ==
          std::vector<std::string>{"/etc/cordon", "/srv/view"});
}
