#include "proxy/alerts/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "proxy/alerts/denial_table.hpp"

namespace cordon::proxy::alerts {
namespace {

struct name_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
        return std::hash<std::string_view>{}(s);
    }
};

// Job name -> series. Immutable once published; a new job publishes a new index.
struct job_index {
    std::unordered_map<std::string, job_metrics*, name_hash, std::equal_to<>> by_name;
};

constexpr std::string_view overflow_job = "(other)";

// A histogram whose Observe is a few relaxed atomic adds: prometheus-cpp's takes a mutex,
// and this one is observed once per upstream connection on every worker.
class atomic_histogram {
public:
    static constexpr std::array<double, 14> bounds{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                   0.1,    0.25,  0.5,    1,     2.5,  5,     10};
    void observe(double seconds) {
        std::size_t i = 0;
        while (i < bounds.size() && seconds > bounds[i]) {
            ++i;
        }
        counts_[i].fetch_add(1, std::memory_order_relaxed);
        const double ns = seconds > 0 ? seconds * 1e9 : 0;
        sum_ns_.fetch_add(ns < 1.8e19 ? static_cast<std::uint64_t>(ns) : 0,
                          std::memory_order_relaxed);
    }
    prometheus::MetricFamily collect(std::string name, std::string help) const {
        prometheus::MetricFamily f{
            std::move(name), std::move(help), prometheus::MetricType::Histogram, {}};
        prometheus::ClientMetric m;
        std::uint64_t cumulative = 0;
        for (std::size_t i = 0; i <= bounds.size(); ++i) {
            cumulative += counts_[i].load(std::memory_order_relaxed);
            m.histogram.bucket.push_back(
                {cumulative,
                 i < bounds.size() ? bounds[i] : std::numeric_limits<double>::infinity()});
        }
        m.histogram.sample_count = cumulative;  // = the +Inf bucket, whatever races
        m.histogram.sample_sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
        f.metric.push_back(std::move(m));
        return f;
    }

private:
    std::array<std::atomic<std::uint64_t>, bounds.size() + 1> counts_{};
    std::atomic<std::uint64_t> sum_ns_{0};
};

}  // namespace

