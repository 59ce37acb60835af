#include "proxy/alerts/webhook.hpp"

#include <openssl/ssl.h>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>

#include <future>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "common/asio.hpp"
#include "common/bounded_queue.hpp"
#include "common/error_text.hpp"
#include "common/time.hpp"
#include "config/http_url.hpp"
#include "config/ip.hpp"
#include "config/units.hpp"
#include "proxy/alerts/alert_payload.hpp"
#include "proxy/alerts/denial_bursts.hpp"
#include "proxy/alerts/webhook_retry.hpp"

namespace cordon::proxy::alerts {

namespace {

namespace ssl = net::ssl;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

constexpr auto tick_period = 50ms;
constexpr std::size_t max_response_header = 16 * 1024;

std::int64_t mono_ms() {
    return std::chrono::duration_cast<milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::int64_t wall_ms() {
    return std::chrono::duration_cast<milliseconds>(common::wall_clock::now().time_since_epoch())
        .count();
}

burst_settings settings_of(const config::webhook_spec& w) {
    burst_settings s;
    s.interval = w.interval;
    s.max_per_minute = w.max_per_minute;
    s.burst_threshold = w.burst_threshold;
    s.burst_window = w.burst_window;
    return s;
}

// Without a webhook: bursts only, with the defaults of alerts.webhook's burst keys.
burst_settings detect_only() {
    burst_settings s = settings_of(config::webhook_spec{});
    s.windows = false;
    return s;
}

/// Where alerts go: the parsed URL, the settings and (https) the TLS context. Immutable;
/// deliveries in flight keep the one they started with across a reload.
struct sink {
    config::webhook_spec spec;
    config::http_url url;
    std::string origin;  ///< scheme://host[:port]: the only form of the URL that is logged
    std::unique_ptr<ssl::context> tls;
};

struct attempt_result {
    delivery_outcome outcome = delivery_outcome::retry;
    std::string error;
    std::optional<milliseconds> retry_after;
};

std::string describe(const error_code& ec, std::string_view step) {
    if (ec == beast::error::timeout || ec == net::error::operation_aborted) {
        return std::string(step) + ": timeout";
    }
    return std::string(step) + ": " + ec.message();
}

// Writes the request and reads the answer's head (the body is not needed).
template <class Stream>
awaitable<attempt_result> exchange(Stream& stream, http::request<http::string_body>& req) {
    auto [wec, written] = co_await http::async_write(stream, req, use_nothrow);
    static_cast<void>(written);
    if (wec) {
        co_return attempt_result{delivery_outcome::retry, describe(wec, "send"), {}};
    }
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.header_limit(max_response_header);
    auto [rec, read] = co_await http::async_read_header(stream, buffer, parser, use_nothrow);
    static_cast<void>(read);
    if (rec) {
        co_return attempt_result{delivery_outcome::retry, describe(rec, "response"), {}};
    }
    const auto& res = parser.get();
    attempt_result r;
    r.outcome = outcome_of_status(res.result_int());
    r.error = "HTTP " + std::to_string(res.result_int());
    if (const auto it = res.find(http::field::retry_after); it != res.end()) {
        const std::string_view value(it->value().data(), it->value().size());
        r.retry_after = parse_retry_after(value, common::wall_clock::now());
    }
    co_return r;
}

}  // namespace

struct denial_notifier::impl {
    explicit impl(callbacks c) : cb(std::move(c)) {}

    callbacks cb;
    std::atomic<bool> enabled{false};  // a webhook is set
    std::atomic<bool> running{false};  // submit() queues: configured once, not stopped
    std::atomic<bool> stopped{false};
    std::unique_ptr<common::bounded_queue<denial_event>> queue;  // made once, before running
    std::atomic<std::uint64_t> dropped{0};
    std::atomic<std::uint64_t> delivered{0};
    std::atomic<std::uint64_t> failed{0};
    std::string last_configured;  // the control thread's last configure() message

