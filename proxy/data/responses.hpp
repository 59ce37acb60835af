#pragma once
// The proxy's own answers to clients: denials, auth challenges, errors. Pure.

#include <string>
#include <string_view>

#include "config/decide.hpp"

namespace cordon::proxy::data {

/// A complete HTTP/1.1 response that closes the connection: status line, `X-Cordon-Deny`
/// when `reason` is set, `Proxy-Authenticate` for 407, a JSON body an agent can act on:
/// {"error", "reason", "job", "target", "message"}.
std::string deny_response(int status, std::string_view reason, std::string_view job,
                          std::string_view target, std::string_view message);

/// The standard reason phrase of a status code cordon sends.
std::string_view status_text(int status);

/// A short human explanation of a deny reason, for the JSON body.
std::string_view explain(config::deny_reason r);

}  // namespace cordon::proxy::data
