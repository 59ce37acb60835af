#include "common/accept_loop.hpp"  // first: the header must compile alone

#include <catch2/catch.hpp>

#include <chrono>
#include <deque>
#include <tuple>
#include <utility>
#include <vector>

namespace cordon::common {
namespace {

// An acceptor without sockets: each accept takes the next scripted error code (none: a
// "socket", numbered from 1); when the script runs out the wait is cancelled.
struct fake_acceptor {
    using endpoint_type = int;  // the peer: 100 + the socket's number
    std::deque<error_code> script;
    bool open = true;
    int accepted = 0;

    bool is_open() const { return open; }

    template <class Token>
    awaitable<std::tuple<error_code, int>> async_accept(endpoint_type& peer, Token) {
        if (script.empty()) {
            co_return std::tuple<error_code, int>{net::error::operation_aborted, 0};
        }
        const error_code ec = script.front();
        script.pop_front();
        if (ec) {
            co_return std::tuple<error_code, int>{ec, 0};
        }
        ++accepted;
        peer = 100 + accepted;
        co_return std::tuple<error_code, int>{ec, accepted};
    }
};

using steady = std::chrono::steady_clock;

// Runs the loop to its end; returns how long it took.
template <class OnAccept>
steady::duration run(fake_acceptor& a, OnAccept on_accept) {
    net::io_context ioc(1);
    bool done = false;
    const auto t0 = steady::now();
    net::co_spawn(ioc, accept_loop(a, on_accept), [&done](std::exception_ptr e) {
        done = true;
        if (e) {
            std::rethrow_exception(e);
        }
    });
    ioc.run();
    REQUIRE(done);
    return steady::now() - t0;
}

const error_code emfile = std::make_error_code(std::errc::too_many_files_open);

TEST_CASE("accept loop: serves each socket, backs off 100 ms on an error, stops when "
          "cancelled",
          "[accept_loop]") {
    fake_acceptor a;
    a.script = {{}, emfile, {}, {}};
    std::vector<int> served;
    const auto took = run(a, [&served](int& s) {
        served.push_back(s);
        return after_accept::next;
    });
    CHECK(served == std::vector<int>{1, 2, 3});
    CHECK(took >= std::chrono::milliseconds(100));  // one back-off
    CHECK(took < std::chrono::milliseconds(1000));
}

TEST_CASE("accept loop: a handler that takes the peer gets the one accept(2) named",
          "[accept_loop]") {
    fake_acceptor a;
    a.script = {{}, emfile, {}};
    std::vector<std::pair<int, int>> served;
    run(a, [&served](int& s, const int& peer) {
        served.emplace_back(s, peer);
        return after_accept::next;
    });
    CHECK(served == std::vector<std::pair<int, int>>{{1, 101}, {2, 102}});
}

TEST_CASE("accept loop: no back-off without errors", "[accept_loop]") {
    fake_acceptor a;
    a.script = {{}, {}, {}, {}, {}};
    int served = 0;
    const auto took = run(a, [&served](int&) {
        ++served;
        return after_accept::next;
    });
    CHECK(served == 5);
    CHECK(took < std::chrono::milliseconds(100));
}

TEST_CASE("accept loop: a handler over its cap asks for the back-off", "[accept_loop]") {
    fake_acceptor a;
    a.script = {{}, {}, {}};
    std::vector<int> seen;
    const auto took = run(a, [&seen](int& s) {
        seen.push_back(s);
        return s == 2 ? after_accept::back_off : after_accept::next;
    });
    CHECK(seen == std::vector<int>{1, 2, 3});
    CHECK(took >= std::chrono::milliseconds(100));
}

TEST_CASE("accept loop: every error is followed by a back-off, errors never reach the "
          "handler",
          "[accept_loop]") {
    fake_acceptor a;
    a.script = {emfile, std::make_error_code(std::errc::too_many_files_open_in_system), {}};
    std::vector<int> served;
    const auto took = run(a, [&served](int& s) {
        served.push_back(s);
        return after_accept::next;
    });
    CHECK(served == std::vector<int>{1});
    CHECK(took >= std::chrono::milliseconds(200));
}

TEST_CASE("accept loop: stops once the acceptor is closed", "[accept_loop]") {
    fake_acceptor a;
    a.script = {{}, {}, {}, {}};
    std::vector<int> served;
    run(a, [&a, &served](int& s) {
        served.push_back(s);
        if (s == 2) {
            a.open = false;  // as the shutdown closes it
        }
        return after_accept::next;
    });
    // The accept after the close ends the loop; its result is not handed over.
    CHECK(served == std::vector<int>{1, 2});
    CHECK(a.script.size() == 1);
}

}  // namespace
}  // namespace cordon::common
