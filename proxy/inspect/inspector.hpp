#pragma once
// What the data plane needs to terminate TLS for `protocol: https` rules, built from the
// policy's `inspect` section: cordon's CA (ca.hpp) and its leaf cache (leaf_cache.hpp), the
// server side's TLS settings (a leaf for the CONNECT host, ALPN http/1.1 only) and the
// upstream side's (certificates verified against `upstream_ca` or the system's roots, the
// host name checked, SNI and ALPN http/1.1 sent). OpenSSL only: the data plane wraps the
// SSL objects made here in its streams.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "config/policy.hpp"
#include "proxy/inspect/leaf_cache.hpp"
#include "proxy/inspect/secrets.hpp"

using SSL = struct ssl_st;
using SSL_CTX = struct ssl_ctx_st;

namespace cordon::proxy::inspect {

class inspector {
public:
    /// Reads the CA files and the upstream bundle named by `spec` and checks them (a CA key
    /// that is not the certificate's, an expired CA, an unreadable bundle: refused).
    /// nullptr with `error` set (naming the file, never quoting a key) otherwise.
    /// With `secrets` (the policy's), also the credential broker: the values read, the
    /// placeholders keyed from the CA key (secrets.hpp).
    static std::shared_ptr<inspector> load(const config::inspect_spec& spec,
                                           const std::vector<config::secret_spec>& secrets,
                                           std::string& error);
    /// From PEM text (tests); `upstream_ca_pem` empty: the system's roots.
    static std::shared_ptr<inspector> from_pem(std::string_view ca_cert, std::string_view ca_key,
                                               std::string_view upstream_ca_pem,
                                               std::chrono::seconds leaf_ttl,
                                               std::size_t leaf_cache_size, std::string& error);
    ~inspector();
    inspector(const inspector&) = delete;
    inspector& operator=(const inspector&) = delete;

    /// A server-side SSL object presenting the leaf for `name` (minted on first use, then
    /// cached). The caller owns it (SSL_free, or a stream that takes it). nullptr with
    /// `error` set when no leaf could be had.
    SSL* server_session(std::string_view name, std::string& error);
    /// A client-side SSL object for an upstream `host`: SNI `host`, the certificate must
    /// name it and chain to the upstream roots, ALPN http/1.1. nullptr with `error` set.
    SSL* upstream_session(std::string_view host, std::string& error) const;

    /// True when `ssl`'s handshake failed because the client offered ALPN protocols and
    /// none of them is http/1.1 (an h2-only client).
    static bool alpn_refused(const SSL* ssl) noexcept;
    /// Why the last handshake of `ssl` failed, for audit records and answers: the
    /// certificate verification error when there is one ("certificate has expired"), else
    /// the OpenSSL error queue's first reason. Clears the queue.
    static std::string handshake_error(const SSL* ssl);

    /// The CA certificate as PEM: what sandboxes trust.
    const std::string& ca_pem() const noexcept { return ca_->pem(); }
    leaf_cache::stats leaf_stats() const { return leaves_.counters(); }
    /// The credential broker, or nullptr when the policy has no secrets.
    const credential_broker* broker() const noexcept { return broker_.get(); }
    void set_broker(std::unique_ptr<credential_broker> b) { broker_ = std::move(b); }

private:
    inspector(std::shared_ptr<const authority> ca, std::chrono::seconds ttl, std::size_t cache);
    std::shared_ptr<const authority> ca_;
    leaf_cache leaves_;
    SSL_CTX* server_ctx_ = nullptr;
    SSL_CTX* upstream_ctx_ = nullptr;
    std::unique_ptr<credential_broker> broker_;
};

/// Reads a whole file of at most `max` bytes; nullopt with `error` set.
std::optional<std::string> read_small_file(const std::string& path, std::size_t max,
                                           std::string& error);

}  // namespace cordon::proxy::inspect
