#pragma once
// The daemon's shared state: the policy pointer, sessions, audit, the data-plane workers
// and the live connections kills and reloads act on. Internal to proxy/ (heavy: Asio).

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/time.hpp"
#include "config/decide.hpp"
#include "dns/resolver.hpp"
#include "common/asio.hpp"
#include "proxy/audit/audit.hpp"
#include "proxy/control/capacity.hpp"
#include "proxy/control/pipe_pool.hpp"
#include "proxy/alerts/denial_table.hpp"
#include "proxy/control/events.hpp"
#include "proxy/alerts/metrics.hpp"
#include "proxy/control/sessions.hpp"
#include "proxy/control/state_store.hpp"
#include "proxy/alerts/webhook.hpp"

namespace cordon::proxy::data {
class tunnel_relay;
}

namespace cordon::proxy::control {

class lifelines;

/// Per-session usage shared by the session's connections on every worker.
struct session_usage {
    std::atomic<std::int64_t> tunnels{0};
    std::atomic<std::uint64_t> bytes_up{0};
};

/// Something a kill, a revocation or a reload may have to close. Lives on one worker's
/// thread; registered there while open, and only touched from that thread.
class live_connection {
public:
    virtual ~live_connection() = default;
    /// Closes both sides now, recording `why` (a deny reason name, or "shutdown") as the
    /// close reason. Abortive (RST): nothing queued is delivered afterwards.
    void close(std::string_view why) {
        close_client(why);
        close_upstream();
    }
    /// The two halves of close(), for kills that cut every client first.
    virtual void close_client(std::string_view why) = 0;
    virtual void close_upstream() = 0;

    std::string session;   ///< empty for clients attributed by `sources`
    std::string token_id;
    std::string job;
    std::string host;      ///< as decided (normalised name or literal)
    std::uint16_t port = 0;
    config::request_kind kind = config::request_kind::connect;
    std::string method;
    /// The upstream address connected to, while there is one: a reload re-checks it
    /// against the new rule's resolves_to, as a new connection's resolution would be.
    std::optional<config::ip_address> address;

    /// `d`, the decision for this connection's request now, checked against that address:
    /// private_address when the matching rule no longer lets it reach a non-public one
    /// (config::check_addresses). A literal host's address was decided with the request.
    config::decision check_connected(const config::decision& d) const;
};


/// One data-plane thread: its io_context, resolver, relay buffer and live connections.
struct worker {
    explicit worker(std::size_t i) : index(i) {}
    // Declaration order is destruction order reversed: the io_context (and with it any
    // connection still suspended in it) goes before `live` and the buffer it uses, and the
    // resolver, which holds descriptors on the io_context, goes before the io_context.
    std::size_t index;
    std::unordered_map<std::uint64_t, live_connection*> live;
    data::tunnel_relay* relays = nullptr;  ///< established tunnels, for the idle sweep
    /// Shared by every tunnel of this thread: a relay reads into it and writes out at once;
    /// only a write that would block copies its remainder to the tunnel. So idle tunnels
    /// hold no buffer.
    std::vector<char> relay_buffer = std::vector<char>(256 * 1024);
    pipe_pool pipes;
    net::io_context ioc{1};
    /// Keeps run() going when the acceptor closes and no connection is left, so that
    /// shutdown can still post work here; released by ioc.stop() at the very end.
    net::executor_work_guard<net::io_context::executor_type> keep_running{ioc.get_executor()};
    /// The idle watchdog of this thread's established tunnels (`relays`): one timer
    /// sweeping an intrusive list (proxy/data/relay.cpp), not a timer and a wait per tunnel.
    net::steady_timer idle_sweep{ioc};
    bool sweep_armed = false;
    /// Control work (a kill, a reload's closing) posted here and not yet run. While it is
    /// non-zero a relay moves no data and yields at once, so the control handler is not
    /// queued behind a round of bulk transfers (milliseconds per busy tunnel).
    std::atomic<int> urgent{0};
    std::unique_ptr<dns::resolver> resolver;
    std::thread thread;
};

/// Addresses cordon listens on, so it never connects to itself.
struct self_addresses {
    std::vector<config::endpoint> listeners;  ///< as bound (real ports)
    std::vector<config::ip_address> local;    ///< this host's interface addresses
    bool is_self(const config::ip_address& a, std::uint16_t port) const;
};

/// One denied attempt, as the observers of denials see it (metrics, the top-N table of
/// denied targets, the webhook). Views: valid for the duration of runtime::denied().
struct denial {
    std::string_view job;      ///< "" when the client could not be attributed
    std::string_view session;  ///< "" for clients attributed by `sources` or not at all
    std::string_view reason;   ///< a deny reason name (config::to_string(deny_reason))
    std::string_view target;   ///< "host:port" (a URL when refused early: denied() redacts
                               ///< it), the name for DNS
    std::string_view kind;     ///< "connect", "http" or "dns"
    std::uint64_t count = 1;   ///< identical attempts (the DNS server reports repeats at once)
};

/// What a kill call did, measured inside cordon.
struct kill_outcome {
    std::size_t connections_closed = 0;
    double elapsed_ms = 0;
    bool already = false;  ///< the kill was already in force
    std::size_t tokens_revoked = 0;
    bool persisted = true;  ///< written to the state store before returning
};

class runtime {
public:
    runtime(std::string config_path, std::shared_ptr<const config::compiled_policy> p);

