#pragma once
// `cordon run --job JOB -- CMD...`: creates a session for JOB through the admin API, runs
// CMD in the sandbox (shims/sandbox.hpp) with relays to cordon (shims/relay.hpp), follows
// the session's events and kills the whole sandbox within a second of a kill, runs the
// job's identity hooks (shims/hooks.hpp), audits scratch writes, and ends the session when
// CMD exits. See docs/shim.md.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cordon::shim {

struct admin_reply {
    int status = 0;
    std::string body;
};

/// The admin API as the shim uses it. `call` may run on any thread (each call is its own
/// connection) and throws std::runtime_error when the API cannot be reached.
class admin_port {
public:
    virtual ~admin_port() = default;
    virtual admin_reply call(std::string_view method, std::string_view path,
                             std::string_view json_body) = 0;
};

struct run_options {
    std::string job;
    std::vector<std::string> command;
    std::string admin_host;  ///< for the event stream; `admin_port` serves the calls
    std::string admin_port;
    std::string admin_token;
    std::string admin_token_file;    ///< hidden from the sandbox
    std::optional<std::string> ttl;  ///< session ttl ("10m"); default the job's
    std::optional<std::string> dns;  ///< cordon's DNS "HOST:PORT"; default from /v1/status
    std::chrono::milliseconds admin_grace{10'000};
    std::uint64_t scratch_bytes = 1ull << 30;
    std::vector<std::string> hide;                      ///< host paths the sandbox may not read
    std::optional<std::pair<unsigned, unsigned>> user;  ///< --user: uid, gid of the command
    bool allow_unix_sockets = false;                    ///< --allow-unix-sockets
    /// --tty: the sandbox gets a pty of its own as its terminal, relayed to the shim's (which
    /// must be a terminal); without it, stdin, stdout and stderr are pipes the shim relays.
    bool tty = false;
    bool quiet = false;
};

/// DELETE /v1/sessions/ID: tried up to `attempts` times while the admin API cannot be
/// reached or answers 5xx (a restart, say), waiting `backoff`, then twice as long each time.
/// True when the session is ended (or gone: 404); false with `err` otherwise.
bool end_session_call(admin_port& a, const std::string& id, int attempts,
                      std::chrono::milliseconds backoff, std::string& err);

/// Runs it all; returns the shim's exit code: CMD's status, 137 when the sandbox was
/// killed (kill event, signal, lost admin API), 1 when it could not start.
int run(const run_options& o, admin_port& admin);

}  // namespace cordon::shim
