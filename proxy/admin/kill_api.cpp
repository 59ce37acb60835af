// The admin API's kill switch: POST /v1/kill, POST /v1/revive, POST /v1/sessions/ID/kill
// (the kills themselves are runtime's: proxy/control/kill.cpp).

#include <boost/json.hpp>

#include "proxy/admin/handlers.hpp"
#include "proxy/control/fleet.hpp"

namespace cordon::proxy::admin {
namespace {

namespace json = boost::json;

// A kill given on a fleet (DESIGN "Fleet"): the fleet-wide figures replace this instance's
// connections_closed and elapsed_ms; `instance` names this one's own.
void add_fleet(json::object& o, const control::kill_outcome& k) {
    if (!k.fleet) {
        return;
    }
    const auto& f = *k.fleet;
    json::array instances;
    for (const auto& i : f.instances) {
        instances.push_back(json::object{{"instance", i.instance},
                                         {"connections_closed", i.connections_closed},
                                         {"elapsed_ms", i.elapsed_ms}});
    }
    json::array missing;
    for (const auto& m : f.missing) {
        missing.emplace_back(m);
    }
    o["connections_closed"] = f.connections_closed;
    o["elapsed_ms"] = f.elapsed_ms;
    o["instances"] = std::move(instances);
    o["missing"] = std::move(missing);
    o["kill_id"] = k.kill_id;
}

// {reason, by} of a kill call: reason is required; by defaults to the caller's address.
bool kill_args(const json::object& body, const std::string& client, std::string& reason,
               std::string& by, reply& err) {
    const auto* r = body.if_contains("reason");
    if (r == nullptr || !r->is_string() || r->as_string().empty() || r->as_string().size() > 1024) {
        err = error(http::status::bad_request, "\"reason\" (why, 1-1024 characters) is required");
        return false;
    }
    reason = std::string(r->as_string());
    const auto* b = body.if_contains("by");
    if (b != nullptr && !b->is_null()) {
        if (!b->is_string() || b->as_string().empty() || b->as_string().size() > 256) {
            err = error(http::status::bad_request, "\"by\" must be a name of 1-256 characters");
            return false;
        }
        by = std::string(b->as_string());
    } else {
        by = "admin:" + client;
    }
    return true;
}

}  // namespace

awaitable<reply> admin_handlers::kill_network(const request& req) {
    json::object body;
    reply err;
    std::string reason;
    std::string by;
    if (!body_object(req, body, err) || !kill_args(body, client_, reason, by, err)) {
        co_return err;
    }
    const control::kill_outcome k = co_await rt_.kill.kill_network(reason, by);
    json::object o{{"engaged", true},
                   {"already_engaged", k.already},
                   {"connections_closed", k.connections_closed},
                   {"elapsed_ms", k.elapsed_ms},
                   {"reason", rt_.kill.info().reason},
                   {"by", rt_.kill.info().by},
                   {"at", iso(rt_.kill.info().at)},
                   {"persisted", k.persisted}};
    add_fleet(o, k);
    co_return reply{http::status::ok, std::move(o)};
}

reply admin_handlers::revive(const request& req) {
    json::object body;
    reply err;
    std::string reason;
    std::string by;
    if (!body_object(req, body, err) || !kill_args(body, client_, reason, by, err)) {
        return err;
    }
    if (!rt_.kill.engaged()) {
        return error(http::status::conflict, "the network kill is not engaged");
    }
    const control::kill_outcome k = rt_.kill.revive(reason, by);
    if (!k.persisted) {
        return error(http::status::conflict,
                     "the state store is unavailable (" + rt_.store_error +
                         "), so the kill stays engaged: fix it and restart cordon");
    }
    return {http::status::ok, json::object{{"engaged", false}, {"reason", reason}, {"by", by}}};
}

awaitable<reply> admin_handlers::kill_session(const request& req, const std::string& id) {
    json::object body;
    reply err;
    std::string reason;
    std::string by;
    if (!body_object(req, body, err) || !kill_args(body, client_, reason, by, err)) {
        co_return err;
    }
    const auto k = co_await rt_.kill.kill_session(id, reason, by);
    if (!k) {
        co_return error(http::status::not_found, "no session " + id);
    }
    json::object o{{"id", id},
                   {"state", "killed"},
                   {"already_killed", k->already},
                   {"tokens_revoked", k->tokens_revoked},
                   {"connections_closed", k->connections_closed},
                   {"elapsed_ms", k->elapsed_ms},
                   {"persisted", k->persisted}};
    add_fleet(o, *k);
    co_return reply{http::status::ok, std::move(o)};
}

}  // namespace cordon::proxy::admin
