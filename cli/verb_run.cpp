// cordon run --job JOB [options] -- CMD...: the sandbox shim (shims/run.hpp).

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/admin_client.hpp"
#include "cli/verbs.hpp"
#include "common/error_text.hpp"
#include "config/units.hpp"
#include "shims/run.hpp"

namespace cordon::cli {
namespace {

constexpr std::string_view usage =
    "usage: cordon run --job JOB [options] [--] CMD [ARG...]\n\n"
    "Runs CMD sandboxed as a new session of JOB: new mount, PID, network, IPC and UTS\n"
    "namespaces, everything read-only but the job's scratch dir (a fresh tmpfs, gone at the\n"
    "end), never_write enforced again by Landlock, no capabilities, no network but relays to\n"
    "cordon's proxy (HTTPS_PROXY and friends, with the session's token) and DNS resolver, an\n"
    "environment built from nothing, and the job's identity hooks. A session kill, a network\n"
    "kill, SIGTERM/SIGINT, or losing the admin API for longer than the grace kills every\n"
    "process of the sandbox. CMD's exit status becomes cordon run's (137 when killed).\n\n"
    "options:\n"
    "  --job JOB             the job card (required)\n"
    "  --ttl DURATION        the session token's lifetime (default: the job's identity.ttl)\n"
    "  --dns HOST:PORT       cordon's DNS listener (default: listen.dns from /v1/status)\n"
    "  --admin-grace DUR     kill the sandbox after losing the admin API this long (10s)\n"
    "  --scratch-size SIZE   the scratch tmpfs's size (1GiB)\n"
    "  --hide PATH           make PATH unreadable in the sandbox (repeatable; the admin\n"
    "                        token file is always hidden)\n"
    "  --user USER[:GROUP]   run CMD as this user (name or number; default uid 0 without\n"
    "                        capabilities): root-only files become unreadable too\n"
    "  --allow-unix-sockets  let CMD create Unix sockets (refused by default: a read-only\n"
    "                        mount does not stop connect() to a host socket)\n"
    "  --tty                 give CMD a terminal of the sandbox's own (a pty relayed to\n"
    "                        this one, which is put in raw mode): for interactive use.\n"
    "                        Without it, stdin, stdout and stderr are pipes relayed by the\n"
    "                        shim: CMD never holds this terminal or these files\n"
    "  --quiet               only errors\n"
    "  --admin URL, --admin-token-file FILE (or CORDON_ADMIN, CORDON_ADMIN_TOKEN_FILE)\n"
    "See docs/shim.md for what the sandbox stops and what it does not.\n";

class cli_admin final : public shim::admin_port {
public:
    explicit cli_admin(admin_target t) : t_(std::move(t)) {}
    shim::admin_reply call(std::string_view method, std::string_view path,
                           std::string_view body) override {
        const admin_response r = admin_call(t_, method, path, body);
        return {r.status, r.body};
    }

private:
    admin_target t_;
};

// "nobody", "65534", "alice:staff", "1000:1000": uid and gid (the user's primary group
// when none is given).
std::optional<std::pair<unsigned, unsigned>> parse_user(std::string_view text) {
    const auto colon = text.find(':');
    const std::string user(text.substr(0, colon));
    const std::string group_name = colon == std::string_view::npos
                                       ? ""
                                       : std::string(text.substr(colon + 1));
    const auto number = [](const std::string& s) -> std::optional<unsigned> {
        if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
            return std::nullopt;
        }
        return static_cast<unsigned>(std::stoul(s));
    };
    std::optional<unsigned> uid = number(user);
    std::optional<unsigned> gid;
    if (const passwd* pw = uid ? nullptr : ::getpwnam(user.c_str())) {
        uid = pw->pw_uid;
        gid = pw->pw_gid;
    } else if (uid) {
        if (const passwd* pw2 = ::getpwuid(*uid)) {
            gid = pw2->pw_gid;
        }
    }
    if (!group_name.empty()) {
        gid = number(group_name);
        if (!gid) {
            if (const struct group* gr = ::getgrnam(group_name.c_str())) {
                gid = gr->gr_gid;
            }
        }
    }
    if (!uid) {
        return std::nullopt;
    }
    return std::make_pair(*uid, gid.value_or(*uid));
}

}  // namespace

