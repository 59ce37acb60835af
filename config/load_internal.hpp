#pragma once
// The policy loader class shared by load.cpp, load_daemon.cpp and load_jobs.cpp (internal).

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/ip.hpp"
#include "config/policy.hpp"
#include "config/yaml_read.hpp"

namespace cordon::config::detail {

/// A variable name as an environment takes it: [A-Za-z_][A-Za-z0-9_]* (load_jobs.cpp).
bool valid_env_name(std::string_view s);

// Walks the YAML tree of a policy, filling a `policy` and collecting every error.
class loader : public yaml_reader {
public:
    using yaml_reader::yaml_reader;

    /// The whole policy (load.cpp).
    void load(const YAML::Node& root, policy& p);

private:
    // The daemon sections (load_daemon.cpp).
    void load_listen(const YAML::Node& n, listen_spec& out);
    void load_admin(const YAML::Node& n, admin_spec& out);
    void load_dns(const YAML::Node& n, policy& p);
    void load_state(const YAML::Node& n, state_spec& out);
    void load_audit(const YAML::Node& n, audit_spec& out);
    void load_alerts(const YAML::Node& n, alerts_spec& out);
    // The URL may be a secret (Slack webhook URLs are): no message here quotes it, and none
    // quotes a header value.
    std::optional<std::string> get_webhook_url(const YAML::Node& n, const std::string& path);
    void load_webhook(const YAML::Node& n, alerts_spec& out);
    void load_webhook_headers(const YAML::Node& n, const std::string& path,
                              std::vector<std::pair<std::string, std::string>>& out);
    void load_kill(const YAML::Node& n, kill_spec& out);
    void load_proxy(const YAML::Node& n, proxy_spec& out);
    void load_upstream_proxy(const YAML::Node& n, policy& p);  // load_upstream.cpp
    void load_inspect(const YAML::Node& n, policy& p);
    void load_secrets(const YAML::Node& n, policy& p);
    // The fleet (load_cluster.cpp).
    void load_cluster(const YAML::Node& n, policy& p);

    // The jobs (load_jobs.cpp).
    void load_jobs(const YAML::Node& n, policy& p);
    void load_job(const YAML::Node& n, const std::string& path, job& j);
    // Returns false when the rule is unusable; errors are reported either way.
    bool load_rule(const YAML::Node& n, const std::string& path, egress_rule& r);
    void load_ports(const YAML::Node& n, const std::string& path, std::vector<std::uint16_t>& out);
    void load_methods(const YAML::Node& n, const std::string& path, std::vector<std::string>& out);
    void load_http_rules(const YAML::Node& n, const std::string& path, std::vector<http_rule>& out);
    void load_resolves_to(const YAML::Node& n, const std::string& path, std::vector<cidr>& out);
    void load_credential(const YAML::Node& n, const std::string& path, egress_rule& r);
    void load_mcp(const YAML::Node& n, const std::string& path, egress_rule& r);
    void load_job_credentials(const YAML::Node& n, const std::string& path, job& j);
    // True (after the error) when `p` would open the unspecified range.
    bool refuse_unspecified(const YAML::Node& n, const std::string& path, const cidr& p);
    void load_limits(const YAML::Node& n, const std::string& path, job_limits& out);
    void load_identity(const YAML::Node& n, const std::string& path, identity_spec& out);
    void load_filesystem(const YAML::Node& n, const std::string& path, filesystem_spec& out);
    // A client address must belong to at most one job.
    void check_sources(const policy& p);
    // An https rule needs the `inspect` section (its CA); `at` is where to point otherwise.
    void check_inspect(const policy& p);
    void check_credentials(const policy& p);
};

}  // namespace cordon::config::detail
