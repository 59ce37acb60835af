// Requests inside a TLS tunnel cordon terminates (protocol: https rules; DESIGN.md
// "Inspection", docs/inspect.md): after the CONNECT is allowed and the ClientHello names the
// CONNECT host, cordon completes the client's TLS with a leaf minted for that name
// (proxy/inspect/), opens its own TLS to the upstream (verified: chain to upstream_ca, the
// name checked, SNI and ALPN http/1.1 sent), and then forwards HTTP/1.1 requests one by one:
// each read, checked as plain forwarding checks it (framing, smuggling), decided on its own
// (methods, request rules on the normalised path), passed on head then body, streaming, as is
// its response; each is an http.request record. A 101 to a WebSocket upgrade becomes a relay
// of the two TLS streams.

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <array>
#include <charconv>
#include <functional>

#include "config/http_rules.hpp"
#include "config/mode.hpp"
#include "proxy/data/client_conn_impl.hpp"
#include "proxy/data/credentials.hpp"
#include "proxy/data/http_head.hpp"
#include "proxy/data/mcp_flow.hpp"
#include "proxy/data/request_head.hpp"
#include "proxy/data/response_reader.hpp"
#include "proxy/data/responses.hpp"
#include "proxy/data/stream_pump.hpp"
#include "proxy/data/tls_stream.hpp"
#include "proxy/inspect/inspector.hpp"

