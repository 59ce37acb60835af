#pragma once
// A blocking client of etcd's v3 JSON gateway over HTTP/1.1 (Beast), each call bounded by a
// deadline: its own io_context, run for at most the timeout; one kept-alive connection, the
// next endpoint tried when one fails. For the control thread's writes and the fleet's own
// threads (keepalive, reload); the watch stream is etcd_store's. Not thread-safe: one per
// thread.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/cluster.hpp"
#include "proxy/control/etcd_codec.hpp"

namespace cordon::proxy::control {

class etcd_client {
public:
    struct options {
        std::vector<config::etcd_endpoint> endpoints;
        std::chrono::milliseconds timeout{1000};  ///< per call, connect included
        std::optional<std::string> username;
        std::optional<std::string> password;  ///< never logged
    };

    explicit etcd_client(options o);
    ~etcd_client();
    etcd_client(const etcd_client&) = delete;
    etcd_client& operator=(const etcd_client&) = delete;

    /// POSTs `body` to `path` (e.g. "/v3/kv/put") and reads the whole answer (at most
    /// etcd::max_message bytes). False, with `error`, on a connect failure, timeout, an HTTP
    /// status other than 200, or an oversized answer; the connection is then dropped and the
    /// next call starts with the next endpoint.
    bool post(std::string_view path, const std::string& body, std::string& answer,
              std::string& error);

    bool put(std::string_view key, std::string_view value, std::int64_t lease, etcd::header& h,
             std::string& error);
    bool txn(const std::vector<etcd::txn_compare>& cmp, const std::vector<etcd::txn_op>& ops,
             bool& succeeded, etcd::header& h, std::string& error);
    bool grant(std::int64_t ttl_seconds, std::int64_t& id, std::string& error);
    /// `ttl` 0 on return: the lease is gone (expired or revoked).
    bool keepalive(std::int64_t id, std::int64_t& ttl, std::string& error);
    bool revoke(std::int64_t id, std::string& error);
    /// The seconds lease `id` has left (-1: gone).
    bool time_to_live(std::int64_t id, std::int64_t& ttl, std::string& error);
    /// Every key under `prefix`, at one revision (read in pages), and that revision.
    bool range_all(std::string_view prefix, std::vector<etcd::key_value>& kvs,
                   std::int64_t& revision, std::string& error);
    /// The largest mod_revision of any key under `prefix` now (0 if none).
    bool newest_revision(std::string_view prefix, std::int64_t& revision, std::string& error);

    /// A hard end for every call from now on (a retry loop's deadline): a call never runs past
    /// it, whatever `timeout` says. time_point{} (the default): no cap.
    void cap(std::chrono::steady_clock::time_point until) noexcept { cap_ = until; }

    /// The endpoint the last call used, "HOST:PORT".
    std::string endpoint() const;
    /// The endpoint list and auth, for another client (the watch's).
    const options& settings() const noexcept { return opts_; }
    /// The auth token (Authorization header) for the watch: empty without a username.
    /// Authenticates first if needed.
    bool auth_token(std::string& token, std::string& error);

private:
    bool post_once(std::string_view path, const std::string& body, std::string& answer,
                   std::string& error, bool& retry);
    struct impl;
    options opts_;
    std::chrono::steady_clock::time_point cap_{};
    std::unique_ptr<impl> impl_;
};

}  // namespace cordon::proxy::control
