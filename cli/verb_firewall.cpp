// `cordon firewall --policy FILE`: prints (or loads) the nftables ruleset that lets
// sandboxes reach only cordon's proxy and DNS listeners. The rules come from
// shims/firewall.hpp; this file parses options and runs `nft -f -`.

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/verbs.hpp"
#include "config/load.hpp"
#include "shims/firewall.hpp"

extern char** environ;

namespace cordon::cli {
namespace {

constexpr std::string_view usage =
    R"(usage: cordon firewall --policy FILE [--sandbox-iface NAME]... [--sandbox-cidr CIDR]...
                       [--cgroup PATH] [--kill] [--apply]

Prints an nftables ruleset (table `inet cordon`, IPv4 and IPv6) under which sandboxes reach
only cordon's proxy (TCP) and DNS (UDP and TCP) listeners, as set by listen.proxy and
listen.dns of the policy. Every other packet from a sandbox, TCP or UDP (QUIC included), to
this host or routed through it, is refused with a TCP reset or ICMP "administratively
prohibited"; the admin listener is never reachable. Spoofed source addresses are dropped by a
strict reverse-path check. With --kill every packet from a sandbox is dropped, cordon's
listeners included: the firewall layer of the network kill, which holds even when cordon is
down. Run again without --kill (and with --apply) to lift it. Name the sandboxes with
--sandbox-iface (best: every packet arriving on the interface, whatever its source address),
--sandbox-cidr (by source address only: a warning says what slips past), --cgroup, or several.

options:
  --policy FILE          the policy cordon serves (required; checked as by check-config)
  --sandbox-iface NAME   an interface that carries only sandboxes (a bridge such as docker0,
                         or veth/tap ends), e.g. docker0 or veth* (a trailing * matches every
                         name that starts so); repeatable. Everything arriving on it is a
                         sandbox packet: IPv6 link-local and unlisted sources included. With
                         --sandbox-cidr too, a packet from it whose source is outside the
                         prefixes is dropped. IPv6 neighbour discovery and router
                         solicitations pass; DHCP does not (give sandboxes static addresses).
                         cordon's own egress must leave by another interface (its listeners'
                         replies pass). --apply refuses a name that matches an interface
                         holding a default route now.
  --sandbox-cidr CIDR    a sandbox network, IPv4 or IPv6, e.g. 172.30.0.0/24 or fd00:c0::/64;
                         repeatable. Sandboxes here reach cordon on the listen addresses, so
                         those must be this host's address on that network, not loopback.
  --cgroup PATH          processes of this cgroup v2 on this host are sandboxes
                         (/sys/fs/cgroup/a/b, /a/b or a/b; it must exist when applied).
                         nft binds the cgroup's inode at load: a cgroup removed and created
                         again later (a service restart, a new container) is NOT matched
                         until the rules are applied again; prefer a parent that stays (a
                         slice holding only sandboxes; its children, new ones too, match)
  --kill                 drop everything from sandboxes (interfaces, prefixes and cgroup)
  --apply                load the ruleset with `nft -f -` (root): the table is replaced in
                         one transaction; prints nothing on success but a summary
  -h, --help             show this help

exit status: 0 ok, 1 policy error or nft failed, 2 usage error
)";

/// The interfaces that hold a default route (IPv4 or IPv6) now, from /proc/net/route and
/// /proc/net/ipv6_route (main routing table; lo's "unreachable" entry skipped).
std::vector<std::string> default_route_ifaces() {
    std::vector<std::string> out;
    const auto add = [&](const std::string& name) {
        if (name != "lo" && std::find(out.begin(), out.end(), name) == out.end()) {
            out.push_back(name);
        }
    };
    std::ifstream v4("/proc/net/route");
    std::string line;
    std::getline(v4, line);  // header
    for (int n = 0; n < 100000 && std::getline(v4, line); ++n) {
        std::istringstream f(line);
        std::string name, dest, gw, flags, refcnt, use, metric, mask;
        if (f >> name >> dest >> gw >> flags >> refcnt >> use >> metric >> mask &&
            dest == "00000000" && mask == "00000000") {
            add(name);
        }
    }
    std::ifstream v6("/proc/net/ipv6_route");
    for (int n = 0; n < 100000 && std::getline(v6, line); ++n) {
        std::istringstream f(line);
        std::string dest, plen, src, splen, hop, metric, refcnt, use, flags, name;
        if (f >> dest >> plen >> src >> splen >> hop >> metric >> refcnt >> use >> flags >> name &&
            plen == "00" && dest == std::string(32, '0')) {
            add(name);
        }
    }
    return out;
}

