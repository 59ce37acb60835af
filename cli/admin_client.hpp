#pragma once
// A small synchronous client for the admin API, for the CLI verbs. Light header.

#include <string>
#include <string_view>
#include <vector>

#include "cli/verbs.hpp"

namespace cordon::cli {

/// Where the admin API is and how to authenticate: `--admin URL` or CORDON_ADMIN
/// (default http://127.0.0.1:9090), `--admin-token-file F` or CORDON_ADMIN_TOKEN_FILE.
struct admin_target {
    std::string host = "127.0.0.1";
    std::string port = "9090";
    std::string token;
};

struct admin_response {
    int status = 0;
    std::string body;  ///< JSON
};

/// Reads the admin options out of `a` (removing them) and the environment. On error prints
/// why and returns false.
bool parse_admin_options(std::vector<std::string_view>& a, admin_target& out);

/// Sends one request; throws std::runtime_error with a clear message when the API cannot be
/// reached.
admin_response admin_call(const admin_target& t, std::string_view method, std::string_view path,
                          std::string_view json_body = {});

/// Prints an error response ("cordon: 404: no session s-..") to stderr; returns exit code 1.
int report_failure(std::string_view verb, const admin_response& r);

}  // namespace cordon::cli
