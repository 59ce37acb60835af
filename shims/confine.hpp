#pragma once
// Confining the sandbox's command just before exec: Landlock (writes only beneath scratch),
// capabilities dropped for good (optionally a --user), and a seccomp deny list. Each runs in
// the forked command's process; see docs/shim.md for what each stops.

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>

namespace cordon::shim {

/// The Landlock ABI version the kernel offers, 0 without Landlock.
int landlock_abi();

/// Whether to run and with what, given the kernel's Landlock ABI (0: none) and the job's
/// `filesystem.landlock`. Pure.
struct landlock_plan {
    bool run = false;
    bool use_landlock = false;
    std::string message;  ///< the refusal when !run, else a warning ("" when none)
};
landlock_plan plan_landlock(int abi, bool required);

/// Writes (create, write, truncate, remove, rename, link, mknod) only beneath `scratch`
/// ("" = nowhere), to the nodes of /dev and to the inherited stdio files; reads are not
/// restricted. Needs no_new_privs. False (and `error`) when the kernel refuses.
bool apply_landlock(const std::string& scratch, std::string& error);

/// No capabilities, ever again (bounding set, ambient, securebits locked), after switching
/// to `user` when given. Exits the process (125) if that cannot be done.
void drop_privileges(const std::optional<std::pair<uid_t, gid_t>>& user);

/// The seccomp deny list (AF_UNIX sockets unless allowed, io_uring, namespaces, keyrings,
/// bpf, perf events, foreign architectures). Needs no_new_privs.
bool apply_seccomp(bool allow_unix_sockets);

}  // namespace cordon::shim