/// Runs `nft -f -` with `script` on its standard input. Returns nft's exit status, or -1
/// with `why` when it could not be run.
int run_nft(const std::string& script, std::string& why) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        why = std::string("pipe: ") + std::strerror(errno);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[0], STDIN_FILENO);
    char arg0[] = "nft";
    char arg1[] = "-f";
    char arg2[] = "-";
    char* argv[] = {arg0, arg1, arg2, nullptr};
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, "nft", &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[0]);
    if (rc != 0) {
        ::close(fds[1]);
        why = std::string("cannot run nft: ") + std::strerror(rc) +
              " (install the nftables package)";
        return -1;
    }
    // nft reads the whole script before it commits; a broken pipe just means it failed.
    const auto old = std::signal(SIGPIPE, SIG_IGN);
    std::size_t off = 0;
    while (off < script.size()) {
        const ssize_t n = ::write(fds[1], script.data() + off, script.size() - off);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        off += static_cast<std::size_t>(n);
    }
    ::close(fds[1]);
    std::signal(SIGPIPE, old);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            why = std::string("waitpid: ") + std::strerror(errno);
            return -1;
        }
    }
    if (!WIFEXITED(status)) {
        why = "nft was killed";
        return -1;
    }
    return WEXITSTATUS(status);
}

}  // namespace

int firewall(args a) {
    if (wants_help(a)) {
        std::cout << usage;
        return 0;
    }
    std::string policy_file;
    shim::firewall_spec spec;
    bool apply = false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const bool has_value = i + 1 < a.size();
        if (a[i] == "--policy" && has_value) {
            policy_file = std::string(a[++i]);
        } else if (a[i] == "--sandbox-cidr" && has_value) {
            const std::string err = shim::add_sandbox_cidr(a[++i], spec.sandbox_cidrs);
            if (!err.empty()) {
                std::cerr << "cordon firewall: " << err << '\n';
                return 2;
            }
        } else if (a[i] == "--sandbox-iface" && has_value) {
            const std::string err = shim::add_sandbox_iface(a[++i], spec.sandbox_ifaces);
            if (!err.empty()) {
                std::cerr << "cordon firewall: " << err << '\n';
                return 2;
            }
        } else if (a[i] == "--cgroup" && has_value) {
            if (spec.cgroup) {
                std::cerr << "cordon firewall: --cgroup given twice\n";
                return 2;
            }
            std::string err;
            spec.cgroup = shim::parse_cgroup_path(a[++i], err);
            if (!spec.cgroup) {
                std::cerr << "cordon firewall: " << err << '\n';
                return 2;
            }
        } else if (a[i] == "--kill") {
            spec.kill = true;
        } else if (a[i] == "--apply") {
            apply = true;
        } else {
            std::cerr << "cordon firewall: unexpected argument '" << a[i] << "'\n" << usage;
            return 2;
        }
    }
    if (policy_file.empty()) {
        std::cerr << "cordon firewall: --policy FILE is required\n" << usage;
        return 2;
    }
    if (spec.sandbox_ifaces.empty() && spec.sandbox_cidrs.empty() && !spec.cgroup) {
        std::cerr << "cordon firewall: name the sandboxes with --sandbox-iface, --sandbox-cidr "
                     "and/or --cgroup\n"
                  << usage;
        return 2;
    }
    const config::load_result loaded = config::load_policy_file(policy_file);
    if (!loaded.ok()) {
        for (const auto& e : loaded.errors) {
            std::cerr << e.to_string() << '\n';
        }
        std::cerr << "cordon firewall: " << policy_file << ": invalid policy\n";
        return 1;
    }
    spec.proxy = loaded.value->listen.proxy;
    spec.dns = loaded.value->listen.dns;
    spec.source = policy_file;
    const shim::firewall_result r = shim::make_firewall(spec);
    if (!r.ok()) {
        for (const auto& e : r.errors) {
            std::cerr << "cordon firewall: " << policy_file << ": " << e << '\n';
        }
        return 1;
    }
    for (const auto& w : r.warnings) {
        std::cerr << "cordon firewall: warning: " << w << '\n';
    }
    if (!apply) {
        std::cout << r.ruleset;
        return 0;
    }
    // A sandbox interface that also carries this host's default route would cut the host off
    // its administrators (an uplink, or a bridge shared with the LAN): refuse, change nothing.
    for (const auto& uplink : default_route_ifaces()) {
        for (const auto& p : spec.sandbox_ifaces) {
            if (shim::iface_matches(p, uplink)) {
                std::cerr << "cordon firewall: --sandbox-iface " << p << " matches " << uplink
                          << ", which holds this host's default route: everything arriving "
                             "on it would be treated as a sandbox's; name only interfaces "
                             "that carry sandboxes. The previous ruleset, if any, is "
                             "unchanged\n";
                return 1;
            }
        }
    }
    std::string why;
    const int rc = run_nft(r.ruleset, why);
    if (rc != 0) {
        std::cerr << "cordon firewall: "
                  << (rc < 0 ? why : "nft -f - failed (status " + std::to_string(rc) + ")")
                  << "; the previous ruleset, if any, is unchanged\n";
        return 1;
    }
    std::cout << "cordon firewall: table inet " << shim::firewall_table << " loaded"
              << (spec.kill ? " in KILL mode: sandboxes reach nothing\n"
                            : ": sandboxes reach only cordon's proxy and DNS\n");
    return 0;
}

}  // namespace cordon::cli
