// MCP rules on the wire (mcp_flow.hpp, docs/mcp.md): a request's calls decided and recorded,
// a server's answers filtered.

#include "proxy/data/mcp_flow.hpp"

#include "proxy/audit/tool_event.hpp"
#include "proxy/data/responses.hpp"
#include "proxy/data/tls_stream.hpp"
#include "proxy/mcp/jsonrpc.hpp"

namespace cordon::proxy::data {

using config::deny_reason;

mcp_answer_mode mcp_mode_of(const response_reader& rp, std::string_view& why) {
    if (rp.is_done()) {
        return mcp_answer_mode::pass;  // no body: 202 Accepted to a notification, HEAD, 204
    }
    // One pass over the fields: the first Content-Type, and whether every Content-Encoding
    // and Transfer-Encoding (each is read: a repeated field is one list) names only what
    // cordon reads.
    std::string_view type;
    bool typed = false;
    bool readable = true;
    for_each_field(rp.field_lines(), [&](std::string_view n, std::string_view v) {
        if (!typed && ascii_iequals(n, "content-type")) {
            type = v;
            typed = true;
        } else if (readable && ascii_iequals(n, "content-encoding")) {
            readable = value_is_only(v, "identity");
        } else if (readable && ascii_iequals(n, "transfer-encoding")) {
            readable = value_is_only(v, "chunked");
        }
    });
    const bool events = mcp::is_event_stream_type(type);
    const bool json = !events && mcp::is_json_type(type);
    if ((events || json) && !mcp::utf8_charset(type)) {
        why = "the MCP server answered in a charset other than UTF-8, which cordon does not "
              "read: not passed on";
        return mcp_answer_mode::refused;
    }
    if (!events && !json) {
        if (rp.status() >= 200 && rp.status() < 300) {
            why = "the MCP server answered with a body that is neither JSON nor an event "
                  "stream: not passed on";
            return mcp_answer_mode::refused;
        }
        return mcp_answer_mode::pass;  // an error page
    }
    if (!readable) {  // bytes cordon cannot read cannot be filtered
        why = "the MCP server answered with an encoded body (Content-Encoding or "
              "Transfer-Encoding) cordon cannot read: not passed on";
        return mcp_answer_mode::refused;
    }
    return events ? mcp_answer_mode::events : mcp_answer_mode::json;
}

mcp_answer_filter::mcp_answer_filter(const mcp::filter_context& ctx, std::size_t max_message,
                                     change_sink sink, stream_replacer* redact)
    : ctx_(ctx),
      sink_(std::move(sink)),
      redact_(redact),
      events_(max_message, [this](std::string_view data, std::string& replacement) {
          return on_event(data, replacement);
      }) {}

bool mcp_answer_filter::filter_json(std::string& body, std::string& error) {
    std::string rewritten;
    mcp::filter_result r = mcp::filter_server_message(body, ctx_, rewritten);
    if (!r.changes.empty() && sink_) {
        sink_(r.changes);
    }
    if (!r.ok) {
        error = "the MCP server's answer is not JSON cordon can read (" + r.error +
                "): not passed on";
        return false;
    }
    if (r.rewritten) {
        body.swap(rewritten);
    }
    return true;
}

mcp::sse_filter::verdict mcp_answer_filter::on_event(std::string_view data,
                                                     std::string& replacement) {
    mcp::filter_result r = mcp::filter_server_message(data, ctx_, replacement);
    if (!r.changes.empty() && sink_) {
        sink_(r.changes);
    }
    if (!r.ok) {
        replacement = "an event whose data is not JSON cordon can read (" + r.error + ")";
        return mcp::sse_filter::verdict::refuse;
    }
    return r.rewritten ? mcp::sse_filter::verdict::rewrite : mcp::sse_filter::verdict::pass;
}

void mcp_answer_filter::feed(std::string_view chunk, std::string& out) {
    if (redact_ == nullptr) {
        events_.feed(chunk, out);
        return;
    }
    passed_.clear();
    events_.feed(chunk, passed_);
    redact_->feed(passed_, out);
}

void mcp_answer_filter::finish(std::string& out) {
    if (redact_ == nullptr) {
        events_.finish(out);
        return;
    }
    passed_.clear();
    events_.finish(passed_);
    redact_->feed(passed_, out);
    redact_->finish(out);
}

client_conn::mcp_plan client_conn::judge_mcp(const config::egress_rule& rule, const config::job& j,
                                             std::string_view http_method, std::string_view body,
                                             bool has_body, std::string_view target,
                                             std::string_view denial_kind) {
    mcp_plan plan;
    if (!has_body) {
        return plan;  // GET (an event stream), DELETE (the MCP session's end): no calls
    }
    if (http_method != "POST") {
        plan.act = mcp_plan::action::refuse;
        plan.status = 400;
        plan.reason = deny_reason::bad_request;
        plan.message = "on an MCP rule, a request with a body is a POST of JSON-RPC messages";
        return plan;
    }
    mcp::request_body parsed;
    std::string error;
    if (!mcp::parse_request_body(body, parsed, error)) {
        plan.act = mcp_plan::action::refuse;
        plan.status = 400;
        plan.reason = deny_reason::bad_request;
        plan.message = "not an MCP request cordon can decide: " + error;
        return plan;
    }
    const config::mcp_spec& spec = *rule.mcp;
    const bool report = j.mode == config::job_mode::report;
    const std::string pins = mcp_pin_key();
    const std::string_view server = host;
    std::vector<mcp::call_verdict> verdicts(parsed.messages.size());
    deny_reason first = deny_reason::none;
    for (std::size_t i = 0; i < parsed.messages.size(); ++i) {
        const mcp::message& m = parsed.messages[i];
        if (!m.is_call()) {
            continue;
        }
        verdicts[i] = mcp::judge_call(m, spec, report, [&](std::string_view tool) {
            return rt_.mcp_pins.changed(pins, server, tool);
        });
        if (first == deny_reason::none) {
            first = verdicts[i].reason;
        }
    }
    // Every call is recorded, refused or not (a refusal is a denial too, and says so).
    for (std::size_t i = 0; i < parsed.messages.size(); ++i) {
        const mcp::message& m = parsed.messages[i];
        if (!m.is_call()) {
            continue;
        }
        const audit::tool_event e = audit::tool_event_of(m.tool, m.arguments);
        auto r = sink_.make("tool.call");
        if (!session.empty()) {
            r.add("session", session);
        }
        r.add("job", job).add("client", client_text_).add("via", "mcp");
        if (!token_id.empty()) {
            r.add("token_id", token_id);
        }
        r.add("server", server).add("target", target).add("tool", e.tool);
        if (m.has_id()) {
            r.add("id", m.id.substr(0, 256));
        }
        if (!e.arguments.empty()) {
            r.add_redacted("arguments", e.arguments);  // redacted string by string
        }
        if (e.truncated) {
            r.add("arguments_truncated", true);
        }
        const mcp::call_verdict& v = verdicts[i];
        if (v.reason != deny_reason::none) {
            r.add("reason", config::to_string(v.reason));
        } else if (first != deny_reason::none) {
            r.add("reason", "mcp_batch");  // allowed, but its batch was not forwarded
        }
        if (v.would_deny != deny_reason::none) {
            r.add("would_deny", config::to_string(v.would_deny));
        }
        sink_.write(std::move(r));
        if (v.reason != deny_reason::none) {
            rt_.denied(
                control::denial{job, session, config::to_string(v.reason), target, denial_kind});
        }
    }
    if (first != deny_reason::none) {
        const std::string answer = mcp::refusal_answer(parsed, verdicts, job);
        plan.act = mcp_plan::action::answer;
        plan.reason = first;
        plan.answer = mcp::refusal_head(first, answer.size()) + answer;
    }
    return plan;
}

namespace {

std::string body_refusal_message(whole_end e, std::size_t max) {
    return e == whole_end::too_large ? "an MCP request body larger than the rule's max_body (" +
                                           std::to_string(max) + " bytes)"
                                     : std::string("the request body ended early or is malformed");
}

}  // namespace

awaitable<bool> client_conn::mcp_request_plain(
    request_state& st, http::request_parser<http::buffer_body>& parser, beast::flat_buffer& buffer,
    const config::egress_rule& rule, const config::job& j, bool has_body, std::string& body) {
    auto& req = parser.get();
    if (wants_upgrade(req.base())) {
        co_await deny(st, 400, deny_reason::bad_request,
                      "an MCP rule carries no protocol upgrades");
        co_return false;
    }
    if (has_body) {
        const std::size_t max = rule.mcp->max_body;
        if (const std::string_view why = mcp::request_type_refusal(
                req[http::field::content_type], req[http::field::content_encoding]);
            !why.empty()) {
            co_await deny(st, 415, deny_reason::bad_request, why);
            co_return false;
        }
        if (const auto e = req.find(http::field::expect);
            e != req.end() && beast::iequals(e->value(), "100-continue") && !parser.is_done()) {
            // The body is needed before anything is dialled: the client is told to send it.
            static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
            auto [cec, cn] = co_await net::async_write(client_.socket(), net::buffer(cont),
                                                       use_nothrow);
            (void)cn;
            if (cec) {
                co_await deny(st, 400, deny_reason::bad_request, "the client went away");
                co_return false;
            }
        }
        const whole_end we = co_await read_whole_body(client_, buffer, parser, req.body(), max,
                                                      rt_.policy()->source().proxy.idle_timeout,
                                                      body, fwd().window);
        if (we != whole_end::done) {
            const std::string why = body_refusal_message(we, max);
            co_await deny(st, we == whole_end::too_large ? 413 : 400, deny_reason::bad_request,
                          why);
            co_return false;
        }
        // The upload budget counts the body as forwarding counts each chunk of one: here all
        // of it, before anything goes up.
        if (!session.empty()) {
            quota_.attach(rt_.usage_for(session));
        }
        if (!quota_.admit_chunk(j.limits, body.size())) {
            co_await deny(st, 403, deny_reason::budget);
            co_return false;
        }
    }
    const mcp_plan plan = judge_mcp(rule, j, method, body, has_body, st.log.target, "http");
    if (plan.act == mcp_plan::action::refuse) {
        co_await deny(st, plan.status, plan.reason, plan.message);
        co_return false;
    }
    if (plan.act == mcp_plan::action::answer) {
        // The denials were counted per call (judge_mcp); the record says the first.
        st.log.deny(plan.reason, 200);
        co_await net::async_write(client_.socket(), net::buffer(plan.answer), use_nothrow);
        shutdown_client();
        co_return false;
    }
    co_return true;
}

awaitable<bool> client_conn::mcp_request_inspected(tls_stream& cs, beast::flat_buffer& cbuf,
                                                   http::request_parser<http::buffer_body>& parser,
                                                   request_state& st,
                                                   const inspected_mcp_request& r,
                                                   std::string& body, std::string& reason) {
    const config::proxy_spec& ps = rt_.policy()->source().proxy;
    if (r.upgrade) {
        co_await refuse_inspected(cs, st, 400, deny_reason::bad_request, r.method, r.audit_path,
                                  "an MCP rule carries no protocol upgrades");
        reason = "bad_request";
        co_return false;
    }
    if (r.has_body) {
        const std::size_t max = r.rule.mcp->max_body;
        const auto& req = parser.get();
        if (const std::string_view why = mcp::request_type_refusal(
                req[http::field::content_type], req[http::field::content_encoding]);
            !why.empty()) {
            co_await refuse_inspected(cs, st, 415, deny_reason::bad_request, r.method, r.audit_path,
                                      why);
            reason = "bad_request";
            co_return false;
        }
        const whole_end we = co_await read_whole_body(cs, cbuf, parser, parser.get().body(), max,
                                                      ps.idle_timeout, body, r.window);
        if (we != whole_end::done) {
            const std::string why = body_refusal_message(we, max);
            co_await refuse_inspected(cs, st, we == whole_end::too_large ? 413 : 400,
                                      deny_reason::bad_request, r.method, r.audit_path, why);
            reason = "bad_request";
            co_return false;
        }
        // What any body may not carry (placeholders, secrets), and the budget.
        stream_scanner body_scan(r.secrets);
        deny_reason refusal = body_scan.feed(body);
        if (refusal == deny_reason::none && !quota_.admit_chunk(r.j.limits, body.size())) {
            refusal = deny_reason::budget;
        }
        if (refusal != deny_reason::none) {
            co_await refuse_inspected(cs, st, 403, refusal, r.method, r.audit_path, "");
            reason = config::to_string(refusal);
            co_return false;
        }
    }
    const mcp_plan plan = judge_mcp(r.rule, r.j, r.method, body, r.has_body, tunnel_target_,
                                    "https");
    if (plan.act == mcp_plan::action::refuse) {
        co_await refuse_inspected(cs, st, plan.status, plan.reason, r.method, r.audit_path,
                                  plan.message);
        reason = "bad_request";
        co_return false;
    }
    if (plan.act == mcp_plan::action::answer) {
        // JSON-RPC errors in the server's place: an MCP client shows its model a normal
        // error. The denials were counted per call.
        std::uint64_t wn = 0;
        if (closed_by_.empty()) {
            cs.expires_after(ps.idle_timeout);
            auto [aec, an] = co_await net::async_write(cs, net::buffer(plan.answer), use_nothrow);
            cs.expires_never();
            (void)aec;
            wn = an;
        }
        st.log.bytes_down += wn;
        http_note n{r.method, r.audit_path, 200};
        n.reason = plan.reason;
        n.bytes_down = wn;
        write_http_request(n);
        reason = config::to_string(plan.reason);
        co_return false;
    }
    co_return true;
}

awaitable<bool> client_conn::mcp_answer_inspected(tls_stream& cs, tls_stream& us,
                                                  beast::flat_buffer& ubuf, response_reader& rp,
                                                  mcp_answer_mode mode,
                                                  const inspected_mcp_answer& a,
                                                  std::string& reason) {
    const std::size_t max = a.rule.mcp->max_body;
    const std::string pins = mcp_pin_key();
    const mcp::filter_context ctx{*a.rule.mcp, a.j.mode == config::job_mode::report, &rt_.mcp_pins,
                                  pins, host};
    stream_replacer back(a.sent_secret, a.sent_placeholder);
    stream_replacer* redact_back = a.sent_secret.empty() ? nullptr : &back;
    mcp_answer_filter filter(
        ctx, max,
        [this](const std::vector<mcp::change>& ch) {
            record_mcp_changes(ch, tunnel_target_, "https");
        },
        redact_back);
    const mcp_answer_io io{a.out,
                           a.window,
                           a.scratch,
                           rt_.policy()->source().proxy.idle_timeout,
                           max,
                           a.client_version,
                           a.client_keep_alive,
                           redact_back,
                           a.sent_secret,
                           a.sent_placeholder};
    const mcp_answer_result ar = co_await forward_mcp_answer(us, ubuf, rp, cs, mode, filter, io);
    if (ar.refused_before_head) {
        http_note n{a.method, a.audit_path, 502};
        n.bytes_up = a.bytes_up;
        n.message = ar.error;
        n.credential = a.secret_name;
        co_await upstream_failure(cs, n);
        reason = "upstream_error";
        co_return false;
    }
    a.log_bytes_down += ar.written;
    http_note n{a.method, a.audit_path, static_cast<int>(rp.status())};
    n.would_deny = a.would_deny;
    n.credential = a.secret_name;
    n.bytes_up = a.bytes_up;
    n.bytes_down = ar.written;
    n.message = ar.end == pump_end::done ? std::string_view()
                : !ar.error.empty()      ? std::string_view(ar.error)
                                         : std::string_view("response not forwarded whole");
    write_http_request(n);
    if (ar.end != pump_end::done) {
        reason = ar.end == pump_end::refused ? "upstream_error" : "error";
        co_return false;
    }
    co_return ar.keep;
}

awaitable<bool> client_conn::forward_mcp_response(const forward_exchange& x, response_reader& rp,
                                                  mcp_answer_mode mode, bool client_keep_alive) {
    request_state& st = x.st;
    forward_state& fs = fwd();
    const std::size_t max = x.mcp_rule->mcp->max_body;
    const std::string pins = mcp_pin_key();
    const mcp::filter_context ctx{*x.mcp_rule->mcp, x.j.mode == config::job_mode::report,
                                  &rt_.mcp_pins, pins, host};
    mcp_answer_filter filter(
        ctx, max,
        [this, &st](const std::vector<mcp::change>& ch) {
            record_mcp_changes(ch, st.log.target, "http");
        },
        nullptr);
    std::string scratch;
    const mcp_answer_io io{fs.out_head,
                           fs.window,
                           scratch,
                           x.ps.idle_timeout,
                           max,
                           x.parser.get().version(),
                           client_keep_alive,
                           nullptr,
                           {},
                           {}};
    const mcp_answer_result ar = co_await forward_mcp_answer(upstream_, upstream_buffer_, rp,
                                                             client_, mode, filter, io);
    if (ar.refused_before_head) {
        if (closed_by_.empty()) {
            co_await error_reply(st, 502, ar.error);
        }
        log_close(st, !closed_by_.empty() ? std::string_view(closed_by_) : "upstream_error");
        co_return false;
    }
    st.log.bytes_down += ar.written;
    if (ar.end != pump_end::done) {
        log_close(st, !closed_by_.empty()               ? std::string_view(closed_by_)
                      : ar.end == pump_end::write_error ? std::string_view("client_error")
                                                        : std::string_view("upstream_error"));
        co_return false;
    }
    if (!ar.keep) {
        error_code ignored;
        upstream_.socket().close(ignored);
        forget_upstream();
        address.reset();
    }
    log_close(st, ar.keep ? "done" : "eof");
    co_return ar.keep&& closed_by_.empty();
}

void client_conn::record_mcp_changes(const std::vector<mcp::change>& changes,
                                     std::string_view target, std::string_view denial_kind) {
    for (const mcp::change& c : changes) {
        auto r = sink_.make("mcp.tool_changed");
        if (!session.empty()) {
            r.add("session", session);
        }
        r.add("job", job).add("client", client_text_).add("server", host).add("target", target);
        r.add("tool", c.tool);
        r.add("message", c.full ? "more tools than cordon pins per session: refused as changed"
                                : "the server's definition of this tool changed since it was "
                                  "first listed in this session: its calls are refused");
        sink_.write(std::move(r));
        rt_.denied(control::denial{job, session, config::to_string(deny_reason::mcp_tool_changed),
                                   target, denial_kind});
    }
}

}  // namespace cordon::proxy::data
