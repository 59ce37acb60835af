#pragma once
// `cordon serve`: the daemon's entry point. Light header: no Asio.

#include <string>

namespace cordon::proxy {

struct daemon_options {
    std::string config_path;
    std::string ready_file;  ///< when set, written with the bound addresses once listening
    unsigned threads = 0;    ///< data-plane threads; 0 = one per core
};

/// Loads the policy (refusing to start on any error), binds the listeners, serves until
/// SIGTERM/SIGINT, then closes cleanly and flushes the audit log. Returns the exit code.
int run_daemon(const daemon_options& opts);

}  // namespace cordon::proxy