struct metrics::impl {
    std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
    // The fleet's (enable_cluster); null without one.
    prometheus::Gauge* store_up = nullptr;
    prometheus::Gauge* instances = nullptr;
    prometheus::Histogram* propagation = nullptr;
    prometheus::Gauge& kill_switch_engaged =
        prometheus::BuildGauge()
            .Name("cordon_kill_switch_engaged")
            .Help("1 while the network kill switch is engaged: all egress is cut")
            .Register(*registry)
            .Add({});
    prometheus::Family<prometheus::Counter>& kills =
        prometheus::BuildCounter()
            .Name("cordon_kills_total")
            .Help("Kills carried out, by scope: network, session or credential")
            .Register(*registry);
    prometheus::Counter& kills_network = kills.Add({{"scope", "network"}});
    prometheus::Counter& kills_session = kills.Add({{"scope", "session"}});
    prometheus::Counter& kills_credential = kills.Add({{"scope", "credential"}});
    prometheus::Family<prometheus::Counter>& dns_queries =
        prometheus::BuildCounter()
            .Name("cordon_dns_queries_total")
            .Help("DNS queries answered (allowed) or refused (denied), by job; would_deny: "
                  "answered for a report-mode job although no rule names the name")
            .Register(*registry);
    prometheus::Counter& dns_rate_limited =
        prometheus::BuildCounter()
            .Name("cordon_dns_rate_limited_total")
            .Help("DNS queries dropped by the rate limit (per session, else per address)")
            .Register(*registry)
            .Add({});
    prometheus::Counter& dns_tcp_refused =
        prometheus::BuildCounter()
            .Name("cordon_dns_tcp_refused_total")
            .Help("DNS-over-TCP connections closed at once: the listener's or the client's "
                  "connection limit (dns.tcp) was reached")
            .Register(*registry)
            .Add({});
    prometheus::Histogram& kill_duration =
        prometheus::BuildHistogram()
            .Name("cordon_kill_duration_seconds")
            .Help("Time from a kill call to every affected connection closed, inside cordon")
            .Register(*registry)
            .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                             0.25, 0.5, 1, 2.5});
    prometheus::Family<prometheus::Counter>& connections =
        prometheus::BuildCounter()
            .Name("cordon_connections_total")
            .Help("Proxy requests (CONNECT tunnels and plain HTTP requests) by job and "
                  "decision: allowed (connected upstream), denied (refused with a reason) or "
                  "would_deny (a report-mode job's request enforce mode would refuse, let "
                  "through)")
            .Register(*registry);
    prometheus::Family<prometheus::Counter>& denied =
        prometheus::BuildCounter()
            .Name("cordon_denied_total")
            .Help("Denied attempts, proxy and DNS, by job and deny reason")
            .Register(*registry);
    prometheus::Family<prometheus::Gauge>& active_tunnels =
        prometheus::BuildGauge()
            .Name("cordon_active_tunnels")
            .Help("Allowed requests relaying now (CONNECT tunnels and HTTP requests being "
                  "forwarded), by job")
            .Register(*registry);
    prometheus::Family<prometheus::Counter>& bytes =
        prometheus::BuildCounter()
            .Name("cordon_bytes_total")
            .Help("Bytes relayed, by job and direction: up (client to upstream) or down")
            .Register(*registry);
    prometheus::Family<prometheus::Counter>& http_requests =
        prometheus::BuildCounter()
            .Name("cordon_http_requests_total")
            .Help("Requests inside inspected TLS tunnels (protocol: https), by job and "
                  "decision: allowed, denied (the reason is in cordon_denied_total), "
                  "would_deny (report mode) or error (no valid answer from the upstream)")
            .Register(*registry);
    prometheus::Family<prometheus::Counter>& denial_bursts =
        prometheus::BuildCounter()
            .Name("cordon_denial_bursts_total")
            .Help("Bursts of denials of one session, as coalesced for the alert webhook, "
                  "by job")
            .Register(*registry);
    prometheus::Counter& tokens_minted =
        prometheus::BuildCounter()
            .Name("cordon_tokens_minted_total")
            .Help("Session tokens minted (a new session's first token and added ones)")
            .Register(*registry)
            .Add({});
    prometheus::Counter& tokens_revoked =
        prometheus::BuildCounter()
            .Name("cordon_tokens_revoked_total")
            .Help("Session tokens revoked: by the admin, at session end and by session kills")
            .Register(*registry)
            .Add({});
    prometheus::Gauge& sessions_active =
        prometheus::BuildGauge()
            .Name("cordon_sessions_active")
            .Help("Sessions active (neither ended, killed nor expired) at scrape time")
            .Register(*registry)
            .Add({});
    prometheus::Family<prometheus::Counter>& reloads =
        prometheus::BuildCounter()
            .Name("cordon_config_reloads_total")
            .Help("Policy reloads (SIGHUP or POST /v1/reload) by result: ok or error")
            .Register(*registry);
    prometheus::Counter& reloads_ok = reloads.Add({{"result", "ok"}});
    prometheus::Counter& reloads_error = reloads.Add({{"result", "error"}});
    prometheus::Counter& audit_write_errors =
        prometheus::BuildCounter()
            .Name("cordon_audit_write_errors_total")
            .Help("Audit log writes that failed; while the log cannot be written cordon "
                  "denies new connections")
            .Register(*registry)
            .Add({});
    prometheus::Counter& audit_dropped =
        prometheus::BuildCounter()
            .Name("cordon_audit_dropped_total")
            .Help("Audit records dropped: the queue was full while the log could not be "
                  "written, or cordon stopped before it could write them (kills, revives "
                  "and session records are never dropped from the queue)")
            .Register(*registry)
            .Add({});
    atomic_histogram upstream_connect;

    std::mutex audit_mu;
    std::uint64_t audit_last = 0;          // audit_log::write_errors() at the last scrape
    std::uint64_t audit_dropped_last = 0;  // audit_log::dropped() at the last scrape

    std::mutex jobs_mu;  // adding jobs; lookups take no lock
    std::vector<std::unique_ptr<job_metrics>> jobs;
    std::vector<std::unique_ptr<const job_index>> indexes;  // kept: readers may hold any
    std::atomic<const job_index*> index{nullptr};
    job_metrics* unattributed = nullptr;
    job_metrics* overflow = nullptr;

    job_metrics* make(std::string_view name) {
        const std::string label(name);
        auto m = std::make_unique<job_metrics>();
        m->allowed_ = &connections.Add({{"job", label}, {"decision", "allowed"}});
        m->denied_ = &connections.Add({{"job", label}, {"decision", "denied"}});
        m->would_deny_ = &connections.Add({{"job", label}, {"decision", "would_deny"}});
        for (const auto r : deny_reason_labels()) {
            m->denied_by_reason_.push_back(
                &denied.Add({{"job", label}, {"reason", std::string(r)}}));
        }
        m->active_tunnels_ = &active_tunnels.Add({{"job", label}});
        m->bytes_up_ = &bytes.Add({{"job", label}, {"direction", "up"}});
        m->bytes_down_ = &bytes.Add({{"job", label}, {"direction", "down"}});
        m->dns_allowed_ = &dns_queries.Add({{"job", label}, {"decision", "allowed"}});
        m->dns_denied_ = &dns_queries.Add({{"job", label}, {"decision", "denied"}});
        m->dns_would_deny_ = &dns_queries.Add({{"job", label}, {"decision", "would_deny"}});
        m->denial_bursts_ = &denial_bursts.Add({{"job", label}});
        const char* outcomes[] = {"allowed", "denied", "would_deny", "error"};
        for (std::size_t i = 0; i < m->http_requests_.size(); ++i) {
            m->http_requests_[i] = &http_requests.Add({{"job", label}, {"decision", outcomes[i]}});
        }
        jobs.push_back(std::move(m));
        return jobs.back().get();
    }

    // Publishes an index with `names` added; jobs_mu held.
    void add_locked(const std::vector<std::string_view>& names) {
        const job_index* current = index.load(std::memory_order_acquire);
        auto next = std::make_unique<job_index>();
        if (current != nullptr) {
            next->by_name = current->by_name;
        }
        bool changed = current == nullptr;
        for (const auto name : names) {
            if (next->by_name.find(name) != next->by_name.end()) {
                continue;
            }
            if (next->by_name.size() >= max_jobs) {
                if (overflow == nullptr) {
                    overflow = make(overflow_job);
                }
                next->by_name.emplace(std::string(name), overflow);
            } else {
                next->by_name.emplace(std::string(name), make(name));
            }
            changed = true;
        }
        if (changed) {
            index.store(next.get(), std::memory_order_release);
            indexes.push_back(std::move(next));
        }
    }
};

