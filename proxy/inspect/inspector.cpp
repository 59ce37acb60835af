#include "proxy/inspect/inspector.hpp"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fstream>
#include <iterator>
#include <mutex>

namespace cordon::proxy::inspect {
namespace {

constexpr std::size_t max_pem_bytes = 4 * 1024 * 1024;  // a CA bundle is ~200 KiB

// ALPN as the wire carries it: one length-prefixed name.
constexpr unsigned char alpn_http11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};

// The ex_data slot where the ALPN callback marks a refused client (Asio uses app data).
int alpn_slot() {
    static const int slot = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    return slot;
}

// Server side: http/1.1 if the client offers it; a client that offers ALPN without it (h2
// only) gets a fatal no_application_protocol alert, and the connection is marked so the
// data plane can say why. A client without ALPN speaks HTTP/1.1 by default.
int select_alpn(SSL* ssl, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void*) {
    for (unsigned int i = 0; i < inlen;) {
        const unsigned int len = in[i];
        if (len == 0 || i + 1 + len > inlen) {
            break;
        }
        if (len == 8 && std::equal(in + i + 1, in + i + 1 + len, alpn_http11 + 1)) {
            *out = in + i + 1;
            *outlen = static_cast<unsigned char>(len);
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + len;
    }
    SSL_set_ex_data(ssl, alpn_slot(), reinterpret_cast<void*>(1));
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

std::string last_error(std::string_view what) {
    std::string out(what);
    const unsigned long e = ERR_get_error();
    if (e != 0) {
        const char* reason = ERR_reason_error_string(e);
        out += ": ";
        out += reason != nullptr ? reason : "unknown error";
    }
    ERR_clear_error();
    return out;
}

// TLS 1.2 and 1.3 only, no compression, no renegotiation: what both sides share.
bool harden(SSL_CTX* ctx) {
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE);
    return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1;
}

// Adds every certificate of `pem` to `store`; false (with `error`) when none parses.
bool add_pem_certificates(X509_STORE* store, std::string_view pem, std::string& error) {
    BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    if (bio == nullptr) {
        error = last_error("BIO_new_mem_buf");
        return false;
    }
    int added = 0;
    for (;;) {
        X509* c = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
        if (c == nullptr) {
            break;
        }
        if (X509_STORE_add_cert(store, c) == 1) {
            ++added;
        }
        X509_free(c);
    }
    BIO_free(bio);
    ERR_clear_error();  // the end of the input reads as an error
    if (added == 0) {
        error = "no PEM certificate in it";
        return false;
    }
    return true;
}

}  // namespace

std::optional<std::string> read_small_file(const std::string& path, std::size_t max,
                                           std::string& error) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        error = path + ": cannot be read";
        return std::nullopt;
    }
    std::string out;
    char buf[16 * 1024];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
        out.append(buf, static_cast<std::size_t>(in.gcount()));
        if (out.size() > max) {
            error = path + ": larger than " + std::to_string(max / 1024) + " KiB";
            return std::nullopt;
        }
    }
    if (in.bad()) {
        error = path + ": read error";
        return std::nullopt;
    }
    return out;
}

inspector::inspector(std::shared_ptr<const authority> ca, std::chrono::seconds ttl,
                     std::size_t cache)
    : ca_(std::move(ca)), leaves_(ca_, cache, ttl) {}

inspector::~inspector() {
    SSL_CTX_free(server_ctx_);
    SSL_CTX_free(upstream_ctx_);
}

std::shared_ptr<inspector> inspector::load(const config::inspect_spec& spec,
                                           const std::vector<config::secret_spec>& secrets,
                                           std::string& error) {
    const auto cert = read_small_file(spec.ca_cert, max_pem_bytes, error);
    if (!cert) {
        error = "inspect.ca.cert: " + error;
        return nullptr;
    }
    const auto key = read_small_file(spec.ca_key, max_pem_bytes, error);
    if (!key) {
        error = "inspect.ca.key: " + error;
        return nullptr;
    }
    std::string bundle;
    if (spec.upstream_ca) {
        auto b = read_small_file(*spec.upstream_ca, max_pem_bytes, error);
        if (!b) {
            error = "inspect.upstream_ca: " + error;
            return nullptr;
        }
        bundle = std::move(*b);
        if (bundle.empty()) {
            error = "inspect.upstream_ca: " + *spec.upstream_ca + ": empty";
            return nullptr;
        }
    }
    auto out = from_pem(*cert, *key, bundle, spec.leaf_ttl, spec.leaf_cache, error);
    if (!out) {
        // Say which file: the CA's checks name the certificate or the key, the bundle's own.
        error = (error.starts_with("upstream_ca")
                     ? "inspect."
                     : "inspect.ca (" + spec.ca_cert + ", " + spec.ca_key + "): ") +
                error;
        return nullptr;
    }
    if (!secrets.empty()) {
        std::string pk = placeholder_key_from(*key);
        out->broker_ = credential_broker::load(secrets, pk, error);
        OPENSSL_cleanse(pk.data(), pk.size());
        if (!out->broker_) {
            return nullptr;
        }
    }
    return out;
}

