// The `cordon` binary: one verb per command; `cordon --help` lists them.

#include <array>
#include <exception>
#include <iostream>
#include <string_view>
#include <vector>

#include "cli/verbs.hpp"
#include "common/error_text.hpp"

namespace {

struct verb {
    std::string_view name;
    std::string_view summary;
    int (*run)(cordon::cli::args);
};

constexpr std::array<verb, 14> verbs{{
    {"serve", "run the proxy and admin API on a policy", cordon::cli::serve},
    {"check-config", "validate a policy file; print every error as FILE:LINE:COL",
     cordon::cli::check_config},
    {"session", "create, list or end sessions (admin API)", cordon::cli::session},
    {"status", "listeners, policy, audit health, sessions (admin API)", cordon::cli::status},
    {"kill", "network kill (--all) or session kill, with --reason", cordon::cli::kill},
    {"revive", "lift a network kill, with --reason", cordon::cli::revive},
    {"token", "token revoke SESSION [TOKEN]: credential kill", cordon::cli::token},
    {"audit", "audit timeline SESSION: one session's events, for a post-mortem",
     cordon::cli::audit},
    {"run", "run a command sandboxed as a new session of a job (the shim)", cordon::cli::run},
    {"firewall", "nftables rules: sandboxes reach only cordon (--kill: nothing)",
     cordon::cli::firewall},
    {"worksheet", "the containment worksheet of a job, from what is enforced",
     cordon::cli::worksheet},
    {"policy", "suggest | replay: an allowlist learned from the audit log / tried on it",
     cordon::cli::policy},
    {"ca", "ca init DIR: the CA that protocol: https rules terminate TLS with", cordon::cli::ca},
    {"connect", "connect HOST PORT: a tunnel through cordon on stdin/stdout (ssh ProxyCommand)",
     cordon::cli::connect},
}};

void print_usage(std::ostream& out) {
    out << "usage: cordon <verb> [options]\n\n"
           "cordon is an egress proxy and kill switch for AI-agent sandboxes.\n\n"
           "verbs:\n";
    for (const auto& v : verbs) {
        out << "  " << v.name << std::string(16 - v.name.size(), ' ') << v.summary << '\n';
    }
    out << "\noptions:\n"
           "  -h, --help      show this help (and `cordon <verb> --help` for a verb)\n"
           "  --version       print the version\n";
}

}  // namespace

namespace cordon::cli {

bool wants_help(args a) {
    for (const auto& s : a) {
        if (s == "-h" || s == "--help") {
            return true;
        }
    }
    return false;
}

}  // namespace cordon::cli

int main(int argc, char** argv) {
    const std::vector<std::string_view> all(argv + (argc > 0 ? 1 : 0), argv + argc);
    if (all.empty()) {
        print_usage(std::cerr);
        return 2;
    }
    const std::string_view first = all.front();
    if (first == "-h" || first == "--help" || first == "help") {
        print_usage(std::cout);
        return 0;
    }
    if (first == "--version" || first == "version") {
        std::cout << "cordon " << CORDON_VERSION << '\n';
        return 0;
    }
    for (const auto& v : verbs) {
        if (v.name == first) {
            // A verb reports what it expects to go wrong; this is for what it does not, e.g.
            // an admin API answer of an unexpected shape: a line and exit 1, not an abort.
            try {
                return v.run(cordon::cli::args(all).subspan(1));
            } catch (const std::exception& e) {
                std::cerr << "cordon " << first
                          << ": unexpected error: " << cordon::common::without_location(e) << '\n';
                return 1;
            }
        }
    }
    std::cerr << "cordon: unknown verb '" << first << "'\n\n";
    print_usage(std::cerr);
    return 2;
}
