// `cordon check-config FILE`: runs the loader and validator `cordon serve` uses and prints
// every error as FILE:LINE:COL: message.

#include <iostream>
#include <string>

#include "cli/verbs.hpp"
#include "config/decide.hpp"
#include "config/load.hpp"

namespace cordon::cli {
namespace {

constexpr std::string_view usage = R"(usage: cordon check-config [--config] FILE

Validates a cordon policy with the same loader and validator as `cordon serve`.
On success prints a one-line summary and exits 0. Otherwise prints every error,
one per line as FILE:LINE:COL: message, and exits 1. Warnings (a rule that can
never match because an earlier one takes its requests) go to stderr as
FILE:LINE:COL: warning: message and do not change the exit status.

options:
  -h, --help   show this help
)";

std::string summary(const config::policy& p) {
    std::string s = p.source + ": ok: " + std::to_string(p.jobs.size()) +
                    (p.jobs.size() == 1 ? " job, " : " jobs, ") + std::to_string(p.rule_count()) +
                    (p.rule_count() == 1 ? " egress rule; proxy " : " egress rules; proxy ") +
                    p.listen.proxy.to_string();
    s += p.listen.dns ? ", dns " + p.listen.dns->to_string() : ", no dns listener";
    s += p.listen.admin ? ", admin " + p.listen.admin->to_string() : ", no admin listener";
    return s;
}

// "FILE:LINE:COL: warning: message".
std::string warning_text(const config::diagnostic& w) {
    config::diagnostic d = w;
    d.message = "warning: " + d.message;
    return d.to_string();
}

}  // namespace

int check_config(args a) {
    if (wants_help(a)) {
        std::cout << usage;
        return 0;
    }
    std::string file;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i] == "--config" && i + 1 < a.size()) {
            file = std::string(a[++i]);
        } else if (a[i].starts_with("-") && a[i] != "-") {
            std::cerr << "cordon check-config: unknown option '" << a[i] << "'\n" << usage;
            return 2;
        } else if (file.empty()) {
            file = std::string(a[i]);
        } else {
            std::cerr << "cordon check-config: one FILE only\n" << usage;
            return 2;
        }
    }
    if (file.empty()) {
        std::cerr << "cordon check-config: missing FILE\n" << usage;
        return 2;
    }
    const config::load_result r =
        file == "-" ? config::load_policy(std::string(std::istreambuf_iterator<char>(std::cin),
                                                      std::istreambuf_iterator<char>()),
                                          "<stdin>")
                    : config::load_policy_file(file);
    if (!r.ok()) {
        for (const auto& e : r.errors) {
            std::cerr << e.to_string() << '\n';
        }
        std::cerr << file << ": " << r.errors.size()
                  << (r.errors.size() == 1 ? " error" : " errors") << '\n';
        return 1;
    }
    for (const auto& w : r.warnings) {
        std::cerr << warning_text(w) << '\n';
    }
    std::cout << summary(*r.value) << '\n';
    return 0;
}

}  // namespace cordon::cli