    // The notifier thread only.
    std::shared_ptr<const sink> current;
    denial_bursts bursts{detect_only()};
    std::uint64_t dropped_reported = 0;
    std::size_t in_flight = 0;
    bool flushing = false;
    std::chrono::steady_clock::time_point flush_deadline{};
    std::vector<net::steady_timer*> backing_off;
    std::mt19937_64 rng{std::random_device{}()};
    std::int64_t last_said_ms = std::numeric_limits<std::int64_t>::min() / 2;
    std::uint64_t unsaid = 0;

    std::thread thread;
    // Last: destroyed first, with any delivery still suspended in it, while the members
    // above that its coroutines use are whole.
    net::io_context ioc{1};
    net::executor_work_guard<net::io_context::executor_type> keep_running{ioc.get_executor()};
    net::steady_timer tick{ioc};

    void drain() {
        if (!queue) {
            return;
        }
        denial_event e;
        // Bounded: at most two queues' worth per tick, so a flood cannot starve the sender.
        // Without a webhook (no `current`) the settings keep no windows: bursts only.
        for (std::size_t i = 0; i < 2 * queue_capacity && queue->try_pop(e); ++i) {
            if (bursts.add(e) && cb.on_burst) {
                cb.on_burst(e.job);
            }
        }
        const std::uint64_t d = dropped.load(std::memory_order_relaxed);
        if (d > dropped_reported) {
            bursts.count_dropped(d - dropped_reported);
            dropped_reported = d;
        }
    }

    // Drains the queue, then starts a delivery for each window that is due.
    void step() {
        drain();
        if (!current) {
            bursts.forget_idle(mono_ms());  // what take_due() does with a webhook
            return;
        }
        if (in_flight >= max_in_flight) {
            return;
        }
        const std::size_t room = max_in_flight - in_flight;
        std::vector<denial_alert> due = flushing ? bursts.take_all(mono_ms(), room)
                                                 : bursts.take_due(mono_ms(), room);
        for (auto& a : due) {
            ++in_flight;
            net::co_spawn(ioc, deliver(current, std::move(a)), net::detached);
        }
    }

    awaitable<void> run_ticks() {
        for (;;) {
            tick.expires_after(tick_period);
            auto [ec] = co_await tick.async_wait(use_nothrow);
            if (ec || flushing) {
                co_return;
            }
            step();
        }
    }

    // The end of one attempt: now + timeout, or the flush deadline when that is sooner.
    std::chrono::steady_clock::time_point attempt_deadline(const sink& s) const {
        auto d = std::chrono::steady_clock::now() + s.spec.timeout;
        if (flushing && flush_deadline < d) {
            d = flush_deadline;
        }
        return d;
    }

    awaitable<attempt_result> attempt(const sink& s, const std::string& body) {
        auto ex = co_await net::this_coro::executor;
        const auto deadline = attempt_deadline(s);
        tcp::resolver resolver(ex);
        net::steady_timer guard(ex);
        guard.expires_at(deadline);
        guard.async_wait([&resolver](error_code ec) {
            if (!ec) {
                resolver.cancel();
            }
        });
        const std::string port = std::to_string(s.url.port);
        auto [rec, endpoints] = co_await resolver.async_resolve(s.url.host, port, use_nothrow);
        guard.cancel();
        if (rec) {
            co_return attempt_result{delivery_outcome::retry, describe(rec, "resolve"), {}};
        }
        beast::tcp_stream tcp_stream(ex);
        tcp_stream.expires_at(deadline);
        auto [cec, ep] = co_await tcp_stream.async_connect(endpoints, use_nothrow);
        static_cast<void>(ep);
        if (cec) {
            co_return attempt_result{delivery_outcome::retry, describe(cec, "connect"), {}};
        }
        http::request<http::string_body> req{http::verb::post, s.url.target, 11};
        req.set(http::field::host, s.url.host_header());
        req.set(http::field::user_agent, "cordon/" CORDON_VERSION);
        req.set(http::field::content_type, "application/json");
        req.set(http::field::connection, "close");
        for (const auto& [name, value] : s.spec.headers) {
            req.set(name, value);
        }
        req.body() = body;
        req.prepare_payload();
        if (!s.url.tls) {
            co_return co_await exchange(tcp_stream, req);
        }
        beast::ssl_stream<beast::tcp_stream> tls(std::move(tcp_stream), *s.tls);
        const bool literal = s.url.ipv6 || config::parse_ip(s.url.host).has_value();
        if (!literal) {
            // SNI (SSL_set_tlsext_host_name is a macro with a C cast).
            SSL_ctrl(tls.native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                     const_cast<char*>(s.url.host.c_str()));
        }
        tls.set_verify_mode(ssl::verify_peer);
        tls.set_verify_callback(ssl::host_name_verification(s.url.host));
        auto [hec] = co_await tls.async_handshake(ssl::stream_base::client, use_nothrow);
        if (hec) {
            co_return attempt_result{delivery_outcome::retry, describe(hec, "TLS handshake"), {}};
        }
        co_return co_await exchange(tls, req);
    }

