#include "proxy/inspect/ca.hpp"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <ctime>

#include "config/ip.hpp"

namespace cordon::proxy::inspect {

void pkey_free::operator()(EVP_PKEY* k) const noexcept { EVP_PKEY_free(k); }
void x509_free::operator()(X509* c) const noexcept { X509_free(c); }

namespace {

struct bio_free {
    void operator()(BIO* b) const noexcept { BIO_free(b); }
};
using bio_ptr = std::unique_ptr<BIO, bio_free>;

// The last OpenSSL error as text (the queue is cleared), after `what`.
std::string ssl_error(std::string_view what) {
    std::string out(what);
    const unsigned long e = ERR_get_error();
    if (e != 0) {
        char buf[256];
        ERR_error_string_n(e, buf, sizeof buf);
        out += ": ";
        out += buf;
    }
    ERR_clear_error();
    return out;
}

pkey_ptr new_p256_key() { return pkey_ptr(EVP_EC_gen("P-256")); }

bool is_p256(EVP_PKEY* k) {
    if (EVP_PKEY_base_id(k) != EVP_PKEY_EC) {
        return false;
    }
    char group[64] = {};
    std::size_t len = 0;
    return EVP_PKEY_get_utf8_string_param(k, "group", group, sizeof group, &len) == 1 &&
           std::string_view(group, len) == "prime256v1";
}

// A random positive serial of 127 bits (RFC 5280: at most 20 octets, positive).
bool set_random_serial(X509* c) {
    BIGNUM* bn = BN_new();
    bool ok = bn != nullptr && BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1;
    if (ok) {
        ASN1_INTEGER* serial = BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c));
        ok = serial != nullptr;
    }
    BN_free(bn);
    return ok;
}

bool add_ext(X509* cert, X509* issuer, int nid, const char* value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (ext == nullptr) {
        return false;
    }
    const bool ok = X509_add_ext(cert, ext, -1) == 1;
    X509_EXTENSION_free(ext);
    return ok;
}

bool set_name(X509_NAME* n, std::string_view cn) {
    const std::string c(cn);
    return X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8,
                                      reinterpret_cast<const unsigned char*>(c.c_str()), -1, -1,
                                      0) == 1 &&
           X509_NAME_add_entry_by_txt(n, "O", MBSTRING_UTF8,
                                      reinterpret_cast<const unsigned char*>("cordon"), -1, -1,
                                      0) == 1;
}

std::string to_pem(X509* c) {
    bio_ptr b(BIO_new(BIO_s_mem()));
    if (!b || PEM_write_bio_X509(b.get(), c) != 1) {
        return {};
    }
    char* data = nullptr;
    const long n = BIO_get_mem_data(b.get(), &data);
    return std::string(data, static_cast<std::size_t>(n));
}

std::time_t to_time_t(const ASN1_TIME* t) {
    std::tm tm{};
    if (ASN1_TIME_to_tm(t, &tm) != 1) {
        return 0;
    }
    return timegm(&tm);
}

}  // namespace

