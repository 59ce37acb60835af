// HTTP forwarding (client_conn_impl.hpp): a request in absolute-form is decided on its own,
// connected through the dialer (or over the kept-alive upstream), and passed on head then
// body, streaming, as is its response; a 101 to an Upgrade becomes a tunnel.

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <functional>
#include <optional>
#include <tuple>

#include <sys/socket.h>
#include <sys/uio.h>

#include "common/percent.hpp"
#include "config/host.hpp"
#include "config/http_rules.hpp"
#include "config/target.hpp"
#include "proxy/data/client_conn_impl.hpp"
#include "proxy/data/credentials.hpp"
#include "proxy/data/http_head.hpp"
#include "proxy/data/mcp_flow.hpp"
#include "proxy/data/response_reader.hpp"
#include "proxy/inspect/inspector.hpp"

namespace cordon::proxy::data {

namespace {

using config::deny_reason;
using config::request_kind;

enum class body_end { done, read_error, write_error, refused };

struct body_result {
    body_end end = body_end::done;
    std::uint64_t written = 0;  ///< bytes written to `to`, head and framing included
    bool head_sent = false;     ///< the head was written
};

// Writes what the socket takes now without waiting (MSG_DONTWAIT): a head and a small body
// usually go out whole, sparing an asynchronous write, its timer and a resumption. Returns
// the bytes written; sets `ec` on an error other than "would block".
template <class Buffers>
std::size_t write_now(tcp::socket& s, const Buffers& buffers, error_code& ec) {
    std::array<iovec, 8> iov{};
    std::size_t count = 0;
    for (auto it = net::buffer_sequence_begin(buffers);
         it != net::buffer_sequence_end(buffers) && count < iov.size(); ++it) {
        const net::const_buffer b(*it);
        if (b.size() > 0) {
            iov[count].iov_base = const_cast<void*>(b.data());
            iov[count].iov_len = b.size();
            ++count;
        }
    }
    if (count == 0) {
        return 0;
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = count;
    for (;;) {
        const ssize_t n = ::sendmsg(s.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0) {
            return static_cast<std::size_t>(n);
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            ec = error_code(errno, boost::system::system_category());
        }
        return 0;
    }
}

// Writes `buffers` but their first `done` bytes: write_now, then an asynchronous write
// (bounded by `idle`) for what the socket did not take. Returns the bytes it wrote.
template <class Buffers>
awaitable<std::tuple<error_code, std::size_t>> write_all(beast::tcp_stream& to,
                                                         const Buffers& buffers,
                                                         std::chrono::milliseconds idle,
                                                         std::size_t done) {
    beast::buffers_suffix<Buffers> rest(buffers);
    rest.consume(done);
    error_code ec;
    const std::size_t now = write_now(to.socket(), rest, ec);
    if (ec || now == net::buffer_size(rest)) {
        co_return std::tuple<error_code, std::size_t>{ec, now};
    }
    rest.consume(now);
    to.expires_after(idle);
    auto [wec, wn] = co_await net::async_write(to, rest, use_nothrow);
    to.expires_never();
    co_return std::tuple<error_code, std::size_t>{wec, now + wn};
}

// Forwards a message whose head the parser `p` has read: the rewritten `head`, then the
// body, read through the parser (which enforces the framing and undoes chunking) 16 KiB at
// a time and written as it came (re-chunked when `chunked`: size line, data, CRLF; the last
// chunk "0\r\n\r\n" without trailers, as Beast's serializer did). The head goes out with the
// first body bytes when they are already buffered (one write for a small message). Memory
// stays flat whatever the size. `accept_chunk`, when set, may refuse a chunk before it is
// written.
template <class Parser>
awaitable<body_result> forward_message(beast::tcp_stream& from, beast::flat_buffer& from_buffer,
                                       Parser& p, http::buffer_body::value_type& body,
                                       beast::tcp_stream& to, std::string_view head, bool chunked,
                                       std::chrono::milliseconds idle,
                                       const std::function<bool(std::size_t)>* accept_chunk,
                                       char* window) {
    body_result r;
    char* const chunk = window;  // body_window_size bytes, the connection's
    // Only the head is parsed yet, so a parser already done means a message without a body
    // (HEAD, 204, 304) whatever its Transfer-Encoding says: no chunk framing to write.
    chunked = chunked && !p.is_done();
    p.eager(true);
    if (!p.is_done() && from_buffer.size() == 0) {
        // Nothing of the body here yet: the head goes now, not when the body comes.
        const net::const_buffer head_only = net::buffer(head);
        auto [hec, hn] = co_await write_all(to, head_only, idle, 0);
        r.written += hn;
        head = {};
        r.head_sent = !hec;
        if (hec) {
            r.end = body_end::write_error;
            to.expires_never();
            co_return r;
        }
    }
    for (;;) {
        body.data = chunk;
        body.size = body_window_size;
        bool read_failed = false;
        while (!p.is_done() && body.size > 0) {
            if (from_buffer.size() > 0) {
                error_code ec;
                const std::size_t n = p.put(from_buffer.data(), ec);
                from_buffer.consume(n);
                if (ec == http::error::need_buffer) {
                    break;  // the window is full: write it out first
                }
                if (ec && ec != http::error::need_more) {
                    read_failed = true;
                    break;
                }
                if (!ec && n > 0) {
                    continue;
                }
            }
            if (body.size < body_window_size) {
                break;  // pass on what came before waiting for more
            }
            const std::size_t room = std::min<std::size_t>(64 * 1024, from_buffer.max_size() -
                                                                          from_buffer.size());
            if (room == 0) {
                read_failed = true;  // a chunk header longer than the buffer
                break;
            }
            from.expires_after(idle);
            auto [ec, n] = co_await from.async_read_some(from_buffer.prepare(room), use_nothrow);
            if (ec == net::error::eof) {
                error_code eec;
                p.put_eof(eec);  // ends a body delimited by the close; else partial_message
                read_failed = static_cast<bool>(eec);
                break;
            }
            if (ec) {
                read_failed = true;
                break;
            }
            from_buffer.commit(n);
        }
        if (read_failed) {
            r.end = body_end::read_error;
            break;
        }
        const std::size_t got = body_window_size - body.size;
        if (got > 0 && accept_chunk != nullptr && *accept_chunk && !(*accept_chunk)(got)) {
            r.end = body_end::refused;
            break;
        }
        char size_line[24];
        std::size_t size_len = 0;
        if (chunked && got > 0) {
            const auto [end, ec] = std::to_chars(size_line, size_line + 20, got, 16);
            (void)ec;
            end[0] = '\r';
            end[1] = '\n';
            size_len = static_cast<std::size_t>(end + 2 - size_line);
        }
        static constexpr std::string_view crlf = "\r\n";
        static constexpr std::string_view last_chunk = "0\r\n\r\n";
        const std::array<net::const_buffer, 5> out = {
            net::buffer(head), net::buffer(size_line, size_len), net::buffer(chunk, got),
            net::buffer(crlf.data(), size_len > 0 ? crlf.size() : 0),
            net::buffer(last_chunk.data(), chunked && p.is_done() ? last_chunk.size() : 0)};
        if (net::buffer_size(out) > 0) {
            // Written at once when the socket takes it all (the common case: no coroutine
            // frame, no timer); otherwise the rest waits, bounded by `idle`.
            error_code wec;
            std::size_t wn = write_now(to.socket(), out, wec);
            if (!wec && wn < net::buffer_size(out)) {
                auto [aec, an] = co_await write_all(to, out, idle, wn);
                wec = aec;
                wn += an;
            }
            r.written += wn;
            r.head_sent = r.head_sent || !wec || wn >= head.size();
            head = {};
            if (wec) {
                r.end = body_end::write_error;
                break;
            }
        }
        if (p.is_done()) {
            break;
        }
    }
    from.expires_never();
    to.expires_never();
    co_return r;
}
}  // namespace

// Reads the upstream's response head into `rp` (its header limit applies), within
// `idle`; the bytes after the head stay in upstream_buffer_. What Beast's
// async_read_header did, without its composed operation.
awaitable<error_code> client_conn::read_response_head(response_reader& rp,
                                                      std::chrono::milliseconds idle) {
    error_code ec;
    upstream_.expires_after(idle);
    for (;;) {
        if (upstream_buffer_.size() > 0) {
            const std::size_t n = rp.put(upstream_buffer_.data(), ec);
            upstream_buffer_.consume(n);
            if (!ec && rp.is_header_done()) {
                break;
            }
            if (ec && ec != http::error::need_more) {
                break;
            }
            ec = {};
        }
        const std::size_t room = std::min<std::size_t>(64 * 1024, upstream_buffer_.max_size() -
                                                                      upstream_buffer_.size());
        if (room == 0) {
            ec = http::error::buffer_overflow;
            break;
        }
        auto [rec, rn] = co_await upstream_.async_read_some(upstream_buffer_.prepare(room),
                                                            use_nothrow);
        if (rec) {
            ec = rec == net::error::eof && rp.got_some() ? http::error::partial_message
                 : rec == net::error::eof                ? http::error::end_of_stream
                                                         : rec;
            break;
        }
        upstream_buffer_.commit(rn);
    }
    upstream_.expires_never();
    co_return ec;
}

// A plain request's head against the credential broker: a placeholder (its prefix, in the
// method, the target as sent or percent-decoded, a field name or value) is misuse, a
// secret's bytes are a leak.
config::deny_reason client_conn::plain_head_refusal(const http::request_header<>& req,
                                                    std::string_view origin_form) const {
    constexpr std::string_view ph = "cordon-ph-";
    const std::string decoded = common::percent_decoded(origin_form);
    std::vector<std::string_view> parts{req.method_string(), origin_form, decoded};
    for (const auto& field : req) {
        parts.emplace_back(field.name_string().data(), field.name_string().size());
        parts.emplace_back(field.value().data(), field.value().size());
    }
    const auto insp = rt_.inspection();
    const inspect::credential_broker* b = insp ? insp->broker() : nullptr;
    deny_reason found = deny_reason::none;
    for (const std::string_view p : parts) {
        if (b != nullptr) {
            b->for_each([&](std::string_view, std::string_view value) {
                if (p.find(value) != std::string_view::npos) {
                    found = deny_reason::secret_leak;
                }
            });
        }
        if (found == deny_reason::none && p.find(ph) != std::string_view::npos) {
            found = deny_reason::credential_misuse;
        }
    }
    return found;
}

awaitable<bool> client_conn::handle_forward(request_state& st,
                                            http::request_parser<http::buffer_body>& parser,
                                            beast::flat_buffer& buffer,
                                            const config::target_result& parsed) {
    kind = request_kind::http;
    auto& req = parser.get();
    if (!parsed.value) {
        co_await deny(st, 400, deny_reason::bad_request, parsed.error);
        co_return false;
    }
    const config::target& t = *parsed.value;
    st.log.target = t.authority.find(':') != std::string::npos ||
                            t.host.find(':') != std::string::npos
                        ? t.authority
                        : t.authority + ":" + std::to_string(t.port);
    st.target = make_target(t.host, t.port, st.log.target);
    host = st.target.host;
    port = st.target.port;
    if (const auto h = req.find(http::field::host); h != req.end()) {
        if (!config::host_header_matches(std::string_view(h->value().data(), h->value().size()),
                                         t)) {
            co_await deny(st, 400, deny_reason::bad_request,
                          "the Host header does not match the URL");
            co_return false;
        }
    }

    // Phase: decide, for this request on its own.
    const auto policy = rt_.policy();
    config::decide_args args;
    args.job = job;
    args.host = host;
    args.port = port;
    args.kind = request_kind::http;
    args.method = method;
    // Request rules match the path in normal form; only a rule that has them looks, and
    // without any in the policy the path is not even normalised.
    config::normal_path np;
    if (policy->has_request_rules()) {
        np = config::normalise_path(t.origin_form);
    }
    args.path = np.path;
    args.path_refused = !np.ok();
    decide_request(args, *policy, st);
    // The rule that decided (or got furthest) has request rules: they judged the path.
    const bool normalised = st.decision.rule != nullptr && !st.decision.rule->http.empty();
    if (normalised) {
        // The record says on which path (never the query: its values may be secrets).
        st.log.path = np.ok() ? np.path
                              : t.origin_form.substr(
                                    0, std::min(t.origin_form.find('?'), std::size_t{2048}));
    }
    if (!st.decision.allowed()) {
        if (normalised && args.path_refused && st.decision.reason == deny_reason::bad_request) {
            co_await deny(st, 400, deny_reason::bad_request, np.error);
        } else {
            co_await deny(st, 403, st.decision.reason);
        }
        co_return false;
    }
    const bool has_body = parser.chunked() ||
                          (parser.content_length() && *parser.content_length() > 0);
    if (const std::string_view why = restricted_refusal(st.decision.rule, req.method(), has_body,
                                                        req.base());
        !why.empty()) {
        co_await deny(st, 400, deny_reason::bad_request, why);
        co_return false;
    }
    // The credential broker's placeholders are injected only inside inspected tunnels: one
    // in a plain request's head is misuse, a real secret's bytes a leak (the body is not
    // scanned here: docs/inspect.md). The target is looked at as sent and decoded.
    if (!policy->source().secrets.empty()) {
        const deny_reason r = plain_head_refusal(req, t.origin_form);
        if (r != deny_reason::none) {
            co_await deny(st, 403, r);
            co_return false;
        }
    }
    const std::string sent_target = normalised ? np.origin_form() : std::string();
    const config::job& j = *policy->source().find_job(job);
    // An MCP rule: the body read whole (bounded) and decided call by call before anything is
    // dialled (docs/mcp.md); a refused call is answered in the server's place.
    const config::egress_rule* mcp_rule = st.decision.rule != nullptr && st.decision.rule->mcp
                                              ? st.decision.rule
                                              : nullptr;
    std::string mcp_body;
    if (mcp_rule != nullptr &&
        !co_await mcp_request_plain(st, parser, buffer, *mcp_rule, j, has_body, mcp_body)) {
        co_return false;
    }
    if (!co_await connect_forward(st)) {
        co_return false;
    }
    if (!session.empty()) {
        quota_.attach(rt_.usage_for(session));
    }
    // The upload budget counts the request head too (a head can carry 16 KiB of headers,
    // and a request has no body to be refused on): a head that does not fit is refused.
    if (!quota_.admit_chunk(j.limits, st.head_bytes)) {
        co_await deny(st, 403, deny_reason::budget);
        co_return false;
    }
    // An upgrade becomes a tunnel: it takes a tunnel slot (max_tunnels) as a CONNECT does,
    // held while it relays; a refused upgrade gives it back.
    if (wants_upgrade(req.base()) && !quota_.take_tunnel(j.limits)) {
        co_await deny(st, 403, deny_reason::limit);
        co_return false;
    }
    forward_state& fs = fwd();
    if (st.decision.rule != fs.described_rule || policy != fs.described_policy) {
        // Described once per rule, not per request: keep-alive requests mostly match the
        // rule the one before matched. The snapshot held keeps the rule (and with it the
        // meaning of the pointer) alive.
        fs.described = st.decision.rule != nullptr ? st.decision.rule->describe() : std::string();
        fs.described_rule = st.decision.rule;
        fs.described_policy = policy;
    }
    log_open(st);
    begin_tunnel(st);
    const forward_exchange x{st,
                             parser,
                             buffer,
                             j,
                             policy->source().proxy,
                             t,
                             normalised ? std::string_view(sent_target) : t.origin_form,
                             mcp_rule,
                             &mcp_body};
    co_return co_await forward_request(x);
}

// Phases: resolve, classify, connect, unless this connection already holds an upstream to
// the same place (whose address is then checked against this request's decision). The
// kept-alive case, most requests, awaits nothing but a refusal.
awaitable<bool> client_conn::connect_forward(request_state& st) {
    if (st.target.port == upstream_port_ && upstream_.socket().is_open() &&
        st.target.name == upstream_name_) {
        st.log.ip = address ? address->to_string() : std::string();  // no getpeername per request
        // The kept upstream's address passed the rule of the request that connected it;
        // this request may match another rule, or come after a reload.
        const config::decision checked = check_connected(st.decision);
        if (!checked.allowed()) {
            co_await deny(st, 403, checked.reason);
            co_return false;
        }
        co_return true;
    }
    error_code ignored;
    upstream_.socket().close(ignored);
    upstream_buffer_.consume(upstream_buffer_.size());
    forget_upstream();
    if (!co_await dial(st)) {
        co_return false;
    }
    upstream_name_ = st.target.name;
    upstream_port_ = st.target.port;
    co_return true;
}

// Phase: forward the request, head then body, streaming; then its response.
awaitable<bool> client_conn::forward_request(const forward_exchange& x) {
    request_state& st = x.st;
    auto& parser = x.parser;
    auto& req = parser.get();
    beast::flat_buffer& buffer = x.buffer;
    const config::target& t = x.t;
    forward_state& fs = fwd();
    // A client that asked to be told
    // before sending its body (Expect: 100-continue) is told now: the request is allowed
    // and the upstream is connected, so cordon takes the body and the upstream never sees
    // the expectation.
    field_filter request_filter;
    request_filter.drop_host = true;
    if (const auto e = req.find(http::field::expect); e != req.end()) {
        if (!beast::iequals(e->value(), "100-continue")) {
            co_await error_reply(st, 417, "only Expect: 100-continue is supported");
            log_close(st, "error");  // opened: the conn.close follows the conn.error
            co_return false;
        }
        request_filter.drop_expect = true;
        if (!parser.is_done()) {
            static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
            auto [cec2, cn] = co_await net::async_write(client_.socket(), net::buffer(cont),
                                                        use_nothrow);
            (void)cn;
            if (cec2) {
                log_close(st, !closed_by_.empty() ? closed_by_ : "client_error");
                co_return false;
            }
        }
    }
    const bool upgrade = wants_upgrade(req.base());
    const bool client_keep_alive = req.keep_alive();
    request_filter.keep_upgrade = upgrade;
    // The head as the client sent it, with the target in origin-form, HTTP/1.1, the
    // hop-by-hop fields cut out and Host from the URL; built in a buffer the connection
    // reuses.
    std::string& out = fs.out_head;
    out.clear();
    out.append(req.method_string().data(), req.method_string().size());
    out.push_back(' ');
    out.append(x.origin_form);
    out.append(" HTTP/1.1\r\n");
    append_end_to_end_fields(
        out,
        [&req](auto&& fn) {
            for (const auto& f : req.base()) {
                fn(std::string_view(f.name_string().data(), f.name_string().size()),
                   std::string_view(f.value().data(), f.value().size()));
            }
        },
        request_filter);
    if (upgrade) {
        out.append("Connection: upgrade\r\n");
    }
    if (x.mcp_rule != nullptr) {
        // Answers cordon filters must be readable; the body read whole goes with its length.
        drop_fields(out, {"accept-encoding", "transfer-encoding", "content-length"});
        out.append("Accept-Encoding: identity\r\n");
        if (!x.mcp_body->empty() || parser.content_length()) {
            out.append("Content-Length: ");
            out.append(std::to_string(x.mcp_body->size()));
            out.append("\r\n");
        }
    }
    out.append("Host: ");
    out.append(t.authority);
    out.append("\r\n\r\n");
    if (x.mcp_rule != nullptr) {
        const std::array<net::const_buffer, 2> both = {net::buffer(out), net::buffer(*x.mcp_body)};
        upstream_.expires_after(x.ps.idle_timeout);
        auto [wec, wn] = co_await net::async_write(upstream_, both, use_nothrow);
        upstream_.expires_never();
        st.log.bytes_up += wn;
        if (wec) {
            if (closed_by_.empty()) {
                co_await error_reply(st, 502, "the upstream closed the connection");
            }
            log_close(st, !closed_by_.empty() ? closed_by_ : "upstream_error");
            co_return false;
        }
        co_return co_await forward_response(x, false, client_keep_alive);
    }
    {
        std::string reason;
        // The upload budget is checked per chunk, before the chunk goes upstream.
        const std::function<bool(std::size_t)> within_budget = [&](std::size_t got) {
            return quota_.admit_chunk(x.j.limits, got);
        };
        const std::string_view request_head = out;
        const body_result b = co_await forward_message(
            client_, buffer, parser, req.body(), upstream_, request_head, parser.chunked(),
            x.ps.idle_timeout, &within_budget, fs.window);
        st.log.bytes_up += b.written;
        if (b.end != body_end::done) {
            reason = b.end == body_end::refused       ? "budget"
                     : b.end == body_end::write_error ? "upstream_error"
                     : !closed_by_.empty()            ? closed_by_
                                                      : "client_error";
            if (!b.head_sent && b.end == body_end::write_error) {
                reason = "error";  // the head could not be written: nothing to answer
            } else if (closed_by_.empty() && reason == "upstream_error") {
                co_await error_reply(st, 502, "the upstream closed the connection");
            }
            log_close(st, reason);
            co_return false;
        }
    }
    co_return co_await forward_response(x, upgrade, client_keep_alive);
}

// Phase: forward the response, head then body, streaming; a 101 to an upgrade becomes a
// tunnel. True when the connection may carry another request.
awaitable<bool> client_conn::forward_response(const forward_exchange& x, bool upgrade,
                                              bool client_keep_alive) {
    request_state& st = x.st;
    beast::flat_buffer& buffer = x.buffer;
    forward_state& fs = fwd();
    std::string& out = fs.out_head;
    std::string reason;
    std::optional<response_reader> rp_holder;
    error_code rhec;
    // Interim 1xx answers (but 101) go to the client as they come; then the final one.
    for (int interim = 0;; ++interim) {
        rp_holder.emplace(fs.in_head);
        rp_holder->header_limit(static_cast<std::uint32_t>(x.ps.max_header_bytes));
        rp_holder->body_limit(boost::none);
        if (method == "HEAD") {
            rp_holder->skip(true);
        }
        rhec = co_await read_response_head(*rp_holder, x.ps.idle_timeout);
        const unsigned code = rp_holder->status();
        if (rhec || code < 100 || code >= 200 || code == 101) {
            break;
        }
        if (interim >= 8) {
            rhec = http::error::bad_status;  // an upstream that never gives a final answer
            break;
        }
        out.clear();
        out.append("HTTP/1.1");  // as before: an interim answer goes out as HTTP/1.1
        out.append(rp_holder->status_line().substr(8));
        append_end_to_end_lines(out, rp_holder->field_lines(), field_filter{});
        out.append("\r\n");
        const net::const_buffer interim_head = net::buffer(out);
        auto [wec, wn] = co_await write_all(client_, interim_head, x.ps.idle_timeout, 0);
        st.log.bytes_down += wn;
        if (wec) {
            rhec = wec;
            break;
        }
    }
    auto& rp = *rp_holder;
    if (rhec) {
        if (closed_by_.empty()) {
            const bool timeout = rhec == beast::error::timeout;
            co_await error_reply(st, timeout ? 504 : 502,
                                 timeout ? "the upstream did not answer in time"
                                         : "the upstream sent no valid response");
        }
        log_close(st, !closed_by_.empty() ? closed_by_ : "upstream_error");
        co_return false;
    }
    const bool switching = upgrade && rp.status() == 101;
    if (!switching) {
        // A slot taken for an upgrade the upstream refused comes back before the client
        // reads the answer: its next request may want it at once.
        quota_.release_tunnel();
    }
    if (x.mcp_rule != nullptr) {
        std::string_view why;
        const mcp_answer_mode mode = mcp_mode_of(rp, why);
        if (mode == mcp_answer_mode::refused) {
            if (closed_by_.empty()) {
                co_await error_reply(st, 502, why);
            }
            log_close(st, !closed_by_.empty() ? closed_by_ : "upstream_error");
            co_return false;
        }
        if (mode != mcp_answer_mode::pass) {
            co_return co_await forward_mcp_response(x, rp, mode, client_keep_alive);
        }
    }
    const bool keep = !switching && client_keep_alive && rp.keep_alive();
    out.clear();
    out.append(rp.status_line());
    field_filter response_filter;
    response_filter.keep_upgrade = switching;
    append_end_to_end_lines(out, rp.field_lines(), response_filter);
    if (const std::string_view c = response_connection(rp.version(), keep, switching); !c.empty()) {
        out.append("Connection: ");
        out.append(c);
        out.append("\r\n");
    }
    out.append("\r\n");
    if (switching) {
        const net::const_buffer switching_head = net::buffer(out);
        auto [hec, hn] = co_await write_all(client_, switching_head, x.ps.idle_timeout, 0);
        st.log.bytes_down += hn;
        if (hec) {
            log_close(st, !closed_by_.empty() ? closed_by_ : "client_error");
            co_return false;
        }
    } else {
        const std::string_view response_head = out;
        const body_result b = co_await forward_message(upstream_, upstream_buffer_, rp, rp.body,
                                                       client_, response_head, rp.chunked(),
                                                       x.ps.idle_timeout, nullptr, fs.window);
        st.log.bytes_down += b.written;
        if (b.end != body_end::done) {
            reason = b.end == body_end::write_error ? "client_error"
                     : !closed_by_.empty()          ? closed_by_
                                                    : "upstream_error";
            log_close(st, reason);
            co_return false;
        }
    }
    if (switching) {
        // The upgraded connection becomes a tunnel, within the upload budget as a CONNECT
        // tunnel is; bytes already buffered on either side go first.
        relay_hooks hooks;
        hooks.idle_timeout = x.ps.idle_timeout;
        hooks.bytes = tunnel_metrics_;
        hooks.allow_up = [this, limits = x.j.limits](std::size_t n) -> std::size_t {
            return static_cast<std::size_t>(quota_.admit_up(limits, n));
        };
        if (buffer.size() > 0) {
            const std::size_t pass = hooks.allow_up(buffer.size());
            auto [e, n] = co_await net::async_write(
                upstream_.socket(), net::buffer(buffer.data().data(), pass), use_nothrow);
            st.log.bytes_up += n;
            const bool over = pass < buffer.size();
            buffer.consume(buffer.size());
            if (over || e) {
                error_code ignored;
                client_.socket().close(ignored);
                upstream_.socket().close(ignored);
                log_close(st, !closed_by_.empty() ? std::string_view(closed_by_)
                              : over              ? std::string_view("budget")
                                                  : std::string_view("upstream_error"));
                co_return false;
            }
        }
        if (upstream_buffer_.size() > 0) {
            auto [e, n] = co_await net::async_write(client_.socket(), upstream_buffer_.data(),
                                                    use_nothrow);
            st.log.bytes_down += n;
            upstream_buffer_.consume(upstream_buffer_.size());
        }
        start_relay(std::move(st), std::move(hooks));
        co_return false;
    }
    if (!keep) {
        error_code ignored;
        upstream_.socket().close(ignored);
        forget_upstream();
        address.reset();
    }
    log_close(st, keep ? "done" : "eof");
    co_return keep&& closed_by_.empty();
}

}  // namespace cordon::proxy::data
