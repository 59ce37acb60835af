// Tests of the tunnel relay over socketpair(2)s: no network, no listener. The relay's two
// sockets are one end of each pair; the test plays client and upstream on the other ends,
// with blocking calls bounded by a receive timeout. Covers half-close passed on each way,
// bulk data (the splice path), the upload budget, the idle sweep, a close from outside
// (a kill) and an upstream that goes away mid-transfer.
#include "proxy/data/relay.hpp"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <string>
#include <thread>

namespace {

using namespace cordon;
using namespace cordon::proxy;
using namespace cordon::proxy::data;
using namespace std::chrono_literals;

// One end of a socketpair, played by the test with blocking calls (every read bounded).
class peer {
public:
    explicit peer(int fd) : fd_(fd) {
        const timeval tv{5, 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    peer(const peer&) = delete;
    peer& operator=(const peer&) = delete;
    ~peer() { close(); }

    // No Catch2 assertion in here: the bulk test writes from threads of its own, and
    // Catch2's assertions are for the test's thread only. False on a failed send.
    [[nodiscard]] bool write(const std::string& s) {
        std::size_t done = 0;
        while (done < s.size()) {
            const ssize_t n = ::send(fd_, s.data() + done, s.size() - done, MSG_NOSIGNAL);
            if (n <= 0) {
                return false;
            }
            done += static_cast<std::size_t>(n);
        }
        return true;
    }
    void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
    void close() {
        if (fd_ >= 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }
    // Everything until EOF (or the 5 s timeout, or an error: `eof` says which).
    std::string read_all(bool* eof = nullptr, std::size_t limit = 64u << 20) {
        std::string out;
        char buf[65536];
        while (out.size() < limit) {
            const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) {
                if (eof != nullptr) {
                    *eof = n == 0;
                }
                return out;
            }
            out.append(buf, static_cast<std::size_t>(n));
        }
        return out;
    }
    // Exactly `n` bytes, or fewer at EOF / timeout.
    std::string read_n(std::size_t n) {
        std::string out;
        char buf[65536];
        while (out.size() < n) {
            const ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
            if (r <= 0) {
                break;
            }
            out.append(buf, static_cast<std::size_t>(r));
        }
        return out;
    }

private:
    int fd_;
};

// A relay between two socketpairs on a worker whose io_context runs on its own thread.
struct tunnel final : relay_owner, std::enable_shared_from_this<tunnel> {
    control::worker& w;
    tcp::socket client;
    tcp::socket upstream;
    tunnel_relay relay;
    std::promise<relay_result> done;
    std::atomic<int> calls{0};

    tunnel(control::worker& wk, int client_fd, int upstream_fd, relay_hooks hooks)
        : w(wk),
          client(wk.ioc, tcp::v4(), client_fd),
          upstream(wk.ioc, tcp::v4(), upstream_fd),
          relay(wk, client, upstream, std::move(hooks)) {}

    void relay_done(const relay_result& r) override {
        if (calls.fetch_add(1) == 0) {
            done.set_value(r);
        }
    }
};

struct harness {
    control::worker w{0};
    std::unique_ptr<peer> client_peer;
    std::unique_ptr<peer> upstream_peer;
    std::shared_ptr<tunnel> t;
    std::future<relay_result> result;
    std::thread runner;

    explicit harness(relay_hooks hooks = {}) {
        int c[2];
        int u[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c) == 0);
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, u) == 0);
        client_peer = std::make_unique<peer>(c[0]);
        upstream_peer = std::make_unique<peer>(u[0]);
        t = std::make_shared<tunnel>(w, c[1], u[1], std::move(hooks));
        result = t->done.get_future();
        net::post(w.ioc, [tt = t] { tt->relay.start(tt, *tt); });
        runner = std::thread([this] { w.ioc.run(); });
    }
    harness(const harness&) = delete;
    harness& operator=(const harness&) = delete;
    ~harness() {
        // Ends the relay if the test did not (its sockets close on the worker's thread).
        net::post(w.ioc, [tt = t] {
            error_code ignored;
            tt->client.close(ignored);
            tt->upstream.close(ignored);
        });
        if (result.valid()) {
            result.wait_for(5s);
        }
        w.keep_running.reset();
        w.ioc.stop();
        runner.join();
        t.reset();
    }

    // The relay's report, waited for at most 5 s.
    relay_result finish() {
        REQUIRE(result.wait_for(5s) == std::future_status::ready);
        return result.get();
    }
};

}  // namespace

TEST_CASE("relay: a half-close is passed on and the other direction keeps running", "[relay]") {
    harness h;
    CHECK(h.client_peer->write("GET / HTTP/1.0\r\n\r\n"));
    h.client_peer->shutdown_write();  // the client is done sending

    bool eof = false;
    CHECK(h.upstream_peer->read_all(&eof) == "GET / HTTP/1.0\r\n\r\n");
    CHECK(eof);  // the upstream saw the half-close

    // The answer still flows after the client's half-close.
    CHECK(h.upstream_peer->write("HTTP/1.0 200 OK\r\n\r\nhello"));
    h.upstream_peer->close();
    eof = false;
    CHECK(h.client_peer->read_all(&eof) == "HTTP/1.0 200 OK\r\n\r\nhello");
    CHECK(eof);

    const relay_result r = h.finish();
    CHECK(r.bytes_up == 18);
    CHECK(r.bytes_down == 24);
    CHECK_FALSE(r.idle);
    CHECK_FALSE(r.budget);
    CHECK_FALSE(r.error);
    CHECK(h.t->calls == 1);
}

