#include "shims/confine.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace cordon::shim {
namespace {

// Landlock rights newer than Debian 12's header.
constexpr std::uint64_t ll_truncate = 1ULL << 14;  // ABI 3

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

int landlock_create(const landlock_ruleset_attr* attr, std::size_t size, std::uint32_t flags) {
    return static_cast<int>(::syscall(SYS_landlock_create_ruleset, attr, size, flags));
}

}  // namespace

// Writes only below scratch (and to the nodes of /dev); reads are not restricted. Returns
// false when the kernel has no Landlock.
bool apply_landlock(const std::string& scratch, std::string& error) {
    const int abi = landlock_abi();
    if (abi <= 0) {
        error = "this kernel has no Landlock";
        return false;
    }
    std::uint64_t write_rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                                 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                                 LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
                                 LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                                 LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
    if (abi >= 2) {
        write_rights |= LANDLOCK_ACCESS_FS_REFER;
    }
    if (abi >= 3) {
        write_rights |= ll_truncate;
    }
    landlock_ruleset_attr attr{};
    attr.handled_access_fs = write_rights;
    const int rs = landlock_create(&attr, sizeof attr, 0);
    if (rs < 0) {
        error = errno_text("landlock_create_ruleset");
        return false;
    }
    const auto allow = [&](const std::string& path, std::uint64_t rights) {
        landlock_path_beneath_attr pb{};
        pb.allowed_access = rights;
        pb.parent_fd = ::open(path.c_str(), O_PATH | O_CLOEXEC);
        if (pb.parent_fd < 0) {
            return true;  // nothing there
        }
        const long r = ::syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
        ::close(pb.parent_fd);
        return r == 0;
    };
    bool ok = true;
    if (!scratch.empty()) {
        ok = allow(scratch, write_rights);
    }
    const std::uint64_t file_write = LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? ll_truncate : 0);
    ok = ok && allow("/dev", file_write);
    // No rule for the inherited stdin, stdout and stderr: they are pipes (or the sandbox's
    // own pty) that the shim relays, never the operator's files (reopening a host file
    // through /proc/self/fd/N would write it through the host's writable mount).
    if (!ok || ::syscall(SYS_landlock_restrict_self, rs, 0) != 0) {
        error = errno_text("landlock");
        ::close(rs);
        return false;
    }
    ::close(rs);
    return true;
}

