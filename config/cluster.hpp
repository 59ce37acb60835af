#pragma once
// The policy's `cluster` section: a fleet of cordon instances sharing one state in etcd
// (docs/fleet.md). Pure data.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cordon::config {

/// One etcd endpoint, http://HOST:PORT (the v3 JSON gateway).
struct etcd_endpoint {
    std::string host;  ///< a name or an IP literal (IPv6 without brackets)
    std::uint16_t port = 2379;
    friend bool operator==(const etcd_endpoint&, const etcd_endpoint&) = default;
};

/// cluster: { etcd: {endpoints, prefix, username, password_file}, instance, fail_closed,
/// store_timeout, start_without_store, kill_wait, instance_ttl }.
struct cluster_spec {
    std::vector<etcd_endpoint> endpoints;  ///< never empty
    std::string prefix = "/cordon/";       ///< ends with '/'
    std::optional<std::string> username;
    std::optional<std::string> password_file;  ///< absolute; read at start, never logged
    std::string instance;                      ///< [A-Za-z0-9._-]{1,64}; default: the host name
    /// true: etcd lost for store_timeout engages this instance's network kill until it is back.
    bool fail_closed = false;
    std::chrono::milliseconds store_timeout{5000};
    /// true: start (with the network kill engaged) when etcd cannot be reached at start;
    /// false (default): refuse to start.
    bool start_without_store = false;
    /// How long a kill waits for the other instances' confirmations before it answers.
    std::chrono::milliseconds kill_wait{2000};
    /// The instance registry's lease: a dead instance leaves the registry within it.
    std::chrono::milliseconds instance_ttl{10000};
    friend bool operator==(const cluster_spec&, const cluster_spec&) = default;
};

/// Whether `s` is a usable instance name: [A-Za-z0-9._-]{1,64}.
inline bool valid_instance_name(const std::string& s) {
    if (s.empty() || s.size() > 64) {
        return false;
    }
    for (const char c : s) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        if (!ok) {
            return false;
        }
    }
    return true;
}

}  // namespace cordon::config
