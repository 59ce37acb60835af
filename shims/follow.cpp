#include "shims/follow.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>

#include <array>
#include <memory>

namespace cordon::shim {
namespace {

namespace net = boost::asio;
using net::awaitable;
using net::ip::tcp;
using namespace net::experimental::awaitable_operators;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

constexpr std::size_t max_line = 64 * 1024;
// cordon sends a keepalive comment every 15 s: a stream silent for longer is dead.
constexpr auto silence_limit = std::chrono::seconds(20);
constexpr auto retry_every = std::chrono::milliseconds(250);

std::string field(const boost::json::object& o, const char* key) {
    if (const auto* v = o.if_contains(key); v != nullptr && v->is_string()) {
        return std::string(v->as_string());
    }
    return {};
}

struct follower {
    follow_options o;
    std::function<void(std::string)> on_kill;
    std::function<void()> on_connected;
    std::string last_id;
    bool done = false;
    std::chrono::steady_clock::time_point lost_since{};
    bool lost = false;
    /// The last read of an open stream's body: a resume.lost event covers the gap since.
    std::chrono::steady_clock::time_point heard = std::chrono::steady_clock::now();

    void kill(std::string why) {
        if (!done) {
            done = true;
            on_kill(std::move(why));
        }
    }

    // One connection: returns when it breaks.
    awaitable<void> stream_once() {
        auto ex = co_await net::this_coro::executor;
        tcp::resolver resolver(ex);
        auto [rec, results] = co_await resolver.async_resolve(o.host, o.port, use_nothrow);
        if (rec) {
            co_return;
        }
        tcp::socket s(ex);
        auto [cec, ep] = co_await net::async_connect(s, results, use_nothrow);
        (void)ep;
        if (cec) {
            co_return;
        }
        // lifeline: should this shim die, cordon ends the session once the stream has been
        // gone for the same grace the shim itself allows (docs/shim.md).
        std::string req = "GET /v1/events?session=" + o.session +
                          "&lifeline=" + std::to_string(o.grace.count()) + "ms" +
                          " HTTP/1.1\r\nHost: " + o.host + ":" + o.port +
                          "\r\nAuthorization: Bearer " + o.token +
                          "\r\nAccept: text/event-stream\r\nUser-Agent: cordon-run\r\n";
        if (!last_id.empty()) {
            req += "Last-Event-ID: " + last_id + "\r\n";
        }
        req += "\r\n";
        auto [wec, wn] = co_await net::async_write(s, net::buffer(req), use_nothrow);
        (void)wn;
        if (wec) {
            co_return;
        }
        std::string head;
        bool in_body = false;
        sse_parser parser;
        std::array<char, 8192> buf{};
        for (;;) {
            net::steady_timer silence(ex, silence_limit);
            auto r = co_await (s.async_read_some(net::buffer(buf), use_nothrow) ||
                               silence.async_wait(use_nothrow));
            if (r.index() != 0) {
                co_return;  // silent too long
            }
            auto [ec, n] = std::get<0>(r);
            if (ec) {
                co_return;
            }
            std::string_view chunk(buf.data(), n);
            if (!in_body) {
                head.append(chunk);
                const auto end = head.find("\r\n\r\n");
                if (end == std::string::npos) {
                    if (head.size() > 16 * 1024) {
                        co_return;
                    }
                    continue;
                }
                if (!head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200")) {
                    co_return;  // 401 and the like: retried until the grace runs out
                }
                in_body = true;
                lost = false;
                if (on_connected) {
                    on_connected();
                }
                chunk = std::string_view(head).substr(end + 4);
                std::vector<sse_event> events;
                parser.feed(chunk, events);
                handle(events);
                continue;
            }
            std::vector<sse_event> events;
            parser.feed(chunk, events);
            handle(events);
            if (done) {
                co_return;
            }
            heard = std::chrono::steady_clock::now();
        }
    }

    void handle(const std::vector<sse_event>& events) {
        for (const auto& e : events) {
            if (!e.id.empty()) {
                last_id = e.id;
            }
            if (e.type == "resume.lost") {
                const auto down = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - heard);
                if (auto why = resume_lost_reason(e, o.session, down)) {
                    kill(std::move(*why));
                    return;
                }
                continue;
            }
            if (auto why = kill_reason(e, o.session)) {
                kill(std::move(*why));
                return;
            }
        }
    }