void job_metrics::count_allowed() { allowed_->Increment(); }
void job_metrics::count_would_deny() { would_deny_->Increment(); }
void job_metrics::count_http_request(http_outcome o) {
    http_requests_[static_cast<std::size_t>(o)]->Increment();
}
void job_metrics::tunnel_opened() { active_tunnels_->Increment(); }
void job_metrics::tunnel_closed() { active_tunnels_->Decrement(); }
void job_metrics::count_bytes(bool up, std::uint64_t n) {
    if (n > 0) {
        (up ? bytes_up_ : bytes_down_)->Increment(static_cast<double>(n));
    }
}

metrics::metrics() : impl_(std::make_unique<impl>()) {
    std::lock_guard lock(impl_->jobs_mu);
    impl_->unattributed = impl_->make(unattributed_job);
    impl_->add_locked({});
}
metrics::~metrics() = default;

void metrics::add_jobs(const std::vector<std::string>& names) {
    std::vector<std::string_view> views(names.begin(), names.end());
    std::lock_guard lock(impl_->jobs_mu);
    impl_->add_locked(views);
}

job_metrics& metrics::job(std::string_view name) {
    if (name.empty()) {
        return *impl_->unattributed;
    }
    const job_index* ix = impl_->index.load(std::memory_order_acquire);
    if (const auto it = ix->by_name.find(name); it != ix->by_name.end()) {
        return *it->second;
    }
    // A job the policy did not name when the index was built: a session restored from the
    // state store, say. Rare: take the lock once and publish it.
    std::lock_guard lock(impl_->jobs_mu);
    impl_->add_locked({name});
    return *impl_->index.load(std::memory_order_acquire)->by_name.find(name)->second;
}

void metrics::count_denied(std::string_view job_name, std::string_view reason, bool proxy_request,
                           std::uint64_t n) {
    job_metrics& j = job(job_name);
    j.denied_by_reason_[deny_reason_label(reason)]->Increment(static_cast<double>(n));
    if (proxy_request) {
        j.denied_->Increment(static_cast<double>(n));
    }
}

void metrics::count_denial_burst(const std::string& job_name) {
    job(job_name).denial_bursts_->Increment();
}

void metrics::observe_upstream_connect(double seconds) { impl_->upstream_connect.observe(seconds); }
void metrics::count_tokens_minted(std::uint64_t n) {
    impl_->tokens_minted.Increment(static_cast<double>(n));
}
void metrics::count_tokens_revoked(std::uint64_t n) {
    impl_->tokens_revoked.Increment(static_cast<double>(n));
}
void metrics::count_config_reload(bool ok) {
    (ok ? impl_->reloads_ok : impl_->reloads_error).Increment();
}
void metrics::set_sessions_active(std::size_t n) {
    impl_->sessions_active.Set(static_cast<double>(n));
}