TEST_CASE("relay: an upstream half-close first leaves the upload open", "[relay]") {
    harness h;
    CHECK(h.upstream_peer->write("banner\n"));
    h.upstream_peer->shutdown_write();
    bool eof = false;
    CHECK(h.client_peer->read_all(&eof) == "banner\n");
    CHECK(eof);

    CHECK(h.client_peer->write("late upload"));
    h.client_peer->close();
    eof = false;
    CHECK(h.upstream_peer->read_all(&eof) == "late upload");
    CHECK(eof);

    const relay_result r = h.finish();
    CHECK(r.bytes_up == 11);
    CHECK(r.bytes_down == 7);
}

TEST_CASE("relay: bulk data both ways arrives whole and in order", "[relay]") {
    harness h;
    // Large enough that reads of 64 KiB switch a direction to splice.
    std::string up(3u << 20, '\0');
    std::string down(2u << 20, '\0');
    for (std::size_t i = 0; i < up.size(); ++i) {
        up[i] = static_cast<char>('a' + i % 23);
    }
    for (std::size_t i = 0; i < down.size(); ++i) {
        down[i] = static_cast<char>('A' + i % 19);
    }
    // Writers on their own threads: the socket buffers are far smaller than the data.
    bool up_sent = false;
    bool down_sent = false;
    std::thread cw([&] {
        up_sent = h.client_peer->write(up);
        h.client_peer->shutdown_write();
    });
    std::thread uw([&] {
        down_sent = h.upstream_peer->write(down);
        h.upstream_peer->shutdown_write();
    });
    std::string got_down;
    std::thread cr([&] { got_down = h.client_peer->read_all(); });
    const std::string got_up = h.upstream_peer->read_all();
    cw.join();
    uw.join();
    cr.join();
    CHECK(up_sent);
    CHECK(down_sent);
    CHECK(got_up.size() == up.size());
    CHECK(got_up == up);
    CHECK(got_down.size() == down.size());
    CHECK(got_down == down);

    const relay_result r = h.finish();
    CHECK(r.bytes_up == up.size());
    CHECK(r.bytes_down == down.size());
    CHECK_FALSE(r.error);
}

TEST_CASE("relay: the upload budget passes what it allows, then ends both directions", "[relay]") {
    std::atomic<std::size_t> left{10};
    relay_hooks hooks;
    hooks.allow_up = [&left](std::size_t n) {
        const std::size_t pass = std::min(n, left.load());
        left -= pass;
        return pass;
    };
    harness h(std::move(hooks));
    CHECK(h.client_peer->write(std::string(100, 'x')));

    bool eof = false;
    CHECK(h.upstream_peer->read_all(&eof) == std::string(10, 'x'));  // not one byte more
    CHECK(eof);
    eof = false;
    CHECK(h.client_peer->read_all(&eof).empty());
    CHECK(eof);  // the client's side is closed too

    const relay_result r = h.finish();
    CHECK(r.budget);
    CHECK(r.bytes_up == 10);
    CHECK_FALSE(r.idle);
}

TEST_CASE("relay: an idle tunnel is ended by the worker's sweep, a busy one is not", "[relay]") {
    relay_hooks hooks;
    hooks.idle_timeout = 600ms;
    harness h(std::move(hooks));
    // Traffic every 200 ms for a second: never idle for 600 ms.
    for (int i = 0; i < 5; ++i) {
        CHECK(h.client_peer->write("ping"));
        CHECK(h.upstream_peer->read_n(4) == "ping");
        std::this_thread::sleep_for(200ms);
    }
    CHECK(h.result.wait_for(0ms) == std::future_status::timeout);

    // Then silence: the sweep (every 250 ms) closes both sides.
    const auto quiet_from = std::chrono::steady_clock::now();
    const relay_result r = h.finish();
    const auto waited = std::chrono::steady_clock::now() - quiet_from;
    CHECK(r.idle);
    CHECK(r.bytes_up == 20);
    CHECK(waited >= 300ms);  // not before the timeout (600 ms from the last ping, 200 ms ago)
    CHECK(waited < 3s);
    bool eof = false;
    CHECK(h.client_peer->read_all(&eof).empty());
    CHECK(eof);
}

TEST_CASE("relay: a close from outside (a kill) ends both directions at once", "[relay]") {
    harness h;
    CHECK(h.client_peer->write("abc"));
    CHECK(h.upstream_peer->read_n(3) == "abc");

    // The kill path closes the connection's sockets on the worker's thread.
    net::post(h.w.ioc, [tt = h.t] {
        error_code ignored;
        tt->client.close(ignored);
        tt->upstream.close(ignored);
    });
    const relay_result r = h.finish();
    CHECK(r.bytes_up == 3);
    CHECK_FALSE(r.idle);
    CHECK_FALSE(r.budget);
    CHECK_FALSE(r.error);  // a close from outside is not an error of the relay
    bool eof = false;
    CHECK(h.client_peer->read_all(&eof).empty());
    CHECK(eof);
    eof = false;
    CHECK(h.upstream_peer->read_all(&eof).empty());
    CHECK(eof);
}

TEST_CASE("relay: an upstream that goes away mid-download ends the tunnel", "[relay]") {
    harness h;
    CHECK(h.upstream_peer->write(std::string(1000, 'd')));
    CHECK(h.client_peer->read_n(1000).size() == 1000);
    h.upstream_peer->close();  // EOF to the relay: passed on as the client's EOF
    bool eof = false;
    CHECK(h.client_peer->read_all(&eof).empty());
    CHECK(eof);
    // The client then goes too: the tunnel is over.
    h.client_peer->close();
    const relay_result r = h.finish();
    CHECK(r.bytes_down == 1000);
    CHECK(h.t->calls == 1);
}
