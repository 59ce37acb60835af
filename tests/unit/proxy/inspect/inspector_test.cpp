// Tests of the inspector (proxy/inspect/inspector.hpp): real TLS handshakes over in-memory
// BIO pairs, no sockets. The server side presents a leaf for the CONNECT host that chains to
// cordon's CA and speaks only http/1.1 (an h2-only client is refused and marked); the
// upstream side verifies the chain against the upstream roots and the name, sends SNI.
#include "proxy/inspect/inspector.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <catch2/catch.hpp>

#include <string>

namespace {

using namespace cordon::proxy::inspect;
using namespace std::chrono_literals;

ca_pem new_ca(std::string_view cn) {
    std::string error;
    auto ca = make_ca(cn, std::chrono::hours(24 * 30), error);
    INFO(error);
    REQUIRE(ca);
    return *ca;
}

struct handshake {
    bool client_ok = false;
    bool server_ok = false;
    std::string alpn;  // what the client got
    std::string sni;   // what the server saw
};

// Runs both sides of a handshake over a BIO pair until each is done or failed.
handshake run(SSL* client, SSL* server) {
    BIO* a = nullptr;
    BIO* b = nullptr;
    REQUIRE(BIO_new_bio_pair(&a, 0, &b, 0) == 1);
    SSL_set_bio(client, a, a);
    SSL_set_bio(server, b, b);
    SSL_set_connect_state(client);
    SSL_set_accept_state(server);
    handshake h;
    bool client_done = false;
    bool server_done = false;
    for (int i = 0; i < 100 && !(client_done && server_done); ++i) {
        if (!client_done) {
            const int r = SSL_do_handshake(client);
            if (r == 1) {
                client_done = h.client_ok = true;
            } else {
                const int e = SSL_get_error(client, r);
                client_done = e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
            }
        }
        if (!server_done) {
            const int r = SSL_do_handshake(server);
            if (r == 1) {
                server_done = h.server_ok = true;
            } else {
                const int e = SSL_get_error(server, r);
                server_done = e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
            }
        }
    }
    const unsigned char* p = nullptr;
    unsigned int n = 0;
    SSL_get0_alpn_selected(client, &p, &n);
    h.alpn.assign(reinterpret_cast<const char*>(p), n);
    if (const char* s = SSL_get_servername(server, TLSEXT_NAMETYPE_host_name)) {
        h.sni = s;
    }
    return h;
}

// A client that trusts `ca_pem_text` only and checks `host`, offering `alpn` (wire format).
SSL* client_for(SSL_CTX* ctx, const std::string& ca_pem_text, const std::string& host,
                std::string_view alpn = {}) {
    BIO* b = BIO_new_mem_buf(ca_pem_text.data(), static_cast<int>(ca_pem_text.size()));
    X509* ca = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
    BIO_free(b);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca);
    X509_free(ca);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    SSL* s = SSL_new(ctx);
    SSL_set1_host(s, host.c_str());
    SSL_ctrl(s, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(host.c_str()));  // SSL_set_tlsext_host_name, without its C cast
    if (!alpn.empty()) {
        SSL_set_alpn_protos(s, reinterpret_cast<const unsigned char*>(alpn.data()),
                            static_cast<unsigned int>(alpn.size()));
    }
    return s;
}

std::shared_ptr<inspector> make(const ca_pem& ca, const std::string& upstream_bundle = {}) {
    std::string error;
    auto i = inspector::from_pem(ca.cert, ca.key, upstream_bundle, 24h, 100, error);
    INFO(error);
    REQUIRE(i);
    return i;
}

}  // namespace

TEST_CASE("inspector: the client side gets a leaf for the CONNECT host, chained to cordon's CA") {
    const ca_pem ca = new_ca("cordon CA");
    auto insp = make(ca);
    CHECK(insp->ca_pem() == ca.cert);
    SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
    std::string error;
    SSL* server = insp->server_session("api.test", error);
    REQUIRE(server);
    SSL* client = client_for(cctx, ca.cert, "api.test", std::string_view("\x08http/1.1", 9));
    const handshake h = run(client, server);
    CHECK(h.client_ok);
    CHECK(h.server_ok);
    CHECK(h.alpn == "http/1.1");
    CHECK(SSL_get_verify_result(client) == X509_V_OK);
    CHECK_FALSE(inspector::alpn_refused(server));
    SSL_free(client);
    SSL_free(server);

    // The same name again: the cached leaf; another name: its own.
    SSL* server2 = insp->server_session("api.test", error);
    SSL* server3 = insp->server_session("other.test", error);
    REQUIRE(server2);
    REQUIRE(server3);
    CHECK(insp->leaf_stats().mints == 2);
    CHECK(insp->leaf_stats().hits >= 1);
    // A client checking for api.test refuses the other name's leaf.
    SSL* client3 = client_for(cctx, ca.cert, "api.test");
    const handshake h3 = run(client3, server3);
    CHECK_FALSE(h3.client_ok);
    SSL_free(client3);
    SSL_free(server2);
    SSL_free(server3);
    SSL_CTX_free(cctx);
}