void metrics::set_audit_write_errors(std::uint64_t total) {
    std::lock_guard lock(impl_->audit_mu);
    // A new audit log (after a restart of the writer) counts from 0 again: its whole count
    // is new.
    const std::uint64_t delta = total >= impl_->audit_last ? total - impl_->audit_last : total;
    impl_->audit_last = total;
    impl_->audit_write_errors.Increment(static_cast<double>(delta));
}

void metrics::set_audit_dropped(std::uint64_t total) {
    std::lock_guard lock(impl_->audit_mu);
    const std::uint64_t delta = total >= impl_->audit_dropped_last
                                    ? total - impl_->audit_dropped_last
                                    : total;
    impl_->audit_dropped_last = total;
    impl_->audit_dropped.Increment(static_cast<double>(delta));
}

void metrics::count_dns(const std::string& job_name, bool allowed, std::uint64_t n) {
    job_metrics& j = job(job_name);
    (allowed ? j.dns_allowed_ : j.dns_denied_)->Increment(static_cast<double>(n));
}

void metrics::count_dns_would_deny(const std::string& job_name, std::uint64_t n) {
    job(job_name).dns_would_deny_->Increment(static_cast<double>(n));
}

void metrics::count_dns_rate_limited() { impl_->dns_rate_limited.Increment(); }
void metrics::count_dns_tcp_refused() { impl_->dns_tcp_refused.Increment(); }

void metrics::set_kill_switch_engaged(bool engaged) {
    impl_->kill_switch_engaged.Set(engaged ? 1 : 0);
}

void metrics::enable_cluster() {
    impl_->store_up = &prometheus::BuildGauge()
                           .Name("cordon_cluster_store_up")
                           .Help("1 while this instance reaches etcd and its copy of the fleet's "
                                 "state is current; 0: new sessions are refused")
                           .Register(*impl_->registry)
                           .Add({});
    impl_->instances = &prometheus::BuildGauge()
                            .Name("cordon_cluster_instances")
                            .Help("Instances in the fleet's registry (leased), this one included")
                            .Register(*impl_->registry)
                            .Add({});
    impl_->propagation = &prometheus::BuildHistogram()
                              .Name("cordon_kill_propagation_seconds")
                              .Help(
                                  "A kill given on this instance: time from the call to each other "
                                  "instance's confirmation that it closed its matching tunnels")
                              .Register(*impl_->registry)
                              .Add({}, prometheus::Histogram::BucketBoundaries{
                                           0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5});
}

void metrics::set_cluster_store_up(bool up) {
    if (impl_->store_up != nullptr) {
        impl_->store_up->Set(up ? 1 : 0);
    }
}

void metrics::set_cluster_instances(std::size_t n) {
    if (impl_->instances != nullptr) {
        impl_->instances->Set(static_cast<double>(n));
    }
}

void metrics::observe_kill_propagation(double seconds) {
    if (impl_->propagation != nullptr) {
        impl_->propagation->Observe(seconds);
    }
}

void metrics::count_kill(kill_scope scope, double seconds) {
    switch (scope) {
        case kill_scope::network: impl_->kills_network.Increment(); break;
        case kill_scope::session: impl_->kills_session.Increment(); break;
        case kill_scope::credential: impl_->kills_credential.Increment(); break;
    }
    impl_->kill_duration.Observe(seconds);
}

std::vector<std::pair<std::string, std::int64_t>> metrics::active_tunnels_by_job() const {
    std::vector<std::pair<std::string, std::int64_t>> out;
    std::lock_guard lock(impl_->jobs_mu);  // for `overflow`; the control thread, rarely
    const auto add = [&out](std::string_view name, const job_metrics& j) {
        const auto n = static_cast<std::int64_t>(j.active_tunnels_->Value());
        if (n != 0) {
            out.emplace_back(std::string(name), n);
        }
    };
    add(unattributed_job, *impl_->unattributed);
    for (const auto& [name, j] : impl_->index.load(std::memory_order_acquire)->by_name) {
        if (j != impl_->overflow) {
            add(name, *j);
        }
    }
    if (impl_->overflow != nullptr) {
        add(overflow_job, *impl_->overflow);
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string metrics::render() const {
    auto families = impl_->registry->Collect();
    families.push_back(impl_->upstream_connect.collect(
        "cordon_upstream_connect_seconds",
        "Time to connect to an upstream (every address tried), for allowed requests"));
    std::sort(families.begin(), families.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, families);
    return out.str();
}

}  // namespace cordon::proxy::alerts
