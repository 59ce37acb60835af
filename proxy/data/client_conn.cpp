// The proxy listener's side of a client connection, as named phases over one request:
// read_request -> authenticate -> decide -> resolve -> classify -> connect ->
// {tunnel | forward} -> log. `log` runs exactly once per request, allowed or not.

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <optional>
#include <tuple>

#include <sys/socket.h>
#include <sys/uio.h>

#include "config/classify.hpp"
#include "config/host.hpp"
#include "config/mode.hpp"
#include "dns/asio_address.hpp"
#include "proxy/data/basic_auth.hpp"
#include "proxy/data/client_hello.hpp"
#include "proxy/data/http_head.hpp"
#include "proxy/data/relay.hpp"
#include "proxy/data/reserved_host.hpp"
#include "proxy/data/responses.hpp"
#include "proxy/data/client_conn.hpp"
#include "proxy/control/runtime.hpp"
#include "config/target.hpp"
#include "proxy/audit/tool_event.hpp"

namespace cordon::proxy::data {
namespace {

using namespace net::experimental::awaitable_operators;
using config::deny_reason;
using config::request_kind;
using steady = std::chrono::steady_clock;
using dns::to_asio;
using dns::to_ip;

std::string endpoint_text(const tcp::endpoint& ep) {
    const auto a = ep.address();
    return a.is_v6() ? "[" + a.to_string() + "]:" + std::to_string(ep.port())
                     : a.to_string() + ":" + std::to_string(ep.port());
}

std::string_view deny_name(deny_reason r) { return config::to_string(r); }

bool wants_upgrade(const http::fields& f) {
    if (f.find(http::field::upgrade) == f.end()) {
        return false;
    }
    for (const auto& token : http::token_list(f[http::field::connection])) {
        if (beast::iequals(token, "upgrade")) {
            return true;
        }
    }
    return false;
}

enum class body_end { done, read_error, write_error, refused };

struct body_result {
    body_end end = body_end::done;
    std::uint64_t written = 0;  ///< bytes written to `to`, head and framing included
    bool head_sent = false;     ///< the head was written
};

// A response parser that keeps only what forwarding needs: the status line and the fields
// as "name: value\r\n" lines in a buffer the connection reuses (so no allocation per field
// or per response once it has grown), and the body through a caller's window, like
// http::buffer_body. Framing (Content-Length, chunked, to EOF), limits and the syntax checks
// are Beast's basic_parser's, as with http::response_parser.
class response_reader final : public http::basic_parser<false> {
public:
    explicit response_reader(std::string& head) : head_(head) { head_.clear(); }

    http::buffer_body::value_type body;  ///< where the body goes; data and size advance
    unsigned status() const noexcept { return status_; }
    unsigned version() const noexcept { return version_; }
    /// The status line, CRLF included.
    std::string_view status_line() const noexcept {
        return std::string_view(head_).substr(0, status_len_);
    }
    /// The fields, each "name: value\r\n".
    std::string_view field_lines() const noexcept {
        return std::string_view(head_).substr(status_len_);
    }

private:
    void on_request_impl(http::verb, beast::string_view, beast::string_view, int,
                         error_code& ec) override {
        ec = http::error::bad_method;  // never called for a response parser
    }
    void on_response_impl(int code, beast::string_view reason, int version,
                          error_code&) override {
        status_ = static_cast<unsigned>(code);
        version_ = static_cast<unsigned>(version);
        char digits[16];
        const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, code);
        (void)ec;
        head_.append(version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ");
        head_.append(digits, end);
        head_.push_back(' ');
        head_.append(reason.data(), reason.size());
        head_.append("\r\n");
        status_len_ = head_.size();
    }
    void on_field_impl(http::field, beast::string_view name, beast::string_view value,
                       error_code&) override {
        head_.append(name.data(), name.size());
        head_.append(": ");
        head_.append(value.data(), value.size());
        head_.append("\r\n");
    }
    void on_header_impl(error_code&) override {}
    void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
    std::size_t on_body_impl(beast::string_view s, error_code& ec) override {
        return take(s, ec);
    }
    void on_chunk_header_impl(std::uint64_t, beast::string_view, error_code&) override {}
    std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view s,
                                   error_code& ec) override {
        return take(s, ec);
    }
    void on_finish_impl(error_code&) override {}

    std::size_t take(beast::string_view s, error_code& ec) {
        if (body.data == nullptr) {
            ec = http::error::need_buffer;
            return 0;
        }
        const std::size_t n = std::min(s.size(), body.size);
        std::memcpy(body.data, s.data(), n);
        body.data = static_cast<char*>(body.data) + n;
        body.size -= n;
        if (n < s.size()) {
            ec = http::error::need_buffer;
        }
        return n;
    }

