// Tests of the inspection CA (proxy/inspect/ca.hpp): a CA made and loaded, leaves minted and
// verified with OpenSSL's own chain and hostname checks, and every CA load refused that
// should be (wrong key, not a CA, not P-256, encrypted, garbage).
#include "proxy/inspect/ca.hpp"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <catch2/catch.hpp>

#include <string>

namespace {

using namespace cordon::proxy::inspect;
using namespace std::chrono_literals;

ca_pem new_ca(std::string_view cn = "cordon test CA") {
    std::string error;
    auto ca = make_ca(cn, std::chrono::hours(24 * 365), error);
    INFO(error);
    REQUIRE(ca);
    return *ca;
}

std::unique_ptr<authority> load_ok(const ca_pem& ca) {
    std::string error;
    auto a = authority::load(ca.cert, ca.key, error);
    INFO(error);
    REQUIRE(a);
    return a;
}

std::string load_error(std::string_view cert, std::string_view key) {
    std::string error;
    const auto a = authority::load(cert, key, error);
    return a ? std::string("loaded") : error;
}

// OpenSSL's verdict on `leaf` against `ca` as a TLS client checks a server for `host`
// (a name, or an IP address when `ip`).
int verify(X509* ca, X509* leaf, const std::string& host, bool ip = false) {
    X509_STORE* store = X509_STORE_new();
    X509_STORE_add_cert(store, ca);
    X509_STORE_CTX* ctx = X509_STORE_CTX_new();
    X509_STORE_CTX_init(ctx, store, leaf, nullptr);
    X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_SERVER);
    X509_VERIFY_PARAM* p = X509_STORE_CTX_get0_param(ctx);
    if (ip) {
        X509_VERIFY_PARAM_set1_ip_asc(p, host.c_str());
    } else {
        X509_VERIFY_PARAM_set1_host(p, host.c_str(), host.size());
    }
    const int ok = X509_verify_cert(ctx);
    const int err = ok == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
    return err;
}

}  // namespace

TEST_CASE("inspect ca: a new CA is a P-256 CA that loads", "[inspect]") {
    const ca_pem ca = new_ca();
    CHECK(ca.cert.starts_with("-----BEGIN CERTIFICATE-----"));
    CHECK(ca.key.starts_with("-----BEGIN PRIVATE KEY-----"));
    const auto a = load_ok(ca);
    X509* c = a->certificate();
    CHECK(X509_check_ca(c) == 1);
    CHECK((X509_get_key_usage(c) & KU_KEY_CERT_SIGN) != 0);
    CHECK(X509_get0_subject_key_id(c) != nullptr);
    CHECK(describe(c).find("CN=cordon test CA") != std::string::npos);
    CHECK(describe(c).find("valid until") != std::string::npos);
    CHECK(a->pem() == ca.cert);
    // Two CAs are two keys.
    CHECK(new_ca().key != ca.key);
}

TEST_CASE("inspect ca: a minted leaf passes a TLS client's checks for its name only", "[inspect]") {
    const auto a = load_ok(new_ca());
    std::string error;
    const auto l = a->mint("api.example.com", 24h, error);
    INFO(error);
    REQUIRE(l);
    CHECK(verify(a->certificate(), l->cert.get(), "api.example.com") == X509_V_OK);
    CHECK(verify(a->certificate(), l->cert.get(), "evil.example.com") ==
          X509_V_ERR_HOSTNAME_MISMATCH);
    CHECK(verify(a->certificate(), l->cert.get(), "example.com") == X509_V_ERR_HOSTNAME_MISMATCH);
    // The key is the one the certificate names, and it is not the CA's.
    CHECK(X509_check_private_key(l->cert.get(), l->key) == 1);
    CHECK(X509_check_private_key(a->certificate(), l->key) != 1);
    // A leaf: not a CA, serverAuth, AKI = the CA's SKI.
    CHECK(X509_check_ca(l->cert.get()) == 0);
    CHECK((X509_get_extended_key_usage(l->cert.get()) & XKU_SSL_SERVER) != 0);
    const ASN1_OCTET_STRING* aki = X509_get0_authority_key_id(l->cert.get());
    REQUIRE(aki != nullptr);
    CHECK(ASN1_OCTET_STRING_cmp(aki, X509_get0_subject_key_id(a->certificate())) == 0);
    // Lifetime: the ttl asked, give or take the test's own seconds.
    const auto left = l->not_after - std::chrono::system_clock::now();
    CHECK(left > 24h - 1min);
    CHECK(left <= 24h);
    // Another CA does not vouch for it.
    const auto other = load_ok(new_ca("another CA"));
    CHECK(verify(other->certificate(), l->cert.get(), "api.example.com") != X509_V_OK);
}

