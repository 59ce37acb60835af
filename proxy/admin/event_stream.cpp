// GET /v1/events: the admin API's Server-Sent Events stream, its resume points and the
// lifeline `cordon run` holds a session by.

#include <boost/json.hpp>

#include "config/units.hpp"
#include "proxy/admin/handlers.hpp"
#include "proxy/control/lifelines.hpp"

namespace cordon::proxy::admin {
namespace {

using namespace net::experimental::awaitable_operators;

namespace json = boost::json;

std::string sse(const control::event& e) {
    return "id: " + std::to_string(e.id) + "\nevent: " + e.type + "\ndata: " + e.json + "\n\n";
}

// The lifeline of `cordon run`'s stream (?lifeline=GRACE with ?session=ID): when the last
// one of a session closes and none reopens within GRACE, cordon ends the session itself.
std::optional<control::lifelines::hold> hold_lifeline(control::runtime& rt,
                                                      net::any_io_executor control,
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
std::string resume_lost_event(control::runtime& rt, std::string_view why,
                              const std::string& session) {
    json::object kill{{"engaged", rt.kill.engaged()}, {"changed_ms_ago", nullptr}};
    if (rt.kill.info().at != common::wall_clock::time_point{}) {
        const auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(rt.now() -
                                                                               rt.kill.info().at);
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

}  // namespace

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
        if (const std::string_view why = control::resume_lost(id, *rt.events, next_stored);
            !why.empty()) {
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

}  // namespace cordon::proxy::admin
