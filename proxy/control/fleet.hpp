#pragma once
// The fleet as the rest of the daemon sees it (runtime::cluster): this instance's name, the
// instance registry, whether the shared state is reachable and current, and a kill's fleet-wide
// confirmations. Implemented by etcd_store (proxy/control/etcd_store.hpp). Control thread.

#include <chrono>
#include <string>
#include <vector>

#include "common/asio.hpp"
#include "proxy/control/fleet_state.hpp"
#include "proxy/control/state_backend.hpp"

namespace cordon::proxy::control {

class fleet {
public:
    virtual ~fleet() = default;

    /// This instance's name (cluster.instance).
    virtual const std::string& instance() const noexcept = 0;
    /// Names the kill the next write of this session's kill (or, `session` empty, of the
    /// network kill) belongs to: its fact carries the id the other instances confirm under.
    virtual void kill_id_for(const std::string& session, const std::string& kill_id) = 0;
    /// After a kill given here was made durable and closed what it cut here: writes its record
    /// and this instance's confirmation (both committed by etcd before this returns), then
    /// waits, at most cluster.kill_wait, for every other registered instance's confirmation.
    /// `persisted` false: nothing is waited for (the others learn of it once it is written).
    virtual awaitable<fleet_outcome> gather(const fleet_kill& kill,
                                            const instance_confirmation& mine,
                                            std::chrono::steady_clock::time_point t0,
                                            bool persisted) = 0;
    /// Up (etcd answers) and caught up (the watch has applied what etcd held when it
    /// reconnected): only then are new sessions created.
    virtual bool serving() const = 0;
    /// etcd answers (the last keepalive succeeded).
    virtual bool store_up() const = 0;
    /// The registry, by name.
    virtual std::vector<fleet_instance> instances() const = 0;
    /// One line on the store's health, for /v1/status.
    virtual std::string describe() const = 0;
    /// Once a second (the daemon's sweep): metrics, fail_closed, a whole reload if asked.
    virtual void tick() = 0;
    /// A kill or end given here for a session this instance has not learnt of yet (made on
    /// another instance a moment ago): its facts read from etcd now and folded in. True if
    /// etcd has it. Blocks the control thread for a few reads (the admin path, never the
    /// request path).
    virtual bool fetch_session(const std::string& id) = 0;
    /// A session just created here (POST /v1/sessions): written to etcd, committed before this
    /// returns true; false, with `error`, if etcd did not take it (then no session may be
    /// handed out). The control thread is not blocked meanwhile: the write goes, batched with
    /// the other creates of the moment, on a thread of its own.
    virtual awaitable<bool> save_new_session(const stored_session& s, std::string& error) = 0;
};

}  // namespace cordon::proxy::control