// A seccomp filter for what no agent needs and what widens the kernel's attack surface or
// reaches around the other layers:
// - socket families are an allow list: AF_INET and AF_INET6 (the relays to cordon),
//   AF_NETLINK for NETLINK_ROUTE only (getifaddrs, `ip`: the sandbox's own network
//   namespace), AF_UNIX only when allowed (connect() to a host socket such as docker.sock is
//   not stopped by a read-only mount) and socketpair(AF_UNIX) always (it reaches nothing
//   outside). Everything else (AF_VSOCK: the hypervisor at CID 2, a path around the network
//   namespace; AF_ALG, AF_PACKET, AF_KEY, AF_XDP, ...) fails with EAFNOSUPPORT;
// - ioctl TIOCSTI and TIOCLINUX: typing into a terminal (the sandbox has no controlling
//   terminal of the operator's, but a terminal fd could still reach it);
// - io_uring (it could create sockets past this filter), new namespaces, the kernel
//   keyrings, bpf, perf events and userfaultfd (a favourite of kernel race exploits).
bool apply_seccomp(bool allow_unix_sockets) {
#if defined(__x86_64__)
    constexpr std::uint32_t arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
    constexpr std::uint32_t arch = AUDIT_ARCH_AARCH64;
#else
    return false;
#endif
    std::vector<sock_filter> f;
    const auto op = [&](std::uint16_t code, std::uint32_t k, std::uint8_t jt = 0,
                        std::uint8_t jf = 0) {
        f.push_back(sock_filter{code, jt, jf, k});
    };
    const auto ret = [&](std::uint32_t action) { op(BPF_RET | BPF_K, action); };
    const auto ret_errno = [&](int e) {
        ret(SECCOMP_RET_ERRNO | (static_cast<std::uint32_t>(e) & SECCOMP_RET_DATA));
    };
    // Loads the low 32 bits of argument `i`: the kernel reads socket()'s domain and
    // protocol as int and ioctl()'s request as unsigned int, so the high bits are ignored
    // by the kernel too and cannot hide a value from this filter.
    const auto load_arg = [&](int i) {
        op(BPF_LD | BPF_W | BPF_ABS,
           static_cast<std::uint32_t>(offsetof(seccomp_data, args) +
                                      static_cast<std::size_t>(i) * sizeof(std::uint64_t)));
    };
    const auto load_nr = [&] { op(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)); };
    op(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
    op(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0);
    ret(SECCOMP_RET_KILL_PROCESS);
    load_nr();
#if defined(__x86_64__)
    op(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1);  // the x32 ABI
    ret_errno(EPERM);
#endif
    for (const long nr : {SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
                          SYS_unshare, SYS_setns, SYS_keyctl, SYS_add_key, SYS_request_key, SYS_bpf,
                          SYS_perf_event_open, SYS_userfaultfd}) {
        op(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(nr), 0, 1);
        ret_errno(EPERM);
    }
    // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc use clone.
    op(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
    ret_errno(ENOSYS);
    constexpr std::uint32_t ns_flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                       CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP;
    op(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4);
    load_arg(0);
    op(BPF_JMP | BPF_JSET | BPF_K, ns_flags, 0, 1);
    ret_errno(EPERM);
    ret(SECCOMP_RET_ALLOW);

    // socket(domain, type, protocol): the allow list. (Jump offsets count the instructions
    // skipped: [+n] below is where each lands.)
    load_nr();
    op(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 10);  // not socket: the next block
    load_arg(0);
    op(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 7, 0);   // allow
    op(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 6, 0);  // allow
    op(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1);
    ret(allow_unix_sockets ? SECCOMP_RET_ALLOW : SECCOMP_RET_ERRNO | (EACCES & SECCOMP_RET_DATA));
    op(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 0, 2);  // else: refuse
    load_arg(2);
    op(BPF_JMP | BPF_JEQ | BPF_K, 0 /* NETLINK_ROUTE */, 1, 0);  // allow
    ret_errno(EAFNOSUPPORT);
    ret(SECCOMP_RET_ALLOW);

    // socketpair(domain, type, ...): AF_UNIX streams and seqpackets only. A datagram pair
    // is not bound to its peer: sendto() or connect() on it reaches any host datagram socket
    // by path (journald, syslog, /run/systemd/notify).
    load_nr();
    op(BPF_JMP | BPF_JEQ | BPF_K, SYS_socketpair, 0, 8);
    load_arg(0);
    op(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 4);  // else: refuse
    load_arg(1);
    op(BPF_ALU | BPF_AND | BPF_K, 0xf);                // SOCK_TYPE_MASK: without NONBLOCK/CLOEXEC
    op(BPF_JMP | BPF_JEQ | BPF_K, SOCK_STREAM, 2, 0);  // allow
    op(BPF_JMP | BPF_JEQ | BPF_K, SOCK_SEQPACKET, 1, 0);  // allow
    ret_errno(EAFNOSUPPORT);
    ret(SECCOMP_RET_ALLOW);

    // ioctl(fd, request, ...): no typing into a terminal.
    load_nr();
    op(BPF_JMP | BPF_JEQ | BPF_K, SYS_ioctl, 0, 5);
    load_arg(1);
    op(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 1, 0);
    op(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 0, 1);
    ret_errno(EPERM);
    ret(SECCOMP_RET_ALLOW);

    ret(SECCOMP_RET_ALLOW);  // everything else
    sock_fprog prog{static_cast<unsigned short>(f.size()), f.data()};
    return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0;
}

// In the command's process: no capabilities, ever again (also not through exec).
void drop_privileges(const std::optional<std::pair<uid_t, gid_t>>& user) {
    (void)::prctl(PR_SET_SECUREBITS, SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                         SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NOROOT |
                                         SECBIT_NOROOT_LOCKED);
    for (int cap = 0; cap <= 63; ++cap) {
        if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno == EINVAL) {
            break;  // past the last capability this kernel knows
        }
    }
    (void)::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (user) {
        const gid_t g = user->second;
        const uid_t u = user->first;
        if (::setgroups(0, nullptr) != 0 || ::setresgid(g, g, g) != 0 ||
            ::setresuid(u, u, u) != 0) {
            const std::string m = errno_text("cordon run: switching to the --user") + "\n";
            (void)::write(2, m.data(), m.size());
            ::_exit(125);
        }
    }
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    std::array<__user_cap_data_struct, 2> data{};
    if (::syscall(SYS_capset, &hdr, data.data()) != 0) {
        ::_exit(125);
    }
}

landlock_plan plan_landlock(int abi, bool required) {
    if (abi > 0) {
        return {true, true, ""};
    }
    if (required) {
        return {false, false,
                "this kernel has no Landlock and the job requires it "
                "(filesystem.landlock: optional runs on the read-only mounts alone)"};
    }
    return {true, false,
            "this kernel has no Landlock: never_write is enforced by the read-only mounts "
            "alone (the job allows it)"};
}

int landlock_abi() {
    const long v = ::syscall(SYS_landlock_create_ruleset, nullptr, 0,
                             LANDLOCK_CREATE_RULESET_VERSION);
    return v < 0 ? 0 : static_cast<int>(v);
}

}  // namespace cordon::shim