std::shared_ptr<inspector> inspector::from_pem(std::string_view ca_cert, std::string_view ca_key,
                                               std::string_view upstream_ca_pem,
                                               std::chrono::seconds leaf_ttl,
                                               std::size_t leaf_cache_size, std::string& error) {
    std::shared_ptr<const authority> ca = authority::load(ca_cert, ca_key, error);
    if (!ca) {
        return nullptr;
    }
    std::shared_ptr<inspector> out(new inspector(ca, leaf_ttl, leaf_cache_size));
    out->server_ctx_ = SSL_CTX_new(TLS_server_method());
    out->upstream_ctx_ = SSL_CTX_new(TLS_client_method());
    if (out->server_ctx_ == nullptr || out->upstream_ctx_ == nullptr || !harden(out->server_ctx_) ||
        !harden(out->upstream_ctx_)) {
        error = last_error("TLS contexts");
        return nullptr;
    }
    SSL_CTX_set_alpn_select_cb(out->server_ctx_, select_alpn, nullptr);
    // The chain a client sees: the leaf, then cordon's CA (what the sandbox trusts).
    if (SSL_CTX_add1_chain_cert(out->server_ctx_, ca->certificate()) != 1) {
        error = last_error("the CA in the server chain");
        return nullptr;
    }

    SSL_CTX_set_verify(out->upstream_ctx_, SSL_VERIFY_PEER, nullptr);
    if (upstream_ca_pem.empty()) {
        if (SSL_CTX_set_default_verify_paths(out->upstream_ctx_) != 1) {
            error = last_error("upstream_ca: the system's roots");
            return nullptr;
        }
    } else if (!add_pem_certificates(SSL_CTX_get_cert_store(out->upstream_ctx_), upstream_ca_pem,
                                     error)) {
        error = "upstream_ca: " + error;
        return nullptr;
    }
    if (SSL_CTX_set_alpn_protos(out->upstream_ctx_, alpn_http11, sizeof alpn_http11) != 0) {
        error = last_error("upstream ALPN");
        return nullptr;
    }
    return out;
}

SSL* inspector::server_session(std::string_view name, std::string& error) {
    const std::shared_ptr<const leaf> l = leaves_.get(name, error);
    if (!l) {
        return nullptr;
    }
    SSL* ssl = SSL_new(server_ctx_);
    // SSL_use_* take their own references: the cache may drop the leaf meanwhile.
    if (ssl == nullptr || SSL_use_certificate(ssl, l->cert.get()) != 1 ||
        SSL_use_PrivateKey(ssl, l->key) != 1) {
        error = last_error("the leaf for the TLS session");
        SSL_free(ssl);
        return nullptr;
    }
    return ssl;
}

SSL* inspector::upstream_session(std::string_view host, std::string& error) const {
    SSL* ssl = SSL_new(upstream_ctx_);
    const std::string h(host);
    if (ssl == nullptr) {
        error = last_error("SSL_new");
        return nullptr;
    }
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    // SSL_set_tlsext_host_name, without the macro's C cast.
    if (SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                 const_cast<char*>(h.c_str())) != 1 ||
        SSL_set1_host(ssl, h.c_str()) != 1) {
        error = last_error("the upstream's name");
        SSL_free(ssl);
        return nullptr;
    }
    return ssl;
}

bool inspector::alpn_refused(const SSL* ssl) noexcept {
    return SSL_get_ex_data(ssl, alpn_slot()) != nullptr;
}

std::string inspector::handshake_error(const SSL* ssl) {
    const long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) {
        ERR_clear_error();
        return std::string("certificate verify failed: ") + X509_verify_cert_error_string(v);
    }
    if (alpn_refused(ssl)) {
        ERR_clear_error();
        return "the client offers no ALPN protocol cordon speaks (only http/1.1 is inspected)";
    }
    return last_error("TLS handshake failed");
}

}  // namespace cordon::proxy::inspect