TEST_CASE("inspect ca: IP literals get an IP SAN", "[inspect]") {
    const auto a = load_ok(new_ca());
    std::string error;
    const auto v4 = a->mint("127.0.0.1", 1h, error);
    REQUIRE(v4);
    CHECK(verify(a->certificate(), v4->cert.get(), "127.0.0.1", true) == X509_V_OK);
    CHECK(verify(a->certificate(), v4->cert.get(), "127.0.0.2", true) != X509_V_OK);
    const auto v6 = a->mint("::1", 1h, error);
    REQUIRE(v6);
    CHECK(verify(a->certificate(), v6->cert.get(), "::1", true) == X509_V_OK);
}

TEST_CASE("inspect ca: a leaf never outlives its CA", "[inspect]") {
    std::string error;
    const auto ca = make_ca("short CA", std::chrono::hours(2), error);
    REQUIRE(ca);
    const auto a = load_ok(*ca);
    const auto l = a->mint("api.example.com", std::chrono::hours(24 * 30), error);
    REQUIRE(l);
    CHECK(l->not_after - std::chrono::system_clock::now() <= 2h);
    CHECK(verify(a->certificate(), l->cert.get(), "api.example.com") == X509_V_OK);
}

TEST_CASE("inspect ca: serials are random and leaves differ per name", "[inspect]") {
    const auto a = load_ok(new_ca());
    std::string error;
    const auto x = a->mint("a.example", 1h, error);
    const auto y = a->mint("a.example", 1h, error);
    REQUIRE(x);
    REQUIRE(y);
    CHECK(ASN1_INTEGER_cmp(X509_get0_serialNumber(x->cert.get()),
                           X509_get0_serialNumber(y->cert.get())) != 0);
    CHECK_FALSE(a->mint("", 1h, error));
    CHECK(!error.empty());
}

TEST_CASE("inspect ca: what is not a usable CA is refused, saying why", "[inspect]") {
    const ca_pem ca = new_ca();
    const ca_pem other = new_ca();
    CHECK(load_error(ca.cert, other.key) == "the CA key does not belong to the CA certificate");
    CHECK(load_error("not a certificate", ca.key).starts_with("the CA certificate is not a PEM"));
    CHECK(load_error(ca.cert, "not a key") == "the CA key is not an unencrypted PEM private key");
    CHECK(load_error(ca.cert, "") == "the CA key is not an unencrypted PEM private key");

    // A leaf is not a CA.
    const auto a = load_ok(ca);
    std::string error;
    const auto l = a->mint("x.example", 1h, error);
    REQUIRE(l);
    BIO* b = BIO_new(BIO_s_mem());
    PEM_write_bio_X509(b, l->cert.get());
    PEM_write_bio_PrivateKey(b, l->key, nullptr, nullptr, 0, nullptr, nullptr);
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    const std::string both(data, static_cast<std::size_t>(n));
    BIO_free(b);
    const std::size_t split = both.find("-----BEGIN PRIVATE KEY-----");
    REQUIRE(split != std::string::npos);
    CHECK(load_error(both.substr(0, split), both.substr(split)) ==
          "the CA certificate is not a CA allowed to sign certificates");

    // An RSA key is not what `cordon ca init` makes.
    EVP_PKEY* rsa = EVP_RSA_gen(2048);
    REQUIRE(rsa != nullptr);
    BIO* kb = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(kb, rsa, nullptr, nullptr, 0, nullptr, nullptr);
    const long kn = BIO_get_mem_data(kb, &data);
    const std::string rsa_pem(data, static_cast<std::size_t>(kn));
    BIO_free(kb);
    EVP_PKEY_free(rsa);
    CHECK(load_error(ca.cert, rsa_pem) ==
          "the CA key is not an ECDSA P-256 key (`cordon ca init` makes one)");

    // An encrypted key fails without prompting, and without quoting anything of it.
    const auto loaded = load_ok(ca);
    BIO* eb = BIO_new(BIO_s_mem());
    EVP_PKEY* k = nullptr;
    {
        BIO* in = BIO_new_mem_buf(ca.key.data(), static_cast<int>(ca.key.size()));
        k = PEM_read_bio_PrivateKey(in, nullptr, nullptr, nullptr);
        BIO_free(in);
    }
    REQUIRE(k != nullptr);
    char pass[] = "secret-passphrase";
    PEM_write_bio_PKCS8PrivateKey(eb, k, EVP_aes_256_cbc(), pass, sizeof pass - 1, nullptr,
                                  nullptr);
    const long en = BIO_get_mem_data(eb, &data);
    const std::string enc(data, static_cast<std::size_t>(en));
    BIO_free(eb);
    EVP_PKEY_free(k);
    CHECK(enc.find("ENCRYPTED") != std::string::npos);
    CHECK(load_error(ca.cert, enc) == "the CA key is not an unencrypted PEM private key");
}