int run(args a) {
    std::vector<std::string_view> opts;
    std::vector<std::string> command;
    bool in_command = false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (in_command) {
            command.emplace_back(a[i]);
        } else if (a[i] == "--") {
            in_command = true;
        } else {
            opts.push_back(a[i]);
        }
    }
    if (!in_command && wants_help(a)) {
        std::cout << usage;
        return 0;
    }
    admin_target target;
    std::string token_file;
    for (std::size_t i = 0; i + 1 < opts.size(); ++i) {
        if (opts[i] == "--admin-token-file") {
            token_file = std::string(opts[i + 1]);
        }
    }
    if (token_file.empty()) {
        if (const char* e = std::getenv("CORDON_ADMIN_TOKEN_FILE")) {
            token_file = e;
        }
    }
    if (!parse_admin_options(opts, target)) {
        return 2;
    }
    shim::run_options o;
    o.admin_host = target.host;
    o.admin_port = target.port;
    o.admin_token = target.token;
    o.admin_token_file = token_file;
    const std::vector<std::string_view> valued{"--job",          "--ttl",  "--dns", "--admin-grace",
                                               "--scratch-size", "--hide", "--user"};
    std::size_t i = 0;
    for (; i < opts.size(); ++i) {
        const std::string_view k = opts[i];
        const bool takes_value = std::find(valued.begin(), valued.end(), k) != valued.end();
        if (takes_value && i + 1 >= opts.size()) {
            std::cerr << "cordon run: " << k << " needs a value\n";
            return 2;
        }
        if (k == "--job") {
            o.job = std::string(opts[++i]);
        } else if (k == "--ttl") {
            o.ttl = std::string(opts[++i]);
        } else if (k == "--dns") {
            o.dns = std::string(opts[++i]);
        } else if (k == "--admin-grace") {
            const auto d = config::parse_duration(opts[++i]);
            if (!d || *d < std::chrono::milliseconds(100) || *d > std::chrono::hours(1)) {
                std::cerr << "cordon run: --admin-grace: expected a duration within 100ms..1h\n";
                return 2;
            }
            o.admin_grace = *d;
        } else if (k == "--scratch-size") {
            const auto s = config::parse_size(opts[++i]);
            if (!s || *s < 1024 * 1024) {
                std::cerr << "cordon run: --scratch-size: expected a size of at least 1MiB\n";
                return 2;
            }
            o.scratch_bytes = *s;
        } else if (k == "--hide") {
            o.hide.emplace_back(opts[++i]);
        } else if (k == "--user") {
            o.user = parse_user(opts[++i]);
            if (!o.user) {
                std::cerr << "cordon run: --user: unknown user or group '" << opts[i] << "'\n";
                return 2;
            }
        } else if (k == "--allow-unix-sockets") {
            o.allow_unix_sockets = true;
        } else if (k == "--tty") {
            o.tty = true;
        } else if (k == "--quiet") {
            o.quiet = true;
        } else if (!k.starts_with("-")) {
            break;  // the command, without a "--"
        } else {
            std::cerr << "cordon run: unknown option " << k << "\n\n" << usage;
            return 2;
        }
    }
    // `cordon run --job j CMD ARG...`: CMD starts at the first non-option.
    command.insert(command.begin(), opts.begin() + static_cast<std::ptrdiff_t>(i), opts.end());
    if (o.job.empty() || command.empty()) {
        std::cerr << "cordon run: --job JOB and a command are required\n\n" << usage;
        return 2;
    }
    o.command = std::move(command);
    if (o.tty && ::isatty(0) == 0) {
        std::cerr << "cordon run: --tty needs a terminal on stdin\n";
        return 2;
    }
    cli_admin admin(target);
    try {
        return shim::run(o, admin);
    } catch (const std::exception& e) {
        std::cerr << "cordon run: " << common::without_location(e) << '\n';
        return 1;
    }
}

}  // namespace cordon::cli
