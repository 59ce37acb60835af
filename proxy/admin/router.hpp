#pragma once
// The admin API's router: which handler a request goes to, or which refusal it gets, as a
// pure function of its method, target and whether it carries the admin token (Beast's
// handle_request(req) -> response, without the I/O). No sockets, no runtime.

#include <boost/beast/http/verb.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace cordon::proxy::admin {

/// Where a request goes. The refusals (unauthorized, not_found, method_not_allowed) are
/// answered by the caller with the message in route_match::message.
enum class route {
    healthz,             ///< GET /healthz (any method: load balancers probe with HEAD too)
    ca_pem,              ///< GET /v1/ca.pem: the inspection CA's certificate (public: no
                         ///< token needed; 404 without an `inspect` section)
    metrics,             ///< GET /metrics
    status,              ///< GET /v1/status
    denials,             ///< GET /v1/denials
    reload,              ///< POST /v1/reload
    kill,                ///< POST /v1/kill
    revive,              ///< POST /v1/revive
    events,              ///< GET /v1/events (Server-Sent Events; the connection is held)
    list_sessions,       ///< GET /v1/sessions
    create_session,      ///< POST /v1/sessions
    get_session,         ///< GET /v1/sessions/ID
    end_session,         ///< DELETE /v1/sessions/ID
    kill_session,        ///< POST /v1/sessions/ID/kill
    add_token,           ///< POST /v1/sessions/ID/tokens
    revoke_token,        ///< DELETE /v1/sessions/ID/tokens/TID
    post_event,          ///< /v1/sessions/ID/events: authorised and method-checked by its
                         ///< handler (the session's own token may call it; 405 after auth)
    job_card,            ///< GET /v1/jobs/NAME
    worksheet,           ///< GET /v1/jobs/NAME/worksheet
    unauthorized,        ///< 401: missing or wrong admin token
    not_found,           ///< 404
    method_not_allowed,  ///< 405
};

/// The router's answer. `id` and `sub_id` view the request target (session or job name,
/// token id): valid while it is.
struct route_match {
    admin::route route = route::not_found;
    std::string_view id;       ///< session ID or job NAME, when the route has one
    std::string_view sub_id;   ///< token TID (revoke_token)
    std::string_view message;  ///< the error text of a refusal, empty otherwise
};

/// Decides where `method target` goes. `admin_authorized`: the request carries the admin
/// token (bearer_matches). Pure; the query string is ignored, repeated slashes collapse.
route_match route_request(boost::beast::http::verb method, std::string_view target,
                          bool admin_authorized);

/// Whether an Authorization header value is "Bearer TOKEN" for `token` (the scheme's case
/// ignored), compared in constant time.
bool bearer_matches(std::string_view authorization, std::string_view token);

/// The path's segments: "/v1/sessions/ID/tokens/TID" -> v1, sessions, ID, tokens, TID.
/// The query string is dropped; empty segments are skipped.
std::vector<std::string_view> path_segments(std::string_view target);

/// The value of `name` in the target's query string ("" when absent). Not URL-decoded.
std::string query_param(std::string_view target, std::string_view name);

}  // namespace cordon::proxy::admin
