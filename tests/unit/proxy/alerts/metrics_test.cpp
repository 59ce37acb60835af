#include "proxy/alerts/metrics.hpp"

#include <catch2/catch.hpp>

#include <thread>
#include <vector>

using namespace cordon::proxy;
using namespace cordon::proxy::alerts;

namespace {

bool has_line(const std::string& text, const std::string& line) {
    return text.find("\n" + line + "\n") != std::string::npos;
}

}  // namespace

TEST_CASE("metrics: job series exist at zero, count by job and bounded reason", "[metrics]") {
    metrics m;
    m.add_jobs({"web", "ci"});
    std::string t = m.render();
    CHECK(has_line(t, R"m(cordon_connections_total{decision="allowed",job="ci"} 0)m"));
    CHECK(has_line(t, R"m(cordon_denied_total{job="(none)",reason="qtype"} 0)m"));
    CHECK(has_line(t, R"m(cordon_active_tunnels{job="web"} 0)m"));
    CHECK(has_line(t, "cordon_upstream_connect_seconds_count 0"));

    job_metrics& web = m.job("web");
    CHECK(&web == &m.job("web"));  // stable: callers keep the reference
    web.count_allowed();
    web.tunnel_opened();
    web.count_bytes(true, 1000);
    web.count_bytes(false, 5);
    m.count_denied("web", "port", true);
    m.count_denied("web", "no_rule", false);  // DNS: not a connection
    m.count_denied("", "made-up-reason", true);
    m.observe_upstream_connect(0.002);
    m.observe_upstream_connect(30);
    t = m.render();
    CHECK(has_line(t, R"m(cordon_connections_total{decision="allowed",job="web"} 1)m"));
    CHECK(has_line(t, R"m(cordon_connections_total{decision="denied",job="web"} 1)m"));
    CHECK(has_line(t, R"m(cordon_denied_total{job="web",reason="port"} 1)m"));
    CHECK(has_line(t, R"m(cordon_denied_total{job="web",reason="no_rule"} 1)m"));
    CHECK(has_line(t, R"m(cordon_denied_total{job="(none)",reason="other"} 1)m"));
    CHECK(has_line(t, R"m(cordon_active_tunnels{job="web"} 1)m"));
    CHECK(has_line(t, R"m(cordon_bytes_total{direction="up",job="web"} 1000)m"));
    CHECK(has_line(t, R"m(cordon_upstream_connect_seconds_bucket{le="0.0025"} 1)m"));
    CHECK(has_line(t, R"m(cordon_upstream_connect_seconds_bucket{le="10"} 1)m"));
    CHECK(has_line(t, R"m(cordon_upstream_connect_seconds_bucket{le="+Inf"} 2)m"));
    CHECK(has_line(t, "cordon_upstream_connect_seconds_count 2"));
    CHECK(t.find("made-up-reason") == std::string::npos);
    // Weighted: the DNS server reports a second of identical repeats at once.
    m.count_denied("web", "no_rule", false, 41);
    m.count_dns("web", false, 7);
    t = m.render();
    CHECK(has_line(t, R"m(cordon_denied_total{job="web",reason="no_rule"} 42)m"));
    CHECK(has_line(t, R"m(cordon_dns_queries_total{decision="denied",job="web"} 7)m"));
    const auto tunnels = m.active_tunnels_by_job();
    REQUIRE(tunnels.size() == 1);
    CHECK(tunnels[0] == std::pair<std::string, std::int64_t>{"web", 1});
    web.tunnel_closed();
    CHECK(m.active_tunnels_by_job().empty());
}

TEST_CASE("metrics: reload adds jobs; audit errors never go back", "[metrics]") {
    metrics m;
    m.add_jobs({"web"});
    job_metrics& web = m.job("web");
    m.add_jobs({"web", "late"});
    CHECK(&m.job("web") == &web);  // kept across new indexes
    CHECK(has_line(m.render(), R"m(cordon_denial_bursts_total{job="late"} 0)m"));
    m.count_denial_burst("late");
    CHECK(has_line(m.render(), R"m(cordon_denial_bursts_total{job="late"} 1)m"));
    m.set_audit_write_errors(3);
    m.set_audit_write_errors(5);
    CHECK(has_line(m.render(), "cordon_audit_write_errors_total 5"));
    m.set_audit_write_errors(2);  // a new audit log counting from 0 again
    CHECK(has_line(m.render(), "cordon_audit_write_errors_total 7"));
}

TEST_CASE("metrics: concurrent lookups and counts while jobs are added", "[metrics]") {
    metrics m;
    m.add_jobs({"a"});
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&m, i] {
            for (int n = 0; n < 2000; ++n) {
                m.job(i % 2 == 0 ? "a" : "j" + std::to_string(n % 50)).count_allowed();
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    CHECK(has_line(m.render(), R"m(cordon_connections_total{decision="allowed",job="a"} 4000)m"));
    CHECK(has_line(m.render(), R"m(cordon_connections_total{decision="allowed",job="j7"} 80)m"));
}

TEST_CASE("metrics: would_deny series exist at zero for every job and count apart",
          "[metrics][mode]") {
    metrics m;
    m.add_jobs({"learner", "strict"});
    std::string t = m.render();
    CHECK(has_line(t, R"m(cordon_connections_total{decision="would_deny",job="learner"} 0)m"));
    CHECK(has_line(t, R"m(cordon_connections_total{decision="would_deny",job="strict"} 0)m"));
    CHECK(has_line(t, R"m(cordon_dns_queries_total{decision="would_deny",job="learner"} 0)m"));
    m.job("learner").count_would_deny();
    m.count_dns_would_deny("learner", 3);
    t = m.render();
    CHECK(has_line(t, R"m(cordon_connections_total{decision="would_deny",job="learner"} 1)m"));
    CHECK(has_line(t, R"m(cordon_connections_total{decision="allowed",job="learner"} 0)m"));
    CHECK(has_line(t, R"m(cordon_dns_queries_total{decision="would_deny",job="learner"} 3)m"));
    CHECK(has_line(t, R"m(cordon_dns_queries_total{decision="allowed",job="learner"} 0)m"));
}
