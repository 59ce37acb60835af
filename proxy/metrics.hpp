#pragma once
// Prometheus metrics (prefix cordon_), registered once at start; callers keep references,
// so counting on the data path is an atomic add, never a lookup. Light header: the
// prometheus-cpp types stay in metrics.cpp.

#include <memory>
#include <string>

namespace cordon::proxy {

enum class kill_scope { network, session, credential };

/// Thread-safe.
class metrics {
public:
    metrics();
    ~metrics();
    metrics(const metrics&) = delete;
    metrics& operator=(const metrics&) = delete;

    void set_kill_switch_engaged(bool engaged);
    /// A DNS query answered (allowed) or refused (denied), by job ("" when unattributed).
    void count_dns(const std::string& job, bool allowed);
    void count_dns_rate_limited();
    void count_kill(kill_scope scope, double seconds);

    /// The Prometheus text exposition of every metric.
    std::string render() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace cordon::proxy
