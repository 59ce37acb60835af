#pragma once
// The proxy's reserved name (tool_event.hpp: cordon.events): requests to it are answered by
// cordon itself, never resolved and never forwarded. Internal to proxy/ (Asio).

#include <string_view>

#include "common/asio.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy::data {

/// The authenticated client of a request to the reserved name.
struct reserved_caller {
    std::string_view session;  ///< "" for clients attributed by `sources` (then refused: 407)
    std::string_view job;
    std::string_view token_id;
    std::string_view client;  ///< "ip:port"
};

/// Answers one request to the reserved name, whose head `parser` has parsed (its body, if
/// any, is in `buffer` and on the socket). `POST /v1/events` with a JSON body of at most
/// max_event_body_bytes (Content-Length required) records a tool.call for the caller's
/// session: 202 {"recorded":"tool.call"}. Malformed bodies: 400, no length: 411, too large:
/// 413, other paths 404, other methods and CONNECT 405, audit log down 503; each with a JSON
/// body {"error": ...}. Returns true when the connection may carry another request.
awaitable<bool> serve_reserved(control::runtime& rt, beast::tcp_stream& client,
                               beast::flat_buffer& buffer,
                               http::request_parser<http::buffer_body>& parser,
                               const reserved_caller& who);

}  // namespace cordon::proxy::data
