#pragma once
// cordon's inspection CA (issue 21, DESIGN "Inspection"): an ECDSA P-256 CA made by
// `cordon ca init DIR`, and the leaf certificates minted from it for the names a
// `protocol: https` rule terminates. OpenSSL only: no sockets, no event loop.
//
// A leaf: ECDSA P-256 (one key for every leaf of this process, made at start), SAN = the
// name (or the IP address), EKU serverAuth, basicConstraints CA:FALSE, keyUsage
// digitalSignature, SKI and AKI, a random 127-bit serial, valid from an hour ago (clock
// skew) for `ttl`, never past the CA's own end.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

using EVP_PKEY = struct evp_pkey_st;
using X509 = struct x509_st;

namespace cordon::proxy::inspect {

struct pkey_free {
    void operator()(EVP_PKEY* k) const noexcept;
};
struct x509_free {
    void operator()(X509* c) const noexcept;
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;

/// A new CA as PEM text: the certificate and its private key (PKCS#8, unencrypted: the
/// file's mode protects it).
struct ca_pem {
    std::string cert;
    std::string key;
};

/// Makes a CA: ECDSA P-256, self-signed, basicConstraints critical CA:TRUE pathlen:0,
/// keyUsage critical keyCertSign + cRLSign, SKI, subject "CN=<common_name>, O=cordon".
/// nullopt with `error` set on failure.
std::optional<ca_pem> make_ca(std::string_view common_name, std::chrono::hours lifetime,
                              std::string& error);

/// A minted leaf: certificate and the key it certifies (shared by every leaf).
struct leaf {
    x509_ptr cert;
    EVP_PKEY* key = nullptr;  ///< owned by the authority; lives as long as it
    std::chrono::system_clock::time_point not_after;
};

/// A loaded CA that mints leaves. Thread-safe: minting reads only what load() set.
class authority {
public:
    /// Loads and checks a CA: the key is EC P-256 and matches the certificate, which is a
    /// CA (basicConstraints CA:TRUE) allowed to sign certificates, and valid now.
    /// nullptr with `error` set (naming what is wrong, never the key's bytes) otherwise.
    static std::unique_ptr<authority> load(std::string_view cert_pem, std::string_view key_pem,
                                           std::string& error);
    ~authority();
    authority(const authority&) = delete;
    authority& operator=(const authority&) = delete;

    /// Mints a leaf for `name` (a DNS name, already normalised, or an IP literal).
    /// nullopt with `error` set on failure.
    std::optional<leaf> mint(std::string_view name, std::chrono::seconds ttl,
                             std::string& error) const;

    X509* certificate() const noexcept { return cert_.get(); }
    /// The CA certificate as PEM (what sandboxes trust).
    const std::string& pem() const noexcept { return pem_; }

private:
    authority() = default;
    x509_ptr cert_;
    pkey_ptr key_;
    pkey_ptr leaf_key_;
    std::string pem_;
};

/// The certificate's subject and validity as one line, for `cordon ca init`'s output
/// ("CN=..., O=cordon; valid until 2036-12-01").
std::string describe(X509* cert);

}  // namespace cordon::proxy::inspect
