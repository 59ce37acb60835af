#pragma once
// What the shim reads from the admin API's answers: the job card (GET /v1/jobs/NAME) and
// listener addresses ("127.0.0.1:3128", "[::1]:53"). Pure.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shims/env.hpp"
#include "shims/relay.hpp"

namespace cordon::shim {

/// The parts of a job card the shim enforces.
struct job_card {
    std::string scratch;  ///< "" when the job has none
    std::vector<std::string> never_write;
    bool landlock_required = true;
    std::vector<env_request> env;
    std::string mint;       ///< "" when none
    std::string mint_env;   ///< "" = CORDON_IDENTITY (unless mint_file)
    std::string mint_file;  ///< a file name in scratch
    std::string revoke;     ///< "" when none
};

/// Parses GET /v1/jobs/NAME's JSON; nullopt with `err` when filesystem, env or identity is
/// missing or not what it should be.
std::optional<job_card> parse_job_card(std::string_view json, std::string& err);

/// "127.0.0.1:3128", "[::1]:53" -> host and port (1..65535); 0.0.0.0 and :: become
/// loopback. nullopt when malformed.
std::optional<relay_target> parse_host_port(std::string_view s);

}  // namespace cordon::shim