TEST_CASE("inspector: ALPN is http/1.1 or nothing; an h2-only client is refused and marked") {
    const ca_pem ca = new_ca("cordon CA");
    auto insp = make(ca);
    SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
    std::string error;
    {
        SSL* server = insp->server_session("api.test", error);
        SSL* client = client_for(cctx, ca.cert, "api.test", std::string_view("\x02h2", 3));
        const handshake h = run(client, server);
        CHECK_FALSE(h.server_ok);
        CHECK_FALSE(h.client_ok);
        CHECK(inspector::alpn_refused(server));
        CHECK_THAT(inspector::handshake_error(server), Catch::Contains("ALPN"));
        SSL_free(client);
        SSL_free(server);
    }
    {
        SSL* server = insp->server_session("api.test", error);
        SSL* client = client_for(cctx, ca.cert, "api.test",
                                 std::string_view("\x02h2\x08http/1.1", 12));
        const handshake h = run(client, server);
        CHECK(h.server_ok);
        CHECK(h.alpn == "http/1.1");
        SSL_free(client);
        SSL_free(server);
    }
    {
        // No ALPN at all: HTTP/1.1 by default.
        SSL* server = insp->server_session("api.test", error);
        SSL* client = client_for(cctx, ca.cert, "api.test");
        const handshake h = run(client, server);
        CHECK(h.server_ok);
        CHECK(h.alpn.empty());
        CHECK_FALSE(inspector::alpn_refused(server));
        SSL_free(client);
        SSL_free(server);
    }
    SSL_CTX_free(cctx);
}

TEST_CASE("inspector: the upstream side verifies chain and name against upstream_ca, sends SNI") {
    const ca_pem ours = new_ca("cordon CA");
    const ca_pem theirs = new_ca("upstream CA");
    const ca_pem stranger = new_ca("someone else");
    // The "upstream server": an inspector of their CA presents leaves minted by it.
    auto upstream_server = make(theirs);
    auto stranger_server = make(stranger);
    auto insp = make(ours, theirs.cert);
    std::string error;

    SECTION("the right name, chained to upstream_ca") {
        SSL* client = insp->upstream_session("api.test", error);
        SSL* server = upstream_server->server_session("api.test", error);
        const handshake h = run(client, server);
        CHECK(h.client_ok);
        CHECK(h.sni == "api.test");
        CHECK(h.alpn == "http/1.1");
        SSL_free(client);
        SSL_free(server);
    }
    SECTION("a certificate for another name") {
        SSL* client = insp->upstream_session("api.test", error);
        SSL* server = upstream_server->server_session("evil.test", error);
        const handshake h = run(client, server);
        CHECK_FALSE(h.client_ok);
        CHECK_THAT(inspector::handshake_error(client), Catch::Contains("hostname mismatch"));
        SSL_free(client);
        SSL_free(server);
    }
    SECTION("a chain to a CA that is not in upstream_ca") {
        SSL* client = insp->upstream_session("api.test", error);
        SSL* server = stranger_server->server_session("api.test", error);
        const handshake h = run(client, server);
        CHECK_FALSE(h.client_ok);
        CHECK_THAT(inspector::handshake_error(client),
                   Catch::Contains("certificate verify failed"));
        SSL_free(client);
        SSL_free(server);
    }
    SECTION("cordon's own CA is not trusted upstream (no loop through itself)") {
        auto own_server = make(ours);
        SSL* client = insp->upstream_session("api.test", error);
        SSL* server = own_server->server_session("api.test", error);
        CHECK_FALSE(run(client, server).client_ok);
        SSL_free(client);
        SSL_free(server);
    }
}

TEST_CASE("inspector: bad CA or upstream bundle is refused with a message that quotes no key") {
    const ca_pem ca = new_ca("cordon CA");
    const ca_pem other = new_ca("other");
    std::string error;
    CHECK_FALSE(inspector::from_pem(ca.cert, other.key, {}, 24h, 10, error));
    CHECK_FALSE(error.empty());
    CHECK(error.find("PRIVATE") == std::string::npos);
    error.clear();
    CHECK_FALSE(inspector::from_pem(ca.cert, ca.key, "not a bundle", 24h, 10, error));
    CHECK_THAT(error, Catch::Contains("upstream_ca") && Catch::Contains("no PEM certificate"));
    error.clear();
    // The system's roots when no bundle is given.
    CHECK(inspector::from_pem(ca.cert, ca.key, {}, 24h, 10, error));
}

TEST_CASE("inspector: load() reads the policy's files and names the one that fails") {
    const ca_pem ca = new_ca("cordon CA");
    cordon::config::inspect_spec spec;
    spec.ca_cert = "/nonexistent/ca.pem";
    spec.ca_key = "/nonexistent/ca.key";
    std::string error;
    CHECK_FALSE(inspector::load(spec, {}, error));
    CHECK_THAT(error, Catch::Contains("inspect.ca.cert") && Catch::Contains("/nonexistent/ca.pem"));
}

TEST_CASE("read_small_file: bounded") {
    std::string error;
    CHECK_FALSE(read_small_file("/nonexistent", 10, error));
    CHECK_THAT(error, Catch::Contains("cannot be read"));
    error.clear();
    const auto os_release = read_small_file("/etc/os-release", 1, error);
    CHECK_FALSE(os_release);
    CHECK_THAT(error, Catch::Contains("larger than"));
}
