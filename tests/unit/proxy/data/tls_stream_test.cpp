// Tests of tls_stream (proxy/data/tls_stream.hpp): first its error mapping as a pure function,
// then real TLS over socketpair(2)s (no network, no listener), both ends tls_streams made
// from one inspector (the server side presents cordon's leaf for api.test; the client side
// verifies it against the same CA as its upstream roots). The test's io_context runs on the
// test thread, every run bounded.
#include "proxy/data/tls_stream.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ssl/error.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "proxy/inspect/ca.hpp"
#include "proxy/inspect/inspector.hpp"

namespace {

using namespace cordon;
using namespace cordon::proxy::data;
using namespace std::chrono_literals;
using namespace net::experimental::awaitable_operators;
using want = tls_step::want;
namespace ssl_error = boost::asio::ssl::error;

std::shared_ptr<cordon::proxy::inspect::inspector> test_inspector() {
    static const std::shared_ptr<cordon::proxy::inspect::inspector> insp = [] {
        std::string error;
        const auto ca = cordon::proxy::inspect::make_ca("tls_stream test CA", 24h * 30, error);
        REQUIRE(ca);
        // The CA is also the client side's upstream root: it verifies the leaf it mints.
        auto i = cordon::proxy::inspect::inspector::from_pem(ca->cert, ca->key, ca->cert, 24h, 10,
                                                             error);
        INFO(error);
        REQUIRE(i);
        return i;
    }();
    return insp;
}

awaitable<error_code> handshake_as(tls_stream& s, tls_stream::role r) {
    auto [ec] = co_await s.async_handshake(r, use_nothrow);
    co_return ec;
}

// Two tls_streams over a socketpair: `client` (an upstream session for api.test) on `a`,
// `server` (cordon's leaf for api.test) on `b`.
struct tls_pair {
    net::io_context ioc;
    tcp::socket a{ioc};
    tcp::socket b{ioc};
    std::unique_ptr<tls_stream> client;
    std::unique_ptr<tls_stream> server;

