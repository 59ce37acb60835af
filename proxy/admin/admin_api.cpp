// The admin API: JSON over HTTP with a bearer token, served on the control thread so that
// it answers even while the data plane is saturated. Each request is routed by the pure
// route_request() (proxy/admin/router.hpp), then answered by its handler: here the status,
// metrics, reload, denials, job card, worksheet and posted events; sessions and tokens in
// session_api.cpp, kills in kill_api.cpp, the event stream in event_stream.cpp.

#include <boost/json.hpp>

#include "proxy/admin/admin_api.hpp"
#include "proxy/admin/denials_api.hpp"
#include "proxy/admin/handlers.hpp"
#include "proxy/admin/job_card_api.hpp"
#include "proxy/admin/worksheet_api.hpp"
#include "proxy/audit/shim_event.hpp"
#include "proxy/audit/tool_event.hpp"
#include "proxy/control/fleet.hpp"
#include "proxy/data/http_head.hpp"
#include "proxy/data/responses.hpp"
#include "proxy/inspect/inspector.hpp"

namespace cordon::proxy::admin {
namespace {

namespace json = boost::json;

constexpr std::size_t max_admin_body = 64 * 1024;  // admin requests are small JSON objects
// Admin connections an event stream may never take: a kill always finds one free.
constexpr std::int64_t event_stream_spare = 2;

}  // namespace

reply error(http::status s, std::string message) {
    return {s, json::object{{"error", std::move(message)}}};
}

std::string iso(common::wall_clock::time_point t) { return common::format_rfc3339(t); }

bool body_object(const request& req, json::object& out, reply& err) {
    if (req.body().empty()) {
        return true;
    }
    error_code ec;
    json::value v = json::parse(req.body(), ec);
    if (ec || !v.is_object()) {
        err = error(http::status::bad_request, "the request body must be a JSON object");
        return false;
    }
    out = std::move(v.as_object());
    return true;
}

bool admin_handlers::authorized(const request& req) const {
    const auto it = req.find(http::field::authorization);
    if (it == req.end()) {
        return false;
    }
    return bearer_matches(std::string_view(it->value().data(), it->value().size()), token_);
}

awaitable<reply> admin_handlers::handle(const request& req, const route_match& m) {
    switch (m.route) {
        case route::healthz: co_return reply{http::status::ok, json::object{{"status", "ok"}}};
        case route::post_event: co_return post_event(req, std::string(m.id));
        case route::unauthorized:
            co_return error(http::status::unauthorized, std::string(m.message));
        case route::method_not_allowed:
            co_return error(http::status::method_not_allowed, std::string(m.message));
        case route::metrics: co_return metrics();
        case route::ca_pem: co_return ca_pem();
        case route::kill: co_return co_await kill_network(req);
        case route::revive: co_return revive(req);
        case route::status: co_return status();
        case route::denials: co_return denials(req);
        case route::reload: co_return co_await reload();
        case route::list_sessions: co_return list_sessions();
        case route::create_session: co_return co_await create_session(req);
        case route::get_session: co_return get_session(std::string(m.id));
        case route::end_session: co_return co_await end_session(std::string(m.id));
        case route::kill_session: co_return co_await kill_session(req, std::string(m.id));
        case route::add_token: co_return add_token(req, std::string(m.id));
        case route::revoke_token:
            co_return co_await revoke_token(std::string(m.id), std::string(m.sub_id));
        case route::job_card: co_return job_card(m.id);
        case route::worksheet: co_return worksheet(req, m.id);
        case route::events:  // streamed by serve_admin, never answered here
        case route::not_found: break;
    }
    co_return error(http::status::not_found, "no such endpoint");
}

reply admin_handlers::post_event(const request& req, const std::string& id) {
    std::string token_id;
    std::string job;
    if (authorized(req)) {
        const auto s = rt_.sessions.get(id);
        if (!s) {
            return error(http::status::not_found, "no session " + id);
        }
        job = s->job;
    } else {
        const auto it = req.find(http::field::authorization);
        const std::string_view v = it == req.end()
                                       ? std::string_view{}
                                       : std::string_view(it->value().data(), it->value().size());
        constexpr std::string_view bearer = "Bearer ";
        if (v.size() <= bearer.size() || !beast::iequals(v.substr(0, bearer.size()), bearer)) {
            return error(http::status::unauthorized,
                         "missing token (Authorization: Bearer SESSION_TOKEN)");
        }
        const control::auth_result a = rt_.sessions.authenticate(id, v.substr(bearer.size()));
        if (a.status == control::auth_status::bad_credentials) {
            return error(http::status::unauthorized, "wrong token for session " + id);
        }
        if (!a.ok()) {
            return error(http::status::forbidden,
                         "session " + id + ": " + std::string(to_string(a.status)));
        }
        token_id = a.token_id;
        job = a.job;
    }
    if (req.method() != http::verb::post) {
        return error(http::status::method_not_allowed, "use POST");
    }
    std::string why;
    // The shim's own events (file.write, identity.*): admin token only, never an agent's.
    if (audit::is_shim_event(req.body())) {
        if (!token_id.empty() || !authorized(req)) {
            return error(http::status::forbidden, "only the admin token may post this event");
        }
        auto rec = audit::parse_shim_event(req.body(), id, job, rt_.now(), why);
        if (!rec) {
            return error(http::status::bad_request, why);
        }
        if (!rt_.audit(std::move(*rec))) {
            return error(http::status::service_unavailable,
                         "the audit log is unavailable; nothing recorded");
        }
        return {http::status::accepted, json::object{{"recorded", "shim event"}}};
    }
    const auto e = audit::parse_tool_event(req.body(), why);
    if (!e) {
        return error(http::status::bad_request, why);
    }
    const audit::tool_event_source from{id, job, token_id, client_, "admin"};
    if (!rt_.audit(audit::tool_call_record(*e, from, rt_.now()))) {
        return error(http::status::service_unavailable,
                     "the audit log is unavailable; nothing recorded");
    }
    return {http::status::accepted, json::object{{"recorded", "tool.call"}}};
}

// GET /v1/denials[?job=J][&limit=N] (proxy/admin/denials_api.cpp).
reply admin_handlers::denials(const request& req) {
    reply r;
    const std::string job = query_param(req.target(), "job");
    const std::string limit = query_param(req.target(), "limit");
    json::object body;
    r.status = static_cast<http::status>(
        denials_request(rt_.denials, *rt_.policy(), job, limit, body));
    r.body = std::move(body);
    return r;
}

reply admin_handlers::status() {
    const auto p = rt_.policy();
    const auto uptime = std::chrono::duration_cast<std::chrono::seconds>(rt_.now() - rt_.started);
    json::object listen{{"proxy", rt_.proxy_endpoint.to_string()}};
    if (const auto& d = p->source().listen.dns; d && d->port != 0) {
        listen["dns"] = d->to_string();  // as configured (`cordon run` relays to it)
    }
    json::object o{
        {"version", CORDON_VERSION},
        {"uptime_s", uptime.count()},
        {"sessions_active", rt_.sessions.active_count()},
        {"connections", rt_.connections.open.load()},
        {"audit",
         json::object{{"healthy", rt_.audit_healthy()},
                      {"path", p->source().audit.path},
                      {"write_errors", rt_.audit_log_ ? rt_.audit_log_->write_errors() : 0}}},
        {"policy", json::object{{"source", rt_.config_path()},
                                {"jobs", p->source().jobs.size()},
                                {"rules", p->source().rule_count()}}},
        {"reloads",
         json::object{{"ok", rt_.reloads_ok.load()}, {"failed", rt_.reloads_failed.load()}}},
        {"listen", std::move(listen)},
    };
    // What a sandbox on this host must not read (`cordon run` hides each): cordon's
    // secrets (the admin token, the admin TLS key, the policy, which may hold the
    // webhook's secret URL and headers) and its records (audit log, state store). The
    // paths themselves are no secret.
    json::array hide;
    const auto& src = p->source();
    if (src.admin.token_file) {
        hide.emplace_back(*src.admin.token_file);
    }
    if (src.admin.tls) {
        hide.emplace_back(src.admin.tls->key);
    }
    if (!rt_.config_path().empty()) {
        hide.emplace_back(rt_.config_path());
    }
    hide.emplace_back(src.audit.path);
    hide.emplace_back(src.state.path);
    o["hide_from_sandboxes"] = std::move(hide);
    json::object kill{{"engaged", rt_.kill.engaged()}};
    if (!rt_.kill.info().reason.empty()) {
        kill["reason"] = rt_.kill.info().reason;
        kill["by"] = rt_.kill.info().by;
        kill["at"] = iso(rt_.kill.info().at);
    }
    if (rt_.kill.local_engaged()) {
        kill["local"] = true;  // this instance only: the fleet's store was lost (fail_closed)
    }
    o["kill"] = std::move(kill);
    if (rt_.cluster != nullptr) {
        json::array instances;
        for (const auto& i : rt_.cluster->instances()) {
            instances.push_back(json::object{{"instance", i.name},
                                             {"admin", i.admin},
                                             {"proxy", i.proxy},
                                             {"pid", i.pid},
                                             {"started", iso(i.started)},
                                             {"self", i.name == rt_.cluster->instance()}});
        }
        o["cluster"] = json::object{{"instance", rt_.cluster->instance()},
                                    {"store", rt_.cluster->describe()},
                                    {"serving", rt_.cluster->serving()},
                                    {"instances", std::move(instances)}};
    }
    json::object tunnels;
    for (const auto& [job, n] : rt_.stats.active_tunnels_by_job()) {
        tunnels[job] = n;
    }
    o["tunnels"] = std::move(tunnels);          // active tunnels by job, jobs with none left out
    const control::capacity& cap = rt_.limits;  // the descriptor budget (docs/proxy.md)
    o["capacity"] = json::object{
        {"descriptor_limit", cap.descriptor_limit},
        {"reserved", cap.reserved},
        {"descriptors_per_connection", control::capacity::descriptors_per_connection},
        {"max_connections", cap.max_connections},
        {"admin_connections", cap.admin_connections},
        {"admin_open", rt_.admin_connections.load()},
        {"pipes_per_worker", cap.pipes_per_worker}};
    // Healthy only while changes are durable: the store open, its file still the one
    // opened, its last write good and nothing waiting to be written.
    std::string state_error;
    const bool durable = rt_.kill.state_durable(state_error);
    json::object state{{"path", p->source().state.path}, {"healthy", durable}};
    if (!durable) {
        state["error"] = state_error;
    }
    if (rt_.store && rt_.store->reserve_used()) {
        state["warning"] = "the state disk filled up and its space reserve was used: "
                           "free space there";
    }
    o["state"] = std::move(state);
    if (!rt_.audit_healthy()) {
        o["warning"] = "audit log unwritable: new connections are denied";
    }
    return {http::status::ok, std::move(o)};
}

reply admin_handlers::metrics() {
    reply r;
    rt_.stats.set_sessions_active(rt_.sessions.active_count());
    rt_.stats.set_audit_write_errors(rt_.audit_log_ ? rt_.audit_log_->write_errors() : 0);
    rt_.stats.set_audit_dropped(rt_.audit_log_ ? rt_.audit_log_->dropped() : 0);
    r.text = rt_.stats.render();
    return r;
}

reply admin_handlers::ca_pem() {
    const auto insp = rt_.inspection();
    if (!insp) {
        return error(http::status::not_found,
                     "no inspection CA: the policy has no `inspect` section");
    }
    reply r;
    r.text = insp->ca_pem();
    r.content_type = "application/x-pem-file";
    return r;
}

awaitable<reply> admin_handlers::reload() {
    const std::string by = "admin:" + client_;
    std::vector<std::string> needs_restart;
    const std::string errors = co_await rt_.reload(by, &needs_restart);
    if (!errors.empty()) {
        co_return error(http::status::bad_request, "policy refused: " + errors);
    }
    json::object o{{"result", "ok"}};
    if (!needs_restart.empty()) {
        json::array names;
        for (const auto& n : needs_restart) {
            names.emplace_back(n);
        }
        o["needs_restart"] = std::move(names);
        o["warning"] = "changed settings that only a restart applies: the running "
                       "values stay in force";
    }
    co_return reply{http::status::ok, std::move(o)};
}

// GET /v1/jobs/NAME: what `cordon run` enforces (proxy/admin/job_card_api.cpp).
reply admin_handlers::job_card(std::string_view name) {
    const auto p = rt_.policy();
    const config::job* j = p->source().find_job(name);
    if (j == nullptr) {
        return error(http::status::not_found, "no job " + std::string(name));
    }
    return {http::status::ok, job_card_json(*j)};
}

// GET /v1/jobs/NAME/worksheet[?format=md|json]: proxy/admin/worksheet_api.cpp.
reply admin_handlers::worksheet(const request& req, std::string_view name) {
    const std::string format = query_param(req.target(), "format");
    const auto accept = req[http::field::accept];
    const worksheet_response w = serve_worksheet(rt_, name, format,
                                                 std::string_view(accept.data(), accept.size()));
    reply r;
    r.status = static_cast<http::status>(w.status);
    r.text = w.body;
    r.content_type = w.content_type;
    return r;
}

namespace {

// A 400 with the admin API's error body; the connection is not kept.
awaitable<void> write_bad_request(beast::tcp_stream& stream, std::string message) {
    http::response<http::string_body> res{http::status::bad_request, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = json::serialize(error(http::status::bad_request, std::move(message)).body) + "\n";
    res.keep_alive(false);
    res.prepare_payload();
    co_await http::async_write(stream, res, use_nothrow);
}

}  // namespace

awaitable<void> serve_admin(control::runtime& rt, std::string admin_token, tcp::socket socket) {
    error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    if (ec) {
        co_return;
    }
    // Counted against the admin share of the descriptor budget (limits.admin_connections).
    ++rt.admin_connections;
    struct uncount {
        control::runtime& rt;
        ~uncount() { --rt.admin_connections; }
    } const counted{rt};
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer(max_admin_body + 16 * 1024);
    admin_handlers handlers(rt, admin_token, remote.address().to_string());
    for (;;) {
        http::request_parser<http::string_body> parser;
        parser.header_limit(16 * 1024);
        parser.body_limit(max_admin_body);
        stream.expires_after(std::chrono::seconds(30));  // slow or idle admin clients
        // The head first: a body framed two ways (Content-Length and a Transfer-Encoding
        // such as "xchunked") is refused before it is read, not read one way and forwarded
        // the other (RFC 9112 6.3: 400).
        auto [rec, rn] = co_await http::async_read_header(stream, buffer, parser, use_nothrow);
        (void)rn;
        if (!rec) {
            const auto& h = parser.get();
            const auto count = [&h](http::field name) {
                return static_cast<std::size_t>(std::count_if(
                    h.begin(), h.end(), [name](const auto& f) { return f.name() == name; }));
            };
            const auto te = h[http::field::transfer_encoding];
            if (const std::string_view refusal = data::framing_refusal(
                    count(http::field::host), count(http::field::content_length),
                    count(http::field::transfer_encoding), std::string_view(te.data(), te.size()));
                !refusal.empty()) {
                co_await write_bad_request(stream, "malformed request: " + std::string(refusal));
                co_return;
            }
            auto [bec, bn] = co_await http::async_read(stream, buffer, parser, use_nothrow);
            (void)bn;
            rec = bec;
        }
        if (rec) {
            if (rec != http::error::end_of_stream && rec != net::error::eof &&
                rec != beast::error::timeout && rec != net::error::connection_reset) {
                co_await write_bad_request(stream, "malformed request: " + rec.message());
            }
            co_return;
        }
        const request& req = parser.get();
        const route_match m = route_request(req.method(), req.target(), handlers.authorized(req));
        if (m.route == route::events) {
            // Streams hold their connection for good: they never take the admin share's
            // last slots, which stay free for a kill (docs/proxy.md, reserved capacity).
            if (rt.event_streams + event_stream_spare >=
                static_cast<std::int64_t>(rt.limits.admin_connections)) {
                http::response<http::string_body> res{http::status::service_unavailable,
                                                      req.version()};
                res.set(http::field::content_type, "application/json");
                res.set(http::field::retry_after, "5");
                res.body() = json::serialize(error(http::status::service_unavailable,
                                                   "too many event streams open (the last "
                                                   "admin connections are kept for kills)")
                                                 .body) +
                             "\n";
                res.keep_alive(false);
                res.prepare_payload();
                co_await http::async_write(stream, res, use_nothrow);
                co_return;
            }
            ++rt.event_streams;
            struct unstream {
                control::runtime& rt;
                ~unstream() { --rt.event_streams; }
            } const streaming{rt};
            co_await stream_events(rt, stream, req);
            error_code ignored;
            stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
            co_return;
        }
        const reply r = co_await handlers.handle(req, m);
        http::response<http::string_body> res{r.status, req.version()};
        res.set(http::field::cache_control, "no-store");
        if (!r.text.empty()) {
            res.set(http::field::content_type, r.content_type.empty()
                                                   ? std::string("text/plain; version=0.0.4")
                                                   : r.content_type);
            res.body() = r.text;
        } else {
            res.set(http::field::content_type, "application/json");
            res.body() = json::serialize(r.body) + "\n";
        }
        res.keep_alive(req.keep_alive());
        res.prepare_payload();
        auto [wec, wn] = co_await http::async_write(stream, res, use_nothrow);
        (void)wn;
        if (wec || !req.keep_alive()) {
            error_code ignored;
            stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
            co_return;
        }
    }
}

}  // namespace cordon::proxy::admin
