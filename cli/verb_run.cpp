// cordon run --job JOB [options] -- CMD...: the sandbox shim (shims/run.hpp).

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/admin_client.hpp"
#include "cli/verbs.hpp"
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
    const std::vector<std::string_view> valued{"--job", "--ttl", "--dns", "--admin-grace",
                                               "--scratch-size", "--hide"};
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
    cli_admin admin(target);
    try {
        return shim::run(o, admin);
    } catch (const std::exception& e) {
        std::cerr << "cordon run: " << e.what() << '\n';
        return 1;
    }
}

}  // namespace cordon::cli
