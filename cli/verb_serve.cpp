// `cordon serve --config FILE`: runs the proxy and admin listeners.

#include <iostream>
#include <string>

#include "cli/verbs.hpp"
#include "proxy/daemon.hpp"

namespace cordon::cli {
namespace {

constexpr std::string_view usage =
    R"(usage: cordon serve --config FILE [--ready-file PATH] [--threads N]

Runs cordon: the egress proxy and the admin API, on the policy in FILE. Refuses to
start on any policy error (printed as by `cordon check-config`), an unreadable admin
token file or an unwritable audit log.

  SIGTERM, SIGINT   stop accepting, close every connection, flush the audit log, exit 0
  SIGHUP            reload FILE; an invalid policy is refused and the old one stays

options:
  --config FILE       the policy (required)
  --ready-file PATH   once listening, write {"proxy": ADDR, "admin": ADDR, "pid": N}
                      there (useful with port 0)
  --threads N         data-plane threads (default: one per core)
  -h, --help          show this help
)";

}  // namespace

int serve(args a) {
    if (wants_help(a)) {
        std::cout << usage;
        return 0;
    }
    proxy::daemon_options opts;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const bool has_value = i + 1 < a.size();
        if (a[i] == "--config" && has_value) {
            opts.config_path = std::string(a[++i]);
        } else if (a[i] == "--ready-file" && has_value) {
            opts.ready_file = std::string(a[++i]);
        } else if (a[i] == "--threads" && has_value) {
            try {
                const int n = std::stoi(std::string(a[++i]));
                if (n < 1 || n > 256) {
                    throw std::out_of_range("threads");
                }
                opts.threads = static_cast<unsigned>(n);
            } catch (const std::exception&) {
                std::cerr << "cordon serve: --threads takes a number 1..256\n";
                return 2;
            }
        } else {
            std::cerr << "cordon serve: unexpected argument '" << a[i] << "'\n" << usage;
            return 2;
        }
    }
    if (opts.config_path.empty()) {
        std::cerr << "cordon serve: --config FILE is required\n" << usage;
        return 2;
    }
    return proxy::run_daemon(opts);
}

}  // namespace cordon::cli
