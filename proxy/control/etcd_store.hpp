#pragma once
// The fleet's state_backend: sessions, token hashes, revocations, kills and the instance
// registry in etcd (docs/fleet.md), with a local copy (fleet_state) loaded at start and kept
// current by a watch, so the request path never waits on etcd: it reads the session registry
// and the kill flag as with SQLite. Writes (control thread) are committed by etcd before they
// return. Threads: the control thread (writes, applying what the watch saw, kills); a watch
// thread (the long-lived POST /v3/watch, parsed and handed to the control thread); a keepalive
// thread (the instance's lease, and whether etcd answers).

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/asio.hpp"
#include "config/cluster.hpp"
#include "proxy/control/etcd_client.hpp"
#include "proxy/control/fleet.hpp"
#include "proxy/control/fleet_state.hpp"
#include "proxy/control/state_backend.hpp"

namespace cordon::proxy::control {

class runtime;

class etcd_store final : public state_backend, public fleet {
public:
    /// Nothing is contacted yet: load() does. `password` from cluster.etcd.password_file.
    etcd_store(runtime& rt, net::io_context& control, config::cluster_spec spec,
               std::optional<std::string> password);
    ~etcd_store() override;  ///< stop()
    etcd_store(const etcd_store&) = delete;
    etcd_store& operator=(const etcd_store&) = delete;

    /// Registers this instance (leased) and starts the watch, keepalive and committer threads.
    /// After load() (or after a failed one with cluster.start_without_store: the watch loads
    /// whole once etcd answers). `admin` and `proxy` are where it listens, for the registry.
    /// False, with `error`, when another live instance is registered under this instance's
    /// name (cordon refuses to start); a dead predecessor's entry is taken over.
    bool start(const std::string& admin, const std::string& proxy, std::string& error);
    /// Stops the threads and revokes the instance's lease (it leaves the registry now).
    void stop();

    // state_backend
    const std::string& path() const noexcept override { return path_; }
    bool save_session(const stored_session& s, std::string& error) override;
    bool save_kill(const kill_state& k, std::string& error) override;
    bool save_kill_timing(const kill_timing& t, std::string& error) override;
    bool kill_timings(std::vector<kill_timing>& out, std::string& error) override;
    bool append_event(stored_event& e, std::string& error) override;
    bool load(loaded_state& out, std::string& error) override;
    std::vector<stored_event> events_after(std::uint64_t, std::string_view, std::size_t) override {
        return {};  // events are kept in memory (the last 4,096): docs/fleet.md
    }
    bool prune(common::wall_clock::time_point, std::string&) override { return true; }
    bool check(std::string& error) override;
    bool reserve_used() const override { return false; }

    // fleet
    const std::string& instance() const noexcept override { return spec_.instance; }
    void kill_id_for(const std::string& session, const std::string& kill_id) override;
    awaitable<fleet_outcome> gather(const fleet_kill& kill, const instance_confirmation& mine,
                                    std::chrono::steady_clock::time_point t0,
                                    bool persisted) override;
    bool serving() const override;
    bool store_up() const override { return up_.load(); }
    std::vector<fleet_instance> instances() const override;
    std::string describe() const override;

    /// The control thread's once-a-second look (from the daemon's sweep): store_up and
    /// instances metrics, and with fail_closed the local network kill after store_timeout.
    void tick() override;
    bool fetch_session(const std::string& id) override;
    awaitable<bool> save_new_session(const stored_session& s, std::string& error) override;

private:
    // Writes `ops` in one transaction; on success applies them to the copy at once (the
    // watch's echo then changes nothing). Fails fast while etcd is known unreachable.
    bool write(std::vector<etcd::txn_op> ops, std::string& error);
    // Calls `call` (on `client`) until it succeeds, etcd is known down, or write_retry_for
    // passed: no call runs past that deadline (the client is capped), so the caller is blocked
    // at most write_retry_for.
    template <class Call>
    bool retrying(etcd_client& client, Call&& call, std::string& error);
    std::int64_t lease_for(common::wall_clock::time_point expires_at, std::string& error);
    // The committer: writes queued by the control thread, committed by etcd on a thread of
    // their own (batched: what queued while one transaction was in flight goes in the next),
    // the control thread's coroutine resumed with the outcome. Session creates, kill records
    // and confirmations go this way; the control thread never waits on etcd for them.
    struct commit;
    enum class lease_kind : std::uint8_t { none, session, records };
    awaitable<bool> commit_async(std::vector<etcd::txn_op> ops, lease_kind lease,
                                 std::int64_t expiry_s, std::string& error);
    void committer_thread();
    // Ops etcd committed at `h`, applied to the copy unless the watch has already applied that
    // revision (and maybe what came after it).
    void apply_written(std::vector<etcd::txn_op>& ops, const etcd::header& h);
    // The watch thread hands events here (posted to the control thread).
    void on_events(const std::vector<etcd::event>& events);
    void act(const fleet_state::change& c, std::chrono::steady_clock::time_point received);
    // A whole reload: the copy replaced, what changed acted on (compaction, a late start).
    void reload_whole();
    awaitable<void> confirm(std::string kill_id, std::uint64_t closed, double elapsed_ms);
    awaitable<void> close_and_confirm(std::string session, std::string token, std::string why,
                                      std::string kill_id,
                                      std::chrono::steady_clock::time_point received);
    awaitable<void> network_and_confirm(kill_state k, std::string kill_id,
                                        std::chrono::steady_clock::time_point received);
    void watch_thread();
    void drop_watch();  // watch thread: closes the watch's connection (stop, a partition)
    void keepalive_thread();
    std::string key(const std::string& rel) const { return spec_.prefix + rel; }
    // Whether a live instance holds this instance's name in the registry (`error` says who).
    bool name_in_use(const std::string& admin, std::string& error);

    runtime& rt_;
    net::io_context& control_;
    const config::cluster_spec spec_;
    std::string path_;
    etcd_client writer_;                               // control thread only
    fleet_state copy_;                                 // control thread only
    std::set<std::string> confirmed_;                  // kill ids this instance confirmed (or gave)
    std::map<std::string, std::string> pending_kill_;  // session ("" network) -> kill id
    std::map<std::int64_t, std::int64_t> leases_;      // expiry second -> lease id
    std::int64_t watch_revision_ = 0;  // control thread: the newest revision the watch applied
    std::uint64_t next_event_id_ = 0;
    bool loaded_ = false;     // control thread: the copy holds etcd's state
    bool caught_up_ = false;  // control thread
    std::int64_t catch_up_to_ = 0;
    std::chrono::steady_clock::time_point down_since_{};
    bool was_serving_ = true;

    std::atomic<bool> up_{false};
    std::atomic<bool> stopping_{false};
    std::atomic<std::int64_t> instance_lease_{0};
    std::atomic<std::int64_t> next_revision_{0};  // where the watch resumes; 0: reload first
    std::atomic<bool> reload_asked_{false};
    std::string admin_;
    std::string proxy_;
    common::wall_clock::time_point started_{};
    std::optional<std::string> password_;

    net::io_context watch_ioc_{1};
    beast::tcp_stream* watch_conn_ = nullptr;  // watch thread only
    std::thread watch_;
    std::thread keepalive_;
    std::thread committer_;
    std::mutex commit_mu_;  // guards commits_
    std::condition_variable commit_cv_;
    std::deque<std::shared_ptr<commit>> commits_;
    std::mutex stop_mu_;
    std::condition_variable stop_cv_;
};

}  // namespace cordon::proxy::control
