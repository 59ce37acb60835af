#pragma once
// Prometheus metrics (prefix cordon_), registered once at start; callers keep references,
// so counting on the data path is an atomic add, never a lookup. Light header: the
// prometheus-cpp types stay in metrics.cpp. The metrics are listed in docs/observability.md.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prometheus {
class Counter;
class Gauge;
}  // namespace prometheus

namespace cordon::proxy::alerts {

enum class kill_scope { network, session, credential };

/// The series of one job (or of unattributed clients, job label "(none)"). Created once
/// and never freed while the metrics object lives, so a pointer to it may be kept. Every
/// method is an atomic add: thread-safe and lock-free.
/// How a request inside an inspected TLS tunnel ended (cordon_http_requests_total).
enum class http_outcome : std::uint8_t { allowed, denied, would_deny, error };

class job_metrics {
public:
    /// A proxy request allowed and connected upstream (cordon_connections_total{decision=
    /// "allowed"}), and the relay it starts (cordon_active_tunnels, until tunnel_closed()).
    void count_allowed();
    /// A proxy request of a report-mode job that enforce mode would deny, let through and
    /// connected upstream (decision="would_deny"; counted instead of count_allowed()).
    void count_would_deny();
    void tunnel_opened();
    void tunnel_closed();
    /// Bytes relayed for this job, client -> upstream (up) or back (down).
    void count_bytes(bool up, std::uint64_t n);
    /// A request inside an inspected (TLS-terminated) tunnel: cordon_http_requests_total
    /// {job,decision}: allowed (answered by the upstream), denied (refused by cordon: the
    /// reason is in cordon_denied_total), would_deny (a report-mode job's), error (no
    /// valid answer from the upstream, or a transfer cut short).
    void count_http_request(http_outcome o);

private:
    friend class metrics;
    prometheus::Counter* allowed_ = nullptr;
    prometheus::Counter* denied_ = nullptr;
    prometheus::Counter* would_deny_ = nullptr;
    std::vector<prometheus::Counter*> denied_by_reason_;  ///< by deny_reason_label()
    prometheus::Gauge* active_tunnels_ = nullptr;
    prometheus::Counter* bytes_up_ = nullptr;
    prometheus::Counter* bytes_down_ = nullptr;
    prometheus::Counter* dns_allowed_ = nullptr;
    prometheus::Counter* dns_denied_ = nullptr;
    prometheus::Counter* dns_would_deny_ = nullptr;
    prometheus::Counter* denial_bursts_ = nullptr;
    std::array<prometheus::Counter*, 4> http_requests_{};  ///< by http_outcome
};

/// Thread-safe.
class metrics {
public:
    metrics();
    ~metrics();
    metrics(const metrics&) = delete;
    metrics& operator=(const metrics&) = delete;

    /// Creates the series of these jobs (zero) if they do not exist yet: at start and on
    /// every reload, so a scrape shows every job of the policy. Series of jobs a reload
    /// removed stay (at their last values) until restart.
    void add_jobs(const std::vector<std::string>& names);
    /// The series of `job` ("" = unattributed). A lock-free lookup in an immutable index;
    /// callers on the data path do it once per request and keep the reference. A name not
    /// in the index yet is added (bounded: past max_jobs names share the label "(other)").
    job_metrics& job(std::string_view name);
    static constexpr std::size_t max_jobs = 4096;

    /// A denied attempt: cordon_denied_total{job,reason}, and for proxy requests (not DNS)
    /// cordon_connections_total{job,decision="denied"}. Reasons outside the fixed set count
    /// as "other". `n`: that many identical denials (the DNS server reports repeats at once).
    void count_denied(std::string_view job, std::string_view reason, bool proxy_request,
                      std::uint64_t n = 1);
    /// A burst of denials of one session of `job`, as the alert webhook coalesces them.
    void count_denial_burst(const std::string& job);
    /// Time from the first connect() to an upstream connected, in seconds.
    void observe_upstream_connect(double seconds);
    void count_tokens_minted(std::uint64_t n = 1);
    void count_tokens_revoked(std::uint64_t n = 1);
    void count_config_reload(bool ok);
    /// Values read at scrape time.
    void set_sessions_active(std::size_t n);
    /// The audit log's own failure count (audit_log::write_errors()); exported as a counter
    /// that never goes back, even when the audit log is replaced.
    void set_audit_write_errors(std::uint64_t total);
    /// The audit log's count of dropped records (audit_log::dropped()), the same way.
    void set_audit_dropped(std::uint64_t total);

    void set_kill_switch_engaged(bool engaged);
    /// `n` DNS queries answered (allowed) or refused (denied), by job ("" when unattributed).
    void count_dns(const std::string& job, bool allowed, std::uint64_t n = 1);
    /// `n` DNS queries of a report-mode job answered although no rule names the name
    /// (cordon_dns_queries_total{decision="would_deny"}).
    void count_dns_would_deny(const std::string& job, std::uint64_t n = 1);
    void count_dns_rate_limited();
    void count_dns_tcp_refused();
    void count_kill(kill_scope scope, double seconds);

    /// The fleet (docs/fleet.md): registers cordon_cluster_store_up, cordon_cluster_instances
    /// and cordon_kill_propagation_seconds (only an instance with `cluster` has them). Once,
    /// at start, before the setters below are called.
    void enable_cluster();
    /// 1 while this instance reaches etcd and its copy of the state is current.
    void set_cluster_store_up(bool up);
    /// Instances in the fleet's registry (this one included).
    void set_cluster_instances(std::size_t n);
    /// A kill given here, as each other instance confirmed it: seconds from the call.
    void observe_kill_propagation(double seconds);

    /// Jobs with active tunnels now, and how many (for GET /v1/status).
    std::vector<std::pair<std::string, std::int64_t>> active_tunnels_by_job() const;

    /// The Prometheus text exposition of every metric.
    std::string render() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace cordon::proxy::alerts
