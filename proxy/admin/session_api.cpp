// The admin API's sessions and tokens: /v1/sessions[/ID[/tokens[/TID]]] (create, list, show,
// end, mint, revoke), and ending a session (also the lifeline's way out).

#include <boost/json.hpp>

#include <iostream>

#include "config/units.hpp"
#include "proxy/admin/handlers.hpp"
#include "proxy/control/fleet.hpp"
#include "proxy/control/tokens.hpp"
#include "proxy/inspect/inspector.hpp"

namespace cordon::proxy::admin {
namespace {

namespace json = boost::json;

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
        ep.address = ep.address.is_v4() ? *config::parse_ip("127.0.0.1") : *config::parse_ip("::1");
    }
    return "http://" + m.session_id + ":" + m.token + "@" + ep.to_string();
}

}  // namespace

// Ends session `before` (as it was): state, its connections closed, its tokens revoked,
// audited and published. `by` says who ("admin:CLIENT", "cordon"), `reason` why. Returns
// how many connections it closed. Arguments by value: the lifeline co_spawns it.
awaitable<std::size_t> end_session_now(control::runtime& rt, control::session_info before,
                                       std::string by, std::string reason) {
    const std::string id = before.id;
    rt.sessions.end(id, reason + " (" + by + ")");
    rt.kill.persist_session(id);
    const std::function<bool(const control::live_connection&)> of_session =
        [&id](const control::live_connection& c) { return c.session == id; };
    const std::string why = "session_ended";
    const std::size_t closed = co_await rt.connections.close_where(of_session, why);
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

reply admin_handlers::list_sessions() {
    json::array list;
    for (const auto& s : rt_.sessions.list()) {
        list.push_back(session_json(s));
    }
    return {http::status::ok, json::object{{"sessions", std::move(list)}}};
}

reply admin_handlers::get_session(const std::string& id) {
    const auto s = rt_.sessions.get(id);
    if (!s) {
        return error(http::status::not_found, "no session " + id);
    }
    return {http::status::ok, session_json(*s)};
}

awaitable<reply> admin_handlers::create_session(const request& req) {
    json::object body;
    reply err;
    if (!body_object(req, body, err)) {
        co_return err;
    }
    const auto* job_v = body.if_contains("job");
    if (job_v == nullptr || !job_v->is_string()) {
        co_return error(http::status::bad_request, "\"job\" (a job name) is required");
    }
    const std::string job_name(job_v->as_string());
    const auto p = rt_.policy();
    const config::job* j = p->source().find_job(job_name);
    if (j == nullptr) {
        co_return error(http::status::not_found, "no job named " + job_name);
    }
    std::chrono::milliseconds ttl{};
    if (!read_ttl(body, *j, ttl, err)) {
        co_return err;
    }
    // A fleet creates sessions only while its copy of the state is current (docs/fleet.md):
    // the session is written to etcd (committed) before it is handed out, or not at all.
    if (rt_.cluster != nullptr && !rt_.cluster->serving()) {
        co_return error(http::status::service_unavailable,
                        "the fleet's store is " + rt_.cluster->describe() +
                            ": no new sessions until it is reachable and caught up");
    }
    control::minted m;
    try {
        m = rt_.sessions.create(job_name, ttl);
    } catch (const std::exception& e) {
        co_return error(http::status::service_unavailable, e.what());
    }
    if (rt_.cluster == nullptr) {
        rt_.kill.persist_session(m.session_id);  // SQLite: an unsaved session is retried
    } else {
        // Committed by etcd before it is answered, or no session: written by the fleet's
        // committer, batched with the creates of the moment, while this thread serves on.
        const auto stored = rt_.sessions.stored(m.session_id);
        std::string why = "the session vanished before it was written";
        bool saved = false;
        if (stored) {
            saved = co_await rt_.cluster->save_new_session(*stored, why);
        }
        if (!saved) {
            std::cerr << "cordon: cluster: session " << m.session_id << ": " << why << '\n';
            rt_.sessions.forget(m.session_id);
            co_return error(http::status::service_unavailable,
                            "the fleet's store did not take the session: no session was made (" +
                                why + ")");
        }
    }
    rt_.audit(std::move(rt_.record("session.create")
                            .add("session", m.session_id)
                            .add("job", job_name)
                            .add("by", "admin:" + client_)
                            .add("expires_at", iso(m.expires_at))));
    audit_mint(m, job_name);
    json::object out = minted_json(m, true);
    // The credential broker: a placeholder per sandbox variable, bound to this session; the
    // real values never leave cordon (docs/inspect.md "Credentials").
    if (!j->credentials.empty()) {
        const auto insp = rt_.inspection();
        const inspect::credential_broker* b = insp ? insp->broker() : nullptr;
        if (b == nullptr) {
            co_return error(
                http::status::service_unavailable,
                "the job's credentials need the credential broker, which is not loaded");
        }
        json::object creds;
        for (const auto& [var, secret] : j->credentials) {
            creds[var] = b->placeholder(m.session_id, var);
        }
        out["credentials"] = std::move(creds);
    }
    co_return reply{http::status::created, std::move(out)};
}

reply admin_handlers::add_token(const request& req, const std::string& id) {
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
    rt_.kill.persist_session(id);
    audit_mint(*m, s->job);
    return {http::status::created, minted_json(*m, false)};
}

awaitable<reply> admin_handlers::end_session(const std::string& id) {
    // A fleet: a session made on another instance a moment ago is read from etcd first.
    if (rt_.cluster != nullptr && !rt_.sessions.get(id)) {
        rt_.cluster->fetch_session(id);
    }
    const auto before = rt_.sessions.get(id);
    if (!before) {
        co_return error(http::status::not_found, "no session " + id);
    }
    const std::size_t closed = co_await end_session_now(rt_, *before, "admin:" + client_,
                                                        "ended by admin");
    co_return reply{http::status::ok, json::object{{"id", id}, {"connections_closed", closed}}};
}

awaitable<reply> admin_handlers::revoke_token(const std::string& id, const std::string& token_id) {
    if (rt_.cluster != nullptr && !rt_.sessions.get(id)) {
        rt_.cluster->fetch_session(id);  // as end_session
    }
    const auto s = rt_.sessions.get(id);
    const auto t0 = std::chrono::steady_clock::now();
    const control::revoke_result r = rt_.sessions.revoke_token(id, token_id, "revoked by admin");
    if (r == control::revoke_result::unknown) {
        co_return error(http::status::not_found, "no token " + token_id + " in session " + id);
    }
    rt_.kill.persist_session(id);
    const std::function<bool(const control::live_connection&)> of_token =
        [&](const control::live_connection& c) {
            return c.session == id && c.token_id == token_id;
        };
    const std::string why = "token_revoked";
    const std::size_t closed = co_await rt_.connections.close_where(of_token, why);
    const auto ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    rt_.audit_durable(
        std::move(rt_.record("token.revoke")
                      .add("session", id)
                      .add("job", s ? s->job : std::string())
                      .add("token_id", token_id)
                      .add("reason", "revoked by admin")
                      .add("by", "admin:" + client_)
                      .add("connections_closed", static_cast<std::uint64_t>(closed))));
    rt_.stats.count_kill(alerts::kill_scope::credential, ms / 1000);
    if (r != control::revoke_result::already_revoked) {
        rt_.stats.count_tokens_revoked();
    }
    rt_.events->publish("token.revoke", id,
                        json::serialize(json::object{
                            {"session", id}, {"token_id", token_id}, {"by", "admin:" + client_}}));
    co_return reply{http::status::ok,
                    json::object{{"session", id},
                                 {"token_id", token_id},
                                 {"already_revoked", r == control::revoke_result::already_revoked},
                                 {"connections_closed", closed},
                                 {"elapsed_ms", ms}}};
}

void admin_handlers::audit_mint(const control::minted& m, const std::string& job) {
    rt_.stats.count_tokens_minted();
    rt_.audit(std::move(rt_.record("token.mint")
                            .add("session", m.session_id)
                            .add("job", job)
                            .add("token_id", m.token_id)
                            .add("expires_at", iso(m.expires_at))));
}

json::object admin_handlers::minted_json(const control::minted& m, bool with_id) const {
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

}  // namespace cordon::proxy::admin
