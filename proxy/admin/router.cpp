#include "proxy/admin/router.hpp"

#include <boost/beast/core/string.hpp>

#include "proxy/control/tokens.hpp"

namespace cordon::proxy::admin {
namespace {

using verb = boost::beast::http::verb;

constexpr std::string_view no_endpoint = "no such endpoint";

route_match to(route r, std::string_view id = {}, std::string_view sub_id = {}) {
    return {r, id, sub_id, {}};
}

route_match refuse(route r, std::string_view message) { return {r, {}, {}, message}; }

// /v1/sessions/...: the segments after "sessions" decide.
route_match route_sessions(verb method, const std::vector<std::string_view>& seg) {
    if (seg.size() == 2) {
        if (method == verb::get) {
            return to(route::list_sessions);
        }
        if (method == verb::post) {
            return to(route::create_session);
        }
        return refuse(route::method_not_allowed, "use GET or POST");
    }
    const std::string_view id = seg[2];
    if (seg.size() == 3) {
        if (method == verb::get) {
            return to(route::get_session, id);
        }
        if (method == verb::delete_) {
            return to(route::end_session, id);
        }
        return refuse(route::method_not_allowed, "use GET or DELETE");
    }
    if (seg.size() == 4 && seg[3] == "kill" && method == verb::post) {
        return to(route::kill_session, id);
    }
    if (seg[3] != "tokens") {
        return refuse(route::not_found, no_endpoint);
    }
    if (seg.size() == 4 && method == verb::post) {
        return to(route::add_token, id);
    }
    if (seg.size() == 5 && method == verb::delete_) {
        return to(route::revoke_token, id, seg[4]);
    }
    return refuse(route::not_found, no_endpoint);
}

}  // namespace

std::vector<std::string_view> path_segments(std::string_view path) {
    std::vector<std::string_view> out;
    const auto q = path.find('?');
    if (q != std::string_view::npos) {
        path = path.substr(0, q);
    }
    while (!path.empty()) {
        if (path.front() == '/') {
            path.remove_prefix(1);
            continue;
        }
        const auto slash = path.find('/');
        out.push_back(path.substr(0, slash));
        if (slash == std::string_view::npos) {
            break;
        }
        path.remove_prefix(slash);
    }
    return out;
}

std::string query_param(std::string_view target, std::string_view name) {
    const auto q = target.find('?');
    if (q == std::string_view::npos) {
        return {};
    }
    std::string_view rest = target.substr(q + 1);
    while (!rest.empty()) {
        const auto amp = rest.find('&');
        const std::string_view pair = rest.substr(0, amp);
        if (pair.size() > name.size() && pair.substr(0, name.size()) == name &&
            pair[name.size()] == '=') {
            return std::string(pair.substr(name.size() + 1));
        }
        if (amp == std::string_view::npos) {
            break;
        }
        rest.remove_prefix(amp + 1);
    }
    return {};
}

bool bearer_matches(std::string_view authorization, std::string_view token) {
    constexpr std::string_view bearer = "Bearer ";
    if (authorization.size() <= bearer.size() ||
        !boost::beast::iequals(authorization.substr(0, bearer.size()), bearer)) {
        return false;
    }
    return control::equal_constant_time(authorization.substr(bearer.size()), token);
}

route_match route_request(verb method, std::string_view target, bool admin_authorized) {
    // The event stream is matched on the raw target (exactly /v1/events, then the query),
    // before the segments: it holds its connection, so nothing else may reach it.
    if (method == verb::get && target.starts_with("/v1/events") &&
        (target.size() == 10 || target[10] == '?') && admin_authorized) {
        return to(route::events);
    }
    const auto seg = path_segments(target);
    if (seg.size() == 1 && seg[0] == "healthz") {
        return to(route::healthz);
    }
    // The inspection CA's certificate: what sandboxes trust, no secret in it.
    if (seg.size() == 2 && seg[0] == "v1" && seg[1] == "ca.pem" && method == verb::get) {
        return to(route::ca_pem);
    }
    // The one endpoint a session's own token may call (besides the admin token).
    if (seg.size() == 4 && seg[0] == "v1" && seg[1] == "sessions" && seg[3] == "events") {
        return to(route::post_event, seg[2]);
    }
    if (!admin_authorized) {
        return refuse(route::unauthorized,
                      "missing or wrong admin token (Authorization: Bearer ...)");
    }
    if (seg.size() == 1 && seg[0] == "metrics" && method == verb::get) {
        return to(route::metrics);
    }
    if (seg.size() == 2 && seg[0] == "v1" && seg[1] == "kill" && method == verb::post) {
        return to(route::kill);
    }
    if (seg.size() == 2 && seg[0] == "v1" && seg[1] == "revive" && method == verb::post) {
        return to(route::revive);
    }
    if (seg.empty() || seg[0] != "v1") {
        return refuse(route::not_found, no_endpoint);
    }
    if (seg.size() == 2 && seg[1] == "status" && method == verb::get) {
        return to(route::status);
    }
    if (seg.size() == 2 && seg[1] == "denials" && method == verb::get) {
        return to(route::denials);
    }
    if (seg.size() == 2 && seg[1] == "reload" && method == verb::post) {
        return to(route::reload);
    }
    if (seg.size() >= 2 && seg[1] == "sessions") {
        return route_sessions(method, seg);
    }
    if (seg.size() == 3 && seg[1] == "jobs" && method == verb::get) {
        return to(route::job_card, seg[2]);
    }
    if (seg.size() == 4 && seg[1] == "jobs" && seg[3] == "worksheet" && method == verb::get) {
        return to(route::worksheet, seg[2]);
    }
    return refuse(route::not_found, no_endpoint);
}

}  // namespace cordon::proxy::admin