    awaitable<void> run() {
        auto ex = co_await net::this_coro::executor;
        while (!done) {
            co_await stream_once();
            if (done) {
                co_return;
            }
            const auto now = std::chrono::steady_clock::now();
            if (!lost) {
                lost = true;
                lost_since = now;
            } else if (now - lost_since >= o.grace) {
                kill("lost the admin API for " +
                     std::to_string(
                         std::chrono::duration_cast<std::chrono::milliseconds>(now - lost_since)
                             .count()) +
                     " ms (fail closed)");
                co_return;
            }
            net::steady_timer t(ex, retry_every);
            co_await t.async_wait(use_nothrow);
        }
    }
};

// Keeps the follower alive as long as its coroutine runs.
awaitable<void> run_follower(std::shared_ptr<follower> f) { co_await f->run(); }

}  // namespace

void sse_parser::feed(std::string_view bytes, std::vector<sse_event>& out) {
    for (const char c : bytes) {
        if (c == '\n') {
            std::string_view l = partial_;
            if (l.ends_with('\r')) {
                l.remove_suffix(1);
            }
            line(l, out);
            partial_.clear();
        } else if (partial_.size() < max_line) {
            partial_.push_back(c);
        }
    }
}

void sse_parser::line(std::string_view l, std::vector<sse_event>& out) {
    if (l.empty()) {
        // An id-only block is kept too: cordon sends one first, the point a stream that
        // breaks before its first event resumes from.
        if (!current_.type.empty() || !current_.data.empty() || !current_.id.empty()) {
            out.push_back(std::move(current_));
        }
        current_ = {};
        return;
    }
    if (l.front() == ':') {
        return;
    }
    const auto colon = l.find(':');
    const std::string_view name = l.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? std::string_view{}
                                                             : l.substr(colon + 1);
    if (value.starts_with(' ')) {
        value.remove_prefix(1);
    }
    if (name == "event") {
        current_.type.assign(value);
    } else if (name == "data") {
        if (!current_.data.empty()) {
            current_.data.push_back('\n');
        }
        if (current_.data.size() + value.size() <= max_line) {
            current_.data.append(value);
        }
    } else if (name == "id") {
        current_.id.assign(value);
    }
}

std::optional<std::string> kill_reason(const sse_event& e, std::string_view session) {
    boost::system::error_code ec;
    const auto v = boost::json::parse(e.data, ec);
    boost::json::object o;
    if (!ec && v.is_object()) {
        o = v.as_object();
    }
    const std::string s = field(o, "session");
    const std::string by = field(o, "by");
    const std::string reason = field(o, "reason");
    const std::string who = (by.empty() ? "" : " by " + by) + (reason.empty() ? "" : ": " + reason);
    if (e.type == "kill.network") {
        return "network kill" + who;
    }
    if (e.type == "kill.session" && s == session) {
        return "session killed" + who;
    }
    if (e.type == "session.end" && s == session) {
        return "session ended" + who;
    }
    return std::nullopt;
}

std::optional<std::string> resume_lost_reason(const sse_event& e, std::string_view session,
                                              std::chrono::milliseconds down_for) {
    const std::string unknown = "the event stream lost its place and cordon's account of the "
                                "gap is unreadable (fail closed)";
    boost::system::error_code ec;
    const auto v = boost::json::parse(e.data, ec);
    if (ec || !v.is_object()) {
        return unknown;
    }
    const auto& o = v.as_object();
    const auto* kill = o.if_contains("kill");
    if (kill == nullptr || !kill->is_object()) {
        return unknown;
    }
    const auto* engaged = kill->as_object().if_contains("engaged");
    if (engaged == nullptr || !engaged->is_bool()) {
        return unknown;
    }
    if (engaged->as_bool()) {
        return std::string("network kill (engaged while the event stream was down)");
    }
    if (!session.empty()) {
        const auto* s = o.if_contains("session");
        const std::string state = s != nullptr && s->is_object() ? field(s->as_object(), "state")
                                                                 : std::string();
        if (state.empty()) {
            return unknown;
        }
        if (state != "active") {
            return "session " + state + " while the event stream was down";
        }
    }
    const auto* ago = kill->as_object().if_contains("changed_ms_ago");
    if (ago == nullptr) {
        return unknown;
    }
    if (!ago->is_null()) {
        if (!ago->is_int64() && !ago->is_uint64()) {
            return unknown;
        }
        const auto slack = std::chrono::seconds(1);
        if (ago->to_number<std::int64_t>() <= (down_for + slack).count()) {
            return std::string("the network kill switch changed while the event stream was "
                               "down: a kill may have been missed (fail closed)");
        }
    }
    return std::nullopt;
}

void start_follow(boost::asio::io_context& ioc, const follow_options& o,
                  std::function<void(std::string)> on_kill, std::function<void()> on_connected) {
    auto f = std::make_shared<follower>();
    f->o = o;
    f->on_kill = std::move(on_kill);
    f->on_connected = std::move(on_connected);
    net::co_spawn(ioc, run_follower(std::move(f)), net::detached);
}

}  // namespace cordon::shim