    std::string& head_;
    std::size_t status_len_ = 0;
    unsigned status_ = 0;
    unsigned version_ = 11;
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
constexpr std::size_t body_window_size = 16 * 1024;

template <class Parser>
awaitable<body_result> forward_message(beast::tcp_stream& from, beast::flat_buffer& from_buffer,
                                       Parser& p, http::buffer_body::value_type& body,
                                       beast::tcp_stream& to, std::string_view head,
                                       bool chunked, std::chrono::milliseconds idle,
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
            const std::size_t room = std::min<std::size_t>(
                64 * 1024, from_buffer.max_size() - from_buffer.size());
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
            net::buffer(head),
            net::buffer(size_line, size_len),
            net::buffer(chunk, got),
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

// The state of one client connection, visible to kills, revocations and reloads.
class client_conn final : public control::live_connection,
                          public relay_owner,
                          public std::enable_shared_from_this<client_conn> {
public:
    client_conn(control::runtime& rt, control::worker& w, tcp::socket s)
        : rt_(rt), w_(w), client_(std::move(s)), upstream_(w.ioc), id_(rt.connections.next_id++) {
        w_.live.emplace(id_, this);
        ++rt_.connections.open;
    }
    ~client_conn() override {
        w_.live.erase(id_);
        --rt_.connections.open;
        release_tunnel_slot();
        end_tunnel();
    }
    client_conn(const client_conn&) = delete;
    client_conn& operator=(const client_conn&) = delete;

    void close_client(std::string_view why) override {
        if (closed_by_.empty()) {
            closed_by_ = why;
        }
        abort(client_.socket());
    }
    void close_upstream() override { abort(upstream_.socket()); }

    // Abortive close (RST): a graceful close would let the kernel go on delivering what is
    // already queued, megabytes to an upstream after a kill returned, and keep a socket to a
    // client that never reads. Linger 0 discards it at once.
    static void abort(tcp::socket& s) {
        if (s.is_open()) {
            error_code ignored;
            s.set_option(net::socket_base::linger(true, 0), ignored);
            s.close(ignored);
        }
    }

    awaitable<void> run();

    // The tunnel has ended: account, close, log.
    void relay_done(const relay_result& r) override {
        request_state& st = tunnel_st_;
        st.bytes_up += r.bytes_up;
        st.bytes_down += r.bytes_down;
        st.counted_up += r.bytes_up;
        st.counted_down += r.bytes_down;
        error_code ignored;
        client_.socket().close(ignored);
        upstream_.socket().close(ignored);
        log_close(st, close_reason(r));
    }

private:
    struct request_state {
        std::string target_text;  // "host:port" for logs and bodies
        steady::time_point start = steady::now();
        config::decision decision;
        deny_reason would_deny = deny_reason::none;  // report mode let it through (mode.hpp)
        std::string ip;
        std::uint64_t bytes_up = 0;
        std::uint64_t bytes_down = 0;
        double dns_ms = 0;
        double connect_ms = 0;
        bool opened = false;
        std::uint64_t counted_up = 0;  // bytes the relay already counted in the metrics
        std::uint64_t counted_down = 0;
    };

    // Metrics of an allowed request once it is connected upstream: counted, and gauged as
    // an active tunnel until log_close (or the connection's end). The job's series are
    // looked up once here; the relay counts bytes through the same reference.
    void begin_tunnel(const request_state& st) {
        end_tunnel();
        tunnel_metrics_ = &rt_.stats.job(job);
        if (st.would_deny != deny_reason::none) {
            tunnel_metrics_->count_would_deny();
        } else {
            tunnel_metrics_->count_allowed();
        }
        tunnel_metrics_->tunnel_opened();
    }
    void end_tunnel() {
        if (tunnel_metrics_ != nullptr) {
            tunnel_metrics_->tunnel_closed();
            tunnel_metrics_ = nullptr;
        }
    }

    // `resolved`: the addresses the request's name resolved to (resolve()), once; nothing
    // for an IP literal or a kept-alive upstream (no resolution).
    void add_resolved(audit::audit_record& r) {
        if (!resolved_.empty()) {
            r.add("resolved", resolved_);
            std::string().swap(resolved_);
        }
    }

    // Phase: answer a denial, audit it, and close.
    awaitable<void> deny(int status, deny_reason reason, std::string_view target,
                         std::string_view message = {}) {
        auto r = rt_.record("conn.deny");
        add_identity(r);
        r.add("reason", deny_name(reason)).add("target", target).add("status",
                                                                    std::int64_t{status});
        if (!method.empty()) {
            r.add("method", method);  // CONNECT or the HTTP method: `policy replay` re-decides
        }
        if (reason == deny_reason::private_address) {
            add_resolved(r);
        }
        rt_.audit(std::move(r));
        rt_.denied(control::denial{job, session, deny_name(reason), target, kind_name()});
        const std::string msg = message.empty() ? std::string(explain(reason)) : std::string(message);
        const std::string resp = deny_response(status, deny_name(reason), job, target, msg);
        co_await net::async_write(client_.socket(), net::buffer(resp), use_nothrow);
        shutdown_client();
    }

    awaitable<void> error_reply(int status, std::string_view target, std::string_view message) {
        std::string().swap(resolved_);  // not audited here: never carried to a later record
        auto r = rt_.record("conn.error");
        add_identity(r);
        r.add("target", target).add("status", std::int64_t{status}).add("message", message);
        rt_.audit(std::move(r));
        const std::string resp = deny_response(status, "", job, target, message);
        co_await net::async_write(client_.socket(), net::buffer(resp), use_nothrow);
        shutdown_client();
    }

    std::string_view kind_name() const {
        return kind == request_kind::connect ? "connect" : "http";
    }

    void shutdown_client() {
        error_code ignored;
        client_.socket().shutdown(tcp::socket::shutdown_send, ignored);
        client_.socket().close(ignored);
    }

    void add_identity(audit::audit_record& r) const {
        if (!session.empty()) {
            r.add("session", session);
        }
        if (!job.empty()) {
            r.add("job", job);
        }
        r.add("client", client_text_);
    }

    // Phase: authenticate. Returns the deny reason, or none.
    deny_reason authenticate(const http::fields& headers) {
        const auto it = headers.find(http::field::proxy_authorization);
        if (it == headers.end()) {
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
        const auto creds = parse_basic_auth(std::string_view(it->value().data(),
                                                             it->value().size()));
        if (!creds) {
            return deny_reason::auth;
        }
        const control::auth_result a = rt_.sessions.authenticate(creds->user, creds->password);
        if (a.ok()) {
            session = creds->user;
            token_id = a.token_id;
            job = a.job;
            return deny_reason::none;
        }
        // Valid credentials of a session that may no longer connect: name it in the denial
        // so the audit log ties the refused attempts to the session.
        if (a.status != control::auth_status::bad_credentials) {
            session = creds->user;
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
    // denies, flagged in st.would_deny (config/mode.hpp); never private addresses.
    static void decide_request(const config::decide_args& args, const config::compiled_policy& p,
                               request_state& st) {
        const config::moded_decision m = config::decide_with_mode(args, p);
        st.decision = m.effective;
        st.would_deny = m.would_deny;
    }

    // Phase: resolve + classify. Fills `addresses`; returns a deny reason or none, or
    // sets `resolve_error` for an upstream DNS failure.
    awaitable<deny_reason> resolve(std::string_view name, std::uint16_t to_port,
                                   request_state& st,
                                   std::vector<config::ip_address>& addresses,
                                   std::string& resolve_error) {
        const config::literal lit = config::parse_literal(name);
        const auto t0 = steady::now();
        resolved_.clear();
        if (lit.kind == config::literal_kind::ipv4 || lit.kind == config::literal_kind::ipv6) {
            addresses = {lit.address};
        } else {
            const config::host_result norm = config::normalise_host(name);
            auto result = co_await async_resolve(norm.value);
            if (!result.error.empty()) {
                resolve_error = result.error;
                co_return deny_reason::none;
            }
            addresses = std::move(result.addresses);
            // Every address serve checks, for the audit record: `policy suggest` learns them
            // all and `policy replay` checks them all, as this check does.
            for (const auto& a : addresses) {
                resolved_ += (resolved_.empty() ? "" : " ") + a.to_string();
            }
            const config::decision checked =
                config::check_addresses(st.decision, addresses);
            if (!checked.allowed()) {
                co_return checked.reason;
            }
        }
        st.dns_ms = std::chrono::duration<double, std::milli>(steady::now() - t0).count();
        for (const auto& a : addresses) {
            if (rt_.self.is_self(a, to_port)) {
                co_return deny_reason::private_address;  // never connect to ourselves
            }
        }
        co_return deny_reason::none;
    }

    awaitable<dns::resolve_result> async_resolve(const std::string& name) {
        // Named, not a temporary: GCC 12 destroys non-trivial temporaries of a co_await
        // full-expression twice (GCC PR 100611), so no coroutine here passes one.
        auto initiation = [this, &name](auto handler) {
            auto shared = std::make_shared<decltype(handler)>(std::move(handler));
            w_.resolver->async_resolve(name, [shared](dns::resolve_result r) {
                auto ex = net::get_associated_executor(*shared);
                net::dispatch(ex, [shared, r = std::move(r)]() mutable {
                    (*shared)(std::move(r));
                });
            });
        };
        co_return co_await net::async_initiate<const net::use_awaitable_t<>&,
                                               void(dns::resolve_result)>(initiation,
                                                                          net::use_awaitable);
    }

    // Phase: connect, trying each checked address in turn within the connect timeout.
    awaitable<error_code> connect(const std::vector<config::ip_address>& addresses,
                                  std::uint16_t to_port, request_state& st) {
        const auto timeout = rt_.policy()->source().proxy.connect_timeout;
        error_code last = net::error::host_not_found;
        const auto t0 = steady::now();
        address.reset();
        for (const auto& a : addresses) {
            if (!closed_by_.empty()) {
                co_return net::error::operation_aborted;  // killed while resolving
            }
            error_code ignored;
            upstream_.socket().close(ignored);
            upstream_.expires_after(timeout);
            auto [ec] = co_await upstream_.async_connect(tcp::endpoint(to_asio(a), to_port),
                                                         use_nothrow);
            upstream_.expires_never();
            if (!ec && !closed_by_.empty()) {
                break;  // killed while connecting: never use this upstream
            }
            if (!ec) {
                address = a;
                st.ip = a.to_string();
                st.connect_ms =
                    std::chrono::duration<double, std::milli>(steady::now() - t0).count();
                rt_.stats.observe_upstream_connect(st.connect_ms / 1000);
                upstream_.socket().set_option(tcp::no_delay(true), ignored);
                co_return error_code{};
            }
            last = ec;
            if (!closed_by_.empty()) {
                break;
            }
        }
        co_return last;
    }

    bool take_tunnel_slot(const config::job& j) {
        if (session.empty()) {
            return true;
        }
        usage_ = rt_.usage_for(session);
        if (j.limits.max_tunnels &&
            usage_->tunnels.load() >= static_cast<std::int64_t>(*j.limits.max_tunnels)) {
            return false;
        }
        ++usage_->tunnels;
        holds_slot_ = true;
        return true;
    }
    void release_tunnel_slot() {
        if (holds_slot_ && usage_) {
            --usage_->tunnels;
            holds_slot_ = false;
        }
    }

    // Bytes a session may still send up; nullopt when unlimited.
    std::optional<std::uint64_t> budget_left(const config::job& j) const {
        if (!j.limits.max_bytes_up || !usage_) {
            return std::nullopt;
        }
        const std::uint64_t used = usage_->bytes_up.load();
        return used >= *j.limits.max_bytes_up ? 0 : *j.limits.max_bytes_up - used;
    }

    void log_open(const request_state& st) {
        auto r = rt_.record("conn.open");
        add_identity(r);
        r.add("target", st.target_text).add("ip", st.ip).add("method", method);
        add_resolved(r);
        if (st.decision.rule != nullptr && fwd_ && st.decision.rule == fwd_->described_rule) {
            r.add("rule", fwd_->described);
        } else if (st.decision.rule != nullptr) {
            r.add("rule", st.decision.rule->describe());
        }
        if (st.would_deny != deny_reason::none) {
            r.add("would_deny", deny_name(st.would_deny));
        }
        r.add("dns_ms", st.dns_ms).add("connect_ms", st.connect_ms);
        rt_.audit(std::move(r));
    }

    void log_close(const request_state& st, std::string_view reason) {
        auto r = rt_.record("conn.close");
        add_identity(r);
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() -
                                                                              st.start);
        r.add("target", st.target_text)
            .add("method", method)
            .add("ip", st.ip)
            .add("bytes_up", st.bytes_up)
            .add("bytes_down", st.bytes_down)
            .add("duration_ms", static_cast<std::int64_t>(ms.count()))
            .add("reason", reason);
        rt_.audit(std::move(r));
        alerts::job_metrics& m = tunnel_metrics_ != nullptr ? *tunnel_metrics_ : rt_.stats.job(job);
        m.count_bytes(true, st.bytes_up - std::min(st.counted_up, st.bytes_up));
        m.count_bytes(false, st.bytes_down - std::min(st.counted_down, st.bytes_down));
        end_tunnel();
    }

    // Hands the established tunnel to the callback relay; the caller's coroutine chain then
    // ends (suspended frames would cost kilobytes per idle tunnel). The relay's pending
    // operations keep this connection alive until relay_done has logged its close.
    void start_relay(request_state&& st, relay_hooks hooks) {
        tunnel_st_ = std::move(st);
        // A tunnel made from an HTTP connection (a 101 upgrade, or CONNECT after forwarded
        // requests) keeps none of HTTP forwarding's state while it relays: not the 16 KiB
        // window and heads, not their pinned policy snapshot, not the upstream read buffer.
        // The rule pointer may belong to that snapshot and is not used from here on.
        tunnel_st_.decision.rule = nullptr;
        fwd_.reset();
        upstream_buffer_.consume(upstream_buffer_.size());
        upstream_buffer_.shrink_to_fit();
        upstream_key_.clear();
        relay_.emplace(w_, client_.socket(), upstream_.socket(), std::move(hooks));
        relay_->start(shared_from_this(), *this);
    }

    std::string close_reason(const relay_result& rr) const {
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

    struct read_head_result {
        std::size_t head_len = 0;
        bool too_large = false;
        std::string_view refusal;  ///< not HTTP (head_prefix_refusal): answered at once
        error_code error;
    };

    // Reads until the blank line that ends a request head, within `limit` bytes and the
    // header timeout (slowloris). Bytes after the head stay in `buffer`.
    awaitable<read_head_result> read_head(beast::flat_buffer& buffer, std::size_t limit,
                                          std::chrono::milliseconds timeout) {
        read_head_result r;
        std::size_t searched = 0;
        std::size_t checked = 0;
        client_.expires_after(timeout);
        for (;;) {
            const std::string_view have(static_cast<const char*>(buffer.data().data()),
                                        buffer.size());
            const auto end = have.find("\r\n\r\n", searched);
            // Only the head's own bytes: a body (or a ClientHello after CONNECT) may follow.
            const std::size_t head_end = end != std::string_view::npos ? end + 4 : have.size();
            r.refusal = head_prefix_refusal(have.substr(0, head_end), checked);
            checked = head_end;
            if (!r.refusal.empty()) {
                break;
            }
            if (end != std::string_view::npos) {
                r.head_len = end + 4;
                r.too_large = r.head_len > limit;
                break;
            }
            if (have.size() >= limit) {
                r.too_large = true;
                break;
            }
            searched = have.size() >= 3 ? have.size() - 3 : 0;
            auto [ec, n] = co_await client_.async_read_some(
                buffer.prepare(std::min<std::size_t>(limit - have.size() + 4, 16 * 1024)),
                use_nothrow);
            if (ec) {
                r.error = ec;
                break;
            }
            buffer.commit(n);
        }
        client_.expires_never();
        co_return r;
    }

    // Reads the upstream's response head into `rp` (its header limit applies), within
    // `idle`; the bytes after the head stay in upstream_buffer_. What Beast's
    // async_read_header did, without its composed operation.
    awaitable<error_code> read_response_head(response_reader& rp, std::chrono::milliseconds idle) {
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
            const std::size_t room = std::min<std::size_t>(
                64 * 1024, upstream_buffer_.max_size() - upstream_buffer_.size());
            if (room == 0) {
                ec = http::error::buffer_overflow;
                break;
            }
            auto [rec, rn] =
                co_await upstream_.async_read_some(upstream_buffer_.prepare(room), use_nothrow);
            if (rec) {
                ec = rec == net::error::eof && rp.got_some() ? http::error::partial_message
                     : rec == net::error::eof               ? http::error::end_of_stream
                                                            : rec;
                break;
            }
            upstream_buffer_.commit(rn);
        }
        upstream_.expires_never();
        co_return ec;
    }

    awaitable<void> handle_connect(const std::string& target_text, beast::flat_buffer& buffer);
    awaitable<bool> check_sni(const std::string& want, std::vector<std::uint8_t>& hello);
    // `parsed` is the request's target, parsed (or refused) once by run(); it lives in
    // run()'s frame for the whole call.
    awaitable<bool> handle_forward(http::request_parser<http::buffer_body>& parser,
                                   beast::flat_buffer& buffer, const config::target_result& parsed);

public:
    std::string client_text_;
    config::ip_address client_ip_;

private:
    control::runtime& rt_;
    control::worker& w_;
    beast::tcp_stream client_;
    beast::tcp_stream upstream_;
    // Once a tunnel is established the coroutine chain ends and these carry it: the relay
    // (callbacks), the request it logs at the end, and the policy snapshot its job (and so
    // its budget) lives in.
    std::optional<tunnel_relay> relay_;
    request_state tunnel_st_;
    std::shared_ptr<const config::compiled_policy> tunnel_policy_;
    std::uint64_t id_;
    std::string closed_by_;  // set when closed from outside: a kill, revocation, reload
    std::string resolved_;   // what the last name resolved to, until audited (add_resolved)
    std::shared_ptr<control::session_usage> usage_;
    alerts::job_metrics* tunnel_metrics_ = nullptr;  // set while an allowed request relays
    bool holds_slot_ = false;
    std::string upstream_key_;  // "host:port" of the kept-alive upstream, if any
    beast::flat_buffer upstream_buffer_{64 * 1024 + 16 * 1024};
    // What only HTTP forwarding needs, allocated by the first forwarded request and kept
    // for the next ones: a tunnel carries one pointer of it, not buffers.
    struct forward_state {
        char window[body_window_size];  // bodies pass here, one direction at a time
        std::string out_head;           // the head being forwarded
        std::string in_head;            // the upstream's status line and fields
        // The audit text of the last rule a request matched, with the snapshot it is in.
        const config::egress_rule* described_rule = nullptr;
        std::shared_ptr<const config::compiled_policy> described_policy;
        std::string described;
    };
    forward_state& fwd() {
        if (!fwd_) {
            fwd_ = std::make_unique<forward_state>();
        }
        return *fwd_;
    }
    std::unique_ptr<forward_state> fwd_;
};

// Smuggling and framing checks on a parsed request head. Returns why the request is refused
// (answered 400, then closed), or nothing when it may proceed.
std::string_view request_refusal(const http::request_header<>& h, std::string_view raw_head) {
    // Obsolete line folding: a header line starting with space or tab.
    if (raw_head.find("\r\n ") != std::string_view::npos ||
        raw_head.find("\r\n\t") != std::string_view::npos) {
        return "obsolete header line folding";
    }
    const auto count = [&h](http::field name) {
        return static_cast<std::size_t>(std::count_if(
            h.begin(), h.end(), [name](const auto& f) { return f.name() == name; }));
    };
    const auto te = h[http::field::transfer_encoding];
    return framing_refusal(count(http::field::host), count(http::field::content_length),
                           count(http::field::transfer_encoding),
                           std::string_view(te.data(), te.size()));
}

awaitable<bool> client_conn::check_sni(const std::string& want, std::vector<std::uint8_t>& hello) {
    const auto deadline = steady::now() + rt_.policy()->source().proxy.handshake_timeout;
    for (;;) {
        const hello_result r = parse_client_hello(hello);
        if (r.status == hello_status::ok) {
            const config::host_result sni = config::normalise_host(r.sni);
            co_return sni.ok() && sni.value == want;
        }
        if (r.status != hello_status::need_more) {
            co_return false;
        }
        if (steady::now() >= deadline) {
            co_return false;
        }
        std::uint8_t chunk[4096];
        client_.expires_at(deadline);
        auto [ec, n] = co_await client_.async_read_some(net::buffer(chunk), use_nothrow);
        client_.expires_never();
        if (ec) {
            co_return false;
        }
        hello.insert(hello.end(), chunk, chunk + n);
    }
}

awaitable<void> client_conn::handle_connect(const std::string& target_text,
                                            beast::flat_buffer& buffer) {
    request_state st;
    st.target_text = target_text;
    kind = request_kind::connect;
    const config::target_result parsed = config::parse_connect_target(target_text);
    if (!parsed.value) {
        co_await deny(400, deny_reason::bad_request, target_text, parsed.error);
        co_return;
    }
    host = parsed.value->host;
    port = parsed.value->port;

    // Phase: decide. The policy snapshot stays alive for this tunnel's whole life.
    const auto policy = rt_.policy();
    config::decide_args args;
    args.job = job;
    args.host = host;
    args.port = port;
    args.kind = request_kind::connect;
    decide_request(args, *policy, st);
    if (!st.decision.allowed()) {
        co_await deny(403, st.decision.reason, target_text);
        co_return;
    }
    const config::job& j = *policy->source().find_job(job);
    if (!take_tunnel_slot(j)) {
        co_await deny(403, deny_reason::limit, target_text);
        co_return;
    }
    if (const auto left = budget_left(j); left && *left == 0) {
        co_await deny(403, deny_reason::budget, target_text);
        co_return;
    }

    // Phases: resolve, classify, connect.
    std::vector<config::ip_address> addresses;
    std::string resolve_error;
    const deny_reason rr = co_await resolve(host, port, st, addresses, resolve_error);
    if (!resolve_error.empty()) {
        const std::string msg = "cannot resolve " + host + ": " + resolve_error;
        co_await error_reply(502, target_text, msg);
        co_return;
    }
    if (rr != deny_reason::none) {
        co_await deny(403, rr, target_text);
        co_return;
    }
    const error_code cec = co_await connect(addresses, port, st);
    if (cec) {
        if (!closed_by_.empty()) {
            co_return;
        }
        const bool timeout = cec == beast::error::timeout;
        const std::string msg = (timeout ? "timed out connecting to " : "cannot connect to ") +
                                target_text + (timeout ? "" : ": " + cec.message());
        co_await error_reply(timeout ? 504 : 502, target_text, msg);
        co_return;
    }
    static constexpr std::string_view established = "HTTP/1.1 200 Connection established\r\n\r\n";
    auto [wec, wn] = co_await net::async_write(client_.socket(), net::buffer(established),
                                               use_nothrow);
    (void)wn;
    if (wec) {
        co_return;
    }
    st.opened = true;
    log_open(st);

    // Bytes the client sent right behind the CONNECT head belong to the tunnel.
    std::vector<std::uint8_t> first(static_cast<const std::uint8_t*>(buffer.data().data()),
                                    static_cast<const std::uint8_t*>(buffer.data().data()) +
                                        buffer.size());
    buffer.consume(buffer.size());
    buffer.shrink_to_fit();  // an idle tunnel holds no read buffer

    // Phase: for tls rules, the ClientHello's SNI must name the CONNECT host before a single
    // byte reaches the upstream.
    if (st.decision.rule != nullptr && st.decision.rule->proto == config::protocol::tls) {
        const config::host_result want = config::normalise_host(host);
        if (!co_await check_sni(want.value, first)) {
            auto r = rt_.record("conn.deny");
            add_identity(r);
            r.add("reason", deny_name(deny_reason::sni_mismatch))
                .add("target", target_text)
                .add("method", method);
            const hello_result h = parse_client_hello(first);
            if (h.status == hello_status::ok) {
                r.add("sni", h.sni);
            }
            rt_.audit(std::move(r));
            rt_.denied(control::denial{job, session, deny_name(deny_reason::sni_mismatch), target_text,
                              kind_name()});
            error_code ignored;
            upstream_.socket().close(ignored);
            shutdown_client();
            log_close(st, "sni_mismatch");
            co_return;
        }
    }

    const auto& ps = policy->source().proxy;
    begin_tunnel(st);  // counted allowed only now: an SNI mismatch is a denial, not both
    relay_hooks hooks;
    hooks.idle_timeout = ps.idle_timeout;
    hooks.bytes = tunnel_metrics_;
    tunnel_policy_ = policy;  // keeps `j` alive for the relay's budget checks
    hooks.allow_up = [this, &j](std::size_t n) -> std::size_t {
        if (!usage_ || !j.limits.max_bytes_up) {
            return n;
        }
        const std::uint64_t max = *j.limits.max_bytes_up;
        const std::uint64_t before = usage_->bytes_up.fetch_add(n);
        if (before >= max) {
            return 0;
        }
        return static_cast<std::size_t>(std::min<std::uint64_t>(n, max - before));
    };
    std::string reason;
    if (!first.empty()) {
        const std::size_t pass = hooks.allow_up(first.size());
        auto [fec, fn] = co_await net::async_write(upstream_.socket(),
                                                   net::buffer(first.data(), pass), use_nothrow);
        st.bytes_up += fn;
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

awaitable<bool> client_conn::handle_forward(http::request_parser<http::buffer_body>& parser,
                                            beast::flat_buffer& buffer, const config::target_result& parsed) {
    request_state st;
    kind = request_kind::http;
    auto& req = parser.get();
    const std::string_view target_raw(req.target().data(), req.target().size());
    if (!parsed.value) {
        co_await deny(400, deny_reason::bad_request, target_raw, parsed.error);
        co_return false;
    }
    const config::target& t = *parsed.value;
    host = t.host;
    port = t.port;
    st.target_text = t.authority.find(':') != std::string::npos || t.host.find(':') != std::string::npos
                         ? t.authority
                         : t.authority + ":" + std::to_string(t.port);
    if (const auto h = req.find(http::field::host); h != req.end()) {
        if (!config::host_header_matches(std::string_view(h->value().data(), h->value().size()), t)) {
            co_await deny(400, deny_reason::bad_request, st.target_text,
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
    decide_request(args, *policy, st);
    if (!st.decision.allowed()) {
        co_await deny(403, st.decision.reason, st.target_text);
        co_return false;
    }
    const config::job& j = *policy->source().find_job(job);
    const auto& ps = policy->source().proxy;

    // Phases: resolve, classify, connect, unless this connection already holds an upstream
    // to the same place.
    const config::host_result norm = config::normalise_host(host);
    const std::string key = (norm.ok() ? norm.value : host) + ":" + std::to_string(port);
    if (key != upstream_key_ || !upstream_.socket().is_open()) {
        error_code ignored;
        upstream_.socket().close(ignored);
        upstream_buffer_.consume(upstream_buffer_.size());
        upstream_key_.clear();
        std::vector<config::ip_address> addresses;
        std::string resolve_error;
        const deny_reason rr = co_await resolve(host, port, st, addresses, resolve_error);
        if (!resolve_error.empty()) {
            const std::string msg = "cannot resolve " + host + ": " + resolve_error;
            co_await error_reply(502, st.target_text, msg);
            co_return false;
        }
        if (rr != deny_reason::none) {
            co_await deny(403, rr, st.target_text);
            co_return false;
        }
        const error_code cec = co_await connect(addresses, port, st);
        if (cec) {
            if (closed_by_.empty()) {
                const bool timeout = cec == beast::error::timeout;
                const std::string msg =
                    (timeout ? "timed out connecting to " : "cannot connect to ") + st.target_text;
                co_await error_reply(timeout ? 504 : 502, st.target_text, msg);
            }
            co_return false;
        }
        upstream_key_ = key;
    } else {
        st.ip = address ? address->to_string() : std::string();  // no getpeername per request
        // The kept upstream's address passed the rule of the request that connected it;
        // this request may match another rule, or come after a reload.
        const config::decision checked = check_connected(st.decision);
        if (!checked.allowed()) {
            co_await deny(403, checked.reason, st.target_text);
            co_return false;
        }
    }
    if (!session.empty()) {
        usage_ = rt_.usage_for(session);
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

    // Phase: forward the request, head then body, streaming. A client that asked to be told
    // before sending its body (Expect: 100-continue) is told now: the request is allowed
    // and the upstream is connected, so cordon takes the body and the upstream never sees
    // the expectation.
    field_filter request_filter;
    request_filter.drop_host = true;
    if (const auto e = req.find(http::field::expect); e != req.end()) {
        if (!beast::iequals(e->value(), "100-continue")) {
            co_await error_reply(417, st.target_text, "only Expect: 100-continue is supported");
            co_return false;
        }
        request_filter.drop_expect = true;
        if (!parser.is_done()) {
            static constexpr std::string_view cont = "HTTP/1.1 100 Continue\r\n\r\n";
            auto [cec2, cn] = co_await net::async_write(client_.socket(), net::buffer(cont),
                                                        use_nothrow);
            (void)cn;
            if (cec2) {
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
    out.append(t.origin_form);
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
    out.append("Host: ");
    out.append(t.authority);
    out.append("\r\n\r\n");
    std::string reason = "eof";
    bool keep = false;
    {
        // The upload budget is checked per chunk, before the chunk goes upstream.
        const std::function<bool(std::size_t)> within_budget = [&](std::size_t got) {
            if (auto left = budget_left(j); left && got > *left) {
                return false;
            }
            if (usage_) {
                usage_->bytes_up += got;
            }
            return true;
        };
        const std::string_view request_head = out;
        const body_result b = co_await forward_message(
            client_, buffer, parser, req.body(), upstream_, request_head, parser.chunked(),
            ps.idle_timeout, &within_budget, fs.window);
        st.bytes_up += b.written;
        if (b.end != body_end::done) {
            reason = b.end == body_end::refused      ? "budget"
                     : b.end == body_end::write_error ? "upstream_error"
                     : !closed_by_.empty()            ? closed_by_
                                                      : "client_error";
            if (!b.head_sent && b.end == body_end::write_error) {
                reason = "error";  // the head could not be written: nothing to answer
            } else if (closed_by_.empty() && reason == "upstream_error") {
                co_await error_reply(502, st.target_text, "the upstream closed the connection");
            }
            log_close(st, reason);
            co_return false;
        }
    }

    // Phase: forward the response, head then body, streaming.
    std::optional<response_reader> rp_holder;
    error_code rhec;
    // Interim 1xx answers (but 101) go to the client as they come; then the final one.
    for (int interim = 0;; ++interim) {
        rp_holder.emplace(fs.in_head);
        rp_holder->header_limit(static_cast<std::uint32_t>(ps.max_header_bytes));
        rp_holder->body_limit(boost::none);
        if (method == "HEAD") {
            rp_holder->skip(true);
        }
        rhec = co_await read_response_head(*rp_holder, ps.idle_timeout);
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
        auto [wec, wn] = co_await write_all(client_, interim_head, ps.idle_timeout, 0);
        st.bytes_down += wn;
        if (wec) {
            rhec = wec;
            break;
        }
    }
    auto& rp = *rp_holder;
    if (rhec) {
        if (closed_by_.empty()) {
            const bool timeout = rhec == beast::error::timeout;
            co_await error_reply(timeout ? 504 : 502, st.target_text,
                                 timeout ? "the upstream did not answer in time"
                                         : "the upstream sent no valid response");
        }
        log_close(st, !closed_by_.empty() ? closed_by_
                                                      : "upstream_error");
        co_return false;
    }
    const bool switching = upgrade && rp.status() == 101;
    keep = !switching && client_keep_alive && rp.keep_alive();
    out.clear();
    out.append(rp.status_line());
    field_filter response_filter;
    response_filter.keep_upgrade = switching;
    append_end_to_end_lines(out, rp.field_lines(), response_filter);
    if (const std::string_view c = response_connection(rp.version(), keep, switching);
        !c.empty()) {
        out.append("Connection: ");
        out.append(c);
        out.append("\r\n");
    }
    out.append("\r\n");
    if (switching) {
        const net::const_buffer switching_head = net::buffer(out);
        auto [hec, hn] = co_await write_all(client_, switching_head, ps.idle_timeout, 0);
        st.bytes_down += hn;
        if (hec) {
            log_close(st, !closed_by_.empty() ? closed_by_ : "client_error");
            co_return false;
        }
    } else {
        const std::string_view response_head = out;
        const body_result b =
            co_await forward_message(upstream_, upstream_buffer_, rp, rp.body, client_,
                                     response_head, rp.chunked(), ps.idle_timeout, nullptr,
                                     fs.window);
        st.bytes_down += b.written;
        if (b.end != body_end::done) {
            reason = b.end == body_end::write_error ? "client_error"
                     : !closed_by_.empty()           ? closed_by_
                                                     : "upstream_error";
            log_close(st, reason);
            co_return false;
        }
    }
    if (switching) {
        // The upgraded connection becomes a tunnel; bytes already buffered on either side
        // go first.
        if (buffer.size() > 0) {
            auto [e, n] = co_await net::async_write(upstream_.socket(), buffer.data(), use_nothrow);
            st.bytes_up += n;
            buffer.consume(buffer.size());
        }
        if (upstream_buffer_.size() > 0) {
            auto [e, n] =
                co_await net::async_write(client_.socket(), upstream_buffer_.data(), use_nothrow);
            st.bytes_down += n;
            upstream_buffer_.consume(upstream_buffer_.size());
        }
        relay_hooks hooks;
        hooks.idle_timeout = ps.idle_timeout;
        hooks.bytes = tunnel_metrics_;
        start_relay(std::move(st), std::move(hooks));
        co_return false;
    }
    if (!keep) {
        error_code ignored;
        upstream_.socket().close(ignored);
        upstream_key_.clear();
        address.reset();
    }
    log_close(st, keep ? "done" : "eof");
    co_return keep && closed_by_.empty();
}

awaitable<void> client_conn::run() {
    // Limits as of the connection's start; the snapshot keeps them alive across reloads.
    const auto snapshot = rt_.policy();
    const auto& ps = snapshot->source().proxy;
    // Bounded: a head may not exceed max_header_bytes; body chunks read at most 64 KiB.
    beast::flat_buffer buffer(ps.max_header_bytes + 64 * 1024);
    for (;;) {
        // Phase: read_request. The head is read raw first (to see its exact bytes: obsolete
        // line folding is refused, which parsers otherwise repair), then parsed.
        method.clear();  // the previous request's, until this one's head is parsed
        const read_head_result rh = co_await read_head(buffer, ps.max_header_bytes,
                                                       ps.header_timeout);
        if (!rh.refusal.empty()) {
            co_await deny(400, deny_reason::bad_request, "", rh.refusal);
            co_return;
        }
        if (rh.too_large) {
            co_await deny(431, deny_reason::bad_request, "", "request header too large");
            co_return;
        }
        if (rh.error) {
            if (buffer.size() > 0 && rh.error == net::error::eof) {
                co_await deny(400, deny_reason::bad_request, "", "incomplete request");
            }
            co_return;  // closed, reset or timed out before a request: nothing to answer
        }
        const std::size_t head_len = rh.head_len;
        const std::string_view head(static_cast<const char*>(buffer.data().data()), head_len);
        http::request_parser<http::buffer_body> parser;
        parser.header_limit(static_cast<std::uint32_t>(ps.max_header_bytes));
        parser.body_limit(boost::none);
        error_code pec;
        parser.put(net::buffer(head.data(), head.size()), pec);
        if (pec || !parser.is_header_done()) {
            const std::string msg =
                "malformed request head: " + (pec ? pec.message() : std::string("incomplete"));
            co_await deny(400, deny_reason::bad_request, "", msg);
            co_return;
        }
        if (const std::string_view refusal = request_refusal(parser.get().base(), head);
            !refusal.empty()) {
            co_await deny(400, deny_reason::bad_request, "", refusal);
            co_return;
        }
        buffer.consume(head_len);
        const auto& req = parser.get();
        method = std::string(req.method_string());
        session.clear();
        token_id.clear();
        job.clear();

        // The network kill refuses everything, before anything else is looked at.
        if (rt_.kill.engaged()) {
            co_await deny(403, deny_reason::kill_switch, req.target());
            co_return;
        }
        // Phase: authenticate. A killed session's credentials are valid but refused for
        // good: 403, not a challenge to try other credentials.
        if (const deny_reason a = authenticate(req.base()); a != deny_reason::none) {
            co_await deny(a == deny_reason::session_killed ? 403 : 407, a, req.target());
            co_return;
        }
        if (!rt_.audit_healthy()) {
            // Not audited (the log is what failed), but counted: metrics are then the one
            // record of these refusals.
            const std::string_view asked(req.target().data(), req.target().size());
            rt_.denied(control::denial{job, session, deny_name(deny_reason::audit_unavailable), asked,
                              req.method() == http::verb::connect ? "connect" : "http"});
            const std::string resp =
                deny_response(503, deny_name(deny_reason::audit_unavailable), job,
                              std::string(req.target()), explain(deny_reason::audit_unavailable));
            co_await net::async_write(client_.socket(), net::buffer(resp), use_nothrow);
            shutdown_client();
            co_return;
        }
        // The reserved name (tool.call events from the sandbox) is answered here, never
        // decided, resolved or forwarded (proxy/data/reserved_host.cpp).
        const bool is_connect = req.method() == http::verb::connect;
        config::target_result forward_target;  // parsed once, here and for handle_forward
        if (!is_connect) {
            forward_target = config::parse_absolute_uri(std::string_view(req.target().data(),
                                                                 req.target().size()));
        }
        if (is_connect ? audit::targets_reserved_host(req.target(), true)
                       : forward_target.value && audit::is_reserved_host(forward_target.value->host)) {
            const reserved_caller who{session, job, token_id, client_text_};
            if (!co_await serve_reserved(rt_, client_, buffer, parser, who)) {
                co_return;
            }
            continue;
        }
        if (is_connect) {
            const std::string connect_target(req.target());
            co_await handle_connect(connect_target, buffer);
            co_return;
        }
        if (!co_await handle_forward(parser, buffer, forward_target)) {
            co_return;
        }
    }
}

}  // namespace

awaitable<void> serve_client(control::runtime& rt, control::worker& w, tcp::socket socket) {
    error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    if (ec) {
        co_return;
    }
    socket.set_option(tcp::no_delay(true), ec);
    // Shared: an established tunnel's relay keeps the connection alive after run() ends.
    const auto c = std::make_shared<client_conn>(rt, w, std::move(socket));
    c->client_text_ = endpoint_text(remote);
    c->client_ip_ = to_ip(remote.address());
    co_await c->run();
}

}  // namespace cordon::proxy::data