namespace cordon::proxy::data {
namespace {

using config::deny_reason;

}  // namespace

awaitable<void> client_conn::serve_inspected(
    request_state& st, std::vector<std::uint8_t>& hello,
    const std::shared_ptr<const config::compiled_policy>& policy) {
    const config::proxy_spec& ps = policy->source().proxy;
    const config::job& j = *policy->source().find_job(job);
    const auto insp = rt_.inspection();
    tunnel_target_ = st.log.target;
    const auto give_up = [&](std::string_view reason, std::string_view message) {
        if (!message.empty()) {
            st.log.error(0, message);
        }
        error_code ignored;
        upstream_.socket().close(ignored);
        client_.socket().close(ignored);
        log_close(st, !closed_by_.empty() ? std::string_view(closed_by_) : reason);
    };
    std::string error;
    SSL* server_ssl = insp ? insp->server_session(st.target.name, error) : nullptr;
    if (server_ssl == nullptr) {
        give_up("inspect_error", insp ? error : "TLS inspection is not configured");
        co_return;
    }
    tls_stream cs(client_.socket(), server_ssl);
    cs.expires_after(ps.handshake_timeout);
    auto [hec] = co_await cs.async_handshake(tls_stream::role::server,
                                             net::buffer(hello.data(), hello.size()), use_nothrow);
    cs.expires_never();
    hello.clear();
    hello.shrink_to_fit();
    if (hec) {
        if (inspect::inspector::alpn_refused(server_ssl)) {
            give_up("alpn", inspect::inspector::handshake_error(server_ssl));
        } else {
            give_up(hec == beast::error::timeout ? "idle_timeout" : "client_tls",
                    inspect::inspector::handshake_error(server_ssl));
        }
        co_return;
    }

    // The upstream's TLS, verified before a single request goes to it.
    SSL* up_ssl = insp->upstream_session(st.target.name, error);
    if (up_ssl == nullptr) {
        give_up("inspect_error", error);
        co_return;
    }
    tls_stream us(upstream_.socket(), up_ssl);
    us.expires_after(ps.handshake_timeout);
    auto [uec] = co_await us.async_handshake(tls_stream::role::client, use_nothrow);
    us.expires_never();
    if (uec) {
        const std::string why = "upstream TLS: " + inspect::inspector::handshake_error(up_ssl);
        if (closed_by_.empty()) {
            rt_.denied(control::denial{job, session, config::to_string(deny_reason::upstream_tls),
                                       st.log.target, "https"});
            const std::string resp = deny_response(
                502, config::to_string(deny_reason::upstream_tls), job, st.log.target, why);
            cs.expires_after(ps.idle_timeout);
            co_await net::async_write(cs, net::buffer(resp), use_nothrow);
            cs.expires_never();
        }
        http_note n{"", "", 502};
        n.reason = deny_reason::upstream_tls;
        n.message = why;
        write_http_request(n);
        give_up("upstream_tls", {});
        co_return;
    }
    begin_tunnel(st);

    // The credential broker's view of this tunnel: the session's placeholders and every real
    // value the scans look for.
    std::vector<session_placeholder> mine;
    std::vector<secret_value> secrets;
    if (const inspect::credential_broker* b = insp->broker()) {
        if (!session.empty()) {
            for (const auto& [var, secret] : j.credentials) {
                mine.push_back(session_placeholder{secret, b->placeholder(session, var)});
            }
        }
        b->for_each([&secrets](std::string_view name, std::string_view value) {
            secrets.push_back(secret_value{name, value});
        });
    }

    // The secret that went out on this upstream connection, and its placeholder (views into
    // the broker and `mine`): every later answer on it is redacted.
    std::string_view sent_secret;
    std::string_view sent_placeholder;

    // Requests, one at a time, keep-alive both sides.
    beast::flat_buffer cbuf(ps.max_header_bytes + 64 * 1024);
    beast::flat_buffer& ubuf = upstream_buffer_;
    const config::target host_target{st.target.host, st.target.port, {}, st.log.target};
    std::string reason = "eof";
    for (;;) {
        http::request_parser<http::buffer_body> parser;
        cs.expires_after(ps.header_timeout);
        read_head_result rh;
        if (cbuf.size() == 0) {
            // Idle until the client speaks, holding no read buffer meanwhile.
            auto [wec] = co_await cs.async_wait_readable(use_nothrow);
            rh.error = wec;
        }
        if (!rh.error) {
            rh = co_await read_request_head(cs, cbuf, ps.max_header_bytes);
        }
        cs.expires_never();
        if (!rh.refusal.empty() || rh.too_large || (rh.error && cbuf.size() > 0)) {
            const std::string_view why = !rh.refusal.empty() ? rh.refusal
                                         : rh.too_large      ? "request header too large"
                                                             : "incomplete request";
            co_await refuse_inspected(cs, st, rh.too_large ? 431 : 400, deny_reason::bad_request,
                                      "", "", why);
            reason = "bad_request";
            break;
        }
        if (rh.error) {
            reason = rh.error == beast::error::timeout ? "idle_timeout" : "eof";
            break;
        }
        // A view into cbuf: valid until cbuf is read into again (the MCP body below is read
        // before the head is rebuilt, so there it is kept first).
        std::string_view head(static_cast<const char*>(cbuf.data().data()), rh.head_len);
        parser.header_limit(static_cast<std::uint32_t>(ps.max_header_bytes));
        parser.body_limit(boost::none);
        error_code pec;
        parser.put(net::buffer(head.data(), head.size()), pec);
        if (pec || !parser.is_header_done()) {
            co_await refuse_inspected(cs, st, 400, deny_reason::bad_request, "", "",
                                      "malformed request head");
            reason = "bad_request";
            break;
        }
        auto& req = parser.get();
        const std::string req_method(req.method_string());
        const std::string_view target(req.target().data(), req.target().size());
        if (const std::string_view refusal = request_refusal(req.base(), head); !refusal.empty()) {
            co_await refuse_inspected(cs, st, 400, deny_reason::bad_request, req_method, "",
                                      refusal);
            reason = "bad_request";
            break;
        }
        const std::size_t head_bytes = rh.head_len;
        cbuf.consume(rh.head_len);
        // Inside the tunnel a request names a path on the CONNECT host, nothing else.
        if (target.empty() || target.front() != '/') {
            co_await refuse_inspected(cs, st, 400, deny_reason::bad_request, req_method, "",
                                      "inside an inspected tunnel, requests are in origin-form "
                                      "(GET /path HTTP/1.1)");
            reason = "bad_request";
            break;
        }
        if (const auto h = req.find(http::field::host);
            h == req.end() ||
            !config::host_header_matches(std::string_view(h->value().data(), h->value().size()),
                                         host_target, 443)) {
            co_await refuse_inspected(cs, st, 400, deny_reason::bad_request, req_method, "",
                                      "the Host header does not name the CONNECT host");
            reason = "bad_request";
            break;
        }

        forward_state& f = fwd();  // released again once the exchange is over

        // Decide this request on its own, on the path in normal form.
        const config::normal_path np = config::normalise_path(target);
        const std::string audit_path =
            np.ok() ? inspected_path_for_audit(np.path, target)
                    : std::string(target.substr(0, std::min(target.find('?'), std::size_t{2048})));
        const auto now_policy = rt_.policy();
        config::decide_args args;
        args.job = job;
        args.host = host;
        args.port = port;
        args.kind = config::request_kind::inspected;
        args.method = req_method;
        args.path = np.path;
        args.path_refused = !np.ok();
        const config::moded_decision md = config::decide_with_mode(args, *now_policy);
        if (!md.effective.allowed()) {
            const bool bad_path = args.path_refused &&
                                  md.effective.reason == deny_reason::bad_request;
            co_await refuse_inspected(cs, st, bad_path ? 400 : 403, md.effective.reason, req_method,
                                      audit_path,
                                      bad_path ? std::string_view(np.error) : std::string_view());
            reason = config::to_string(md.effective.reason);
            break;
        }
        const bool has_body = parser.chunked() ||
                              (parser.content_length() && *parser.content_length() > 0);
        if (const std::string_view why = restricted_refusal(md.effective.rule, req.method(),
                                                            has_body, req.base());
            !why.empty()) {
            co_await refuse_inspected(cs, st, 400, deny_reason::bad_request, req_method, audit_path,
                                      why);
            reason = "bad_request";
            break;
        }
        if (!quota_.admit_chunk(j.limits, head_bytes)) {
            co_await refuse_inspected(cs, st, 403, deny_reason::budget, req_method, audit_path, "");
            reason = "budget";
            break;
        }
        // The credential broker: the session's placeholder becomes the real secret in the
        // header the rule names, and nothing else of the head may carry either.
        const config::credential_spec* cred = md.effective.rule != nullptr &&
                                                      md.effective.rule->credential
                                                  ? &*md.effective.rule->credential
                                                  : nullptr;
        head_verdict hv;
        if (cred != nullptr || !secrets.empty()) {
            hv = judge_head(target, head_fields(head), cred, mine, secrets);
            if (hv.reason != deny_reason::none) {
                co_await refuse_inspected(cs, st, 403, hv.reason, req_method, audit_path, hv.why);
                reason = config::to_string(hv.reason);
                break;
            }
        }
        const bool upgrade = wants_upgrade(req.base());
        // Expect: 100-continue is answered by cordon (the request is allowed), and the
        // upstream never sees the expectation, as in plain forwarding.
        field_filter filter;
        filter.drop_host = true;
        filter.keep_upgrade = upgrade;
        if (const auto e = req.find(http::field::expect); e != req.end()) {
            if (!beast::iequals(e->value(), "100-continue")) {
                co_await refuse_inspected(cs, st, 417, deny_reason::bad_request, req_method,
                                          audit_path, "only Expect: 100-continue is supported");
                reason = "bad_request";
                break;
            }
            filter.drop_expect = true;
            if (!parser.is_done()) {
                static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
                cs.expires_after(ps.idle_timeout);
                auto [cec, cn] = co_await net::async_write(cs, net::buffer(cont), use_nothrow);
                cs.expires_never();
                (void)cn;
                if (cec) {
                    reason = "client_error";
                    break;
                }
            }
        }

        // An MCP rule: the body is read whole (bounded) and decided call by call before any
        // of the request goes upstream (docs/mcp.md; mcp_flow.cpp).
        const config::egress_rule* mcp_rule = md.effective.rule != nullptr && md.effective.rule->mcp
                                                  ? md.effective.rule
                                                  : nullptr;
        std::string mcp_body;
        std::string head_kept;
        if (mcp_rule != nullptr) {
            head_kept.assign(head);
            head = head_kept;
            const inspected_mcp_request mr{*mcp_rule, j,       req_method, audit_path,
                                           has_body,  upgrade, secrets,    f.window};
            if (!co_await mcp_request_inspected(cs, cbuf, parser, st, mr, mcp_body, reason)) {
                break;
            }
        }

        // The head as it goes upstream: the normal form where request rules judged the path.
        const bool normalised = md.effective.rule != nullptr && !md.effective.rule->http.empty();
        f.out_head.clear();
        f.out_head.append(req_method);
        f.out_head.push_back(' ');
        if (normalised) {
            f.out_head.append(np.origin_form());
        } else {
            f.out_head.append(target);
        }
        f.out_head.append(" HTTP/1.1\r\nHost: ");
        f.out_head.append(st.log.target);  // host:port as the CONNECT named it
        f.out_head.append("\r\n");
        // Content-Length written from the parsed value: "5, 5" or "005" never go on as sent.
        filter.drop_content_length = true;
        append_end_to_end_lines(f.out_head, head_fields(head), filter);
        if (const auto cl = parser.content_length(); cl && !parser.chunked()) {
            f.out_head.append("Content-Length: ");
            f.out_head.append(std::to_string(*cl));
            f.out_head.append("\r\n");
        }
        if (mcp_rule != nullptr && has_body) {
            // The answer must be readable to be filtered (no compression, on the body or on
            // WebSocket frames), and the body read whole goes with its length: one pass.
            drop_fields(f.out_head, {"accept-encoding", "sec-websocket-extensions",
                                     "transfer-encoding", "content-length"});
            f.out_head.append("Accept-Encoding: identity\r\n");
        } else if (!hv.placeholder.empty() || mcp_rule != nullptr) {
            // The answer must be readable to be redacted or filtered: no compression, on the
            // body or on WebSocket frames.
            drop_fields(f.out_head, {"accept-encoding", "sec-websocket-extensions"});
            f.out_head.append("Accept-Encoding: identity\r\n");
        }
        if (mcp_rule != nullptr && has_body) {
            f.out_head.append("Content-Length: ");
            f.out_head.append(std::to_string(mcp_body.size()));
            f.out_head.append("\r\n");
        }
        if (upgrade) {
            f.out_head.append("Connection: upgrade\r\n");
        }
        f.out_head.append("\r\n");
        // What was judged on the client's bytes must hold on the bytes sent: the only
        // placeholder is the credentialed field's, and it becomes the secret there.
        if (cred != nullptr || !secrets.empty()) {
            if (const deny_reason r = splice_credential(f.out_head, cred, hv, secrets);
                r != deny_reason::none) {
                std::fill(f.out_head.begin(), f.out_head.end(), '\0');
                co_await refuse_inspected(cs, st, 403, r, req_method, audit_path,
                                          r == deny_reason::secret_leak
                                              ? "the request carries a real credential"
                                              : "a credential placeholder where no credential "
                                                "is injected (in the request as it would be "
                                                "sent)");
                reason = config::to_string(r);
                break;
            }
        }
        if (!hv.placeholder.empty()) {
            sent_secret = hv.secret_value;  // this upstream connection has seen it
            sent_placeholder = hv.placeholder;
        }
        const bool client_keep_alive = req.keep_alive();

        // What the body may not carry (placeholders, secrets), and the upload budget, per
        // chunk before it goes upstream.
        stream_scanner scan(secrets);
        deny_reason body_refusal = deny_reason::none;
        const std::function<bool(std::string_view)> admit = [&](std::string_view chunk) {
            if (const deny_reason r = scan.feed(chunk); r != deny_reason::none) {
                body_refusal = r;
                return false;
            }
            if (!quota_.admit_chunk(j.limits, chunk.size())) {
                body_refusal = deny_reason::budget;
                return false;
            }
            return true;
        };
        // Named, never a temporary in a co_await expression: GCC 12 destroys those twice
        // (GCC PR 100611; see dialer.cpp). The same for every argument below.
        const std::function<bool(std::string_view)> no_limit;
        std::string scratch;
        http::buffer_body::value_type& rbody = parser.get().body();
        pump_result up;
        if (mcp_rule != nullptr) {
            const std::array<net::const_buffer, 2> both = {net::buffer(f.out_head),
                                                           net::buffer(mcp_body)};
            us.expires_after(ps.idle_timeout);
            auto [wec, wn] = co_await net::async_write(us, both, use_nothrow);
            us.expires_never();
            up.written = wn;
            up.end = wec ? pump_end::write_error : pump_end::done;
        } else {
            up = co_await pump(cs, cbuf, parser, rbody, us, f.out_head, parser.chunked(),
                               ps.idle_timeout, admit, f.window, nullptr, scratch);
        }
        st.log.bytes_up += up.written;
        if (!sent_secret.empty()) {
            std::fill(f.out_head.begin(), f.out_head.end(), '\0');  // it held the secret
        }
        if (up.end != pump_end::done) {
            const bool refused = up.end == pump_end::refused;
            if (refused) {
                // The upstream has part of a request it must never complete: cut it.
                abort(upstream_.socket());
                co_await refuse_inspected(cs, st, 403, body_refusal, req_method, audit_path,
                                          body_refusal == deny_reason::secret_leak
                                              ? "the request body carries a real "
                                                "credential"
                                          : body_refusal == deny_reason::budget
                                              ? ""
                                              : "a credential placeholder in the request body");
                reason = config::to_string(body_refusal);
                break;
            }
            http_note n{req_method, audit_path, refused ? 403 : 0};
            n.reason = refused ? deny_reason::budget : deny_reason::none;
            n.bytes_up = up.written;
            n.message = refused ? "" : "request not forwarded whole";
            write_http_request(n);
            reason = refused ? "budget" : "error";
            break;
        }

        // The response: interim 1xx answers (but 101) go to the client as they come.
        std::optional<response_reader> rp_holder;
        error_code rec;
        for (int interim = 0;; ++interim) {
            rp_holder.emplace(f.in_head);
            rp_holder->header_limit(static_cast<std::uint32_t>(ps.max_header_bytes));
            rp_holder->body_limit(boost::none);
            if (req.method() == http::verb::head) {
                rp_holder->skip(true);
            }
            us.expires_after(ps.idle_timeout);
            rec = co_await data::read_response_head(us, ubuf, *rp_holder);
            us.expires_never();
            const unsigned code = rp_holder->status();
            if (rec || code < 100 || code >= 200 || code == 101) {
                break;
            }
            if (interim >= 8) {
                rec = http::error::bad_status;  // an upstream that never gives a final answer
                break;
            }
            f.out_head.clear();
            f.out_head.append("HTTP/1.1");
            f.out_head.append(rp_holder->status_line().substr(8));
            append_end_to_end_lines(f.out_head, rp_holder->field_lines(), field_filter{});
            f.out_head.append("\r\n");
            if (!sent_secret.empty()) {
                replace_all(f.out_head, sent_secret, sent_placeholder);
            }
            cs.expires_after(ps.idle_timeout);
            auto [wec, wn] = co_await net::async_write(cs, net::buffer(f.out_head), use_nothrow);
            cs.expires_never();
            st.log.bytes_down += wn;
            if (wec) {
                rec = wec;
                break;
            }
        }
        response_reader& rp = *rp_holder;
        if (rec) {
            http_note n{req_method, audit_path, 502};
            n.bytes_up = up.written;
            n.message = "the upstream sent no valid response";
            co_await upstream_failure(cs, n);
            reason = "upstream_error";
            break;
        }
        const bool switching = upgrade && rp.status() == 101;
        if (mcp_rule != nullptr) {
            // A JSON answer read whole and filtered, an event stream event by event; other
            // answers (no body, error pages) go on below as any answer.
            std::string_view why;
            const mcp_answer_mode mode = mcp_mode_of(rp, why);
            if (mode == mcp_answer_mode::refused) {
                http_note n{req_method, audit_path, 502};
                n.bytes_up = up.written;
                n.message = why;
                co_await upstream_failure(cs, n);
                reason = "upstream_error";
                break;
            }
            if (mode != mcp_answer_mode::pass) {
                const inspected_mcp_answer ma{*mcp_rule,        j,
                                              req_method,       audit_path,
                                              req.version(),    client_keep_alive,
                                              sent_secret,      sent_placeholder,
                                              hv.secret_name,   md.would_deny,
                                              up.written,       f.window,
                                              f.out_head,       scratch,
                                              st.log.bytes_down};
                if (!co_await mcp_answer_inspected(cs, us, ubuf, rp, mode, ma, reason)) {
                    break;
                }
                if (ubuf.size() > 0) {
                    reason = "upstream_error";  // bytes past a complete answer, as below
                    break;
                }
                fwd_.reset();
                ubuf.shrink_to_fit();
                if (cbuf.size() == 0) {
                    cbuf.shrink_to_fit();
                }
                continue;
            }
        }
        // A credentialed answer has the secret replaced by the placeholder, which changes
        // its length: a body goes out chunked (HTTP/1.0 clients: delimited by the close).
        // Every answer on an upstream connection the secret went out on is redacted.
        const bool redact = !sent_secret.empty();
        if (redact && !switching) {
            // Bytes cordon cannot read cannot be redacted: a compressed or otherwise encoded
            // answer is not passed on.
            // Every field is read: a client joins "identity" and "gzip" into "identity, gzip".
            if (!field_is_only(rp.field_lines(), "content-encoding", "identity") ||
                !field_is_only(rp.field_lines(), "transfer-encoding", "chunked")) {
                http_note n{req_method, audit_path, 502};
                n.bytes_up = up.written;
                n.message =
                    "the upstream answered a credentialed request with an encoded body "
                    "(Content-Encoding or Transfer-Encoding) cordon cannot redact: not passed on";
                n.credential = hv.secret_name;
                co_await upstream_failure(cs, n);
                reason = "upstream_error";
                break;
            }
        }
        const bool rechunk = redact && !switching && !rp.is_done() && !rp.chunked();
        // HTTP/1.0 clients get no chunked body: such answers end with the connection.
        const bool unchunk = req.version() < 11 && !rp.is_done() && (rp.chunked() || rechunk);
        const bool keep = !switching && client_keep_alive && rp.keep_alive() && !unchunk;
        std::string& out = f.out_head;
        out.clear();
        out.append(rp.status_line());
        field_filter rfilter{switching, false, false};
        rfilter.drop_content_length = rechunk;
        append_end_to_end_lines(out, rp.field_lines(), rfilter);
        if (unchunk) {
            drop_fields(out, {"transfer-encoding"});
        } else if (rechunk) {
            out.append("Transfer-Encoding: chunked\r\n");
        }
        if (const std::string_view c = response_connection(rp.version(), keep, switching);
            !c.empty()) {
            out.append("Connection: ");
            out.append(c);
            out.append("\r\n");
        }
        out.append("\r\n");
        if (redact) {
            replace_all(out, sent_secret, sent_placeholder);
        }
        stream_replacer back(sent_secret, sent_placeholder);
        const pump_result down = co_await pump(
            us, ubuf, rp, rp.body, cs, out, (rp.chunked() || rechunk) && !unchunk, ps.idle_timeout,
            no_limit, f.window, redact ? &back : nullptr, scratch);
        st.log.bytes_down += down.written;
        http_note n{req_method, audit_path, static_cast<int>(rp.status())};
        n.would_deny = md.would_deny;
        n.credential = hv.secret_name;
        n.bytes_up = up.written;
        n.bytes_down = down.written;
        n.message = down.end == pump_end::done ? "" : "response not forwarded whole";
        write_http_request(n);
        if (down.end != pump_end::done) {
            reason = "error";
            break;
        }
        if (switching) {
            // A WebSocket: the two TLS streams relayed as they are, both ways.
            using namespace net::experimental::awaitable_operators;
            // Frames cannot be rewritten: on a credentialed rule a secret coming back, or a
            // placeholder or secret going out, ends the connection instead.
            stream_scanner back_scan(secrets, false);
            const std::function<bool(std::string_view)> down_check = [&](std::string_view chunk) {
                return !redact || back_scan.feed(chunk) == deny_reason::none;
            };
            auto both = copy_stream(cs, us, cbuf, ps.idle_timeout, admit) &&
                        copy_stream(us, cs, ubuf, ps.idle_timeout, down_check);
            const auto [a, b] = co_await std::move(both);
            st.log.bytes_up += a;
            st.log.bytes_down += b;
            reason = "eof";
            break;
        }
        if (!keep) {
            break;
        }
        if (ubuf.size() > 0) {
            // Bytes past a complete answer: the upstream answered more than was asked (a
            // smuggled request?). Its next answer could be anyone's: the tunnel ends.
            reason = "upstream_error";
            break;
        }
        // Idle until the next request: no per-request buffers held meanwhile (the window
        // and heads, the upstream's read buffer; the client's unless a request is waiting).
        fwd_.reset();
        ubuf.shrink_to_fit();
        if (cbuf.size() == 0) {
            cbuf.shrink_to_fit();
        }
    }
    // close_notify to each side, bounded: a peer that does not read it cannot hold us.
    if (closed_by_.empty()) {
        cs.expires_after(std::chrono::seconds(1));
        co_await cs.async_shutdown(use_nothrow);
        us.expires_after(std::chrono::seconds(1));
        co_await us.async_shutdown(use_nothrow);
    }
    give_up(reason, {});
}

// One request inside an inspected tunnel: its http.request record. Never a query value, a
// header or a body: the path's query values are hidden (inspected_path_for_audit).
void client_conn::write_http_request(const http_note& n) {
    auto r = sink_.make("http.request");
    if (!session.empty()) {
        r.add("session", session);
    }
    if (!job.empty()) {
        r.add("job", job);
    }
    r.add("client", client_text_).add("target", tunnel_target_);
    if (!n.method.empty()) {
        r.add("method", n.method);
    }
    if (!n.path.empty()) {
        r.add("path", n.path);
    }
    if (n.status != 0) {
        r.add("status", std::int64_t{n.status});
    }
    if (n.reason != deny_reason::none) {
        r.add("reason", config::to_string(n.reason));
    }
    if (n.would_deny != deny_reason::none) {
        r.add("would_deny", config::to_string(n.would_deny));
    }
    if (!n.credential.empty()) {
        r.add_name_of_secret("credential", n.credential);  // the name, never the value
    }
    r.add("bytes_up", n.bytes_up).add("bytes_down", n.bytes_down);
    if (!n.message.empty()) {
        r.add("message", n.message);
    }
    sink_.write(std::move(r));
    using alerts::http_outcome;
    rt_.stats.job(job).count_http_request(
        n.reason != deny_reason::none           ? http_outcome::denied
        : n.would_deny != deny_reason::none     ? http_outcome::would_deny
        : n.status == 0                         ? http_outcome::error
        : n.status == 502 && !n.message.empty() ? http_outcome::error
                                                : http_outcome::allowed);
}

// The upstream gave no answer cordon can pass on: a 502 to the client (unless the connection
// was closed from outside) and the request's record, both saying why (`n.message`).
awaitable<void> client_conn::upstream_failure(tls_stream& cs, const http_note& n) {
    if (closed_by_.empty()) {
        const std::string resp = deny_response(502, "", job, tunnel_target_, n.message);
        cs.expires_after(rt_.policy()->source().proxy.idle_timeout);
        co_await net::async_write(cs, net::buffer(resp), use_nothrow);
        cs.expires_never();
    }
    write_http_request(n);
}

// A request refused inside the tunnel: the answer (403 or 400, X-Cordon-Deny and the JSON
// body) goes over the client's TLS, the denial is counted and recorded, the tunnel closes.
awaitable<void> client_conn::refuse_inspected(tls_stream& cs, request_state& st, int status,
                                              deny_reason reason, std::string_view req_method,
                                              std::string_view path, std::string_view message) {
    rt_.denied(control::denial{job, session, config::to_string(reason), st.log.target, "https"});
    http_note n{req_method, path, status};
    n.reason = reason;
    n.message = message;
    write_http_request(n);
    const std::string msg = message.empty() ? std::string(explain(reason)) : std::string(message);
    const std::string resp = deny_response(status, config::to_string(reason), job, st.log.target,
                                           msg);
    if (closed_by_.empty()) {
        cs.expires_after(rt_.policy()->source().proxy.idle_timeout);
        co_await net::async_write(cs, net::buffer(resp), use_nothrow);
        cs.expires_never();
    }
}

}  // namespace cordon::proxy::data
