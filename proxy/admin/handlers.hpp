#pragma once
// The admin API's handlers, one per route of proxy/admin/router.hpp, and the reply they
// build. Internal to proxy/admin/: serve_admin (admin_api.cpp) is the way in. Control
// thread only.

#include <boost/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "common/asio.hpp"
#include "common/time.hpp"
#include "proxy/admin/router.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy::admin {

using request = http::request<http::string_body>;

/// One answer: a JSON body, or a text one (the Prometheus exposition, the worksheet).
struct reply {
    reply() = default;
    reply(http::status s, boost::json::value b) : status(s), body(std::move(b)) {}
    http::status status = http::status::ok;
    boost::json::value body;
    std::string text;          ///< when set, sent as text/plain (the Prometheus exposition) instead
    std::string content_type;  ///< of `text`, when not the Prometheus exposition's
};

/// `{"error": message}` with status `s`.
reply error(http::status s, std::string message);

std::string iso(common::wall_clock::time_point t);

/// Parses the optional JSON object body; an empty body is an empty object.
bool body_object(const request& req, boost::json::object& out, reply& err);

/// Ends session `before` (as it was): state, its connections closed, its tokens revoked,
/// audited and published. `by` says who ("admin:CLIENT", "cordon"), `reason` why. Returns
/// how many connections it closed. Arguments by value: the lifeline co_spawns it.
awaitable<std::size_t> end_session_now(control::runtime& rt, control::session_info before,
                                       std::string by, std::string reason);

/// GET /v1/events[?session=ID]: Server-Sent Events until the client goes away
/// (proxy/admin/event_stream.cpp).
awaitable<void> stream_events(control::runtime& rt, beast::tcp_stream& stream, const request& req);

/// Answers the requests of one admin connection, each routed by route_request().
class admin_handlers {
public:
    admin_handlers(control::runtime& rt, const std::string& token, std::string client)
        : rt_(rt), token_(token), client_(std::move(client)) {}

    /// Whether `req` carries the admin token.
    bool authorized(const request& req) const;

    /// Runs the handler `m` names (never route::events: serve_admin streams those), or
    /// answers its refusal.
    awaitable<reply> handle(const request& req, const route_match& m);

private:
    // admin_api.cpp
    reply post_event(const request& req, const std::string& id);
    reply metrics();
    reply ca_pem();
    reply denials(const request& req);
    reply status();
    awaitable<reply> reload();
    reply job_card(std::string_view name);
    reply worksheet(const request& req, std::string_view name);
    awaitable<reply> kill_network(const request& req);
    reply revive(const request& req);

    // session_api.cpp
    reply list_sessions();
    reply get_session(const std::string& id);
    awaitable<reply> create_session(const request& req);
    reply add_token(const request& req, const std::string& id);
    awaitable<reply> end_session(const std::string& id);
    awaitable<reply> revoke_token(const std::string& id, const std::string& token_id);
    awaitable<reply> kill_session(const request& req, const std::string& id);
    void audit_mint(const control::minted& m, const std::string& job);
    boost::json::object minted_json(const control::minted& m, bool with_id) const;

    control::runtime& rt_;
    const std::string& token_;
    std::string client_;
};

}  // namespace cordon::proxy::admin
