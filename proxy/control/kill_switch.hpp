#pragma once
// The kill switch: the network kill flag every request reads, the kill state the store
// holds, the kills themselves (network, session) and the revive, and what could not yet be
// made durable (retried every second). Part of runtime (proxy/control/runtime.hpp), whose
// connections, audit log and event stream the kills act through.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/asio.hpp"
#include "proxy/control/state_backend.hpp"

namespace cordon::proxy::control {

class runtime;

/// What a kill call did, measured inside cordon.
struct kill_outcome {
    std::size_t connections_closed = 0;
    double elapsed_ms = 0;
    bool already = false;  ///< the kill was already in force
    std::size_t tokens_revoked = 0;
    bool persisted = true;  ///< written to the state store before returning
    std::string kill_id;    ///< "k-" + 16 hex: names the kill's record (fleet)
    /// With a fleet (runtime::cluster): every instance's figures.
    std::optional<fleet_outcome> fleet;
};

/// The network kill and the session kill, durable before they return (proxy/control/kill.cpp).
/// Threads: engaged() from any thread; everything else on the control thread.
class kill_switch {
public:
    explicit kill_switch(runtime& rt) : rt_(rt) {}
    kill_switch(const kill_switch&) = delete;
    kill_switch& operator=(const kill_switch&) = delete;

    /// Whether the network kill is engaged: every new request is refused while it is.
    /// Any thread; cheap (read by every request on the data path).
    bool engaged() const noexcept { return engaged_.load(std::memory_order_acquire); }
    /// The kill state as last engaged or lifted (reason, by, at). Control thread only.
    const kill_state& info() const noexcept { return info_; }
    /// At startup: the state the store held (or a fail-closed kill when it could not be read).
    void restore(const kill_state& s) {
        info_ = s;
        engaged_.store(s.engaged);
    }

    /// Engages the network kill: the flag first, then every live connection closed on its
    /// own worker while the state is written to the store.
    awaitable<kill_outcome> kill_network(const std::string& reason, const std::string& by);
    /// Lifts the network kill; `already` is set when none was engaged. Stays killed (and
    /// says persisted: false) when the store cannot take the change.
    kill_outcome revive(const std::string& reason, const std::string& by);
    /// Kills one session for good: tokens revoked, connections closed. nullopt: unknown.
    awaitable<std::optional<kill_outcome>> kill_session(const std::string& id,
                                                        const std::string& reason,
                                                        const std::string& by);

    /// Writes a session (after any change) to the state store; false if it could not (then
    /// it is kept as unsaved and written again by retry_unsaved()).
    bool persist_session(const std::string& id);
    /// Writes what could not be persisted before (the kill state, sessions) once the store
    /// takes writes again; called every second on the control thread.
    void retry_unsaved();
    /// Whether changes are durable now: the store is open and writes (state_store::check),
    /// and nothing is waiting to be written. `why` says what is wrong. Control thread.
    bool state_durable(std::string& why);

    // The fleet (docs/fleet.md). Control thread.
    /// Another instance engaged (or lifted) the network kill: the flag, every live connection
    /// closed, the event published. Returns how many were closed.
    awaitable<std::size_t> apply_fleet_network(const kill_state& s);
    /// This instance lost its store for cluster.store_timeout with fail_closed: the flag is
    /// engaged here only (nothing written), connections closed; lifted by release_local().
    awaitable<std::size_t> engage_local(const std::string& reason);
    void release_local();
    /// Whether the local (store lost) kill is engaged.
    bool local_engaged() const noexcept { return local_; }

private:
    runtime& rt_;
    std::atomic<bool> engaged_{false};
    kill_state info_;
    bool unsaved_ = false;  ///< info_ is not what the store holds
    bool local_ = false;    ///< engaged by engage_local() (not part of info_)
    std::set<std::string> unsaved_sessions_;
};

}  // namespace cordon::proxy::control
