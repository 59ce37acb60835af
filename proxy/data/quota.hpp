#pragma once
// A session's quota as one request sees it: the session's usage (shared by its connections
// on every worker) against its job's limits (max_tunnels, max_bytes_up). The checks the
// connection made inline, as methods.

#include <cstdint>
#include <memory>
#include <optional>

#include "config/policy.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy::data {

/// The quota of one connection's session. Without a session (a client attributed by
/// `sources`) nothing is counted and everything is within limits. Holds at most one tunnel
/// slot, released by release_tunnel() or the destructor. One worker thread; the usage it
/// points to is shared (atomics).
class session_quota {
public:
    session_quota() = default;
    ~session_quota() { release_tunnel(); }
    session_quota(const session_quota&) = delete;
    session_quota& operator=(const session_quota&) = delete;

    /// Counts against `usage` from now on (nullptr: no session).
    void attach(std::shared_ptr<control::session_usage> usage) {
        release_tunnel();
        usage_ = std::move(usage);
    }
    bool attached() const noexcept { return usage_ != nullptr; }

    /// Takes a tunnel slot unless the session already holds `limits.max_tunnels`.
    bool take_tunnel(const config::job_limits& limits);
    void release_tunnel() noexcept;

    /// Bytes the session may still send up; nullopt when unlimited.
    std::optional<std::uint64_t> budget_left(const config::job_limits& limits) const;
    /// True when the upload budget is used up: a new CONNECT is refused (`budget`). Forwarded
    /// requests are refused per body chunk instead (admit_chunk), as they always were.
    bool budget_spent(const config::job_limits& limits) const {
        const auto left = budget_left(limits);
        return left && *left == 0;
    }
    /// A forwarded body's chunk of `n` bytes: counts it and returns true when it fits in
    /// what is left, else false and counts nothing (checked before the chunk goes up).
    bool admit_chunk(const config::job_limits& limits, std::uint64_t n);
    /// A tunnel's `n` bytes about to go up: counts them all and returns how many of them
    /// may pass (the relay ends when fewer than `n` may).
    std::uint64_t admit_up(const config::job_limits& limits, std::uint64_t n);

private:
    std::shared_ptr<control::session_usage> usage_;
    bool holds_slot_ = false;
};

}  // namespace cordon::proxy::data
