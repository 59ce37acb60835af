#include "proxy/data/reserved_host.hpp"

#include "common/json_string.hpp"
#include "config/target.hpp"
#include "proxy/audit/tool_event.hpp"
#include "proxy/data/responses.hpp"
#include "proxy/inspect/inspector.hpp"

namespace cordon::proxy::data {
namespace {

// Slow senders of an event body are cut after this (slowloris).
constexpr std::chrono::seconds body_timeout{10};

std::string json_reply(int status, std::string_view body_json, bool keep_alive) {
    std::string r = "HTTP/1.1 " + std::to_string(status) + " " + std::string(status_text(status)) +
                    "\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
                    "Content-Length: " +
                    std::to_string(body_json.size() + 1) + "\r\n";
    if (!keep_alive) {
        r += "Connection: close\r\n";
    }
    r += "\r\n";
    r += body_json;
    r += "\n";
    return r;
}

std::string error_body(std::string_view message) {
    std::string body = "{\"error\":";
    common::append_json_string_ascii(body, message);
    body += '}';
    return body;
}

}  // namespace

awaitable<bool> serve_reserved(control::runtime& rt, beast::tcp_stream& client,
                               beast::flat_buffer& buffer,
                               http::request_parser<http::buffer_body>& parser,
                               const reserved_caller& who) {
    const auto& req = parser.get();
    const std::string target_text(req.target());
    int status = 0;
    std::string message;
    std::string path;
    if (req.method() != http::verb::connect) {
        const config::target_result t = config::parse_absolute_uri(target_text);
        path = t.value ? t.value->origin_form : std::string();
    }
    // The inspection CA's certificate, for sandboxes to trust (no secret in it: any caller).
    if (req.method() == http::verb::get && path == "/ca.pem") {
        const auto insp = rt.inspection();
        const bool keep = req.keep_alive() && parser.is_done();
        std::string resp;
        if (!insp) {
            resp = json_reply(404,
                              error_body("no inspection CA: the policy has no `inspect` "
                                         "section"),
                              keep);
        } else {
            const std::string& pem = insp->ca_pem();
            resp = "HTTP/1.1 200 OK\r\nContent-Type: application/x-pem-file\r\n"
                   "Cache-Control: no-store\r\nContent-Length: " +
                   std::to_string(pem.size()) + "\r\n" + (keep ? "" : "Connection: close\r\n") +
                   "\r\n" + pem;
        }
        auto [wec, wn] = co_await net::async_write(client.socket(), net::buffer(resp), use_nothrow);
        (void)wn;
        co_return !wec && keep;
    }
    if (who.session.empty()) {
        const std::string resp = deny_response(
            407, "auth", who.job, audit::reserved_events_host,
            "tool events need the session's credentials in Proxy-Authorization");
        co_await net::async_write(client.socket(), net::buffer(resp), use_nothrow);
        co_return false;
    }
    if (req.method() != http::verb::post) {
        status = 405;
        message = "only POST http://cordon.events/v1/events and GET http://cordon.events/ca.pem "
                  "are served on this name";
    } else if (path != audit::reserved_events_path) {
        status = 404;
        message = "no such endpoint: POST http://cordon.events/v1/events records an event";
    } else if (parser.chunked() || !parser.content_length()) {
        status = 411;
        message = "send the event with a Content-Length";
    } else if (*parser.content_length() > audit::max_event_body_bytes) {
        status = 413;
        message = "the event is larger than " + std::to_string(audit::max_event_body_bytes) +
                  " bytes";
    }
    if (status != 0) {
        const std::string resp = json_reply(status, error_body(message), false);
        co_await net::async_write(client.socket(), net::buffer(resp), use_nothrow);
        co_return false;
    }

    // Bounded above: at most max_event_body_bytes, within body_timeout.
    const auto length = static_cast<std::size_t>(*parser.content_length());
    if (buffer.size() < length && beast::iequals(req[http::field::expect], "100-continue")) {
        // curl asks before bodies above 1 KiB and would otherwise wait a second.
        static constexpr std::string_view go_on = "HTTP/1.1 100 Continue\r\n\r\n";
        auto [cec, cn] = co_await net::async_write(client.socket(), net::buffer(go_on),
                                                   use_nothrow);
        (void)cn;
        if (cec) {
            co_return false;
        }
    }
    client.expires_after(body_timeout);
    while (buffer.size() < length) {
        auto [ec, n] = co_await client.async_read_some(buffer.prepare(length - buffer.size()),
                                                       use_nothrow);
        if (ec) {
            client.expires_never();
            co_return false;  // gone or too slow: nothing to answer
        }
        buffer.commit(n);
    }
    client.expires_never();
    const std::string body(static_cast<const char*>(buffer.data().data()), length);
    buffer.consume(length);

    std::string error;
    const auto e = audit::parse_tool_event(body, error);
    if (!e) {
        const std::string resp = json_reply(400, error_body(error), false);
        co_await net::async_write(client.socket(), net::buffer(resp), use_nothrow);
        co_return false;
    }
    const audit::tool_event_source from{who.session, who.job, who.token_id, who.client, "proxy"};
    if (!rt.audit(audit::tool_call_record(*e, from, rt.now()))) {
        const std::string resp = json_reply(
            503, error_body("the audit log is unavailable; nothing recorded"), false);
        co_await net::async_write(client.socket(), net::buffer(resp), use_nothrow);
        co_return false;
    }
    const bool keep = req.keep_alive();
    const std::string resp = json_reply(202, "{\"recorded\":\"tool.call\"}", keep);
    auto [wec, wn] = co_await net::async_write(client.socket(), net::buffer(resp), use_nothrow);
    (void)wn;
    co_return !wec && keep;
}

}  // namespace cordon::proxy::data
