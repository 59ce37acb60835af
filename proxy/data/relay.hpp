#pragma once
// The byte relay of a tunnel: two directions pumped at once, half-close passed on, idleness
// noted for the worker's sweep, and per-direction accounting. Internal to proxy/ (Asio).
//
// Callbacks, not coroutines: an established tunnel may sit idle for minutes, and a suspended
// coroutine chain costs kilobytes of frames per tunnel. An idle tunnel_relay holds its two
// sockets' reactor state, itself and two pending waits (a read each way): no buffer, no
// pipe, no timer (the worker sweeps its tunnels for idleness with one timer).

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "proxy/control/runtime.hpp"

namespace cordon::proxy::data {

/// What the relay reports and asks as it runs. Called on the worker's thread.
struct relay_hooks {
    /// Bytes about to go client -> upstream; returns how many of them may pass (the upload
    /// budget). Passing fewer than asked ends the relay.
    std::function<std::size_t(std::size_t)> allow_up;
    std::chrono::milliseconds idle_timeout{300'000};
    /// When set, every chunk relayed is counted here as it passes (cordon_bytes_total), so
    /// long tunnels show in the byte rate while they run, not only when they close.
    alerts::job_metrics* bytes = nullptr;
};

struct relay_result {
    std::uint64_t bytes_up = 0;
    std::uint64_t bytes_down = 0;
    bool idle = false;    ///< ended by the worker's idle sweep
    bool budget = false;  ///< ended because allow_up refused bytes
    error_code error;     ///< first unexpected error, if any
};

/// Told once, on the worker's thread, that the relay has ended.
class relay_owner {
public:
    virtual void relay_done(const relay_result& r) = 0;

protected:
    ~relay_owner() = default;
};

/// Relays until both directions have ended (EOF each way, passed on as a half-close), an
/// error, the idle timeout, the budget, or either socket being closed from outside (a kill).
/// Sockets are switched to non-blocking mode; bytes move with splice(2) through a pipe held
/// only while a direction has data, or through the worker's shared buffer.
class tunnel_relay {
public:
    /// The sockets and the owner must outlive every pending operation: `start`'s `keep`
    /// holds them (typically the owner, of which this relay is a member).
    tunnel_relay(control::worker& w, tcp::socket& client, tcp::socket& upstream, relay_hooks hooks);
    tunnel_relay(const tunnel_relay&) = delete;
    tunnel_relay& operator=(const tunnel_relay&) = delete;
    ~tunnel_relay();

    /// Starts both directions and joins the worker's idle sweep. Every pending operation
    /// holds a copy of `keep`; `owner.relay_done` is called once, when both directions
    /// have ended.
    void start(const std::shared_ptr<void>& keep, relay_owner& owner);

private:
    using keep_t = std::shared_ptr<void>;

    struct direction {
        tcp::socket* from = nullptr;
        tcp::socket* to = nullptr;
        bool up = false;
        bool use_splice = true;  ///< false once splice proved impossible here
        bool bulk = false;       ///< copied until a large read shows bulk data
        bool done = false;
        int pipe[2] = {-1, -1};  ///< open only while this direction has data in flight
        bool spliced = false;    ///< the chunk in hand is in the pipe (else in the buffer)
        std::size_t held = 0;    ///< bytes in the pipe
        std::size_t read = 0;    ///< bytes of the chunk in hand, as read
        std::size_t pass = 0;    ///< ... of which the budget lets through
        std::size_t left = 0;    ///< ... of which are not yet written (splice path)
        std::vector<char> rest;  ///< copy path: what a would-block write left over
    };

    void pump(direction& d, const keep_t& keep);
    bool send(direction& d, const keep_t& keep);
    bool account(direction& d);
    void fail(const error_code& ec);
    void note(const error_code& ec);
    void end(direction& d);
    void link();
    void unlink();
    static void arm_sweep(control::worker& w);
    static void sweep(control::worker& w);
    bool open_pipe(direction& d);
    void close_pipe(direction& d);

    control::worker& w_;
    tcp::socket& client_;
    tcp::socket& upstream_;
    relay_hooks hooks_;
    relay_owner* owner_ = nullptr;
    relay_result result_;
    std::chrono::steady_clock::time_point last_activity_;
    tunnel_relay* prev_ = nullptr;  ///< the worker's list of relays (idle sweep)
    tunnel_relay* next_ = nullptr;
    bool linked_ = false;
    direction up_;
    direction down_;
    bool finished_ = false;
};

}  // namespace cordon::proxy::data
