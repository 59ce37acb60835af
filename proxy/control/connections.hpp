#pragma once
// The data plane's threads (workers) and the live connections on them: what a kill, a
// revocation, a reload or the shutdown closes, each on its own thread. Part of runtime
// (proxy/control/runtime.hpp).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/asio.hpp"
#include "config/decide.hpp"
#include "dns/resolver.hpp"
#include "proxy/control/pipe_pool.hpp"

namespace cordon::proxy::data {
class tunnel_relay;
}

namespace cordon::proxy::control {

/// Something a kill, a revocation or a reload may have to close. Lives on one worker's
/// thread; registered there while open, and only touched from that thread.
class live_connection {
public:
    virtual ~live_connection() = default;
    /// Closes both sides now, recording `why` (a deny reason name, or "shutdown") as the
    /// close reason. Abortive (RST): nothing queued is delivered afterwards.
    void close(std::string_view why) {
        close_client(why);
        close_upstream();
    }
    /// The two halves of close(), for kills that cut every client first.
    virtual void close_client(std::string_view why) = 0;
    virtual void close_upstream() = 0;

    std::string session;  ///< empty for clients attributed by `sources`
    std::string token_id;
    std::string job;
    std::string host;  ///< as decided (normalised name or literal)
    std::uint16_t port = 0;
    config::request_kind kind = config::request_kind::connect;
    std::string method;
    /// The upstream address connected to, while there is one: a reload re-checks it
    /// against the new rule's resolves_to, as a new connection's resolution would be.
    std::optional<config::ip_address> address;

    /// `d`, the decision for this connection's request now, checked against that address:
    /// private_address when the matching rule no longer lets it reach a non-public one
    /// (config::check_addresses). A literal host's address was decided with the request.
    config::decision check_connected(const config::decision& d) const;
};

/// One data-plane thread: its io_context, resolver, relay buffer and live connections.
struct worker {
    explicit worker(std::size_t i) : index(i) {}
    // Declaration order is destruction order reversed: the io_context (and with it any
    // connection still suspended in it) goes before `live` and the buffer it uses, and the
    // resolver, which holds descriptors on the io_context, goes before the io_context.
    std::size_t index;
    std::unordered_map<std::uint64_t, live_connection*> live;
    data::tunnel_relay* relays = nullptr;  ///< established tunnels, for the idle sweep
    /// Shared by every tunnel of this thread: a relay reads into it and writes out at once;
    /// only a write that would block copies its remainder to the tunnel. So idle tunnels
    /// hold no buffer.
    std::vector<char> relay_buffer = std::vector<char>(256 * 1024);
    pipe_pool pipes;
    net::io_context ioc{1};
    /// Keeps run() going when the acceptor closes and no connection is left, so that
    /// shutdown can still post work here; released by ioc.stop() at the very end.
    net::executor_work_guard<net::io_context::executor_type> keep_running{ioc.get_executor()};
    /// The idle watchdog of this thread's established tunnels (`relays`): one timer
    /// sweeping an intrusive list (proxy/data/relay.cpp), not a timer and a wait per tunnel.
    net::steady_timer idle_sweep{ioc};
    bool sweep_armed = false;
    /// Control work (a kill, a reload's closing) posted here and not yet run. While it is
    /// non-zero a relay moves no data and yields at once, so the control handler is not
    /// queued behind a round of bulk transfers (milliseconds per busy tunnel).
    std::atomic<int> urgent{0};
    std::unique_ptr<dns::resolver> resolver;
    std::thread thread;
};

/// The workers and the connections open on them, with the two ways control work reaches
/// them: run something on every worker, or close the connections a predicate selects.
class connection_registry {
public:
    /// Runs `fn` on every worker's thread in turn and sums what it returns.
    /// Callers pass named objects, never temporaries (GCC PR 100611: see proxy/data/dialer.cpp).
    /// All workers run `fn` in parallel; `meanwhile` runs here while they do.
    awaitable<std::size_t> on_workers(const std::function<std::size_t(worker&)>& fn,
                                      const std::function<void()>& meanwhile = {});
    /// Closes every live connection `pred` selects, on its own thread; returns how many.
    awaitable<std::size_t> close_where(const std::function<bool(const live_connection&)>& pred,
                                       const std::string& why,
                                       const std::function<void()>& meanwhile = {});

    std::vector<std::unique_ptr<worker>> workers;  ///< set up by the daemon before serving
    std::atomic<std::uint64_t> next_id{1};         ///< the next client connection's id
    std::atomic<std::int64_t> open{0};             ///< client connections open, every worker
};

}  // namespace cordon::proxy::control