    std::shared_ptr<const config::compiled_policy> policy() const { return policy_.load(); }
    void set_policy(std::shared_ptr<const config::compiled_policy> p) { policy_.store(std::move(p)); }
    const std::string& config_path() const { return config_path_; }

    common::wall_clock::time_point now() const { return common::wall_clock::now(); }
    audit::audit_record record(std::string_view event) const { return audit::audit_record(event, now()); }
    /// Writes an audit record; false when the log is unhealthy (callers fail closed).
    bool audit(audit::audit_record&& r);
    /// audit(), then waits (bounded, blocking this thread) until the record is fdatasync()ed:
    /// for kills, revives and revocations, on disk before their call returns.
    bool audit_durable(audit::audit_record&& r);
    bool audit_healthy() const;
    /// Every denied attempt (proxy and DNS) passes here after it was audited. Called on
    /// data-plane threads: cheap and never blocking.
    void denied(const denial& d);

    std::shared_ptr<session_usage> usage_for(const std::string& session);
    void forget_usage(const std::string& session);

    /// Runs `fn` on every worker's thread in turn and sums what it returns.
    /// Callers pass named objects, never temporaries (see GCC PR 100611 in client.cpp).
    /// All workers run `fn` in parallel; `meanwhile` runs here while they do.
    awaitable<std::size_t> on_workers(const std::function<std::size_t(worker&)>& fn,
                                      const std::function<void()>& meanwhile = {});
    /// Closes every live connection `pred` selects, on its own thread; returns how many.
    awaitable<std::size_t> close_where(const std::function<bool(const live_connection&)>& pred,
                                       const std::string& why,
                                       const std::function<void()>& meanwhile = {});

    /// Loads config_path again and swaps the policy in; live connections the new policy no
    /// longer allows are closed (policy_changed). Returns the errors, empty on success.
    /// Settings only a restart applies keep their running values (config::keep_restart_only);
    /// the names of those the file changed go to `needs_restart`.
    awaitable<std::string> reload(const std::string& by,
                                  std::vector<std::string>* needs_restart = nullptr);

    // The kill switch (proxy/control/kill.cpp). Calls run on the control thread; the flag is read
    // by every request on the data path.
    awaitable<kill_outcome> kill_network(const std::string& reason, const std::string& by);
    /// Lifts the network kill; `already` is set when none was engaged.
    kill_outcome revive(const std::string& reason, const std::string& by);
    /// Kills one session for good: tokens revoked, connections closed. nullopt: unknown.
    awaitable<std::optional<kill_outcome>> kill_session(const std::string& id,
                                                        const std::string& reason,
                                                        const std::string& by);
    /// Writes a session (after any change) to the state store; false if it could not (then
    /// it is kept in unsaved_sessions and written again by retry_unsaved()).
    bool persist_session(const std::string& id);
    /// Writes what could not be persisted before (the kill state, sessions) once the store
    /// takes writes again; called every second on the control thread.
    void retry_unsaved();
    /// Whether changes are durable now: the store is open and writes (state_store::check),
    /// and nothing is waiting to be written. `why` says what is wrong. Control thread.
    bool state_durable(std::string& why);
    std::atomic<bool> network_killed{false};
    kill_state kill_info;  ///< control thread only
    bool kill_unsaved = false;  ///< kill_info is not what the store holds (control thread)
    std::set<std::string> unsaved_sessions;  ///< control thread only

    session_registry sessions;
    std::unique_ptr<audit::audit_log> audit_log_;
    std::unique_ptr<state_store> store;  ///< null when it could not be opened (then killed)
    std::string store_error;
    std::unique_ptr<event_bus> events;   ///< control thread only
    /// `cordon run`'s lifelines (proxy/control/lifelines.hpp); made by the admin API on first use.
    /// Control thread only.
    std::shared_ptr<lifelines> lifelines_;
    alerts::metrics stats;
    alerts::denial_table denials;  ///< top denied targets per job (GET /v1/denials)
    /// The alert webhook (alerts.webhook); set by the daemon before the workers start.
    std::unique_ptr<alerts::denial_notifier> notifier;
    std::vector<std::unique_ptr<worker>> workers;
    self_addresses self;
    config::endpoint proxy_endpoint;
    std::atomic<std::uint64_t> next_connection_id{1};
    std::atomic<std::int64_t> open_connections{0};
    /// Admin API connections open (control thread; atomic for the accept loop's check).
    std::atomic<std::int64_t> admin_connections{0};
    std::int64_t event_streams = 0;  ///< GET /v1/events streams open (control thread)
    /// The descriptor budget the listeners were capped by (proxy/control/capacity.hpp).
    capacity limits;
    std::atomic<std::uint64_t> reloads_ok{0};
    std::atomic<std::uint64_t> reloads_failed{0};
    common::wall_clock::time_point started = common::wall_clock::now();

private:
    std::string config_path_;
    std::atomic<std::shared_ptr<const config::compiled_policy>> policy_;
    std::mutex usage_mu_;
    std::unordered_map<std::string, std::shared_ptr<session_usage>> usage_;
};

}  // namespace cordon::proxy::control
