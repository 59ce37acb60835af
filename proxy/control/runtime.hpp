#pragma once
// The daemon's shared state, a small hub: the policy pointer, sessions, audit, metrics and
// alerts, the kill switch (kill_switch.hpp) and the connection registry (connections.hpp)
// that kills and reloads act on. Internal to proxy/ (heavy: Asio).

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/asio.hpp"
#include "common/time.hpp"
#include "config/decide.hpp"
#include "dns/answered.hpp"
#include "proxy/alerts/denial_table.hpp"
#include "proxy/alerts/metrics.hpp"
#include "proxy/alerts/webhook.hpp"
#include "proxy/audit/audit.hpp"
#include "proxy/control/capacity.hpp"
#include "proxy/control/connections.hpp"
#include "proxy/control/events.hpp"
#include "proxy/control/kill_switch.hpp"
#include "proxy/control/sessions.hpp"
#include "proxy/control/state_backend.hpp"
#include "proxy/mcp/tools.hpp"

namespace cordon::proxy::inspect {
class inspector;
}

namespace cordon::proxy::control {

class lifelines;
class fleet;

/// Per-session usage shared by the session's connections on every worker.
struct session_usage {
    std::atomic<std::int64_t> tunnels{0};
    std::atomic<std::uint64_t> bytes_up{0};
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
    std::string_view kind;     ///< "connect", "http", "https" (inside an inspected tunnel) or "dns"
    std::uint64_t count = 1;   ///< identical attempts (the DNS server reports repeats at once)
};

/// The daemon's shared state, one per `cordon serve`; see each member for its thread.
class runtime {
public:
    runtime(std::string config_path, std::shared_ptr<const config::compiled_policy> p);

    std::shared_ptr<const config::compiled_policy> policy() const { return policy_.load(); }
    void set_policy(std::shared_ptr<const config::compiled_policy> p) {
        policy_.store(std::move(p));
    }
    const std::string& config_path() const { return config_path_; }
    /// TLS inspection (the policy's `inspect` section; proxy/inspect/inspector.hpp): null
    /// when the policy has none. Swapped with the policy on reload (set before it).
    std::shared_ptr<inspect::inspector> inspection() const { return inspection_.load(); }
    /// Also gives the audit log (set before) the broker's line filter: no record carries a
    /// secret's value (credential_broker::hide_values).
    void set_inspection(std::shared_ptr<inspect::inspector> i);

    common::wall_clock::time_point now() const { return common::wall_clock::now(); }
    audit::audit_record record(std::string_view event) const {
        return audit::audit_record(event, now());
    }
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

    /// Loads config_path again and swaps the policy in; live connections the new policy no
    /// longer allows are closed (policy_changed). Returns the errors, empty on success.
    /// Settings only a restart applies keep their running values (config::keep_restart_only);
    /// the names of those the file changed go to `needs_restart`.
    awaitable<std::string> reload(const std::string& by,
                                  std::vector<std::string>* needs_restart = nullptr);

    /// The network kill, the session kill and durability (proxy/control/kill_switch.hpp).
    kill_switch kill{*this};

    session_registry sessions;
    std::unique_ptr<audit::audit_log> audit_log_;
    /// SQLite (state_store) or etcd (etcd_store); null when it could not be opened (then killed).
    std::unique_ptr<state_backend> store;
    std::string store_error;
    /// The fleet (the policy's `cluster`: proxy/control/fleet.hpp), owned by `store` (the
    /// etcd_store); null without one. Control thread.
    fleet* cluster = nullptr;
    /// This instance's name in a fleet (cluster.instance); empty without one.
    std::string instance;
    std::unique_ptr<event_bus> events;  ///< control thread only
    /// `cordon run`'s lifelines (proxy/control/lifelines.hpp); made by the admin API on first use.
    /// Control thread only.
    std::shared_ptr<lifelines> lifelines_;
    alerts::metrics stats;
    alerts::denial_table denials;  ///< top denied targets per job (GET /v1/denials)
    /// The MCP tool definitions each session has seen (docs/mcp.md "Pinning"); every worker
    /// shares them; a session's go with its usage (forget_usage).
    mcp::pin_store mcp_pins;
    /// The names cordon's resolver answered with each address, per job and session, within
    /// their TTL (dns/answered.hpp): a SOCKS5 address target is decided as such a name.
    /// Written by the DNS threads, read by the workers (it locks).
    dns::answered_names answered;
    /// The alert webhook (alerts.webhook); set by the daemon before the workers start.
    std::unique_ptr<alerts::denial_notifier> notifier;
    /// The workers and the connections open on them (proxy/control/connections.hpp).
    /// Declared after what its connections use, so destroyed before that.
    connection_registry connections;
    self_addresses self;
    config::endpoint proxy_endpoint;
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
    std::atomic<std::shared_ptr<inspect::inspector>> inspection_;
    std::mutex usage_mu_;
    std::unordered_map<std::string, std::shared_ptr<session_usage>> usage_;
};

}  // namespace cordon::proxy::control
