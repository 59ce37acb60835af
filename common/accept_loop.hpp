#pragma once
// The accept loop every listener shares: the proxy and admin listeners (proxy/listeners.cpp),
// DNS over TCP (dns/server.cpp) and the `cordon run` relays (shims/relay.cpp).

#include <chrono>
#include <iostream>
#include <type_traits>
#include <utility>

#include "common/asio.hpp"

namespace cordon::common {

/// What the accept loop does once `on_accept` has seen a socket.
enum class after_accept {
    next,      ///< accept the next connection at once
    back_off,  ///< wait 100 ms first (e.g. the listener is at its connection cap)
};

/// Accepts on `acceptor` until it is closed or its wait is cancelled (operation_aborted).
/// Each accepted socket goes to `on_accept(socket&)` (or `on_accept(socket&, peer)`, with
/// the peer's endpoint as accept(2) gave it: no getpeername), which moves it away to serve
/// it, or leaves it: then it is closed at the end of this round (after any back-off). On an accept
/// error (EMFILE, ENFILE, ...) the error is logged as "cordon: WHAT accept: ..." when `what`
/// is set, and the loop backs off 100 ms and continues, so a descriptor flood does not spin
/// (Asio throttling_proxy). Runs on the executor it is spawned on, which must be the
/// acceptor's.
template <class Acceptor, class OnAccept>
awaitable<void> accept_loop(Acceptor& acceptor, OnAccept on_accept, const char* what = nullptr) {
    net::steady_timer backoff(co_await net::this_coro::executor);
    using endpoint = typename Acceptor::endpoint_type;
    endpoint peer;
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(peer, use_nothrow);
        if (ec == net::error::operation_aborted || !acceptor.is_open()) {
            co_return;
        }
        if (!ec) {
            after_accept then;
            if constexpr (std::is_invocable_v<OnAccept&, decltype(socket)&, const endpoint&>) {
                then = on_accept(socket, std::as_const(peer));
            } else {
                then = on_accept(socket);
            }
            if (then == after_accept::next) {
                continue;
            }
        }
        if (ec && what != nullptr) {
            std::cerr << "cordon: " << what << " accept: " << ec.message() << '\n';
        }
        backoff.expires_after(std::chrono::milliseconds(100));
        co_await backoff.async_wait(use_nothrow);
    }
}

}  // namespace cordon::common