    awaitable<void> deliver(std::shared_ptr<const sink> s, denial_alert a) {
        const std::string body = alert_payload(a, s->spec.interval.count());
        attempt_result r;
        unsigned attempts = 0;
        for (;;) {
            ++attempts;
            r = co_await attempt(*s, body);
            if (r.outcome != delivery_outcome::retry || attempts > s->spec.retries || flushing) {
                break;
            }
            std::uniform_real_distribution<double> unit(0.0, 1.0);
            const auto delay = retry_delay(attempts, unit(rng), r.retry_after);
            net::steady_timer wait(ioc);
            wait.expires_after(delay);
            backing_off.push_back(&wait);
            co_await wait.async_wait(use_nothrow);  // cut short by a flush: one last attempt
            std::erase(backing_off, &wait);
        }
        --in_flight;
        if (r.outcome == delivery_outcome::delivered) {
            ++delivered;
            co_return;
        }
        ++failed;
        delivery_failure f{s->origin, a.job, a.session, a.denials, attempts, r.error};
        say_failure(f);
        if (cb.on_failure) {
            cb.on_failure(f);
        }
    }

    // stderr: at most one line a minute (each failure is in the audit log).
    void say_failure(const delivery_failure& f) {
        const std::int64_t now = mono_ms();
        if (now - last_said_ms < 60'000) {
            ++unsaid;
            return;
        }
        last_said_ms = now;
        std::cerr << "cordon: webhook " << f.webhook << ": an alert (" << f.denials
                  << " denials) was not delivered after " << f.attempts
                  << (f.attempts == 1 ? " attempt: " : " attempts: ") << f.error;
        if (unsaid > 0) {
            std::cerr << " (" << unsaid << " more failures since the last message)";
            unsaid = 0;
        }
        std::cerr << '\n';
    }

    // The control thread: the queue, then the thread, once; submit() queues from now on.
    void start() {
        if (!queue) {
            queue = std::make_unique<common::bounded_queue<denial_event>>(queue_capacity);
        }
        running.store(true, std::memory_order_release);
        if (thread.joinable()) {
            return;
        }
        net::co_spawn(ioc, run_ticks(), net::detached);
        thread = std::thread([this] {
            for (;;) {
                try {
                    ioc.run();
                    return;
                } catch (const std::exception& e) {
                    std::cerr << "cordon: webhook: " << common::without_location(e) << '\n';
                }
            }
        });
    }

