#pragma once
// The state of one client connection (client_conn.hpp's serve_client), shared by the files
// that implement its phases: client_conn.cpp (read_request, authenticate, decide, CONNECT
// tunnels, log) and forward.cpp (HTTP forwarding). Internal to proxy/data/.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/asio.hpp"
#include "config/decide.hpp"
#include "config/target.hpp"
#include "proxy/control/runtime.hpp"
#include "proxy/data/dialer.hpp"
#include "proxy/data/quota.hpp"
#include "proxy/data/relay.hpp"
#include "proxy/data/request_head.hpp"
#include "proxy/data/request_log.hpp"
#include "proxy/data/socks5.hpp"

namespace cordon::proxy::mcp {
struct change;
}  // namespace cordon::proxy::mcp

namespace cordon::proxy::data {

/// The client's or the upstream's TLS in an inspected tunnel (inspected.cpp, tls_stream.hpp),
/// over the connection's own socket: a kill's abort of the socket ends it too.
class tls_stream;

/// Bodies pass through a window of this size, one direction at a time (forward.cpp).
inline constexpr std::size_t body_window_size = 16 * 1024;

class response_reader;
enum class mcp_answer_mode;
struct secret_value;

/// One client connection, visible to kills, revocations and reloads (live_connection).
class client_conn final : public control::live_connection,
                          public relay_owner,
                          public std::enable_shared_from_this<client_conn> {
public:
    client_conn(control::runtime& rt, control::worker& w, tcp::socket s);
    ~client_conn() override;
    client_conn(const client_conn&) = delete;
    client_conn& operator=(const client_conn&) = delete;

    void close_client(std::string_view why) override;
    void close_upstream() override { abort(upstream_.socket()); }

    /// Abortive close (RST): a graceful close would let the kernel go on delivering what is
    /// already queued, megabytes to an upstream after a kill returned, and keep a socket to
    /// a client that never reads. Linger 0 discards it at once.
    static void abort(tcp::socket& s);

    awaitable<void> run();

    /// The tunnel has ended: account, close, log.
    void relay_done(const relay_result& r) override;

    std::string client_text_;
    config::ip_address client_ip_;
    /// Accepted on listen.socks: SOCKS5 only. On the proxy port a first byte 5 selects it.
    bool socks_listener_ = false;

private:
    /// One request, from its head to its terminal record.
    struct request_state {
        explicit request_state(request_log&& l) : log(std::move(l)) {}
        request_log log;
        upstream_target target;
        config::decision decision;
        std::uint64_t counted_up = 0;  // bytes the relay already counted in the metrics
        std::uint64_t counted_down = 0;
        std::size_t head_bytes = 0;  // the request head as the client sent it
    };

    request_log new_log() { return request_log(sink_, *this, client_text_, closed_by_); }

    // Phase: log. Metrics and records (client_conn.cpp).
    void begin_tunnel(const request_state& st);
    void end_tunnel();
    void log_open(request_state& st);
    void log_close(request_state& st, std::string_view reason) {
        log_close(st.log, st.counted_up, st.counted_down, reason);
    }
    void log_close(request_log& log, std::uint64_t counted_up, std::uint64_t counted_down,
                   std::string_view reason);
    std::string_view kind_name() const {
        return kind == config::request_kind::connect ? "connect" : "http";
    }

    // Answers that end the request: HTTP, or SOCKS5 replies once socks_ is set.
    awaitable<void> deny(request_state& st, int status, config::deny_reason reason,
                         std::string_view message = {});
    awaitable<void> error_reply(request_state& st, int status, std::string_view message,
                                socks5::reply socks_reply = socks5::reply::host_unreachable);
    /// A denial's record and count, without an answer.
    void note_denial(request_state& st, int status, config::deny_reason reason);
    void shutdown_client();

    // Phases before either path.
    config::deny_reason authenticate(const http::fields& headers);
    /// A session's credentials (Basic, or SOCKS5 username/password), checked in constant
    /// time by the session registry; names the session and job.
    config::deny_reason authenticate_user(std::string_view user, std::string_view password);
    /// A client without credentials: its address in a job's `sources` names the job.
    config::deny_reason authenticate_source();
    static void decide_request(const config::decide_args& args, const config::compiled_policy& p,
                               request_state& st);
    /// resolve -> classify -> connect through the dialer; answers and logs what fails.
    /// True when the upstream is connected.
    awaitable<bool> dial(request_state& st);

    /// Read, parse and refuse what is not a request; false when the connection is done, or
    /// (socks_ set) when the first request's first byte is SOCKS5's.
    awaitable<bool> read_request(request_state& st, beast::flat_buffer& buffer,
                                 http::request_parser<http::buffer_body>& parser,
                                 const config::proxy_spec& ps, bool first_request);

    // SOCKS5 (socks_conn.cpp): greeting, credentials, request, then handle_connect.
    bool socks_ = false;  ///< this connection speaks SOCKS5: its answers are SOCKS replies
    awaitable<void> serve_socks(request_state& st, beast::flat_buffer& buffer,
                                std::chrono::steady_clock::time_point deadline);
    /// More handshake bytes within the deadline and socks5::max_handshake_bytes; false
    /// (the request ended and recorded) when none came.
    awaitable<bool> socks_read(request_state& st, beast::flat_buffer& buffer,
                               std::chrono::steady_clock::time_point deadline);
    /// Writes a handshake answer, behind any held ones, in one write; false when the client
    /// is gone.
    awaitable<bool> socks_answer(std::span<const std::uint8_t> bytes);
    /// A client that sent its next message without waiting for this answer (`pipelined`)
    /// gets it with the next one (one write and one wake-up less for both); else at once.
    awaitable<bool> socks_answer_or_hold(std::span<const std::uint8_t> bytes, bool pipelined);
    std::array<std::uint8_t, 4> socks_held_{};  ///< the method and credentials answers held
    std::uint8_t socks_held_size_ = 0;
    bool socks_spoke_ = false;  ///< a whole greeting came: its end is recorded, not dismissed

    // The CONNECT path (client_conn.cpp).
    /// `answered`: for a SOCKS5 address target, the names cordon's resolver answered with
    /// that address to this session (latest first): the request is decided as the first of
    /// them the job allows, else as the IP literal.
    awaitable<void> handle_connect(request_state& st, const std::string& target_text,
                                   beast::flat_buffer& buffer,
                                   std::span<const std::string> answered = {});
    /// How the wait for the ClientHello ended.
    enum class hello_wait : std::uint8_t {
        match,     ///< it names the CONNECT host
        mismatch,  ///< another name, no SNI, not TLS, malformed
        ended,     ///< no whole ClientHello: the client closed, a read failed, or the
                   ///< connection was closed from outside (a kill)
        timeout,   ///< no whole ClientHello within the handshake timeout
    };
    awaitable<hello_wait> check_sni(const std::string& want, std::vector<std::uint8_t>& hello);
    /// `protocol: ssh`: the client's first line must be an SSH identification string.
    awaitable<hello_wait> check_ssh(std::vector<std::uint8_t>& first);
    /// Reads the tunnel's first client bytes (within the handshake timeout) until `judge`
    /// says match or mismatch (it answers need_more as `ended`).
    awaitable<hello_wait> await_first_bytes(
        const std::function<hello_wait(std::span<const std::uint8_t>)>& judge,
        std::vector<std::uint8_t>& first);
    awaitable<void> start_tunnel(request_state& st, const config::job& j,
                                 std::vector<std::uint8_t>& first,
                                 const std::shared_ptr<const config::compiled_policy>& policy);
    void start_relay(request_state&& st, relay_hooks hooks);
    std::string close_reason(const relay_result& rr) const;

    // The inspected path (inspected.cpp): TLS terminated on both sides, requests decided one
    // by one. Runs until the tunnel ends; logs its close.
    awaitable<void> serve_inspected(request_state& st, std::vector<std::uint8_t>& hello,
                                    const std::shared_ptr<const config::compiled_policy>& policy);
    /// What an http.request record says (views: valid for the call).
    struct http_note {
        http_note(std::string_view m, std::string_view p, int s) : method(m), path(p), status(s) {}
        std::string_view method;
        std::string_view path;  ///< normal form, query values hidden
        int status = 0;         ///< 0: no answer reached the client
        config::deny_reason reason = config::deny_reason::none;
        config::deny_reason would_deny = config::deny_reason::none;
        std::uint64_t bytes_up = 0;
        std::uint64_t bytes_down = 0;
        std::string_view message;
        std::string_view credential;  ///< the injected secret's name
    };
    void write_http_request(const http_note& n);
    awaitable<void> upstream_failure(tls_stream& cs, const http_note& n);
    awaitable<void> refuse_inspected(tls_stream& cs, request_state& st, int status,
                                     config::deny_reason reason, std::string_view req_method,
                                     std::string_view path, std::string_view message);

    // MCP rules (mcp_flow.cpp, docs/mcp.md), on both paths.
    /// What becomes of a request on an MCP rule, decided on its whole body.
    struct mcp_plan {
        enum class action : std::uint8_t { forward, refuse, answer };
        action act = action::forward;
        int status = 0;                                          ///< refuse: 400 or 413
        config::deny_reason reason = config::deny_reason::none;  ///< refuse, answer
        std::string message;                                     ///< refuse: why
        std::string answer;  ///< answer: the head and the JSON-RPC errors, in the server's place
    };
    /// Parses and decides the body (tool.call records for its calls, each refused call a
    /// denial of `kind`, "http" or "https", on `target`).
    mcp_plan judge_mcp(const config::egress_rule& rule, const config::job& j,
                       std::string_view http_method, std::string_view body, bool has_body,
                       std::string_view target, std::string_view denial_kind);
    /// The pins that broke in a server's answer: an mcp.tool_changed record each, and a
    /// denial (mcp_tool_changed), so the alert webhook hears of the rug pull.
    void record_mcp_changes(const std::vector<mcp::change>& changes, std::string_view target,
                            std::string_view kind);
    /// An MCP rule's request inside an inspected tunnel: its body read whole, scanned,
    /// budgeted and decided. False when the tunnel ends here (answered or refused; `reason`
    /// says why); `body` holds the body to send otherwise.
    struct inspected_mcp_request {
        const config::egress_rule& rule;
        const config::job& j;
        std::string_view method;
        std::string_view audit_path;
        bool has_body;
        bool upgrade;
        const std::vector<secret_value>& secrets;
        char* window;
    };
    awaitable<bool> mcp_request_inspected(tls_stream& cs, beast::flat_buffer& cbuf,
                                          http::request_parser<http::buffer_body>& parser,
                                          request_state& st, const inspected_mcp_request& r,
                                          std::string& body, std::string& reason);
    /// Its JSON or event-stream answer: filtered to the client, recorded (http.request).
    /// True when the tunnel may carry another request; false with `reason` otherwise.
    struct inspected_mcp_answer {
        const config::egress_rule& rule;
        const config::job& j;
        std::string_view method;
        std::string_view audit_path;
        unsigned client_version;
        bool client_keep_alive;
        std::string_view sent_secret;  ///< redacted from the answer ("" when none went out)
        std::string_view sent_placeholder;
        std::string_view secret_name;
        config::deny_reason would_deny;
        std::uint64_t bytes_up;
        char* window;
        std::string& out;
        std::string& scratch;
        std::uint64_t& log_bytes_down;  ///< the tunnel's conn.close count, added to
    };
    awaitable<bool> mcp_answer_inspected(tls_stream& cs, tls_stream& us, beast::flat_buffer& ubuf,
                                         response_reader& rp, mcp_answer_mode mode,
                                         const inspected_mcp_answer& a, std::string& reason);
    /// An MCP rule's request on the plain path, before anything is dialled: its body read
    /// whole and decided. False when the request ended here (answered or refused).
    awaitable<bool> mcp_request_plain(request_state& st,
                                      http::request_parser<http::buffer_body>& parser,
                                      beast::flat_buffer& buffer, const config::egress_rule& rule,
                                      const config::job& j, bool has_body, std::string& body);
    /// Whose pins: the session, or the job for clients without one (`sources`).
    std::string mcp_pin_key() const { return session.empty() ? "job:" + job : session; }

    // The HTTP forwarding path (forward.cpp). `parsed` is the request's target, parsed (or
    // refused) once by run(); it lives in run()'s frame for the whole call.
    awaitable<bool> handle_forward(request_state& st,
                                   http::request_parser<http::buffer_body>& parser,
                                   beast::flat_buffer& buffer, const config::target_result& parsed);
    awaitable<bool> connect_forward(request_state& st);
    config::deny_reason plain_head_refusal(const http::request_header<>& req,
                                           std::string_view origin_form) const;
    /// One forwarded exchange's inputs, named (coroutines here take no temporaries).
    struct forward_exchange {
        request_state& st;
        http::request_parser<http::buffer_body>& parser;
        beast::flat_buffer& buffer;
        const config::job& j;
        const config::proxy_spec& ps;
        const config::target& t;
        /// The request-target sent upstream: the client's, or its normal form where the
        /// rule has request rules (what was matched is what is sent).
        std::string_view origin_form;
        /// An MCP rule's request: the rule, and the body already read whole and decided.
        const config::egress_rule* mcp_rule = nullptr;
        const std::string* mcp_body = nullptr;
    };
    awaitable<bool> forward_request(const forward_exchange& x);
    awaitable<bool> forward_response(const forward_exchange& x, bool upgrade,
                                     bool client_keep_alive);
    awaitable<error_code> read_response_head(response_reader& rp, std::chrono::milliseconds idle);
    /// An MCP rule's JSON or event-stream answer on the plain path (mcp_flow.cpp).
    awaitable<bool> forward_mcp_response(const forward_exchange& x, response_reader& rp,
                                         mcp_answer_mode mode, bool client_keep_alive);

    control::runtime& rt_;
    control::worker& w_;
    beast::tcp_stream client_;
    beast::tcp_stream upstream_;
    runtime_sink sink_;
    dns_resolver resolver_;
    stream_connector connector_;
    // Read by request logs when they end (tunnel_st_'s too), so declared before them.
    std::string closed_by_;  // set when closed from outside: a kill, revocation, reload
    // Once a tunnel is established the coroutine chain ends and these carry it: the relay
    // (callbacks), the request it logs at the end, and the policy snapshot its job (and so
    // its budget) lives in.
    std::optional<tunnel_relay> relay_;
    /// What an established tunnel keeps of its request while it relays: its records and the
    /// bytes the relay already counted; not the target, decision and head (176 bytes less
    /// per idle tunnel).
    struct tunnel_state {
        explicit tunnel_state(request_state&& st)
            : log(std::move(st.log)), counted_up(st.counted_up), counted_down(st.counted_down) {}
        request_log log;
        std::uint64_t counted_up = 0;
        std::uint64_t counted_down = 0;
    };
    std::optional<tunnel_state> tunnel_st_;
    std::shared_ptr<const config::compiled_policy> tunnel_policy_;
    std::uint64_t id_;
    session_quota quota_;
    alerts::job_metrics* tunnel_metrics_ = nullptr;  // set while an allowed request relays
    std::string tunnel_target_;  // an inspected tunnel's "host:port", for its records
    // The kept-alive upstream (name and port of its upstream_target), if any: compared per
    // request without building a key string.
    std::string upstream_name_;
    std::uint16_t upstream_port_ = 0;
    void forget_upstream() {
        upstream_name_.clear();
        upstream_port_ = 0;
    }
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
            // Not value-initialised: make_unique would zero the 16 KiB window first, once
            // per request in an inspected tunnel (which drops this state while idle).
            fwd_ = std::make_unique_for_overwrite<forward_state>();
        }
        return *fwd_;
    }
    std::unique_ptr<forward_state> fwd_;
};

}  // namespace cordon::proxy::data
