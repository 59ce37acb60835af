// One request's audit trail (request_log.hpp).

#include "proxy/data/request_log.hpp"

#include <utility>

namespace cordon::proxy::data {

request_log::request_log(request_log&& o) noexcept
    : target(std::move(o.target)),
      ip(std::move(o.ip)),
      resolved(std::move(o.resolved)),
      path(std::move(o.path)),
      would_deny(o.would_deny),
      via(o.via),
      dns_ms(o.dns_ms),
      connect_ms(o.connect_ms),
      bytes_up(o.bytes_up),
      bytes_down(o.bytes_down),
      start(o.start),
      sink_(o.sink_),
      who_(o.who_),
      client_(o.client_),
      closed_by_(o.closed_by_),
      state_(o.state_) {
    o.state_ = state::ended;
}

request_log& request_log::operator=(request_log&& o) noexcept {
    if (this != &o) {
        finish();
        target = std::move(o.target);
        ip = std::move(o.ip);
        resolved = std::move(o.resolved);
        path = std::move(o.path);
        would_deny = o.would_deny;
        via = o.via;
        dns_ms = o.dns_ms;
        connect_ms = o.connect_ms;
        bytes_up = o.bytes_up;
        bytes_down = o.bytes_down;
        start = o.start;
        sink_ = o.sink_;
        who_ = o.who_;
        client_ = o.client_;
        closed_by_ = o.closed_by_;
        state_ = o.state_;
        o.state_ = state::ended;
    }
    return *this;
}

audit::audit_record request_log::make(std::string_view event) const {
    auto r = sink_->make(event);
    if (!who_->session.empty()) {
        r.add("session", who_->session);
    }
    if (!who_->job.empty()) {
        r.add("job", who_->job);
    }
    r.add_formatted("client", *client_);  // "address:port", as client_conn formats it
    if (!via.empty()) {
        r.add_formatted("via", via);  // a constant: "socks5"
    }
    return r;
}

void request_log::open(std::string_view rule) {
    if (state_ != state::fresh) {
        return;
    }
    auto r = make("conn.open");
    r.add("target", target).add_formatted("ip", ip).add("method", who_->method);
    if (!path.empty()) {
        r.add("path", path);
    }
    if (!resolved.empty()) {
        r.add_formatted("resolved", resolved);  // the dialer's addresses, space-separated
        std::string().swap(resolved);
    }
    if (!rule.empty()) {
        r.add("rule", rule);
    }
    if (would_deny != config::deny_reason::none) {
        r.add("would_deny", config::to_string(would_deny));
    }
    r.add_millis("dns_ms", dns_ms).add_millis("connect_ms", connect_ms);
    sink_->write(std::move(r));
    state_ = state::open;
}

void request_log::deny(config::deny_reason reason, int status, std::string_view sni) {
    if (state_ == state::open) {
        write_close(config::to_string(reason), sni);
        return;
    }
    if (state_ == state::ended) {
        return;
    }
    auto r = make("conn.deny");
    r.add("reason", config::to_string(reason))
        .add("target", target)
        .add("status", std::int64_t{status});
    if (!who_->method.empty()) {
        r.add("method", who_->method);  // CONNECT or the HTTP method: `policy replay` re-decides
    }
    if (!path.empty()) {
        r.add("path", path);
    }
    if (reason == config::deny_reason::private_address && !resolved.empty()) {
        r.add("resolved", resolved);
    }
    if (!sni.empty()) {
        r.add("sni", sni);
    }
    std::string().swap(resolved);
    sink_->write(std::move(r));
    state_ = state::ended;
}

void request_log::error(int status, std::string_view message) {
    if (state_ == state::ended) {
        return;
    }
    std::string().swap(resolved);  // not audited here: never carried to a later record
    auto r = make("conn.error");
    r.add("target", target).add("status", std::int64_t{status}).add("message", message);
    sink_->write(std::move(r));
    if (state_ == state::fresh) {
        state_ = state::ended;
    }
}

void request_log::close(std::string_view reason) {
    if (state_ == state::open) {
        write_close(reason);
    } else {
        finish();
    }
}

void request_log::finish() {
    if (state_ == state::open) {
        write_close(closed_by_->empty() ? std::string_view("error") : *closed_by_);
        return;
    }
    if (state_ == state::ended) {
        return;
    }
    // Never answered: closed from outside while resolving or connecting, or the client
    // went away before its answer.
    if (!closed_by_->empty()) {
        auto r = make("conn.deny");
        r.add("reason", *closed_by_).add("target", target);
        if (!who_->method.empty()) {
            r.add("method", who_->method);
        }
        sink_->write(std::move(r));
    } else {
        auto r = make("conn.error");
        r.add("target", target).add("message", "closed before an answer");
        sink_->write(std::move(r));
    }
    state_ = state::ended;
}

void request_log::write_close(std::string_view reason, std::string_view sni) {
    auto r = make("conn.close");
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    r.add("target", target)
        .add("method", who_->method)
        .add_formatted("ip", ip)
        .add("bytes_up", bytes_up)
        .add("bytes_down", bytes_down)
        .add("duration_ms", static_cast<std::int64_t>(ms.count()))
        .add("reason", reason);
    if (!sni.empty()) {
        r.add("sni", sni);
    }
    sink_->write(std::move(r));
    state_ = state::ended;
}

}  // namespace cordon::proxy::data