    // Runs on the notifier thread: the flush at stop(), then `done`.
    void flush(std::shared_ptr<std::promise<void>> done) {
        flushing = true;
        tick.cancel();
        for (auto* t : backing_off) {
            t->cancel();
        }
        net::co_spawn(
            ioc,
            [this, done]() -> awaitable<void> {
                net::steady_timer t(ioc);
                while (std::chrono::steady_clock::now() < flush_deadline) {
                    step();  // rate-limited; the windows left are lost
                    if (in_flight == 0) {
                        break;
                    }
                    t.expires_after(20ms);
                    co_await t.async_wait(use_nothrow);
                }
                done->set_value();
            },
            net::detached);
    }
};

denial_notifier::denial_notifier(callbacks cb) : impl_(std::make_unique<impl>(std::move(cb))) {}

denial_notifier::~denial_notifier() { stop(milliseconds(0)); }

void denial_notifier::configure(const std::optional<config::webhook_spec>& spec) {
    impl& m = *impl_;
    if (m.stopped.load()) {
        return;
    }
    if (!spec) {
        if (m.enabled.exchange(false)) {
            std::cerr << "cordon: webhook: off\n";
        }
        net::post(m.ioc, [&m] {
            m.current.reset();
            m.bursts.configure(detect_only());  // discards open windows; bursts go on
        });
        m.start();
        return;
    }
    auto s = std::make_shared<sink>();
    s->spec = *spec;
    config::http_url_result u = config::parse_http_url(spec->url);
    if (!u.value) {
        // The loader checked it; never print the URL itself.
        std::cerr << "cordon: webhook: " << u.error << "; alerts are off\n";
        configure(std::nullopt);
        return;
    }
    s->url = std::move(*u.value);
    s->origin = s->url.origin();
    if (s->url.tls) {
        s->tls = std::make_unique<ssl::context>(ssl::context::tls_client);
        s->tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                            ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                            ssl::context::no_tlsv1_1);
        s->tls->set_verify_mode(ssl::verify_peer);
        error_code ec;
        s->tls->set_default_verify_paths(ec);
        if (ec) {
            std::cerr << "cordon: webhook: cannot load the system CA certificates (" << ec.message()
                      << "); deliveries to " << s->origin << " will fail\n";
        }
    }
    std::ostringstream said;
    said << "cordon: webhook: denial alerts go to " << s->origin << " (one per session per "
         << config::format_duration(spec->interval) << ", at most " << spec->max_per_minute
         << " a minute; a burst is " << spec->burst_threshold << " denials within "
         << config::format_duration(spec->burst_window) << ")\n";
    if (said.str() != m.last_configured || !m.enabled.load()) {
        std::cerr << said.str();  // at start, and on reloads that change something visible
        m.last_configured = said.str();
    }
    std::shared_ptr<const sink> next = std::move(s);
    net::post(m.ioc, [&m, next] {
        m.current = next;
        m.bursts.configure(settings_of(next->spec));
    });
    m.enabled.store(true, std::memory_order_release);
    m.start();
}

void denial_notifier::submit(std::string_view job, std::string_view session,
                             std::string_view reason, std::string_view target,
                             std::string_view kind, std::uint64_t count) noexcept {
    impl& m = *impl_;
    if (count == 0 || !m.running.load(std::memory_order_acquire)) {
        return;
    }
    try {
        denial_event e;
        e.job.assign(job.substr(0, 128));
        e.session.assign(session.substr(0, 128));
        e.reason.assign(reason.substr(0, 128));
        e.target.assign(target.substr(0, 256));
        e.kind.assign(kind.substr(0, 128));
        e.mono_ms = mono_ms();
        e.wall_ms = wall_ms();
        e.count = count;
        if (m.queue->try_push(e)) {
            return;
        }
    } catch (const std::bad_alloc&) {
    }
    m.dropped.fetch_add(count, std::memory_order_relaxed);
}

void denial_notifier::stop(milliseconds flush_deadline) {
    impl& m = *impl_;
    if (m.stopped.exchange(true)) {
        return;
    }
    m.enabled.store(false);
    m.running.store(false);
    if (!m.thread.joinable()) {
        return;
    }
    auto done = std::make_shared<std::promise<void>>();
    auto finished = done->get_future();
    const auto deadline = std::chrono::steady_clock::now() + flush_deadline;
    net::post(m.ioc, [&m, done, deadline] {
        m.flush_deadline = deadline;
        m.flush(done);
    });
    finished.wait_until(deadline + 500ms);
    m.ioc.stop();
    m.thread.join();
}

bool denial_notifier::enabled() const noexcept { return impl_->enabled.load(); }
std::uint64_t denial_notifier::dropped() const noexcept { return impl_->dropped.load(); }
std::uint64_t denial_notifier::delivered() const noexcept { return impl_->delivered.load(); }
std::uint64_t denial_notifier::failed() const noexcept { return impl_->failed.load(); }

}  // namespace cordon::proxy::alerts