    tls_pair() {
        int fds[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
        a.assign(tcp::v4(), fds[0]);
        b.assign(tcp::v4(), fds[1]);
        std::string error;
        SSL* c = test_inspector()->upstream_session("api.test", error);
        SSL* s = test_inspector()->server_session("api.test", error);
        INFO(error);
        REQUIRE(c);
        REQUIRE(s);
        client = std::make_unique<tls_stream>(a, c);
        server = std::make_unique<tls_stream>(b, s);
    }

    // Runs `co` to completion on the test thread, within `limit`.
    template <class T>
    T run(awaitable<T> co, std::chrono::milliseconds limit = 10s) {
        std::optional<T> out;
        std::exception_ptr failed;
        net::co_spawn(ioc, std::move(co), [&](std::exception_ptr e, T v) {
            failed = std::move(e);
            out = std::move(v);
        });
        ioc.restart();
        ioc.run_for(limit);
        REQUIRE(out.has_value());
        if (failed) {
            std::rethrow_exception(failed);
        }
        return std::move(*out);
    }

    void handshake() {
        // Every awaitable named: GCC 12 destroys temporaries in a co_await expression twice
        // (GCC PR 100611; see dialer.cpp).
        auto both = [](tls_stream& c, tls_stream& s) -> awaitable<int> {
            auto hc = handshake_as(c, tls_stream::role::client);
            auto hs = handshake_as(s, tls_stream::role::server);
            auto [cec, sec] = co_await (std::move(hc) && std::move(hs));
            INFO(cec.message() << " / " << sec.message());
            CHECK_FALSE(cec);
            CHECK_FALSE(sec);
            co_return 0;
        };
        run(both(*client, *server));
    }
};

awaitable<error_code> write_all(tls_stream& s, std::string data) {
    auto [ec, n] = co_await net::async_write(s, net::buffer(data), use_nothrow);
    (void)n;
    co_return ec;
}

// Reads until `want_bytes` came or the stream ended; the error that ended it, if any.
awaitable<std::pair<std::string, error_code>> read_up_to(tls_stream& s, std::size_t want_bytes,
                                                         std::size_t chunk = 16 * 1024) {
    std::string got;
    std::vector<char> buf(chunk);
    while (got.size() < want_bytes) {
        auto [ec, n] = co_await s.async_read_some(net::buffer(buf), use_nothrow);
        got.append(buf.data(), n);
        if (ec) {
            co_return std::pair{got, ec};
        }
    }
    co_return std::pair{got, error_code{}};
}

std::string pattern(std::size_t n, unsigned seed) {
    std::string s(n, '\0');
    for (std::size_t i = 0; i < n; ++i) {
        s[i] = static_cast<char>((i * 131 + seed * 7 + (i >> 9)) & 0xff);
    }
    return s;
}

}  // namespace

TEST_CASE("tls_stream: OpenSSL's outcomes map to the error codes ssl::stream gave") {
    SECTION("waits") {
        CHECK(tls_failure(SSL_ERROR_WANT_READ, 0, 0, false, false).next == want::read);
        CHECK(tls_failure(SSL_ERROR_WANT_WRITE, 0, 0, false, false).next == want::write);
        CHECK_FALSE(tls_failure(SSL_ERROR_WANT_READ, 0, 0, false, false).ec);
    }
    SECTION("the peer's close_notify is eof") {
        const tls_step st = tls_failure(SSL_ERROR_ZERO_RETURN, 0, 0, false, false);
        CHECK(st.next == want::done);
        CHECK(st.ec == net::error::eof);
        CHECK(tls_failure(SSL_ERROR_ZERO_RETURN, 0, 0, false, true).ec == net::error::eof);
        // With SSL_OP_IGNORE_UNEXPECTED_EOF a bare end of stream reads as ZERO_RETURN too:
        // this call's recv saw the end, and no close_notify came before.
        CHECK(tls_failure(SSL_ERROR_ZERO_RETURN, 0, 0, true, false).ec ==
              ssl_error::stream_truncated);
    }
    SECTION("the socket's own errors, as the socket reports them") {
        CHECK(tls_failure(SSL_ERROR_SYSCALL, 0, ECONNRESET, false, false).ec ==
              net::error::connection_reset);
        CHECK(tls_failure(SSL_ERROR_SYSCALL, 0, EPIPE, false, false).ec == net::error::broken_pipe);
        // A socket closed from outside (a kill) before the call.
        CHECK(tls_failure(SSL_ERROR_SYSCALL, 0, EBADF, false, false).ec ==
              net::error::bad_descriptor);
        // The errno wins over whatever the queue says about it.
        CHECK(tls_failure(SSL_ERROR_SSL, ERR_PACK(ERR_LIB_SSL, 0, SSL_R_WRONG_VERSION_NUMBER),
                          ECONNRESET, false, false)
                  .ec == net::error::connection_reset);
    }
    SECTION("an end of stream without close_notify is stream_truncated, with it eof") {
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
        // OpenSSL 3 without SSL_OP_IGNORE_UNEXPECTED_EOF: SSL_ERROR_SSL (unexpected eof).
        const unsigned long eof_reason = ERR_PACK(ERR_LIB_SSL, 0,
                                                  SSL_R_UNEXPECTED_EOF_WHILE_READING);
        CHECK(tls_failure(SSL_ERROR_SSL, eof_reason, 0, true, false).ec ==
              ssl_error::stream_truncated);
#endif
        // OpenSSL 1.1: SSL_ERROR_SYSCALL without errno.
        CHECK(tls_failure(SSL_ERROR_SYSCALL, 0, 0, true, false).ec == ssl_error::stream_truncated);
        CHECK(tls_failure(SSL_ERROR_SYSCALL, 0, 0, true, true).ec == net::error::eof);
    }
    SECTION("protocol errors keep OpenSSL's reason, in Asio's ssl category") {
        test_inspector();  // OpenSSL initialised: its reason strings loaded
        const unsigned long bad = ERR_PACK(ERR_LIB_SSL, 0, SSL_R_WRONG_VERSION_NUMBER);
        const tls_step st = tls_failure(SSL_ERROR_SSL, bad, 0, false, false);
        CHECK(st.next == want::done);
        CHECK(st.ec.category() == net::error::get_ssl_category());
        CHECK(static_cast<unsigned long>(st.ec.value()) == bad);
        CHECK(st.ec.message().find("wrong version number") != std::string::npos);
    }
    SECTION("what says nothing more") {
        CHECK(tls_failure(SSL_ERROR_SYSCALL, 0, 0, false, false).ec ==
              ssl_error::unspecified_system_error);
        CHECK(tls_failure(SSL_ERROR_SSL, 0, 0, false, false).ec == ssl_error::unexpected_result);
    }
}

TEST_CASE("tls_stream: a handshake both ways, then large data both ways at once") {
    tls_pair p;
    p.handshake();
    const unsigned char* alpn = nullptr;
    unsigned int alpn_len = 0;
    SSL_get0_alpn_selected(p.client->native_handle(), &alpn, &alpn_len);
    CHECK(std::string(reinterpret_cast<const char*>(alpn), alpn_len) == "http/1.1");
    CHECK(SSL_get_verify_result(p.client->native_handle()) == X509_V_OK);

    // Several MiB each way at once: far more than a socketpair holds, so writes wait for
    // the socket (SSL_ERROR_WANT_WRITE) while reads go on; odd sizes, odd read sizes.
    const std::string up = pattern(3 * 1024 * 1024 + 17, 1);
    const std::string down = pattern(5 * 1024 * 1024 + 3, 2);
    auto both = [&]() -> awaitable<int> {
        auto w_up = write_all(*p.client, up);
        auto w_down = write_all(*p.server, down);
        auto r_up = read_up_to(*p.server, up.size(), 7001);
        auto r_down = read_up_to(*p.client, down.size());
        auto [w1, w2, r1, r2] = co_await (std::move(w_up) && std::move(w_down) && std::move(r_up) &&
                                          std::move(r_down));
        CHECK_FALSE(w1);
        CHECK_FALSE(w2);
        CHECK_FALSE(r1.second);
        CHECK_FALSE(r2.second);
        CHECK(r1.first == up);
        CHECK(r2.first == down);
        co_return 0;
    };
    p.run(both(), 60s);
}

TEST_CASE("tls_stream: what OpenSSL already holds is read without waiting on the socket") {
    tls_pair p;
    p.handshake();
    // Three records, then nothing more on the socket.
    auto writes = [&]() -> awaitable<int> {
        for (const char* r : {"first record, ", "second record, ", "third record"}) {
            const std::string record(r);
            const error_code ec = co_await write_all(*p.server, record);
            CHECK_FALSE(ec);
        }
        co_return 0;
    };
    p.run(writes());
    const std::string want_text = "first record, second record, third record";
    auto reads = [&]() -> awaitable<int> {
        // A deadline the socket would never meet: every read below must be served from
        // what OpenSSL took in (read-ahead) or decrypted already.
        p.client->expires_after(2s);
        std::string got;
        char c = 0;
        auto [ec0, n0] = co_await p.client->async_read_some(net::buffer(&c, 1), use_nothrow);
        REQUIRE_FALSE(ec0);
        got.append(&c, n0);
        CHECK(SSL_has_pending(p.client->native_handle()) == 1);
        while (got.size() < want_text.size()) {
            auto [wec] = co_await p.client->async_wait_readable(use_nothrow);
            REQUIRE_FALSE(wec);
            auto [ec, n] = co_await p.client->async_read_some(net::buffer(&c, 1), use_nothrow);
            REQUIRE_FALSE(ec);
            got.append(&c, n);
        }
        p.client->expires_never();
        CHECK(got == want_text);
        co_return 0;
    };
    const auto t0 = std::chrono::steady_clock::now();
    p.run(reads());
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
}

TEST_CASE("tls_stream: the bytes of the ClientHello read before are given to the handshake") {
    tls_pair p;
    auto go = [&]() -> awaitable<int> {
        auto client_side = [&]() -> awaitable<error_code> {
            auto [ec] = co_await p.client->async_handshake(tls_stream::role::client, use_nothrow);
            co_return ec;
        };
        auto server_side = [&]() -> awaitable<error_code> {
            // As check_sni does: the ClientHello is read off the socket first.
            co_await p.b.async_wait(tcp::socket::wait_read, use_nothrow);
            std::vector<char> hello(64 * 1024);
            const ssize_t n = ::recv(p.b.native_handle(), hello.data(), hello.size(), 0);
            REQUIRE(n > 0);
            auto [ec] = co_await p.server->async_handshake(
                tls_stream::role::server, net::buffer(hello.data(), static_cast<std::size_t>(n)),
                use_nothrow);
            co_return ec;
        };
        auto cs = client_side();
        auto ss = server_side();
        auto [cec, sec] = co_await (std::move(cs) && std::move(ss));
        CHECK_FALSE(cec);
        CHECK_FALSE(sec);
        const std::string request = "GET / HTTP/1.1\r\n\r\n";
        const error_code wec = co_await write_all(*p.client, request);
        CHECK_FALSE(wec);
        auto [got, ec] = co_await read_up_to(*p.server, 18);
        CHECK_FALSE(ec);
        CHECK(got == "GET / HTTP/1.1\r\n\r\n");
        co_return 0;
    };
    p.run(go());
}

TEST_CASE("tls_stream: close_notify reads as eof, a close without it as stream_truncated") {
    SECTION("close_notify, and the shutdown waits for the peer's") {
        tls_pair p;
        p.handshake();
        auto go = [&]() -> awaitable<int> {
            auto closing = [&]() -> awaitable<error_code> {
                auto [ec] = co_await p.client->async_shutdown(use_nothrow);
                co_return ec;
            };
            auto reading = [&]() -> awaitable<error_code> {
                auto [got, ec] = co_await read_up_to(*p.server, 1);
                CHECK(got.empty());
                CHECK(ec == net::error::eof);
                auto [sec] = co_await p.server->async_shutdown(use_nothrow);
                CHECK_FALSE(sec);
                co_return ec;
            };
            auto c = closing();
            auto r = reading();
            auto [cec, rec] = co_await (std::move(c) && std::move(r));
            CHECK_FALSE(cec);
            co_return 0;
        };
        p.run(go());
    }
    SECTION("a TCP close without close_notify") {
        tls_pair p;
        p.handshake();
        // A FIN: a close with the server's session tickets unread would be a reset
        // (connection_reset, as the socket says).
        p.a.shutdown(tcp::socket::shutdown_send);
        auto go = [&]() -> awaitable<int> {
            auto [got, ec] = co_await read_up_to(*p.server, 1);
            CHECK(ec == ssl_error::stream_truncated);
            co_return 0;
        };
        p.run(go());
    }
}

TEST_CASE("tls_stream: a socket closed from outside ends a pending read at once") {
    tls_pair p;
    p.handshake();
    // As a kill does (client_conn::abort, posted to the connection's worker): the read
    // waiting on the socket ends with operation_aborted, later calls with bad_descriptor,
    // and nothing is written under a descriptor number the kernel may reuse.
    net::steady_timer kill(p.ioc);
    auto go = [&]() -> awaitable<int> {
        kill.expires_after(50ms);
        kill.async_wait([&](error_code) {
            p.b.set_option(net::socket_base::linger(true, 0));
            p.b.close();
        });
        const auto t0 = std::chrono::steady_clock::now();
        auto [got, ec] = co_await read_up_to(*p.server, 1);
        CHECK(ec == net::error::operation_aborted);
        CHECK(std::chrono::steady_clock::now() - t0 < 1s);
        const std::string late = "late";
        const error_code wec = co_await write_all(*p.server, late);
        CHECK(wec == net::error::bad_descriptor);
        auto [rgot, rec] = co_await read_up_to(*p.server, 1);
        CHECK(rec == net::error::bad_descriptor);
        co_return 0;
    };
    p.run(go());
}

TEST_CASE("tls_stream: a deadline that passes ends the operation with timeout") {
    SECTION("an idle read") {
        tls_pair p;
        p.handshake();
        auto go = [&]() -> awaitable<int> {
            p.server->expires_after(100ms);
            const auto t0 = std::chrono::steady_clock::now();
            auto [got, ec] = co_await read_up_to(*p.server, 1);
            CHECK(ec == beast::error::timeout);
            CHECK(std::chrono::steady_clock::now() - t0 >= 90ms);
            CHECK_FALSE(p.b.is_open());  // as beast::tcp_stream: the socket is closed
            co_return 0;
        };
        p.run(go());
    }
    SECTION("a peer that stops mid-handshake") {
        tls_pair p;
        // The start of a ClientHello (a handshake record's header and the message's first
        // bytes), then nothing.
        static constexpr char part[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0x7c};
        REQUIRE(::send(p.a.native_handle(), part, sizeof part, 0) == sizeof part);
        auto go = [&]() -> awaitable<int> {
            p.server->expires_after(100ms);
            auto [sec] = co_await p.server->async_handshake(tls_stream::role::server, use_nothrow);
            CHECK(sec == beast::error::timeout);
            co_return 0;
        };
        p.run(go());
    }
    SECTION("expires_never lifts it; a later deadline moves it") {
        tls_pair p;
        p.handshake();
        auto go = [&]() -> awaitable<int> {
            p.server->expires_after(50ms);
            p.server->expires_never();
            net::steady_timer later(p.ioc);
            later.expires_after(150ms);
            later.async_wait([&](error_code) {
                net::co_spawn(p.ioc, write_all(*p.client, std::string("x")), net::detached);
            });
            auto [got, ec] = co_await read_up_to(*p.server, 1);
            CHECK_FALSE(ec);
            CHECK(got == "x");
            co_return 0;
        };
        p.run(go());
    }
}

TEST_CASE("tls_stream: small buffers are gathered into one write, in order") {
    tls_pair p;
    p.handshake();
    auto go = [&]() -> awaitable<int> {
        const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        const std::string body = pattern(20000, 3);  // past one record: split after 16 KiB
        const std::array<net::const_buffer, 5> out = {net::buffer(head), net::buffer("4e20\r\n", 6),
                                                      net::buffer(body), net::buffer("\r\n", 2),
                                                      net::buffer("0\r\n\r\n", 5)};
        const std::string all = head + "4e20\r\n" + body + "\r\n0\r\n\r\n";
        auto writing = [&]() -> awaitable<error_code> {
            auto [ec, n] = co_await net::async_write(*p.client, out, use_nothrow);
            CHECK(n == all.size());
            co_return ec;
        };
        auto wr = writing();
        auto rd = read_up_to(*p.server, all.size());
        auto [w, r] = co_await (std::move(wr) && std::move(rd));
        CHECK_FALSE(w);
        CHECK(r.first == all);
        co_return 0;
    };
    p.run(go());
}
