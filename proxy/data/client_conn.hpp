#pragma once
// The proxy listener's connection handler: one coroutine per client connection, from its
// first byte to its last audit record (CONNECT tunnels and plain HTTP forwarding).

#include "common/asio.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy::data {

/// Serves one accepted client connection on worker `w`'s thread until it closes.
awaitable<void> serve_client(control::runtime& rt, control::worker& w, tcp::socket socket);

}  // namespace cordon::proxy::data
