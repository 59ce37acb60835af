#pragma once
// The proxy listener's connection handler: one coroutine per client connection, from its
// first byte to its last audit record (CONNECT tunnels and plain HTTP forwarding).

#include "common/asio.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy::data {

/// Serves one accepted client connection on worker `w`'s thread until it closes: HTTP, or
/// SOCKS5 when its first byte is 5; `socks_only` (listen.socks): SOCKS5 and nothing else.
/// `remote` is the client's address as accept(2) gave it. The socket is expected to have
/// TCP_NODELAY already (Linux copies it from the listener: make_acceptor sets it there).
awaitable<void> serve_client(control::runtime& rt, control::worker& w, tcp::socket socket,
                             tcp::endpoint remote, bool socks_only = false);

}  // namespace cordon::proxy::data
