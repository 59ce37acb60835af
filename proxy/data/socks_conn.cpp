// SOCKS5 on a client connection (RFC 1928, RFC 1929): the handshake's phases, then the
// CONNECT path's own (handle_connect: decide -> resolve -> classify -> connect -> tunnel ->
// log), whose answers are SOCKS replies once socks_ is set. The handshake is bounded in
// size (socks5::max_handshake_bytes) and in time (one total deadline).

#include <algorithm>

#include "proxy/data/client_conn_impl.hpp"

namespace cordon::proxy::data {
namespace {

using config::deny_reason;

std::span<const std::uint8_t> have(const beast::flat_buffer& b) {
    return {static_cast<const std::uint8_t*>(b.data().data()), b.size()};
}

}  // namespace

awaitable<bool> client_conn::socks_read(request_state& st, beast::flat_buffer& buffer,
                                        std::chrono::steady_clock::time_point deadline) {
    // A client that waits for the answers held before it sends the rest must have them.
    if (socks_held_size_ > 0 && !co_await socks_answer({})) {
        note_denial(st, 400, deny_reason::bad_request);  // gone mid-handshake
        co_return false;
    }
    if (buffer.size() >= socks5::max_handshake_bytes) {
        // More than any handshake needs before its answer: not a SOCKS client.
        note_denial(st, 400, deny_reason::bad_request);
        shutdown_client();
        co_return false;
    }
    client_.expires_at(deadline);
    auto [ec, n] = co_await client_.async_read_some(
        buffer.prepare(socks5::max_handshake_bytes - buffer.size()), use_nothrow);
    client_.expires_never();
    if (!ec) {
        buffer.commit(n);
        co_return true;
    }
    if (!closed_by_.empty()) {
        co_return false;  // a kill: st.log says so
    }
    if (buffer.size() == 0 && !socks_spoke_) {
        st.log.dismiss();  // connected and said nothing: nothing to answer, as HTTP
    } else {
        // Truncated (the client closed mid-message) or too slow (slowloris): refused,
        // counted and recorded; no answer to a message that never came whole.
        note_denial(st, 400, deny_reason::bad_request);
    }
    shutdown_client();
    co_return false;
}

awaitable<bool> client_conn::socks_answer(std::span<const std::uint8_t> bytes) {
    const std::array<net::const_buffer, 2> out{net::buffer(socks_held_.data(), socks_held_size_),
                                               net::buffer(bytes.data(), bytes.size())};
    socks_held_size_ = 0;
    auto [ec, n] = co_await net::async_write(client_.socket(), out, use_nothrow);
    (void)n;
    co_return !ec;
}

awaitable<bool> client_conn::socks_answer_or_hold(std::span<const std::uint8_t> bytes,
                                                  bool pipelined) {
    if (!pipelined || socks_held_size_ + bytes.size() > socks_held_.size()) {
        co_return co_await socks_answer(bytes);
    }
    std::copy(bytes.begin(), bytes.end(), socks_held_.begin() + socks_held_size_);
    socks_held_size_ = static_cast<std::uint8_t>(socks_held_size_ + bytes.size());
    co_return true;
}

awaitable<void> client_conn::serve_socks(request_state& st, beast::flat_buffer& buffer,
                                         std::chrono::steady_clock::time_point deadline) {
    socks_ = true;
    kind = config::request_kind::connect;
    method = "CONNECT";  // the records' method: `policy replay` decides them as CONNECT
    st.log.via = "socks5";

    // Phase: the greeting (the methods the client offers).
    socks5::greeting g;
    for (;;) {
        g = socks5::parse_greeting(have(buffer));
        if (g.st != socks5::status::need_more) {
            break;
        }
        if (!co_await socks_read(st, buffer, deadline)) {
            co_return;
        }
    }
    if (g.st == socks5::status::bad) {
        co_await socks_answer(socks5::method_answer(socks5::method_none));
        note_denial(st, 400, deny_reason::bad_request);
        shutdown_client();
        co_return;
    }
    buffer.consume(g.consumed);
    socks_spoke_ = true;  // from here an end without a request is a refused handshake

    // The network kill refuses everything, before credentials are read.
    if (rt_.kill.engaged()) {
        co_await socks_answer(socks5::method_answer(socks5::method_none));
        note_denial(st, 403, deny_reason::kill_switch);
        shutdown_client();
        co_return;
    }

    // Phase: authenticate. Username/password whenever offered (it names a session); no
    // authentication only for a client in a job's `sources`.
    if (g.userpass) {
        if (!co_await socks_answer_or_hold(socks5::method_answer(socks5::method_userpass),
                                           buffer.size() > 0)) {
            note_denial(st, 400, deny_reason::bad_request);  // gone mid-handshake
            co_return;
        }
        socks5::credentials c;
        for (;;) {
            c = socks5::parse_credentials(have(buffer));
            if (c.st != socks5::status::need_more) {
                break;
            }
            if (!co_await socks_read(st, buffer, deadline)) {
                co_return;
            }
        }
        const deny_reason a = c.st == socks5::status::good ? authenticate_user(c.user, c.password)
                                                           : deny_reason::auth;
        std::fill(c.password.begin(), c.password.end(), '\0');
        if (a != deny_reason::none) {
            co_await socks_answer(socks5::credentials_answer(false));
            note_denial(st, a == deny_reason::session_killed ? 403 : 407, a);
            shutdown_client();
            co_return;
        }
        buffer.consume(c.consumed);
        if (!co_await socks_answer_or_hold(socks5::credentials_answer(true), buffer.size() > 0)) {
            note_denial(st, 400, deny_reason::bad_request);  // gone mid-handshake
            co_return;
        }
    } else if (g.no_auth && authenticate_source() == deny_reason::none) {
        if (!co_await socks_answer_or_hold(socks5::method_answer(socks5::method_no_auth),
                                           buffer.size() > 0)) {
            note_denial(st, 400, deny_reason::bad_request);  // gone mid-handshake
            co_return;
        }
    } else {
        co_await socks_answer(socks5::method_answer(socks5::method_none));
        note_denial(st, 407, deny_reason::auth);
        shutdown_client();
        co_return;
    }

    // Phase: the request.
    socks5::request r;
    for (;;) {
        r = socks5::parse_request(have(buffer));
        if (r.st != socks5::status::need_more) {
            break;
        }
        if (!co_await socks_read(st, buffer, deadline)) {
            co_return;
        }
    }
    if (r.st == socks5::status::bad) {
        co_await socks_answer(socks5::request_answer(r.refusal));
        note_denial(st, 400, deny_reason::bad_request);
        shutdown_client();
        co_return;
    }
    buffer.consume(r.consumed);
    st.log.target = socks5::target_text(r);
    if (r.cmd != static_cast<std::uint8_t>(socks5::command::connect)) {
        // BIND and UDP ASSOCIATE would open ways in and datagrams: CONNECT only.
        method = std::string(socks5::command_name(r.cmd));
        co_await socks_answer(socks5::request_answer(socks5::reply::command_not_supported));
        note_denial(st, 400, deny_reason::bad_request);
        shutdown_client();
        co_return;
    }
    if (!rt_.audit_healthy()) {
        // As on the HTTP path: not audited (the log is what failed), counted.
        st.log.dismiss();
        rt_.denied(control::denial{job, session, config::to_string(deny_reason::audit_unavailable),
                                   st.log.target, kind_name()});
        co_await socks_answer(socks5::request_answer(socks5::reply::general_failure));
        shutdown_client();
        co_return;
    }
    // A network kill engaged while the handshake went on: refused now, as every request is.
    if (rt_.kill.engaged()) {
        co_await deny(st, 403, deny_reason::kill_switch);
        co_return;
    }
    // The CONNECT path, as for `CONNECT host:port`: the same decision, checks, kills,
    // records and relay.
    const std::string target_text = st.log.target;
    std::vector<std::string> answered;
    if (!r.name) {
        // An address: the names cordon's resolver answered with it to this session (or,
        // for a client known by its address, to its job), within their TTL.
        if (const auto a = config::parse_ip(r.host)) {
            answered = rt_.answered.lookup(*a, job, session, std::chrono::steady_clock::now());
        }
    }
    co_await handle_connect(st, target_text, buffer, answered);
}

}  // namespace cordon::proxy::data
