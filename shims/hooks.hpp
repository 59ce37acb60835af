#pragma once
// The job's identity hooks (identity.mint, identity.revoke): shell commands run on the
// host side, outside the sandbox, with a small environment, a timeout and bounded output.

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace cordon::shim {

struct hook_result {
    int exit_code = -1;  ///< 128+N when killed by signal N; -1 when it could not start
    bool timed_out = false;
    bool output_truncated = false;  ///< more than max_output bytes were printed
    std::string output;             ///< stdout, at most max_output bytes (a secret: never log it)
    std::chrono::milliseconds duration{0};
    bool ok() const { return exit_code == 0 && !timed_out && !output_truncated; }
};

/// Runs `/bin/sh -c command` with exactly `env` (NAME=VALUE), `input` on stdin, stderr
/// passed through, and kills it (its process group) after `timeout`.
hook_result run_hook(const std::string& command, const std::vector<std::string>& env,
                     const std::string& input, std::chrono::milliseconds timeout,
                     std::size_t max_output = 64 * 1024);

/// `output` without trailing whitespace (a credential printed with a newline).
std::string trim_credential(std::string output);

}  // namespace cordon::shim
