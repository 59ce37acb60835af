#include "proxy/control/connections.hpp"

#include <vector>

namespace cordon::proxy::control {

config::decision live_connection::check_connected(const config::decision& d) const {
    if (!d.allowed() || !address) {
        return d;
    }
    const config::ip_address one[] = {*address};
    const config::decision checked = config::check_addresses(d, one);
    if (!checked.allowed() && config::parse_ip(host)) {
        return d;  // an IP literal: decide() already judged its address
    }
    return checked;
}

awaitable<std::size_t> connection_registry::on_workers(
    const std::function<std::size_t(worker&)>& fn, const std::function<void()>& meanwhile) {
    // Every worker at once (a kill's latency is its slowest worker, not their sum); the
    // last one to finish wakes this coroutine. `fn` lives in the caller's suspended frame.
    struct progress {
        explicit progress(net::any_io_executor ex) : done(ex) {}
        std::atomic<std::size_t> pending{0};
        std::atomic<std::size_t> total{0};
        net::steady_timer done;
    };
    auto ex = co_await net::this_coro::executor;
    auto p = std::make_shared<progress>(ex);
    p->pending = workers.size();
    for (auto& w : workers) {
        w->urgent.fetch_add(1, std::memory_order_relaxed);
        net::post(w->ioc, [p, &fn, wp = w.get(), ex] {
            wp->urgent.fetch_sub(1, std::memory_order_relaxed);
            p->total += fn(*wp);
            if (--p->pending == 0) {
                net::post(ex, [p] { p->done.cancel(); });
            }
        });
    }
    if (meanwhile) {
        meanwhile();  // overlaps the workers, e.g. the kill's durable write
    }
    if (p->pending.load() > 0) {
        // The cancel is posted to this thread, so it cannot run before this wait starts.
        p->done.expires_at(net::steady_timer::time_point::max());
        co_await p->done.async_wait(use_nothrow);
    }
    co_return p->total.load();
}

awaitable<std::size_t> connection_registry::close_where(
    const std::function<bool(const live_connection&)>& pred, const std::string& why,
    const std::function<void()>& meanwhile) {
    const std::function<std::size_t(worker&)> fn = [&](worker& w) {
        std::vector<live_connection*> hit;
        for (const auto& [id, c] : w.live) {
            if (pred(*c)) {
                hit.push_back(c);
            }
        }
        // Clients first, all of them, so each sees its connection end as early as possible;
        // then the upstreams. Both before the call returns.
        for (auto* c : hit) {
            c->close_client(why);
        }
        for (auto* c : hit) {
            c->close_upstream();
        }
        return hit.size();
    };
    co_return co_await on_workers(fn, meanwhile);
}

}  // namespace cordon::proxy::control
