#include "shims/relay.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <iostream>
#include <memory>

#include "common/accept_loop.hpp"
#include "dns/wire.hpp"

namespace cordon::shim {
namespace {

namespace net = boost::asio;
using net::awaitable;
using net::ip::tcp;
using net::ip::udp;
using namespace net::experimental::awaitable_operators;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

// Bounds: a sandbox cannot make the shim hold more than this many relayed queries or
// connections open (fd exhaustion on the host side).
constexpr std::size_t max_dns_in_flight = 256;
constexpr std::size_t max_proxy_connections = 4096;
constexpr auto dns_timeout = std::chrono::seconds(5);        // a resolver that never answers
constexpr auto dns_tcp_lifetime = std::chrono::seconds(10);  // a DNS-over-TCP connection, whole

std::size_t proxy_connections = 0;
std::size_t dns_in_flight = 0;

tcp::endpoint to_tcp(const relay_target& t) { return {net::ip::make_address(t.host), t.port}; }

// One direction; passes the end of stream on as a half-close.
awaitable<void> transfer(tcp::socket& from, tcp::socket& to) {
    std::array<char, 16 * 1024> buf{};
    for (;;) {
        auto [ec, n] = co_await from.async_read_some(net::buffer(buf), use_nothrow);
        if (ec) {
            boost::system::error_code ignored;
            to.shutdown(tcp::socket::shutdown_send, ignored);
            co_return;
        }
        auto [wec, wn] = co_await net::async_write(to, net::buffer(buf.data(), n), use_nothrow);
        (void)wn;
        if (wec) {
            boost::system::error_code ignored;
            from.shutdown(tcp::socket::shutdown_receive, ignored);
            co_return;
        }
    }
}

awaitable<void> proxy_session(tcp::socket client, tcp::endpoint target) {
    ++proxy_connections;
    tcp::socket up(client.get_executor());
    auto [ec] = co_await up.async_connect(target, use_nothrow);
    if (!ec) {
        co_await (transfer(client, up) && transfer(up, client));
    }
    --proxy_connections;
}

// Over max_proxy_connections, an accepted connection is held through the back-off and
// then closed (common::accept_loop).
awaitable<void> proxy_accept(tcp::acceptor acceptor, tcp::endpoint target) {
    co_await common::accept_loop(acceptor, [&acceptor, &target](tcp::socket& s) {
        if (proxy_connections >= max_proxy_connections) {
            return common::after_accept::back_off;
        }
        net::co_spawn(acceptor.get_executor(), proxy_session(std::move(s), target), net::detached);
        return common::after_accept::next;
    });
}

// One UDP query: ask cordon over a fresh socket (its own source port), answer the sandbox.
awaitable<void> dns_udp_query(udp::socket& listener, udp::endpoint client,
                              std::vector<std::uint8_t> query, udp::endpoint resolver) {
    ++dns_in_flight;
    udp::socket s(listener.get_executor());
    boost::system::error_code ec;
    s.open(resolver.protocol(), ec);
    std::array<std::uint8_t, 4096> buf{};  // cordon answers within its EDNS size, 1232
    if (!ec) {
        auto [sec, sn] = co_await s.async_send_to(net::buffer(query), resolver, use_nothrow);
        (void)sn;
        if (!sec) {
            net::steady_timer timer(s.get_executor(), dns_timeout);
            udp::endpoint from;
            auto r = co_await (s.async_receive_from(net::buffer(buf), from, use_nothrow) ||
                               timer.async_wait(use_nothrow));
            if (r.index() == 0) {
                auto [rec, rn] = std::get<0>(r);
                if (!rec && from == resolver) {
                    auto [aec, an] = co_await listener.async_send_to(net::buffer(buf.data(), rn),
                                                                     client, use_nothrow);
                    (void)aec;
                    (void)an;
                }
            }
        }
    }
    --dns_in_flight;
}

awaitable<void> dns_udp_serve(udp::socket listener, std::optional<udp::endpoint> resolver,
                              std::string option) {
    std::array<std::uint8_t, 65535> buf{};
    for (;;) {
        udp::endpoint client;
        auto [ec, n] = co_await listener.async_receive_from(net::buffer(buf), client, use_nothrow);
        if (ec == net::error::operation_aborted) {
            co_return;
        }
        if (ec) {
            continue;
        }
        dns_rewrite r = rewrite_dns_query({buf.data(), n}, option);
        if (!r.answer_locally && !resolver) {
            const auto parsed = dns::parse_query({buf.data(), n});
            r.message = dns::build_error(parsed.value, dns::rcode::refused);
            r.answer_locally = true;
        }
        if (r.answer_locally) {
            if (!r.message.empty()) {
                auto [sec, sn] = co_await listener.async_send_to(net::buffer(r.message), client,
                                                                 use_nothrow);
                (void)sec;
                (void)sn;
            }
            continue;
        }
        if (dns_in_flight >= max_dns_in_flight) {
            continue;  // dropped: the client retries
        }
        net::co_spawn(listener.get_executor(),
                      dns_udp_query(listener, client, std::move(r.message), *resolver),
                      net::detached);
    }
}

awaitable<bool> read_framed(tcp::socket& s, std::vector<std::uint8_t>& out) {
    std::array<std::uint8_t, 2> len{};
    auto [ec, n] = co_await net::async_read(s, net::buffer(len), use_nothrow);
    (void)n;
    if (ec) {
        co_return false;
    }
    out.resize(static_cast<std::size_t>(len[0]) << 8 | len[1]);
    auto [ec2, n2] = co_await net::async_read(s, net::buffer(out), use_nothrow);
    (void)n2;
    co_return !ec2;
}

awaitable<bool> write_framed(tcp::socket& s, const std::vector<std::uint8_t>& msg) {
    const std::array<std::uint8_t, 2> len{static_cast<std::uint8_t>(msg.size() >> 8),
                                          static_cast<std::uint8_t>(msg.size() & 0xff)};
    const std::array<net::const_buffer, 2> bufs{net::buffer(len), net::buffer(msg)};
    auto [ec, n] = co_await net::async_write(s, bufs, use_nothrow);
    (void)n;
    co_return !ec;
}

awaitable<void> dns_tcp_session(tcp::socket client, std::optional<tcp::endpoint> resolver,
                                std::string option) {
    ++proxy_connections;
    tcp::socket up(client.get_executor());
    bool connected = false;
    std::vector<std::uint8_t> q;
    std::vector<std::uint8_t> a;
    // One deadline for the connection's whole life, as cordon's own DNS-over-TCP has: a
    // sandbox dripping a byte at a time holds no relay slot for longer.
    net::steady_timer deadline(client.get_executor(), dns_tcp_lifetime);
    for (;;) {
        auto got = co_await (read_framed(client, q) || deadline.async_wait(use_nothrow));
        if (got.index() != 0 || !std::get<0>(got)) {
            break;
        }
        dns_rewrite r = rewrite_dns_query(q, option);
        if (!r.answer_locally && !resolver) {
            r.message = dns::build_error(dns::parse_query(q).value, dns::rcode::refused);
            r.answer_locally = true;
        }
        if (r.answer_locally) {
            if (r.message.empty() || !co_await write_framed(client, r.message)) {
                break;
            }
            continue;
        }
        if (!connected) {
            auto [cec] = co_await up.async_connect(*resolver, use_nothrow);
            if (cec) {
                break;
            }
            connected = true;
        }
        if (!co_await write_framed(up, r.message)) {
            break;
        }
        net::steady_timer timer(client.get_executor(), dns_timeout);
        auto res = co_await (read_framed(up, a) || timer.async_wait(use_nothrow));
        if (res.index() != 0 || !std::get<0>(res)) {
            break;
        }
        if (!co_await write_framed(client, a)) {
            break;
        }
    }
    --proxy_connections;
}

awaitable<void> dns_tcp_accept(tcp::acceptor acceptor, std::optional<tcp::endpoint> resolver,
                               std::string option) {
    co_await common::accept_loop(acceptor, [&](tcp::socket& s) {
        if (proxy_connections >= max_proxy_connections) {
            return common::after_accept::back_off;
        }
        net::co_spawn(acceptor.get_executor(), dns_tcp_session(std::move(s), resolver, option),
                      net::detached);
        return common::after_accept::next;
    });
}

}  // namespace

dns_rewrite rewrite_dns_query(std::span<const std::uint8_t> query, const std::string& option) {
    const dns::parse_result p = dns::parse_query(query);
    dns_rewrite out;
    if (p.status != dns::parse_status::good) {
        out.answer_locally = true;
        out.message = dns::build_error(p.value, p.error);
        return out;
    }
    const std::array<dns::edns_option, 1> opts{dns::edns_option{dns::edns_session_option, option}};
    out.message = dns::build_query(p.value.q.name, p.value.q.qtype, p.value.id, true, opts);
    if (out.message.empty()) {
        out.answer_locally = true;
        out.message = dns::build_error(p.value, dns::rcode::formerr);
    }
    return out;
}

void start_proxy_relay(boost::asio::io_context& ioc, int listen_fd, const relay_target& proxy) {
    tcp::acceptor acceptor(ioc);
    acceptor.assign(tcp::v4(), listen_fd);
    net::co_spawn(ioc, proxy_accept(std::move(acceptor), to_tcp(proxy)), net::detached);
}

void start_dns_relay(boost::asio::io_context& ioc, int udp_fd, int tcp_fd,
                     const std::optional<relay_target>& dns, const std::string& session_option) {
    std::optional<udp::endpoint> uep;
    std::optional<tcp::endpoint> tep;
    if (dns) {
        uep = udp::endpoint(net::ip::make_address(dns->host), dns->port);
        tep = to_tcp(*dns);
    }
    if (udp_fd >= 0) {
        udp::socket s(ioc);
        s.assign(udp::v4(), udp_fd);
        net::co_spawn(ioc, dns_udp_serve(std::move(s), uep, session_option), net::detached);
    }
    if (tcp_fd >= 0) {
        tcp::acceptor a(ioc);
        a.assign(tcp::v4(), tcp_fd);
        net::co_spawn(ioc, dns_tcp_accept(std::move(a), tep, session_option), net::detached);
    }
}

}  // namespace cordon::shim
