// resolve -> classify -> connect (dialer.hpp).

#include "proxy/data/dialer.hpp"

#include <memory>
#include <utility>
#include <vector>

#include "config/host.hpp"
#include "dns/asio_address.hpp"

namespace cordon::proxy::data {
namespace {

using steady = std::chrono::steady_clock;

double ms_since(steady::time_point t0) {
    return std::chrono::duration<double, std::milli>(steady::now() - t0).count();
}

std::string joined(const std::vector<config::ip_address>& addresses) {
    std::string out;
    for (const auto& a : addresses) {
        out += (out.empty() ? "" : " ") + a.to_string();
    }
    return out;
}

}  // namespace

upstream_target make_target(std::string_view host, std::uint16_t port, std::string text) {
    upstream_target t;
    t.host = std::string(host);
    t.port = port;
    t.text = std::move(text);
    const config::literal lit = config::parse_literal(host);
    if (lit.kind == config::literal_kind::ipv4 || lit.kind == config::literal_kind::ipv6) {
        t.literal = lit.address;
    }
    const config::host_result norm = config::normalise_host(host);
    t.name = norm.ok() ? norm.value : t.host;
    return t;
}

awaitable<dns::resolve_result> dns_resolver::resolve(const std::string& name) {
    // Named, not a temporary: GCC 12 destroys non-trivial temporaries of a co_await
    // full-expression twice (GCC PR 100611), so no coroutine here passes one.
    auto initiation = [this, &name](auto handler) {
        auto shared = std::make_shared<decltype(handler)>(std::move(handler));
        r_.async_resolve(name, [shared](dns::resolve_result r) {
            auto ex = net::get_associated_executor(*shared);
            net::dispatch(ex, [shared, r = std::move(r)]() mutable { (*shared)(std::move(r)); });
        });
    };
    co_return co_await net::async_initiate<const net::use_awaitable_t<>&,
                                           void(dns::resolve_result)>(initiation,
                                                                      net::use_awaitable);
}

awaitable<error_code> stream_connector::connect(const tcp::endpoint& to,
                                                std::chrono::milliseconds timeout) {
    error_code ignored;
    s_.socket().close(ignored);
    s_.expires_after(timeout);
    auto [ec] = co_await s_.async_connect(to, use_nothrow);
    s_.expires_never();
    if (!ec) {
        s_.socket().set_option(tcp::no_delay(true), ignored);
    }
    co_return ec;
}

config::deny_reason classify(const config::decision& allowed, bool literal,
                             std::span<const config::ip_address> addresses,
                             const control::self_addresses& self, std::uint16_t port) {
    if (!literal) {
        const config::decision checked = config::check_addresses(allowed, addresses);
        if (!checked.allowed()) {
            return checked.reason;
        }
    }
    for (const auto& a : addresses) {
        if (self.is_self(a, port)) {
            return config::deny_reason::private_address;  // never connect to ourselves
        }
    }
    return config::deny_reason::none;
}

awaitable<dial_result> upstream_dialer::dial(const upstream_target& t,
                                             const config::decision& allowed,
                                             const std::function<bool()>& aborted) {
    dial_result r;
    // Phase: resolve (an IP literal is its own answer).
    const auto t0 = steady::now();
    std::vector<config::ip_address> addresses;
    if (t.literal) {
        addresses = {*t.literal};
        if (t.pinned) {
            r.resolved = t.literal->to_string();
        }
    } else {
        dns::resolve_result found = co_await resolver_.resolve(t.name);
        if (aborted()) {
            // Closed while resolving: a kill cancels the lookup, whose error is then not
            // the upstream's fault (no 502); the close's reason is the record.
            co_return r;
        }
        if (!found.error.empty()) {
            r.status = dial_status::unresolved;
            r.http_status = 502;
            r.message = "cannot resolve " + t.host + ": " + found.error;
            co_return r;
        }
        addresses = std::move(found.addresses);
        // Every address is checked and audited: `policy suggest` learns them all and
        // `policy replay` checks them all, as classify does.
        r.resolved = joined(addresses);
    }
    // Phase: classify.
    r.reason = classify(allowed, t.literal && !t.pinned, addresses, self_, t.port);
    if (r.reason != config::deny_reason::none) {
        r.status = dial_status::denied;
        co_return r;
    }
    r.dns_ms = ms_since(t0);
    // Phase: connect, each checked address in turn.
    const auto c0 = steady::now();
    error_code last = net::error::host_not_found;
    for (const auto& a : addresses) {
        if (aborted()) {
            co_return r;  // closed while resolving or connecting: status aborted
        }
        const tcp::endpoint to(dns::to_asio(a), t.port);  // named: GCC PR 100611
        const error_code ec = co_await connector_.connect(to, timeout_);
        if (aborted()) {
            co_return r;  // never use an upstream connected after a kill
        }
        if (!ec) {
            r.status = dial_status::connected;
            r.address = a;
            r.connect_ms = ms_since(c0);
            co_return r;
        }
        last = ec;
    }
    const bool timeout = last == beast::error::timeout;
    r.status = dial_status::unreachable;
    r.http_status = timeout ? 504 : 502;
    r.message = timeout
                    ? "timed out connecting to " + t.text + connector_.detail()
                    : "cannot connect to " + t.text + ": " + last.message() + connector_.detail();
    co_return r;
}

}  // namespace cordon::proxy::data
