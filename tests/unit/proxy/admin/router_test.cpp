#include "proxy/admin/router.hpp"  // first: the header must compile alone

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

namespace cordon::proxy::admin {
namespace {

using verb = boost::beast::http::verb;

struct row {
    row(verb m, std::string_view t, bool a, route e, std::string_view i = {},
        std::string_view s = {})
        : method(m), target(t), authorized(a), expected(e), id(i), sub_id(s) {}
    verb method;
    std::string_view target;
    bool authorized;
    route expected;
    std::string_view id;
    std::string_view sub_id;
};

std::string name(route r) {
    switch (r) {
        case route::healthz: return "healthz";
        case route::ca_pem: return "ca_pem";
        case route::metrics: return "metrics";
        case route::status: return "status";
        case route::denials: return "denials";
        case route::reload: return "reload";
        case route::kill: return "kill";
        case route::revive: return "revive";
        case route::events: return "events";
        case route::list_sessions: return "list_sessions";
        case route::create_session: return "create_session";
        case route::get_session: return "get_session";
        case route::end_session: return "end_session";
        case route::kill_session: return "kill_session";
        case route::add_token: return "add_token";
        case route::revoke_token: return "revoke_token";
        case route::post_event: return "post_event";
        case route::job_card: return "job_card";
        case route::worksheet: return "worksheet";
        case route::unauthorized: return "unauthorized (401)";
        case route::not_found: return "not_found (404)";
        case route::method_not_allowed: return "method_not_allowed (405)";
    }
    return "?";
}

void check(const row& r) {
    const route_match m = route_request(r.method, r.target, r.authorized);
    INFO(std::string(boost::beast::http::to_string(r.method))
         << ' ' << r.target << (r.authorized ? " (admin token)" : " (no token)"));
    CHECK(name(m.route) == name(r.expected));
    CHECK(m.id == r.id);
    CHECK(m.sub_id == r.sub_id);
    const bool refusal = r.expected == route::unauthorized || r.expected == route::not_found ||
                         r.expected == route::method_not_allowed;
    CHECK(m.message.empty() == !refusal);
}

TEST_CASE("admin router: every route of the admin API", "[admin][router]") {
    const row rows[] = {
        {verb::get, "/healthz", true, route::healthz},
        {verb::get, "/metrics", true, route::metrics},
        {verb::get, "/v1/status", true, route::status},
        {verb::post, "/v1/kill", true, route::kill},
        {verb::post, "/v1/revive", true, route::revive},
        {verb::post, "/v1/sessions", true, route::create_session},
        {verb::get, "/v1/sessions", true, route::list_sessions},
        {verb::get, "/v1/sessions/s-1", true, route::get_session, "s-1"},
        {verb::post, "/v1/sessions/s-1/kill", true, route::kill_session, "s-1"},
        {verb::delete_, "/v1/sessions/s-1", true, route::end_session, "s-1"},
        {verb::post, "/v1/sessions/s-1/tokens", true, route::add_token, "s-1"},
        {verb::delete_, "/v1/sessions/s-1/tokens/t-9", true, route::revoke_token, "s-1", "t-9"},
        {verb::get, "/v1/events", true, route::events},
        {verb::get, "/v1/events?session=s-1&lifeline=5s", true, route::events},
        {verb::post, "/v1/reload", true, route::reload},
        {verb::get, "/v1/denials", true, route::denials},
        {verb::get, "/v1/denials?job=j&limit=3", true, route::denials},
        {verb::get, "/v1/jobs/build", true, route::job_card, "build"},
        {verb::get, "/v1/jobs/build/worksheet", true, route::worksheet, "build"},
        {verb::get, "/v1/jobs/build/worksheet?format=md", true, route::worksheet, "build"},
        {verb::post, "/v1/sessions/s-1/events", true, route::post_event, "s-1"},
    };
    for (const auto& r : rows) {
        check(r);
    }
}

TEST_CASE("admin router: no admin token is a 401, except where another credential counts",
          "[admin][router]") {
    const row rows[] = {
        // Open to all: the health probe, and the session's own events (its handler checks
        // the session token).
        {verb::get, "/healthz", false, route::healthz},
        {verb::get, "/v1/ca.pem", false, route::ca_pem},  // public: no secret in it
        {verb::get, "/v1/ca.pem", true, route::ca_pem},
        {verb::post, "/v1/sessions/s-1/events", false, route::post_event, "s-1"},
        // Methods are the handler's to check there, after the credential.
        {verb::get, "/v1/sessions/s-1/events", false, route::post_event, "s-1"},
        {verb::get, "/metrics", false, route::unauthorized},
        {verb::get, "/v1/status", false, route::unauthorized},
        {verb::post, "/v1/kill", false, route::unauthorized},
        {verb::post, "/v1/revive", false, route::unauthorized},
        {verb::post, "/v1/sessions", false, route::unauthorized},
        {verb::get, "/v1/sessions", false, route::unauthorized},
        {verb::get, "/v1/sessions/s-1", false, route::unauthorized},
        {verb::delete_, "/v1/sessions/s-1", false, route::unauthorized},
        {verb::post, "/v1/sessions/s-1/kill", false, route::unauthorized},
        {verb::post, "/v1/sessions/s-1/tokens", false, route::unauthorized},
        {verb::delete_, "/v1/sessions/s-1/tokens/t-9", false, route::unauthorized},
        {verb::get, "/v1/events", false, route::unauthorized},
        {verb::post, "/v1/reload", false, route::unauthorized},
        {verb::get, "/v1/denials", false, route::unauthorized},
        {verb::get, "/v1/jobs/build", false, route::unauthorized},
        {verb::get, "/v1/jobs/build/worksheet", false, route::unauthorized},
        // Unknown paths too: without the token nothing says what exists.
        {verb::get, "/nothing", false, route::unauthorized},
        {verb::get, "/", false, route::unauthorized},
    };
    for (const auto& r : rows) {
        check(r);
    }
}

TEST_CASE("admin router: wrong methods", "[admin][router]") {
    const row rows[] = {
        // The session collection and a session answer 405 with what they take.
        {verb::put, "/v1/sessions", true, route::method_not_allowed},
        {verb::delete_, "/v1/sessions", true, route::method_not_allowed},
        {verb::post, "/v1/sessions/s-1", true, route::method_not_allowed},
        {verb::put, "/v1/sessions/s-1", true, route::method_not_allowed},
        // Elsewhere a wrong method finds no endpoint (404), as it always has.
        {verb::get, "/v1/kill", true, route::not_found},
        {verb::get, "/v1/revive", true, route::not_found},
        {verb::post, "/v1/status", true, route::not_found},
        {verb::post, "/metrics", true, route::not_found},
        {verb::get, "/v1/reload", true, route::not_found},
        {verb::post, "/v1/denials", true, route::not_found},
        {verb::get, "/v1/sessions/s-1/kill", true, route::not_found},
        {verb::get, "/v1/sessions/s-1/tokens", true, route::not_found},
        {verb::get, "/v1/sessions/s-1/tokens/t-9", true, route::not_found},
        {verb::post, "/v1/sessions/s-1/tokens/t-9", true, route::not_found},
        {verb::post, "/v1/jobs/build", true, route::not_found},
        {verb::delete_, "/v1/jobs/build/worksheet", true, route::not_found},
        // Only GET streams events; anything else is no endpoint.
        {verb::post, "/v1/events", true, route::not_found},
        // The health probe answers any method.
        {verb::head, "/healthz", true, route::healthz},
        {verb::post, "/healthz", false, route::healthz},
    };
    for (const auto& r : rows) {
        check(r);
    }
}

TEST_CASE("admin router: unknown paths, odd ids and traversal", "[admin][router]") {
    const row rows[] = {
        {verb::get, "/", true, route::not_found},
        {verb::get, "", true, route::not_found},
        {verb::get, "/v2/status", true, route::not_found},
        {verb::get, "/v1", true, route::not_found},
        {verb::get, "/v1/", true, route::not_found},
        {verb::get, "/v1/status/more", true, route::not_found},
        {verb::get, "/healthz/x", true, route::not_found},
        {verb::get, "/v1/healthz", true, route::not_found},
        {verb::get, "/v1/jobs", true, route::not_found},
        {verb::get, "/v1/jobs/build/other", true, route::not_found},
        {verb::get, "/v1/jobs/build/worksheet/x", true, route::not_found},
        {verb::post, "/v1/sessions/s-1/tokens/t-9/x", true, route::not_found},
        {verb::post, "/v1/sessions/s-1/other", true, route::not_found},
        {verb::post, "/v1/sessions/s-1/kill/x", true, route::not_found},
        // The event stream is exactly /v1/events (then the query): no trailing slash, no
        // doubled slash, nothing after it.
        {verb::get, "/v1/events/", true, route::not_found},
        {verb::get, "//v1/events", true, route::not_found},
        {verb::get, "/v1/eventsX", true, route::not_found},
        {verb::get, "/v1/events/x", true, route::not_found},
        // Segments are taken as they are: ".." is an id like any other (no session or job
        // has it, so its handler answers 404), never a step up the path.
        {verb::get, "/v1/sessions/..", true, route::get_session, ".."},
        {verb::post, "/v1/sessions/../kill", true, route::kill_session, ".."},
        {verb::get, "/v1/../v1/status", true, route::not_found},
        {verb::get, "/v1/jobs/../worksheet", true, route::worksheet, ".."},
        {verb::get, "/v1/jobs/%2e%2e", true, route::job_card, "%2e%2e"},
        {verb::delete_, "/v1/sessions/s-1/tokens/..", true, route::revoke_token, "s-1", ".."},
        // Repeated slashes collapse, and the query string is no part of an id.
        {verb::get, "//v1//status", true, route::status},
        {verb::get, "/v1/sessions/s-1?x=1", true, route::get_session, "s-1"},
        {verb::get, "/v1/status?/v1/kill", true, route::status},
    };
    for (const auto& r : rows) {
        check(r);
    }
}

TEST_CASE("admin router: the admin token", "[admin][router]") {
    const std::string token = "0123456789abcdef-secret";
    CHECK(bearer_matches("Bearer 0123456789abcdef-secret", token));
    CHECK(bearer_matches("bearer 0123456789abcdef-secret", token));
    CHECK(bearer_matches("BEARER 0123456789abcdef-secret", token));
    CHECK_FALSE(bearer_matches("", token));
    CHECK_FALSE(bearer_matches("Bearer ", token));
    CHECK_FALSE(bearer_matches("Bearer", token));
    CHECK_FALSE(bearer_matches("0123456789abcdef-secret", token));
    CHECK_FALSE(bearer_matches("Basic 0123456789abcdef-secret", token));
    CHECK_FALSE(bearer_matches("Bearer 0123456789abcdef-secreT", token));
    CHECK_FALSE(bearer_matches("Bearer 0123456789abcdef-secret ", token));
    CHECK_FALSE(bearer_matches("Bearer 0123456789abcdef-secre", token));
    CHECK_FALSE(bearer_matches("Bearer  0123456789abcdef-secret", token));
}

TEST_CASE("admin router: path segments and query parameters", "[admin][router]") {
    using v = std::vector<std::string_view>;
    CHECK(path_segments("/v1/sessions/ID/tokens/TID") ==
          v{"v1", "sessions", "ID", "tokens", "TID"});
    CHECK(path_segments("//v1///x/") == v{"v1", "x"});
    CHECK(path_segments("/v1/x?a=/b/c") == v{"v1", "x"});
    CHECK(path_segments("").empty());
    CHECK(path_segments("/").empty());
    CHECK(query_param("/v1/denials?job=j&limit=3", "job") == "j");
    CHECK(query_param("/v1/denials?job=j&limit=3", "limit") == "3");
    CHECK(query_param("/v1/denials?jobs=j", "job").empty());
    CHECK(query_param("/v1/denials?job", "job").empty());
    CHECK(query_param("/v1/denials", "job").empty());
    CHECK(query_param("/v1/x?a=1&&b=2", "b") == "2");
    CHECK(query_param("/v1/x?a=%2F", "a") == "%2F");  // not decoded
}

}  // namespace
}  // namespace cordon::proxy::admin
