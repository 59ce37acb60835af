// The proxy listener's side of a client connection, as named phases over one request:
// read_request -> authenticate -> decide -> resolve -> classify -> connect ->
// {tunnel | forward} -> log. The dialer (dialer.hpp) does resolve -> classify -> connect for
// both paths; HTTP forwarding is forward.cpp; every request's records go through one
// request_log (request_log.hpp), which writes exactly one terminal record.

#include <algorithm>
#include <optional>
#include <tuple>

#include "config/host.hpp"
#include "config/mode.hpp"
#include "config/target.hpp"
#include "dns/asio_address.hpp"
#include "proxy/audit/tool_event.hpp"
#include "proxy/data/basic_auth.hpp"
#include "proxy/data/client_conn.hpp"
#include "proxy/data/client_conn_impl.hpp"
#include "proxy/data/client_hello.hpp"
#include "proxy/data/http_head.hpp"
#include "proxy/data/parent_proxy.hpp"
#include "proxy/data/request_head.hpp"
#include "proxy/data/reserved_host.hpp"
#include "proxy/data/responses.hpp"
#include "proxy/data/ssh_ident.hpp"

namespace cordon::proxy::data {
namespace {

using config::deny_reason;
using config::request_kind;
using steady = std::chrono::steady_clock;
using dns::to_ip;

std::string endpoint_text(const tcp::endpoint& ep) {
    const auto a = ep.address();
    return a.is_v6() ? "[" + a.to_string() + "]:" + std::to_string(ep.port())
                     : a.to_string() + ":" + std::to_string(ep.port());
}

std::string_view deny_name(deny_reason r) { return config::to_string(r); }

}  // namespace

client_conn::client_conn(control::runtime& rt, control::worker& w, tcp::socket s)
    : rt_(rt),
      w_(w),
      client_(std::move(s)),
      upstream_(w.ioc),
      sink_(rt),
      resolver_(*w.resolver),
      connector_(upstream_),
      id_(rt.connections.next_id++) {
    w_.live.emplace(id_, this);
    ++rt_.connections.open;
}

client_conn::~client_conn() {
    w_.live.erase(id_);
    --rt_.connections.open;
    quota_.release_tunnel();
    end_tunnel();
}

void client_conn::close_client(std::string_view why) {
    if (closed_by_.empty()) {
        closed_by_ = why;
    }
    abort(client_.socket());
}

void client_conn::abort(tcp::socket& s) {
    if (s.is_open()) {
        error_code ignored;
        s.set_option(net::socket_base::linger(true, 0), ignored);
        s.close(ignored);
    }
}

void client_conn::relay_done(const relay_result& r) {
    tunnel_state& t = *tunnel_st_;
    t.log.bytes_up += r.bytes_up;
    t.log.bytes_down += r.bytes_down;
    t.counted_up += r.bytes_up;
    t.counted_down += r.bytes_down;
    error_code ignored;
    client_.socket().close(ignored);
    upstream_.socket().close(ignored);
    log_close(t.log, t.counted_up, t.counted_down, close_reason(r));
}

// Metrics of an allowed request once it is connected upstream: counted, and gauged as an
// active tunnel until log_close (or the connection's end). The job's series are looked up
// once here; the relay counts bytes through the same reference.
void client_conn::begin_tunnel(const request_state& st) {
    end_tunnel();
    tunnel_metrics_ = &rt_.stats.job(job);
    if (st.log.would_deny != deny_reason::none) {
        tunnel_metrics_->count_would_deny();
    } else {
        tunnel_metrics_->count_allowed();
    }
    tunnel_metrics_->tunnel_opened();
}

void client_conn::end_tunnel() {
    if (tunnel_metrics_ != nullptr) {
        tunnel_metrics_->tunnel_closed();
        tunnel_metrics_ = nullptr;
    }
}

void client_conn::log_open(request_state& st) {
    const config::egress_rule* rule = st.decision.rule;
    if (rule != nullptr && fwd_ && rule == fwd_->described_rule) {
        st.log.open(fwd_->described);
    } else {
        st.log.open(rule != nullptr ? rule->describe() : std::string());
    }
}

void client_conn::log_close(request_log& log, std::uint64_t counted_up, std::uint64_t counted_down,
                            std::string_view reason) {
    log.close(reason);
    alerts::job_metrics& m = tunnel_metrics_ != nullptr ? *tunnel_metrics_ : rt_.stats.job(job);
    m.count_bytes(true, log.bytes_up - std::min(counted_up, log.bytes_up));
    m.count_bytes(false, log.bytes_down - std::min(counted_down, log.bytes_down));
    end_tunnel();
}

// Phase: answer a denial, audit it, and close.
void client_conn::note_denial(request_state& st, int status, deny_reason reason) {
    st.log.deny(reason, status);
    rt_.denied(control::denial{job, session, deny_name(reason), st.log.target, kind_name()});
}

awaitable<void> client_conn::deny(request_state& st, int status, deny_reason reason,
                                  std::string_view message) {
    note_denial(st, status, reason);
    if (socks_) {
        // Every refusal of the policy is "not allowed by ruleset"; the record says why.
        co_await socks_answer(socks5::request_answer(socks5::reply_for(reason)));
        shutdown_client();
        co_return;
    }
    const std::string& target = st.log.target;
    const std::string msg = message.empty() ? std::string(explain(reason)) : std::string(message);
    const std::string resp = deny_response(status, deny_name(reason), job, target, msg);
    co_await net::async_write(client_.socket(), net::buffer(resp), use_nothrow);
    shutdown_client();
}

awaitable<void> client_conn::error_reply(request_state& st, int status, std::string_view message,
                                         socks5::reply socks_reply) {
    st.log.error(status, message);
    if (socks_) {
        co_await socks_answer(socks5::request_answer(socks_reply));
        shutdown_client();
        co_return;
    }
    const std::string resp = deny_response(status, "", job, st.log.target, message);
    co_await net::async_write(client_.socket(), net::buffer(resp), use_nothrow);
    shutdown_client();
}

void client_conn::shutdown_client() {
    error_code ignored;
    client_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    client_.socket().close(ignored);
}

// Phase: authenticate. Returns the deny reason, or none.
deny_reason client_conn::authenticate(const http::fields& headers) {
    const auto it = headers.find(http::field::proxy_authorization);
    if (it == headers.end()) {
        return authenticate_source();
    }
    const auto creds = parse_basic_auth(std::string_view(it->value().data(), it->value().size()));
    if (!creds) {
        return deny_reason::auth;
    }
    return authenticate_user(creds->user, creds->password);
}

deny_reason client_conn::authenticate_source() {
    // Clients from a job's `sources` belong to it without a token.
    const auto p = rt_.policy();
    for (const auto& j : p->source().jobs) {
        for (const auto& net : j.sources) {
            if (net.contains(client_ip_)) {
                job = j.name;
                return deny_reason::none;
            }
        }
    }
    return deny_reason::auth;
}

deny_reason client_conn::authenticate_user(std::string_view user, std::string_view password) {
    const control::auth_result a = rt_.sessions.authenticate(user, password);
    if (a.ok()) {
        session = std::string(user);
        token_id = a.token_id;
        job = a.job;
        return deny_reason::none;
    }
    // Valid credentials of a session that may no longer connect: name it in the denial
    // so the audit log ties the refused attempts to the session.
    if (a.status != control::auth_status::bad_credentials) {
        session = std::string(user);
        job = a.job;
    }
    switch (a.status) {
        case control::auth_status::ok: break;
        case control::auth_status::token_expired: return deny_reason::token_expired;
        case control::auth_status::token_revoked: return deny_reason::token_revoked;
        case control::auth_status::session_ended: return deny_reason::session_ended;
        case control::auth_status::session_killed: return deny_reason::session_killed;
        case control::auth_status::bad_credentials: break;
    }
    return deny_reason::auth;
}

// Phase: decide, with the job's mode: report mode lets through what only the allowlist
// denies, flagged in would_deny (config/mode.hpp); never private addresses.
void client_conn::decide_request(const config::decide_args& args, const config::compiled_policy& p,
                                 request_state& st) {
    const config::moded_decision m = config::decide_with_mode(args, p);
    st.decision = m.effective;
    st.log.would_deny = m.would_deny;
}

// Phases: resolve, classify, connect. A refusal or failure is answered and logged here;
// a close from outside (kill, revocation, reload) meanwhile ends the request quietly and
// its log says so.
awaitable<bool> client_conn::dial(request_state& st) {
    // The snapshot stays alive for the dial: the parent's spec lives in it.
    const auto policy = rt_.policy();
    const config::policy& pol = policy->source();
    // With upstream_proxy, the checked address is reached through the parent (after the
    // same decision and classify); its no_proxy ones directly.
    std::optional<parent_connector> parent;
    if (pol.upstream_proxy) {
        parent.emplace(upstream_, resolver_, *pol.upstream_proxy, st.target.name);
    }
    connector& c = parent ? static_cast<connector&>(*parent) : connector_;
    upstream_dialer d(resolver_, c, rt_.self, pol.proxy.connect_timeout);
    address.reset();
    const std::function<bool()> aborted = [this] { return !closed_by_.empty(); };
    dial_result r = co_await d.dial(st.target, st.decision, aborted);
    st.log.resolved = std::move(r.resolved);
    switch (r.status) {
        case dial_status::connected:
            address = r.address;
            st.log.ip = r.address->to_string();
            st.log.dns_ms = r.dns_ms;
            st.log.connect_ms = r.connect_ms;
            rt_.stats.observe_upstream_connect(r.connect_ms / 1000);
            co_return true;
        case dial_status::denied: co_await deny(st, 403, r.reason); co_return false;
        case dial_status::unresolved:
        case dial_status::unreachable:
            if (rt_.kill.engaged()) {
                // The network kill cancels lookups and connects in flight, and may do so
                // before it closes this connection: the failure is the kill's, not the
                // upstream's (no 502).
                co_await deny(st, 403, deny_reason::kill_switch);
                co_return false;
            }
            co_await error_reply(st, r.http_status, r.message,
                                 r.status == dial_status::unresolved || r.http_status == 504
                                     ? socks5::reply::host_unreachable
                                     : socks5::reply::connection_refused);
            co_return false;
        case dial_status::aborted: break;
    }
    co_return false;  // st.log ends it: closed from outside
}

// Phase: read_request. The head is read raw first (to see its exact bytes: obsolete line
// folding is refused, which parsers otherwise repair), then parsed.
awaitable<bool> client_conn::read_request(request_state& st, beast::flat_buffer& buffer,
                                          http::request_parser<http::buffer_body>& parser,
                                          const config::proxy_spec& ps, bool first_request) {
    // Within the header timeout (slowloris).
    client_.expires_after(ps.header_timeout);
    const read_head_result rh = co_await read_request_head(client_, buffer, ps.max_header_bytes);
    client_.expires_never();
    if (!rh.refusal.empty()) {
        // A first byte 5 is no HTTP (a control byte, refused at once): on a connection's
        // first request it is a SOCKS5 greeting, which run() serves. The HTTP path pays
        // nothing for it.
        if (first_request && buffer.size() > 0 &&
            *static_cast<const std::uint8_t*>(buffer.data().data()) == socks5::version) {
            socks_ = true;
            co_return false;
        }
        co_await deny(st, 400, deny_reason::bad_request, rh.refusal);
        co_return false;
    }
    if (rh.too_large) {
        co_await deny(st, 431, deny_reason::bad_request, "request header too large");
        co_return false;
    }
    if (rh.error) {
        if (buffer.size() > 0 && rh.error == net::error::eof) {
            co_await deny(st, 400, deny_reason::bad_request, "incomplete request");
        } else {
            st.log.dismiss();  // closed, reset or timed out before a request: nothing to answer
        }
        co_return false;
    }
    const std::string_view head(static_cast<const char*>(buffer.data().data()), rh.head_len);
    parser.header_limit(static_cast<std::uint32_t>(ps.max_header_bytes));
    parser.body_limit(boost::none);
    error_code pec;
    parser.put(net::buffer(head.data(), head.size()), pec);
    if (pec || !parser.is_header_done()) {
        const std::string msg = "malformed request head: " +
                                (pec ? pec.message() : std::string("incomplete"));
        co_await deny(st, 400, deny_reason::bad_request, msg);
        co_return false;
    }
    if (const std::string_view refusal = request_refusal(parser.get().base(), head);
        !refusal.empty()) {
        co_await deny(st, 400, deny_reason::bad_request, refusal);
        co_return false;
    }
    st.head_bytes = rh.head_len;
    buffer.consume(rh.head_len);
    co_return true;
}

// Phase: the SNI check. Reads the ClientHello (within the handshake timeout) until it names
// `want` or anything else.
awaitable<client_conn::hello_wait> client_conn::check_sni(const std::string& want,
                                                          std::vector<std::uint8_t>& hello) {
    const std::function<hello_wait(std::span<const std::uint8_t>)> judge =
        [&want](std::span<const std::uint8_t> b) {
            const sni_verdict v = data::check_sni(want, b);
            return v == sni_verdict::need_more ? hello_wait::ended
                   : v == sni_verdict::match   ? hello_wait::match
                                               : hello_wait::mismatch;
        };
    co_return co_await await_first_bytes(judge, hello);
}

// Phase: the SSH check of `protocol: ssh` rules, as the SNI check: nothing goes upstream
// before the client's identification line.
awaitable<client_conn::hello_wait> client_conn::check_ssh(std::vector<std::uint8_t>& first) {
    const std::function<hello_wait(std::span<const std::uint8_t>)> judge =
        [](std::span<const std::uint8_t> b) {
            const ssh_verdict v = check_ssh_ident(b);
            return v == ssh_verdict::need_more ? hello_wait::ended
                   : v == ssh_verdict::match   ? hello_wait::match
                                               : hello_wait::mismatch;
        };
    co_return co_await await_first_bytes(judge, first);
}

awaitable<client_conn::hello_wait> client_conn::await_first_bytes(
    const std::function<hello_wait(std::span<const std::uint8_t>)>& judge,
    std::vector<std::uint8_t>& hello) {
    const auto deadline = steady::now() + rt_.policy()->source().proxy.handshake_timeout;
    for (;;) {
        const hello_wait v = judge(hello);
        if (v != hello_wait::ended) {
            co_return v;
        }
        if (steady::now() >= deadline) {
            co_return hello_wait::timeout;
        }
        std::uint8_t chunk[4096];
        client_.expires_at(deadline);
        auto [ec, n] = co_await client_.async_read_some(net::buffer(chunk), use_nothrow);
        client_.expires_never();
        if (ec) {
            co_return ec == beast::error::timeout ? hello_wait::timeout : hello_wait::ended;
        }
        hello.insert(hello.end(), chunk, chunk + n);
    }
}

awaitable<void> client_conn::handle_connect(request_state& st, const std::string& target_text,
                                            beast::flat_buffer& buffer,
                                            std::span<const std::string> answered) {
    st.log.target = target_text;
    kind = request_kind::connect;
    const config::target_result parsed = config::parse_connect_target(target_text);
    if (!parsed.value) {
        co_await deny(st, 400, deny_reason::bad_request, parsed.error);
        co_return;
    }
    st.target = make_target(parsed.value->host, parsed.value->port, target_text);
    host = st.target.host;
    port = st.target.port;
    // cordon's own name (tool events, the inspection CA) is answered by cordon over HTTP and
    // never resolved, decided or dialled, whatever the rules say. An HTTP CONNECT to it is
    // answered 405 before this (serve_reserved); a SOCKS5 request for it ends here.
    if (audit::is_reserved_host(st.target.name)) {
        if (socks_) {
            note_denial(st, 405, deny_reason::bad_request);
            co_await socks_answer(socks5::request_answer(socks5::reply::not_allowed));
            shutdown_client();
            co_return;
        }
        co_await deny(st, 405, deny_reason::bad_request,
                      "cordon.events is served by cordon itself over HTTP: nothing to tunnel to");
        co_return;
    }

    // Phase: decide. The policy snapshot stays alive for this tunnel's whole life.
    const auto policy = rt_.policy();
    config::decide_args args;
    args.job = job;
    args.host = host;
    args.port = port;
    args.kind = request_kind::connect;
    if (!answered.empty() && st.target.literal) {
        // A SOCKS5 address cordon's resolver gave this session for a name, within its TTL:
        // decided as that name (the first the job allows), the address dialled as its answer.
        // None allowed: decided as the IP literal below, and refused with the name's reason
        // if that refuses too.
        config::decide_args nargs = args;
        config::moded_decision by_name;
        for (const std::string& name : answered) {
            if (audit::is_reserved_host(name)) {
                continue;  // never decided as cordon's own name (above)
            }
            nargs.host = name;
            by_name = config::decide_with_mode(nargs, *policy);
            if (by_name.effective.allowed()) {
                break;
            }
        }
        if (by_name.effective.allowed()) {
            const config::ip_address a = *st.target.literal;
            st.target = make_target(nargs.host, port,
                                    std::string(nargs.host) + ":" + std::to_string(port));
            st.target.literal = a;
            st.target.pinned = true;
            st.log.target = st.target.text;
            host = st.target.host;
            st.decision = by_name.effective;
            st.log.would_deny = by_name.would_deny;
        } else {
            decide_request(args, *policy, st);
            if (!st.decision.allowed()) {
                co_await deny(st, 403, by_name.effective.reason);
                co_return;
            }
        }
    } else {
        decide_request(args, *policy, st);
    }
    if (!st.decision.allowed()) {
        co_await deny(st, 403, st.decision.reason);
        co_return;
    }
    const config::job& j = *policy->source().find_job(job);
    quota_.attach(session.empty() ? nullptr : rt_.usage_for(session));
    if (!quota_.take_tunnel(j.limits)) {
        co_await deny(st, 403, deny_reason::limit);
        co_return;
    }
    if (quota_.budget_spent(j.limits)) {
        co_await deny(st, 403, deny_reason::budget);
        co_return;
    }
    if (!co_await dial(st)) {
        co_return;
    }
    static constexpr std::string_view established = "HTTP/1.1 200 Connection established\r\n\r\n";
    static const auto socks_established = socks5::request_answer(socks5::reply::succeeded);
    bool answered_ok = false;
    if (socks_) {
        answered_ok = co_await socks_answer(socks_established);
    } else {
        auto [wec, wn] = co_await net::async_write(client_.socket(), net::buffer(established),
                                                   use_nothrow);
        (void)wn;
        answered_ok = !wec;
    }
    if (!answered_ok) {
        co_return;  // never established: st.log says the client went away
    }
    log_open(st);

    // Bytes the client sent right behind the CONNECT head belong to the tunnel.
    std::vector<std::uint8_t> first(static_cast<const std::uint8_t*>(buffer.data().data()),
                                    static_cast<const std::uint8_t*>(buffer.data().data()) +
                                        buffer.size());
    buffer.consume(buffer.size());
    buffer.shrink_to_fit();  // an idle tunnel holds no read buffer

    // Phase: for tls and https rules, the ClientHello's SNI must name the CONNECT host before
    // a single byte reaches the upstream; for ssh rules, the client's first line must be
    // SSH's.
    const config::protocol proto = st.decision.rule != nullptr ? st.decision.rule->proto
                                                               : config::protocol::tcp;
    const bool inspected = proto == config::protocol::https;
    hello_wait hw = hello_wait::match;
    if (proto == config::protocol::tls || inspected) {
        hw = co_await check_sni(st.target.name, first);
    } else if (proto == config::protocol::ssh) {
        hw = co_await check_ssh(first);
    }
    if (hw == hello_wait::ended || hw == hello_wait::timeout) {
        // No ClientHello to judge: not a mismatch. A kill meanwhile is the close's reason;
        // else the client went away (or never spoke) before a byte went upstream.
        error_code ignored;
        upstream_.socket().close(ignored);
        shutdown_client();
        log_close(st, !closed_by_.empty()         ? std::string_view(closed_by_)
                      : hw == hello_wait::timeout ? std::string_view("idle_timeout")
                                                  : std::string_view("client_error"));
        co_return;
    }
    if (hw == hello_wait::mismatch) {
        const bool ssh = proto == config::protocol::ssh;
        const deny_reason why = ssh ? deny_reason::protocol : deny_reason::sni_mismatch;
        const hello_result h = ssh ? hello_result{} : parse_client_hello(first);
        rt_.denied(control::denial{job, session, deny_name(why), st.log.target, kind_name()});
        error_code ignored;
        upstream_.socket().close(ignored);
        shutdown_client();
        // The tunnel was open: its one terminal record is the conn.close.
        st.log.deny(why, 403,
                    !ssh && h.status == hello_status::ok ? std::string_view(h.sni)
                                                         : std::string_view());
        log_close(st, deny_name(why));
        co_return;
    }
    if (inspected) {
        co_await serve_inspected(st, first, policy);
        co_return;
    }
    co_await start_tunnel(st, j, first, policy);
}

// Phase: tunnel. Bytes that came with the CONNECT go first, within the budget; then the relay.
awaitable<void> client_conn::start_tunnel(
    request_state& st, const config::job& j, std::vector<std::uint8_t>& first,
    const std::shared_ptr<const config::compiled_policy>& policy) {
    const auto& ps = policy->source().proxy;
    begin_tunnel(st);  // counted allowed only now: an SNI mismatch is a denial, not both
    relay_hooks hooks;
    hooks.idle_timeout = ps.idle_timeout;
    hooks.bytes = tunnel_metrics_;
    tunnel_policy_ = policy;  // keeps `j` alive for the relay's budget checks
    hooks.allow_up = [this, &j](std::size_t n) -> std::size_t {
        return static_cast<std::size_t>(quota_.admit_up(j.limits, n));
    };
    std::string reason;
    if (!first.empty()) {
        const std::size_t pass = hooks.allow_up(first.size());
        auto [fec, fn] = co_await net::async_write(upstream_.socket(),
                                                   net::buffer(first.data(), pass), use_nothrow);
        st.log.bytes_up += fn;
        if (pass < first.size()) {
            reason = "budget";
        } else if (fec) {
            reason = "error";
        }
        first.clear();
        first.shrink_to_fit();
    }
    if (reason.empty()) {
        start_relay(std::move(st), std::move(hooks));
        co_return;
    }
    if (!closed_by_.empty()) {
        reason = closed_by_;
    }
    error_code ignored;
    client_.socket().close(ignored);
    upstream_.socket().close(ignored);
    log_close(st, reason);
}

// Hands the established tunnel to the callback relay; the caller's coroutine chain then ends
// (suspended frames would cost kilobytes per idle tunnel). The relay's pending operations
// keep this connection alive until relay_done has logged its close.
void client_conn::start_relay(request_state&& st, relay_hooks hooks) {
    tunnel_st_.emplace(std::move(st));
    // A tunnel made from an HTTP connection (a 101 upgrade, or CONNECT after forwarded
    // requests) keeps none of HTTP forwarding's state while it relays: not the 16 KiB window
    // and heads, not their pinned policy snapshot, not the upstream read buffer (nor the
    // request's target and decision: tunnel_state).
    fwd_.reset();
    upstream_buffer_.consume(upstream_buffer_.size());
    upstream_buffer_.shrink_to_fit();
    forget_upstream();
    relay_.emplace(w_, client_.socket(), upstream_.socket(), std::move(hooks));
    relay_->start(shared_from_this(), *this);
}

std::string client_conn::close_reason(const relay_result& rr) const {
    if (!closed_by_.empty()) {
        return closed_by_;
    }
    if (rr.budget) {
        return "budget";
    }
    if (rr.idle) {
        return "idle_timeout";
    }
    if (rr.error) {
        return "error";
    }
    return "eof";
}

awaitable<void> client_conn::run() {
    // Limits as of the connection's start; the snapshot keeps them alive across reloads.
    const auto snapshot = rt_.policy();
    const auto& ps = snapshot->source().proxy;
    // Bounded: a head may not exceed max_header_bytes; body chunks read at most 64 KiB.
    beast::flat_buffer buffer(ps.max_header_bytes + 64 * 1024);
    // The SOCKS5 handshake, whole, within the header timeout from the first byte's wait
    // (slowloris): a total deadline, not an idle timer.
    const auto socks_deadline = steady::now() + ps.header_timeout;
    if (socks_listener_) {
        request_state st(new_log());
        co_await serve_socks(st, buffer, socks_deadline);
        co_return;
    }
    for (bool first_request = true;; first_request = false) {
        method.clear();  // the previous request's, until this one's head is parsed
        request_state st(new_log());
        http::request_parser<http::buffer_body> parser;
        if (!co_await read_request(st, buffer, parser, ps, first_request)) {
            if (socks_) {
                co_await serve_socks(st, buffer, socks_deadline);
            }
            co_return;
        }
        const auto& req = parser.get();
        method = std::string(req.method_string());
        session.clear();
        token_id.clear();
        job.clear();
        st.log.target = std::string(req.target());

        // The network kill refuses everything, before anything else is looked at.
        if (rt_.kill.engaged()) {
            co_await deny(st, 403, deny_reason::kill_switch);
            co_return;
        }
        // Phase: authenticate. A killed session's credentials are valid but refused for
        // good: 403, not a challenge to try other credentials.
        if (const deny_reason a = authenticate(req.base()); a != deny_reason::none) {
            co_await deny(st, a == deny_reason::session_killed ? 403 : 407, a);
            co_return;
        }
        const bool is_connect = req.method() == http::verb::connect;
        if (!rt_.audit_healthy()) {
            // Not audited (the log is what failed), but counted: metrics are then the one
            // record of these refusals.
            st.log.dismiss();
            rt_.denied(control::denial{job, session, deny_name(deny_reason::audit_unavailable),
                                       st.log.target, is_connect ? "connect" : "http"});
            const std::string resp = deny_response(503, deny_name(deny_reason::audit_unavailable),
                                                   job, st.log.target,
                                                   explain(deny_reason::audit_unavailable));
            co_await net::async_write(client_.socket(), net::buffer(resp), use_nothrow);
            shutdown_client();
            co_return;
        }
        // The reserved name (tool.call events from the sandbox) is answered here, never
        // decided, resolved or forwarded (proxy/data/reserved_host.cpp).
        config::target_result forward_target;  // parsed once, here and for handle_forward
        if (!is_connect) {
            forward_target = config::parse_absolute_uri(st.log.target);
        }
        if (is_connect
                ? audit::targets_reserved_host(req.target(), true)
                : forward_target.value && audit::is_reserved_host(forward_target.value->host)) {
            st.log.dismiss();  // serve_reserved audits what it serves
            const reserved_caller who{session, job, token_id, client_text_};
            if (!co_await serve_reserved(rt_, client_, buffer, parser, who)) {
                co_return;
            }
            continue;
        }
        if (is_connect) {
            const std::string connect_target(req.target());
            co_await handle_connect(st, connect_target, buffer);
            co_return;
        }
        if (!co_await handle_forward(st, parser, buffer, forward_target)) {
            co_return;
        }
    }
}

awaitable<void> serve_client(control::runtime& rt, control::worker& w, tcp::socket socket,
                             tcp::endpoint remote, bool socks_only) {
    // Shared: an established tunnel's relay keeps the connection alive after run() ends.
    const auto c = std::make_shared<client_conn>(rt, w, std::move(socket));
    c->client_text_ = endpoint_text(remote);
    c->client_ip_ = to_ip(remote.address());
    c->socks_listener_ = socks_only;
    co_await c->run();
}

}  // namespace cordon::proxy::data
