#pragma once
// The admin listener's connection handler: the JSON API of DESIGN.md (sessions, kills,
// events, reload, status, metrics), authenticated by a bearer token compared in constant time.

#include <string>

#include "common/asio.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy::admin {

/// Serves one accepted admin connection on the control thread until it closes.
awaitable<void> serve_admin(control::runtime& rt, std::string admin_token, tcp::socket socket);

}  // namespace cordon::proxy::admin