std::optional<ca_pem> make_ca(std::string_view common_name, std::chrono::hours lifetime,
                              std::string& error) {
    const pkey_ptr key = new_p256_key();
    x509_ptr cert(X509_new());
    if (!key || !cert) {
        error = ssl_error("cannot make an ECDSA P-256 key");
        return std::nullopt;
    }
    X509* c = cert.get();
    const long seconds = static_cast<long>(
        std::chrono::duration_cast<std::chrono::seconds>(lifetime).count());
    const bool ok = X509_set_version(c, 2) == 1 && set_random_serial(c) &&
                    X509_gmtime_adj(X509_getm_notBefore(c), -3600) != nullptr &&
                    X509_gmtime_adj(X509_getm_notAfter(c), seconds) != nullptr &&
                    set_name(X509_get_subject_name(c), common_name) &&
                    X509_set_issuer_name(c, X509_get_subject_name(c)) == 1 &&
                    X509_set_pubkey(c, key.get()) == 1 &&
                    add_ext(c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
                    add_ext(c, c, NID_key_usage, "critical,keyCertSign,cRLSign") &&
                    add_ext(c, c, NID_subject_key_identifier, "hash") &&
                    X509_sign(c, key.get(), EVP_sha256()) > 0;
    if (!ok) {
        error = ssl_error("cannot make the CA certificate");
        return std::nullopt;
    }
    ca_pem out;
    out.cert = to_pem(c);
    bio_ptr b(BIO_new(BIO_s_mem()));
    if (!b ||
        PEM_write_bio_PrivateKey(b.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
        error = ssl_error("cannot write the CA key");
        return std::nullopt;
    }
    char* data = nullptr;
    const long n = BIO_get_mem_data(b.get(), &data);
    out.key.assign(data, static_cast<std::size_t>(n));
    OPENSSL_cleanse(data, static_cast<std::size_t>(n));
    if (out.cert.empty()) {
        error = ssl_error("cannot write the CA certificate");
        return std::nullopt;
    }
    return out;
}

authority::~authority() = default;

std::unique_ptr<authority> authority::load(std::string_view cert_pem, std::string_view key_pem,
                                           std::string& error) {
    std::unique_ptr<authority> a(new authority());
    bio_ptr cb(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
    a->cert_.reset(cb ? PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr) : nullptr);
    if (!a->cert_) {
        error = ssl_error("the CA certificate is not a PEM certificate");
        return nullptr;
    }
    bio_ptr kb(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
    // No passphrase callback: an encrypted key fails here rather than prompting.
    a->key_.reset(kb ? PEM_read_bio_PrivateKey(
                           kb.get(), nullptr, [](char*, int, int, void*) { return 0; }, nullptr)
                     : nullptr);
    ERR_clear_error();  // never carry key parsing details into a message
    if (!a->key_) {
        error = "the CA key is not an unencrypted PEM private key";
        return nullptr;
    }
    if (!is_p256(a->key_.get())) {
        error = "the CA key is not an ECDSA P-256 key (`cordon ca init` makes one)";
        return nullptr;
    }
    if (X509_check_private_key(a->cert_.get(), a->key_.get()) != 1) {
        ERR_clear_error();
        error = "the CA key does not belong to the CA certificate";
        return nullptr;
    }
    if (X509_check_ca(a->cert_.get()) == 0 ||
        (X509_get_key_usage(a->cert_.get()) & KU_KEY_CERT_SIGN) == 0) {
        error = "the CA certificate is not a CA allowed to sign certificates";
        return nullptr;
    }
    const std::time_t now = std::time(nullptr);
    if (X509_cmp_time(X509_get0_notAfter(a->cert_.get()), nullptr) <= 0) {
        error = "the CA certificate has expired (" + describe(a->cert_.get()) + ")";
        return nullptr;
    }
    if (to_time_t(X509_get0_notBefore(a->cert_.get())) > now + 300) {
        error = "the CA certificate is not valid yet (the clock?)";
        return nullptr;
    }
    a->leaf_key_ = new_p256_key();
    if (!a->leaf_key_) {
        error = ssl_error("cannot make the leaf key");
        return nullptr;
    }
    a->pem_ = to_pem(a->cert_.get());
    return a;
}

std::optional<leaf> authority::mint(std::string_view name, std::chrono::seconds ttl,
                                    std::string& error) const {
    if (name.empty() || name.size() > 253) {
        error = "no name to mint a certificate for";
        return std::nullopt;
    }
    x509_ptr cert(X509_new());
    if (!cert) {
        error = ssl_error("cannot mint a certificate");
        return std::nullopt;
    }
    X509* c = cert.get();
    const std::string n(name);
    const bool is_ip = config::parse_ip(n).has_value();
    const std::string san = (is_ip ? "IP:" : "DNS:") + n;
    // Never past the CA's own end: a client would refuse the chain then anyway.
    std::time_t now = std::time(nullptr);
    std::time_t end = now + static_cast<std::time_t>(ttl.count());
    end = std::min(end, to_time_t(X509_get0_notAfter(cert_.get())));
    const bool ok = X509_set_version(c, 2) == 1 && set_random_serial(c) &&
                    X509_gmtime_adj(X509_getm_notBefore(c), -3600) != nullptr &&
                    X509_time_adj_ex(X509_getm_notAfter(c), 0, static_cast<long>(end - now),
                                     &now) != nullptr &&
                    set_name(X509_get_subject_name(c), n.size() <= 64 ? n : n.substr(0, 64)) &&
                    X509_set_issuer_name(c, X509_get_subject_name(cert_.get())) == 1 &&
                    X509_set_pubkey(c, leaf_key_.get()) == 1 &&
                    add_ext(c, cert_.get(), NID_basic_constraints, "critical,CA:FALSE") &&
                    add_ext(c, cert_.get(), NID_key_usage, "critical,digitalSignature") &&
                    add_ext(c, cert_.get(), NID_ext_key_usage, "serverAuth") &&
                    add_ext(c, cert_.get(), NID_subject_alt_name, san.c_str()) &&
                    add_ext(c, cert_.get(), NID_subject_key_identifier, "hash") &&
                    add_ext(c, cert_.get(), NID_authority_key_identifier, "keyid:always") &&
                    X509_sign(c, key_.get(), EVP_sha256()) > 0;
    if (!ok) {
        error = ssl_error("cannot mint a certificate for " + n);
        return std::nullopt;
    }
    leaf out;
    out.cert = std::move(cert);
    out.key = leaf_key_.get();
    out.not_after = std::chrono::system_clock::from_time_t(end);
    return out;
}

std::string describe(X509* cert) {
    char subject[256] = {};
    X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof subject);
    const std::time_t end = to_time_t(X509_get0_notAfter(cert));
    std::tm tm{};
    gmtime_r(&end, &tm);
    char date[32] = {};
    std::strftime(date, sizeof date, "%Y-%m-%d", &tm);
    return std::string(subject) + "; valid until " + date;
}

}  // namespace cordon::proxy::inspect
