// The admin API: JSON over HTTP with a bearer token, served on the control thread so that
// it answers even while the data plane is saturated. Router after Beast's
// handle_request(req) -> response.

#include <boost/json.hpp>

#include "common/time.hpp"
#include "proxy/admin/admin_api.hpp"
#include "config/units.hpp"
#include "proxy/admin/denials_api.hpp"
#include "proxy/data/http_head.hpp"
#include "proxy/admin/job_card_api.hpp"
#include "proxy/control/lifelines.hpp"
#include "proxy/audit/shim_event.hpp"
#include "proxy/data/responses.hpp"
#include "proxy/control/runtime.hpp"
#include "proxy/control/tokens.hpp"
#include "proxy/audit/tool_event.hpp"
#include "proxy/admin/worksheet_api.hpp"

namespace cordon::proxy::admin {
namespace {

using namespace net::experimental::awaitable_operators;

namespace json = boost::json;
using request = http::request<http::string_body>;

constexpr std::size_t max_admin_body = 64 * 1024;  // admin requests are small JSON objects
// Admin connections an event stream may never take: a kill always finds one free.
constexpr std::int64_t event_stream_spare = 2;

struct reply {
    reply() = default;
    reply(http::status s, json::value b) : status(s), body(std::move(b)) {}
    http::status status = http::status::ok;
    json::value body;
    std::string text;  ///< when set, sent as text/plain (the Prometheus exposition) instead
    std::string content_type;  ///< of `text`, when not the Prometheus exposition's
};

reply error(http::status s, std::string message);

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

reply error(http::status s, std::string message) {
    return {s, json::object{{"error", std::move(message)}}};
}

std::string iso(common::wall_clock::time_point t) { return common::format_rfc3339(t); }

json::object session_json(const control::session_info& s) {
    json::array tokens;
    for (const auto& t : s.tokens) {
        json::object o{{"id", t.id},
                       {"created", iso(t.created)},
                       {"expires_at", iso(t.expires_at)},
                       {"revoked", t.revoked}};
        if (t.revoked) {
            o["revoked_reason"] = t.revoked_reason;
        }
        tokens.push_back(std::move(o));
    }
    json::object o{{"id", s.id},
                   {"job", s.job},
                   {"state", std::string(to_string(s.state))},
                   {"created", iso(s.created)},
                   {"expires_at", iso(s.expires_at)},
                   {"tokens", std::move(tokens)}};
    if (!s.end_reason.empty()) {
        o["end_reason"] = s.end_reason;
    }
    return o;
}

// Splits "/v1/sessions/ID/tokens/TID" into its segments.
std::vector<std::string_view> segments(std::string_view path) {
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

// Parses the optional JSON object body; an empty body is an empty object.
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

// "ttl": "10m" or a number of seconds; bounded by 1m and the job's identity.ttl.
bool read_ttl(const json::object& body, const config::job& j, std::chrono::milliseconds& ttl,
              reply& err) {
    ttl = j.identity.ttl;
    const auto* v = body.if_contains("ttl");
    if (v == nullptr || v->is_null()) {
        return true;
    }
    // A string with its unit, as in the policy: a bare number would leave the unit a guess.
    std::optional<std::chrono::milliseconds> d;
    if (v->is_string()) {
        d = config::parse_duration(std::string_view(v->as_string()));
    }
    if (!d) {
        err = error(http::status::bad_request,
                    "ttl must be a duration string such as \"10m\" or \"1h\"");
        return false;
    }
    if (*d < std::chrono::minutes(1) || *d > j.identity.ttl) {
        err = error(http::status::bad_request,
                    "ttl must be between 1m and the job's identity.ttl (" +
                        config::format_duration(j.identity.ttl) + ")");
        return false;
    }
    ttl = *d;
    return true;
}

std::string proxy_url(const control::runtime& rt, const control::minted& m) {
    config::endpoint ep = rt.proxy_endpoint;
    if (ep.address.bytes() == std::array<std::uint8_t, 16>{}) {
        // Listening on every address: name loopback; deployments set the real address.
        ep.address = ep.address.is_v4() ? *config::parse_ip("127.0.0.1")
                                        : *config::parse_ip("::1");
    }
    return "http://" + m.session_id + ":" + m.token + "@" + ep.to_string();
}

// Bearer token check, constant time.
bool bearer_ok(const request& req, const std::string& token) {
    const auto it = req.find(http::field::authorization);
    if (it == req.end()) {
        return false;
    }
    const std::string_view v(it->value().data(), it->value().size());
    constexpr std::string_view bearer = "Bearer ";
    if (v.size() <= bearer.size() || !beast::iequals(v.substr(0, bearer.size()), bearer)) {
        return false;
    }
    return control::equal_constant_time(v.substr(bearer.size()), token);
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

std::string sse(const control::event& e) {
    return "id: " + std::to_string(e.id) + "\nevent: " + e.type + "\ndata: " + e.json + "\n\n";
}

// Ends session `before` (as it was): state, its connections closed, its tokens revoked,
// audited and published. `by` says who ("admin:CLIENT", "cordon"), `reason` why. Returns
// how many connections it closed. Arguments by value: the lifeline co_spawns it.
awaitable<std::size_t> end_session_now(control::runtime& rt, control::session_info before, std::string by,
                                       std::string reason) {
    const std::string id = before.id;
    rt.sessions.end(id, reason + " (" + by + ")");
    rt.persist_session(id);
    const std::function<bool(const control::live_connection&)> of_session =
        [&id](const control::live_connection& c) { return c.session == id; };
    const std::string why = "session_ended";
    const std::size_t closed = co_await rt.close_where(of_session, why);
    for (const auto& t : before.tokens) {
        if (!t.revoked) {
            rt.stats.count_tokens_revoked();
            rt.audit_durable(std::move(rt.record("token.revoke")
                                           .add("session", id)
                                           .add("job", before.job)
                                           .add("token_id", t.id)
                                           .add("reason", "session ended")
                                           .add("by", by)));
        }
    }
    rt.audit(std::move(rt.record("session.end")
                           .add("session", id)
                           .add("job", before.job)
                           .add("by", by)
                           .add("reason", reason)
                           .add("connections_closed", static_cast<std::uint64_t>(closed))));
    rt.events->publish("session.end", id,
                       json::serialize(json::object{
                           {"session", id}, {"job", before.job}, {"by", by}, {"reason", reason}}));
    rt.forget_usage(id);
    co_return closed;
}

// The lifeline of `cordon run`'s stream (?lifeline=GRACE with ?session=ID): when the last
// one of a session closes and none reopens within GRACE, cordon ends the session itself.
std::optional<control::lifelines::hold> hold_lifeline(control::runtime& rt, net::any_io_executor control,
                                             const std::string& session,
                                             std::string_view grace_text) {
    const auto grace = config::parse_duration(grace_text);
    const auto s = rt.sessions.get(session);
    if (!grace || session.empty() || !s || s->state != control::session_state::active) {
        return std::nullopt;
    }
    if (!rt.lifelines_) {
        control::runtime* r = &rt;
        rt.lifelines_ = std::make_shared<control::lifelines>(
            control, [r, control](const std::string& id) {
                const auto now = r->sessions.get(id);
                if (!now || now->state != control::session_state::active) {
                    return;  // ended or killed meanwhile: nothing to do
                }
                net::co_spawn(control,
                              end_session_now(*r, *now, "cordon",
                                              "lifeline lost: the cordon run shim's event "
                                              "stream closed and did not come back"),
                              net::detached);
            });
    }
    // At least 1 s: a live shim reconnects within 250 ms.
    const auto bounded = std::clamp(*grace, std::chrono::milliseconds(1000),
                                    std::chrono::milliseconds(std::chrono::hours(1)));
    return rt.lifelines_->open(session, bounded);
}

// The first event of a stream whose resume point cannot be served (resume_lost): the
// follower gets everything from now, and this says what it may have missed. `kill` and
// `session` are the state now, so a follower that cannot know whether a kill came in the
// gap does not need to ask (docs/proxy.md, "Event stream").
std::string resume_lost_event(control::runtime& rt, std::string_view why, const std::string& session) {
    json::object kill{{"engaged", rt.network_killed.load()}, {"changed_ms_ago", nullptr}};
    if (rt.kill_info.at != common::wall_clock::time_point{}) {
        const auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(rt.now() -
                                                                               rt.kill_info.at);
        kill["changed_ms_ago"] = std::max<std::int64_t>(0, ago.count());
    }
    json::object o{{"reason", why}, {"last_id", rt.events->last_id()}, {"kill", std::move(kill)}};
    if (!session.empty()) {
        const auto s = rt.sessions.get(session);
        o["session"] = json::object{{"id", session},
                                    {"state", s ? std::string(to_string(s->state)) : "unknown"}};
    }
    return sse(control::event{rt.events->last_id(), "resume.lost", session, json::serialize(o)});
}

awaitable<void> peer_readable(tcp::socket& s) {
    auto [ec] = co_await s.async_wait(tcp::socket::wait_read, use_nothrow);
    (void)ec;
}

// GET /v1/events[?session=ID]: Server-Sent Events until the client goes away. Resumes after
// Last-Event-ID (or ?after=N): from memory, or from the state store for older ids; an id it
// cannot resume from starts the stream now, with a resume.lost event first.
awaitable<void> stream_events(control::runtime& rt, beast::tcp_stream& stream, const request& req) {
    const std::string session = query_param(req.target(), "session");
    // (co_await this_coro::executor does not suspend: nothing is published before the
    // resume decision below.)
    const auto lifeline = hold_lifeline(rt, co_await net::this_coro::executor, session,
                                        query_param(req.target(), "lifeline"));
    std::uint64_t after = rt.events->last_id();
    std::string resume;
    bool resuming = false;
    if (const auto h = req.find("Last-Event-ID"); h != req.end()) {
        resume = std::string(h->value());
        resuming = true;
    } else {
        resume = query_param(req.target(), "after");
        resuming = !resume.empty();
    }
    std::string first;  // the resume.lost event, when the id cannot be served
    if (resuming) {
        const std::optional<std::uint64_t> id = control::parse_event_id(resume);
        const std::function<std::uint64_t(std::uint64_t)> next_stored =
            [&rt](std::uint64_t from) -> std::uint64_t {
            if (!rt.store) {
                return 0;
            }
            const auto next = rt.store->events_after(from, "", 1);
            return next.empty() ? 0 : next.front().id;
        };
        // Decided before the first co_await: nothing is published in between, so the
        // stream from `after` on misses nothing the resume.lost event does not cover.
        if (const std::string_view why = control::resume_lost(id, *rt.events, next_stored); !why.empty()) {
            first = resume_lost_event(rt, why, session);
        } else {
            after = *id;
        }
    }
    if (first.empty()) {
        // The resume point, as an id-only block (no data: nothing is dispatched, the SSE
        // client's last id is set): a follower that reconnects before its first event then
        // resumes from here, and misses nothing that came in between.
        first = "id: " + std::to_string(after) + "\n\n";
    }
    static constexpr std::string_view head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
        "X-Accel-Buffering: no\r\nConnection: close\r\n\r\n: cordon events\n\n";
    stream.expires_never();
    const std::string opening = std::string(head) + first;
    auto [hec, hn] = co_await net::async_write(stream.socket(), net::buffer(opening), use_nothrow);
    (void)hn;
    if (hec) {
        co_return;
    }
    for (;;) {
        bool complete = true;
        std::vector<control::event> batch = rt.events->since(after, session, complete);
        if (!complete && rt.store) {
            std::vector<control::event> older;
            for (const auto& s : rt.store->events_after(after, session, 10000)) {
                if (!batch.empty() && s.id >= batch.front().id) {
                    break;
                }
                older.push_back(control::event{s.id, s.type, s.session, s.json});
            }
            batch.insert(batch.begin(), older.begin(), older.end());
        }
        std::string out;
        for (const auto& e : batch) {
            out += sse(e);
            after = std::max(after, e.id);
        }
        after = std::max(after, rt.events->last_id());
        if (out.empty()) {
            // An event, the keepalive's time, or the follower gone: it sends nothing after its
            // request, so a readable socket is a closed one (its descriptor and lifeline are
            // released now,
            // not at the next keepalive).
            const auto woke = co_await (rt.events->wait(after, std::chrono::seconds(15)) ||
                                        peer_readable(stream.socket()));
            if (woke.index() == 1) {
                co_return;
            }
            if (rt.events->last_id() > after) {
                continue;
            }
            out = ": keepalive\n\n";
        }
        auto [wec, wn] = co_await net::async_write(stream.socket(), net::buffer(out), use_nothrow);
        (void)wn;
        if (wec) {
            co_return;
        }
    }
}

class admin_router {
public:
    admin_router(control::runtime& rt, const std::string& token, std::string client)
        : rt_(rt), token_(token), client_(std::move(client)) {}

    awaitable<reply> handle(const request& req) {
        const auto seg = segments(req.target());
        const auto verb = req.method();
        if (seg.size() == 1 && seg[0] == "healthz") {
            co_return reply{http::status::ok, json::object{{"status", "ok"}}};
        }
        // The one endpoint a session's own token may call (besides the admin token).
        if (seg.size() == 4 && seg[0] == "v1" && seg[1] == "sessions" && seg[3] == "events") {
            co_return post_event(req, std::string(seg[2]));
        }
        if (!authorized(req)) {
            co_return error(http::status::unauthorized,
                            "missing or wrong admin token (Authorization: Bearer ...)");
        }
        if (seg.size() == 1 && seg[0] == "metrics" && verb == http::verb::get) {
            reply r;
            rt_.stats.set_sessions_active(rt_.sessions.active_count());
            rt_.stats.set_audit_write_errors(rt_.audit_log_ ? rt_.audit_log_->write_errors() : 0);
            rt_.stats.set_audit_dropped(rt_.audit_log_ ? rt_.audit_log_->dropped() : 0);
            r.text = rt_.stats.render();
            co_return r;
        }
        if (seg.size() == 2 && seg[0] == "v1" && seg[1] == "kill" && verb == http::verb::post) {
            co_return co_await kill_network(req);
        }
        if (seg.size() == 2 && seg[0] == "v1" && seg[1] == "revive" && verb == http::verb::post) {
            co_return revive(req);
        }
        if (seg.empty() || seg[0] != "v1") {
            co_return error(http::status::not_found, "no such endpoint");
        }
        if (seg.size() == 2 && seg[1] == "status" && verb == http::verb::get) {
            co_return status();
        }
        if (seg.size() == 2 && seg[1] == "denials" && verb == http::verb::get) {
            co_return denials(req);
        }
        if (seg.size() == 2 && seg[1] == "reload" && verb == http::verb::post) {
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
        if (seg.size() >= 2 && seg[1] == "sessions") {
            co_return co_await sessions(req, seg);
        }
        // GET /v1/jobs/NAME: what `cordon run` enforces (proxy/admin/job_card_api.cpp).
        if (seg.size() == 3 && seg[1] == "jobs" && verb == http::verb::get) {
            const auto p = rt_.policy();
            const config::job* j = p->source().find_job(seg[2]);
            if (j == nullptr) {
                co_return error(http::status::not_found, "no job " + std::string(seg[2]));
            }
            co_return reply{http::status::ok, job_card_json(*j)};
        }
        // GET /v1/jobs/NAME/worksheet[?format=md|json]: proxy/admin/worksheet_api.cpp.
        if (seg.size() == 4 && seg[1] == "jobs" && seg[3] == "worksheet" &&
            verb == http::verb::get) {
            const std::string format = query_param(req.target(), "format");
            const auto accept = req[http::field::accept];
            const worksheet_response w = serve_worksheet(
                rt_, seg[2], format, std::string_view(accept.data(), accept.size()));
            reply r;
            r.status = static_cast<http::status>(w.status);
            r.text = w.body;
            r.content_type = w.content_type;
            co_return r;
        }
        co_return error(http::status::not_found, "no such endpoint");
    }

private:
    bool authorized(const request& req) const { return bearer_ok(req, token_); }

    // POST /v1/sessions/ID/events: a tool.call into the session's timeline, authorised by
    // the session's own token (Authorization: Bearer TOKEN) or the admin token.
    reply post_event(const request& req, const std::string& id) {
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
            const std::string_view v =
                it == req.end() ? std::string_view{}
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
    reply denials(const request& req) {
        reply r;
        const std::string job = query_param(req.target(), "job");
        const std::string limit = query_param(req.target(), "limit");
        json::object body;
        r.status = static_cast<http::status>(
            denials_request(rt_.denials, *rt_.policy(), job, limit, body));
        r.body = std::move(body);
        return r;
    }

    reply status() {
        const auto p = rt_.policy();
        const auto uptime = std::chrono::duration_cast<std::chrono::seconds>(rt_.now() -
                                                                             rt_.started);
        json::object listen{{"proxy", rt_.proxy_endpoint.to_string()}};
        if (const auto& d = p->source().listen.dns; d && d->port != 0) {
            listen["dns"] = d->to_string();  // as configured (`cordon run` relays to it)
        }
        json::object o{
            {"version", CORDON_VERSION},
            {"uptime_s", uptime.count()},
            {"sessions_active", rt_.sessions.active_count()},
            {"connections", rt_.open_connections.load()},
            {"audit",
             json::object{{"healthy", rt_.audit_healthy()},
                          {"path", p->source().audit.path},
                          {"write_errors", rt_.audit_log_ ? rt_.audit_log_->write_errors() : 0}}},
            {"policy", json::object{{"source", rt_.config_path()},
                                    {"jobs", p->source().jobs.size()},
                                    {"rules", p->source().rule_count()}}},
            {"reloads", json::object{{"ok", rt_.reloads_ok.load()},
                                     {"failed", rt_.reloads_failed.load()}}},
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
        json::object kill{{"engaged", rt_.network_killed.load()}};
        if (!rt_.kill_info.reason.empty()) {
            kill["reason"] = rt_.kill_info.reason;
            kill["by"] = rt_.kill_info.by;
            kill["at"] = iso(rt_.kill_info.at);
        }
        o["kill"] = std::move(kill);
        json::object tunnels;
        for (const auto& [job, n] : rt_.stats.active_tunnels_by_job()) {
            tunnels[job] = n;
        }
        o["tunnels"] = std::move(tunnels);  // active tunnels by job, jobs with none left out
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
        const bool durable = rt_.state_durable(state_error);
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

    awaitable<reply> sessions(const request& req, const std::vector<std::string_view>& seg) {
        const auto verb = req.method();
        if (seg.size() == 2) {
            if (verb == http::verb::get) {
                json::array list;
                for (const auto& s : rt_.sessions.list()) {
                    list.push_back(session_json(s));
                }
                co_return reply{http::status::ok, json::object{{"sessions", std::move(list)}}};
            }
            if (verb == http::verb::post) {
                co_return create_session(req);
            }
            co_return error(http::status::method_not_allowed, "use GET or POST");
        }
        const std::string id(seg[2]);
        if (seg.size() == 3) {
            if (verb == http::verb::get) {
                const auto s = rt_.sessions.get(id);
                if (!s) {
                    co_return error(http::status::not_found, "no session " + id);
                }
                co_return reply{http::status::ok, session_json(*s)};
            }
            if (verb == http::verb::delete_) {
                co_return co_await end_session(id);
            }
            co_return error(http::status::method_not_allowed, "use GET or DELETE");
        }
        if (seg.size() == 4 && seg[3] == "kill" && verb == http::verb::post) {
            co_return co_await kill_session(req, id);
        }
        if (seg[3] != "tokens") {
            co_return error(http::status::not_found, "no such endpoint");
        }
        if (seg.size() == 4 && verb == http::verb::post) {
            co_return add_token(req, id);
        }
        if (seg.size() == 5 && verb == http::verb::delete_) {
            const std::string token_id(seg[4]);
            co_return co_await revoke_token(id, token_id);
        }
        co_return error(http::status::not_found, "no such endpoint");
    }

    reply create_session(const request& req) {
        json::object body;
        reply err;
        if (!body_object(req, body, err)) {
            return err;
        }
        const auto* job_v = body.if_contains("job");
        if (job_v == nullptr || !job_v->is_string()) {
            return error(http::status::bad_request, "\"job\" (a job name) is required");
        }
        const std::string job_name(job_v->as_string());
        const auto p = rt_.policy();
        const config::job* j = p->source().find_job(job_name);
        if (j == nullptr) {
            return error(http::status::not_found, "no job named " + job_name);
        }
        std::chrono::milliseconds ttl{};
        if (!read_ttl(body, *j, ttl, err)) {
            return err;
        }
        control::minted m;
        try {
            m = rt_.sessions.create(job_name, ttl);
        } catch (const std::exception& e) {
            return error(http::status::service_unavailable, e.what());
        }
        rt_.persist_session(m.session_id);
        rt_.audit(std::move(rt_.record("session.create")
                                .add("session", m.session_id)
                                .add("job", job_name)
                                .add("by", "admin:" + client_)
                                .add("expires_at", iso(m.expires_at))));
        audit_mint(m, job_name);
        return {http::status::created, minted_json(m, true)};
    }

    reply add_token(const request& req, const std::string& id) {
        json::object body;
        reply err;
        if (!body_object(req, body, err)) {
            return err;
        }
        const auto s = rt_.sessions.get(id);
        if (!s) {
            return error(http::status::not_found, "no session " + id);
        }
        const auto p = rt_.policy();
        const config::job* j = p->source().find_job(s->job);
        if (j == nullptr) {
            return error(http::status::conflict, "the session's job is no longer in the policy");
        }
        std::chrono::milliseconds ttl{};
        if (!read_ttl(body, *j, ttl, err)) {
            return err;
        }
        const auto m = rt_.sessions.add_token(id, ttl);
        if (!m) {
            return error(http::status::conflict,
                         "session " + id + " is not active or has too many tokens");
        }
        rt_.persist_session(id);
        audit_mint(*m, s->job);
        return {http::status::created, minted_json(*m, false)};
    }

    awaitable<reply> end_session(const std::string& id) {
        const auto before = rt_.sessions.get(id);
        if (!before) {
            co_return error(http::status::not_found, "no session " + id);
        }
        const std::size_t closed =
            co_await end_session_now(rt_, *before, "admin:" + client_, "ended by admin");
        co_return reply{http::status::ok,
                        json::object{{"id", id}, {"connections_closed", closed}}};
    }

    awaitable<reply> revoke_token(const std::string& id, const std::string& token_id) {
        const auto s = rt_.sessions.get(id);
        const auto t0 = std::chrono::steady_clock::now();
        const control::revoke_result r = rt_.sessions.revoke_token(id, token_id, "revoked by admin");
        if (r == control::revoke_result::unknown) {
            co_return error(http::status::not_found, "no token " + token_id + " in session " + id);
        }
        rt_.persist_session(id);
        const std::function<bool(const control::live_connection&)> of_token =
            [&](const control::live_connection& c) { return c.session == id && c.token_id == token_id; };
        const std::string why = "token_revoked";
        const std::size_t closed = co_await rt_.close_where(of_token, why);
        const auto ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
        rt_.audit_durable(std::move(rt_.record("token.revoke")
                                        .add("session", id)
                                        .add("job", s ? s->job : std::string())
                                        .add("token_id", token_id)
                                        .add("reason", "revoked by admin")
                                        .add("by", "admin:" + client_)
                                        .add("connections_closed",
                                             static_cast<std::uint64_t>(closed))));
        rt_.stats.count_kill(alerts::kill_scope::credential, ms / 1000);
        if (r != control::revoke_result::already_revoked) {
            rt_.stats.count_tokens_revoked();
        }
        rt_.events->publish("token.revoke", id,
                            json::serialize(json::object{{"session", id},
                                                         {"token_id", token_id},
                                                         {"by", "admin:" + client_}}));
        co_return reply{http::status::ok,
                        json::object{{"session", id},
                                     {"token_id", token_id},
                                     {"already_revoked", r == control::revoke_result::already_revoked},
                                     {"connections_closed", closed},
                                     {"elapsed_ms", ms}}};
    }

    awaitable<reply> kill_network(const request& req) {
        json::object body;
        reply err;
        std::string reason;
        std::string by;
        if (!body_object(req, body, err) || !kill_args(body, client_, reason, by, err)) {
            co_return err;
        }
        const control::kill_outcome k = co_await rt_.kill_network(reason, by);
        json::object o{{"engaged", true},
                       {"already_engaged", k.already},
                       {"connections_closed", k.connections_closed},
                       {"elapsed_ms", k.elapsed_ms},
                       {"reason", rt_.kill_info.reason},
                       {"by", rt_.kill_info.by},
                       {"at", iso(rt_.kill_info.at)},
                       {"persisted", k.persisted}};
        co_return reply{http::status::ok, std::move(o)};
    }

    reply revive(const request& req) {
        json::object body;
        reply err;
        std::string reason;
        std::string by;
        if (!body_object(req, body, err) || !kill_args(body, client_, reason, by, err)) {
            return err;
        }
        if (!rt_.network_killed.load()) {
            return error(http::status::conflict, "the network kill is not engaged");
        }
        const control::kill_outcome k = rt_.revive(reason, by);
        if (!k.persisted) {
            return error(http::status::conflict,
                         "the state store is unavailable (" + rt_.store_error +
                             "), so the kill stays engaged: fix it and restart cordon");
        }
        return {http::status::ok,
                json::object{{"engaged", false}, {"reason", reason}, {"by", by}}};
    }

    awaitable<reply> kill_session(const request& req, const std::string& id) {
        json::object body;
        reply err;
        std::string reason;
        std::string by;
        if (!body_object(req, body, err) || !kill_args(body, client_, reason, by, err)) {
            co_return err;
        }
        const auto k = co_await rt_.kill_session(id, reason, by);
        if (!k) {
            co_return error(http::status::not_found, "no session " + id);
        }
        co_return reply{http::status::ok,
                        json::object{{"id", id},
                                     {"state", "killed"},
                                     {"already_killed", k->already},
                                     {"tokens_revoked", k->tokens_revoked},
                                     {"connections_closed", k->connections_closed},
                                     {"elapsed_ms", k->elapsed_ms},
                                     {"persisted", k->persisted}}};
    }

    void audit_mint(const control::minted& m, const std::string& job) {
        rt_.stats.count_tokens_minted();
        rt_.audit(std::move(rt_.record("token.mint")
                                .add("session", m.session_id)
                                .add("job", job)
                                .add("token_id", m.token_id)
                                .add("expires_at", iso(m.expires_at))));
    }

    json::object minted_json(const control::minted& m, bool with_id) const {
        json::object o{{"token", m.token},
                       {"token_id", m.token_id},
                       {"expires_at", iso(m.expires_at)},
                       {"proxy_url", proxy_url(rt_, m)}};
        if (with_id) {
            o["id"] = m.session_id;
        } else {
            o["session"] = m.session_id;
        }
        return o;
    }

    control::runtime& rt_;
    const std::string& token_;
    std::string client_;
};

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
    admin_router router(rt, admin_token, remote.address().to_string());
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
        if (req.method() == http::verb::get && req.target().starts_with("/v1/events") &&
            (req.target().size() == 10 || req.target()[10] == '?') &&
            bearer_ok(req, admin_token)) {
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
        const reply r = co_await router.handle(req);
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
