#pragma once
// The byte relay of a tunnel: two directions pumped at once, half-close passed on, an idle
// watchdog, and per-direction accounting. Internal to proxy/ (Asio).

#include <chrono>
#include <cstdint>
#include <functional>

#include "proxy/runtime.hpp"

namespace cordon::proxy {

/// What the relay reports and asks as it runs. Called on the worker's thread.
struct relay_hooks {
    /// Bytes about to go client -> upstream; returns how many of them may pass (the upload
    /// budget). Passing fewer than asked ends the relay.
    std::function<std::size_t(std::size_t)> allow_up;
    std::chrono::milliseconds idle_timeout{300'000};
    /// When set, every chunk relayed is counted here as it passes (cordon_bytes_total), so
    /// long tunnels show in the byte rate while they run, not only when they close.
    job_metrics* bytes = nullptr;
};

struct relay_result {
    std::uint64_t bytes_up = 0;
    std::uint64_t bytes_down = 0;
    bool idle = false;           ///< ended by the idle watchdog
    bool budget = false;         ///< ended because allow_up refused bytes
    error_code error;            ///< first unexpected error, if any
};

/// Relays until both directions have ended (EOF each way, passed on as a half-close), an
/// error, the idle timeout, the budget, or either socket being closed from outside (a kill).
/// Sockets are switched to non-blocking mode; reads go through the worker's shared buffer.
awaitable<relay_result> relay(worker& w, tcp::socket& client, tcp::socket& upstream,
                              const relay_hooks& hooks);

}  // namespace cordon::proxy
