#include "proxy/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <sstream>

namespace cordon::proxy {

struct metrics::impl {
    std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
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
            .Help("DNS queries answered (allowed) or refused (denied), by job")
            .Register(*registry);
    prometheus::Counter& dns_rate_limited =
        prometheus::BuildCounter()
            .Name("cordon_dns_rate_limited_total")
            .Help("DNS queries dropped by the per-client rate limit")
            .Register(*registry)
            .Add({});
    prometheus::Histogram& kill_duration =
        prometheus::BuildHistogram()
            .Name("cordon_kill_duration_seconds")
            .Help("Time from a kill call to every affected connection closed, inside cordon")
            .Register(*registry)
            .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.025, 0.05,
                                                               0.1, 0.25, 0.5, 1, 2.5});
};

metrics::metrics() : impl_(std::make_unique<impl>()) {}

void metrics::count_dns(const std::string& job, bool allowed) {
    // Job names come from the policy, so the label set is bounded. Each thread keeps the
    // counters it has used, so a query costs an atomic add, not a family lookup.
    struct cached {
        const metrics::impl* owner;
        std::string job;
        prometheus::Counter* allowed;
        prometheus::Counter* denied;
    };
    thread_local std::vector<cached> seen;
    for (const auto& c : seen) {
        if (c.owner == impl_.get() && c.job == job) {
            (allowed ? c.allowed : c.denied)->Increment();
            return;
        }
    }
    const std::string label = job.empty() ? "none" : job;
    cached c{impl_.get(), job,
             &impl_->dns_queries.Add({{"job", label}, {"decision", "allowed"}}),
             &impl_->dns_queries.Add({{"job", label}, {"decision", "denied"}})};
    (allowed ? c.allowed : c.denied)->Increment();
    if (seen.size() < 1024) {
        seen.push_back(std::move(c));
    }
}

void metrics::count_dns_rate_limited() { impl_->dns_rate_limited.Increment(); }
metrics::~metrics() = default;

void metrics::set_kill_switch_engaged(bool engaged) {
    impl_->kill_switch_engaged.Set(engaged ? 1 : 0);
}

void metrics::count_kill(kill_scope scope, double seconds) {
    switch (scope) {
        case kill_scope::network: impl_->kills_network.Increment(); break;
        case kill_scope::session: impl_->kills_session.Increment(); break;
        case kill_scope::credential: impl_->kills_credential.Increment(); break;
    }
    impl_->kill_duration.Observe(seconds);
}

std::string metrics::render() const {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, impl_->registry->Collect());
    return out.str();
}

}  // namespace cordon::proxy
