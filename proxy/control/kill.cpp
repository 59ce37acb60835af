// The kill switch: network kill, revive and session kill. Each is durable before it returns
// (state store), closes what it cuts on every worker's own thread, and is audited (its record
// fdatasync()ed before the call returns: runtime::audit_durable), counted and published on
// the event stream.

#include <boost/json.hpp>

#include <iostream>

#include "common/time.hpp"
#include "proxy/control/fleet.hpp"
#include "proxy/control/kill_switch.hpp"
#include "proxy/control/runtime.hpp"
#include "proxy/control/tokens.hpp"

namespace cordon::proxy::control {
namespace {

namespace json = boost::json;
using steady = std::chrono::steady_clock;

double ms_since(steady::time_point t0) {
    return std::chrono::duration<double, std::milli>(steady::now() - t0).count();
}

// Keeps the measurement for the worksheet (last measured stop time). Posted by the kills to
// run after their answer is on its way: a failure or a slow disk here costs the measurement,
// never the kill or its answer.
void save_timing(state_backend* store, const char* scope, const kill_outcome& out,
                 common::wall_clock::time_point at) {
    if (store == nullptr || out.already) {
        return;
    }
    std::string error;
    if (!store->save_kill_timing(kill_timing{scope, out.elapsed_ms, out.connections_closed, at},
                                 error)) {
        std::cerr << "cordon: state store: " << error << '\n';
    }
}

}  // namespace

bool kill_switch::persist_session(const std::string& id) {
    const auto s = rt_.sessions.stored(id);
    if (!s) {
        unsaved_sessions_.erase(id);
        return false;
    }
    std::string error;
    if (!rt_.store || !rt_.store->save_session(*s, error)) {
        if (rt_.store) {
            std::cerr << "cordon: state store: " << error << '\n';
        }
        unsaved_sessions_.insert(id);
        return false;
    }
    unsaved_sessions_.erase(id);
    return true;
}

void kill_switch::retry_unsaved() {
    if (!rt_.store || (!unsaved_ && unsaved_sessions_.empty())) {
        return;
    }
    std::string error;
    if (unsaved_) {
        if (!rt_.store->save_kill(info_, error)) {
            return;  // still failing: the next second tries again
        }
        unsaved_ = false;
    }
    // Quietly: the failure was said when it happened, and the sweep says when it ends.
    const std::vector<std::string> ids(unsaved_sessions_.begin(), unsaved_sessions_.end());
    for (const auto& id : ids) {
        const auto s = rt_.sessions.stored(id);
        if (s && !rt_.store->save_session(*s, error)) {
            return;
        }
        unsaved_sessions_.erase(id);
    }
}

bool kill_switch::state_durable(std::string& why) {
    if (!rt_.store) {
        why = rt_.store_error;
        return false;
    }
    if (!rt_.store->check(why)) {
        return false;
    }
    if (unsaved_ || !unsaved_sessions_.empty()) {
        why = "changes not yet persisted (" + std::string(unsaved_ ? "the kill state, " : "") +
              std::to_string(unsaved_sessions_.size()) + " sessions); retried every second";
        return false;
    }
    return true;
}

awaitable<kill_outcome> kill_switch::kill_network(const std::string& reason,
                                                  const std::string& by) {
    const auto t0 = steady::now();
    kill_outcome out;
    // The flag first: from this instant every new request is refused.
    out.already = engaged_.exchange(true) && info_.engaged;
    if (!out.already) {
        info_ = kill_state{true, reason, by, rt_.now()};
        if (rt_.cluster != nullptr) {
            out.kill_id = "k-" + random_hex(8);
            rt_.cluster->kill_id_for("", out.kill_id);
        }
    }
    // The durable write overlaps the workers' closing; both are done before this returns.
    const std::function<void()> persist = [this, &out] {
        std::string error;
        out.persisted = rt_.store && rt_.store->save_kill(info_, error);
        if (rt_.store && !out.persisted) {
            std::cerr << "cordon: state store: " << error
                      << " (the network kill is in force in memory, NOT persisted)\n";
        }
        unsaved_ = !out.persisted;
    };
    const std::function<bool(const live_connection&)> all = [](const live_connection&) {
        return true;
    };
    const std::string why = "kill_switch";
    out.connections_closed = co_await rt_.connections.close_where(all, why, persist);
    out.elapsed_ms = ms_since(t0);
    if (rt_.cluster != nullptr) {
        // Named, not temporaries in the co_await: GCC 12 destroys such temporaries wrongly.
        fleet_kill record;
        record.id = out.kill_id;
        record.scope = "network";
        record.reason = reason;
        record.by = by;
        record.at = info_.at;
        instance_confirmation self;
        self.connections_closed = out.connections_closed;
        self.elapsed_ms = out.elapsed_ms;
        const bool written = out.persisted && !out.already;
        out.fleet = co_await rt_.cluster->gather(record, self, t0, written);
    }
    rt_.stats.set_kill_switch_engaged(true);
    rt_.stats.count_kill(alerts::kill_scope::network, out.elapsed_ms / 1000);
    rt_.audit_durable(
        std::move(rt_.record("kill.network")
                      .add("reason", reason)
                      .add("by", by)
                      .add("already_engaged", out.already)
                      .add("connections_closed", static_cast<std::uint64_t>(out.connections_closed))
                      .add("elapsed_ms", out.elapsed_ms)));
    rt_.events->publish("kill.network", "",
                        json::serialize(json::object{{"reason", reason},
                                                     {"by", by},
                                                     {"at", common::format_rfc3339(info_.at)}}));
    // After the answer, not before it: the measurement's fsync is no part of the kill.
    const auto ex = co_await net::this_coro::executor;
    net::post(ex, [this, out, at = info_.at] { save_timing(rt_.store.get(), "network", out, at); });
    co_return out;
}

kill_outcome kill_switch::revive(const std::string& reason, const std::string& by) {
    kill_outcome out;
    if (!info_.engaged) {
        out.already = true;
        return out;
    }
    kill_state lifted{false, reason, by, rt_.now()};
    if (rt_.store) {
        std::string error;
        out.persisted = rt_.store->save_kill(lifted, error);
        if (!out.persisted) {
            std::cerr << "cordon: state store: " << error << '\n';
            return out;  // not durable: stay killed
        }
    } else {
        out.persisted = false;
        return out;
    }
    info_ = lifted;
    unsaved_ = false;
    engaged_.store(local_);  // a local kill (the fleet's store lost) stays until it is back
    rt_.stats.set_kill_switch_engaged(local_);
    rt_.audit_durable(std::move(rt_.record("revive").add("reason", reason).add("by", by)));
    rt_.events->publish("revive", "",
                        json::serialize(json::object{{"reason", reason}, {"by", by}}));
    return out;
}

awaitable<std::optional<kill_outcome>> kill_switch::kill_session(const std::string& id,
                                                                 const std::string& reason,
                                                                 const std::string& by) {
    const auto t0 = steady::now();
    auto before = rt_.sessions.get(id);
    if (!before && rt_.cluster != nullptr && rt_.cluster->fetch_session(id)) {
        before = rt_.sessions.get(id);  // made on another instance a moment ago
    }
    if (!before) {
        co_return std::nullopt;
    }
    kill_outcome out;
    out.already = before->state == session_state::killed;
    for (const auto& t : before->tokens) {
        out.tokens_revoked += t.revoked ? 0 : 1;
    }
    rt_.sessions.kill(id, reason);  // from here its tokens are refused
    if (rt_.cluster != nullptr && !out.already) {
        out.kill_id = "k-" + random_hex(8);
        rt_.cluster->kill_id_for(id, out.kill_id);
    }
    const std::function<void()> persist = [this, &out, &id] {
        out.persisted = persist_session(id);
    };
    const std::function<bool(const live_connection&)> of_session = [&id](const live_connection& c) {
        return c.session == id;
    };
    const std::string why = "session_killed";
    out.connections_closed = co_await rt_.connections.close_where(of_session, why, persist);
    out.elapsed_ms = ms_since(t0);
    if (rt_.cluster != nullptr) {
        fleet_kill record;  // named: see kill_network
        record.id = out.kill_id;
        record.scope = "session";
        record.session = id;
        record.reason = reason;
        record.by = by;
        record.at = rt_.now();
        instance_confirmation self;
        self.connections_closed = out.connections_closed;
        self.elapsed_ms = out.elapsed_ms;
        const bool written = out.persisted && !out.already;
        out.fleet = co_await rt_.cluster->gather(record, self, t0, written);
    }
    rt_.stats.count_kill(alerts::kill_scope::session, out.elapsed_ms / 1000);
    rt_.stats.count_tokens_revoked(out.tokens_revoked);
    rt_.audit_durable(
        std::move(rt_.record("kill.session")
                      .add("session", id)
                      .add("job", before->job)
                      .add("reason", reason)
                      .add("by", by)
                      .add("tokens_revoked", static_cast<std::uint64_t>(out.tokens_revoked))
                      .add("connections_closed", static_cast<std::uint64_t>(out.connections_closed))
                      .add("elapsed_ms", out.elapsed_ms)));
    rt_.events->publish(
        "kill.session", id,
        json::serialize(
            json::object{{"session", id}, {"job", before->job}, {"reason", reason}, {"by", by}}));
    rt_.forget_usage(id);
    const auto ex = co_await net::this_coro::executor;
    net::post(ex,
              [this, out, at = rt_.now()] { save_timing(rt_.store.get(), "session", out, at); });
    co_return out;
}

awaitable<std::size_t> kill_switch::apply_fleet_network(const kill_state& s) {
    const std::function<bool(const live_connection&)> all = [](const live_connection&) {
        return true;
    };
    if (s.engaged) {
        const bool was = engaged_.exchange(true) && info_.engaged;
        info_ = s;
        unsaved_ = false;
        const std::string why = "kill_switch";
        const std::size_t closed = co_await rt_.connections.close_where(all, why);
        rt_.stats.set_kill_switch_engaged(true);
        if (!was) {
            rt_.audit(
                std::move(rt_.record("kill.network")
                              .add("reason", s.reason)
                              .add("by", s.by)
                              .add("via", "fleet")
                              .add("connections_closed", static_cast<std::uint64_t>(closed))));
            rt_.events->publish(
                "kill.network", "",
                json::serialize(json::object{
                    {"reason", s.reason}, {"by", s.by}, {"at", common::format_rfc3339(s.at)}}));
        }
        co_return closed;
    }
    if (!info_.engaged) {
        co_return 0;
    }
    info_ = s;
    unsaved_ = false;
    engaged_.store(local_);
    rt_.stats.set_kill_switch_engaged(local_);
    rt_.audit(std::move(
        rt_.record("revive").add("reason", s.reason).add("by", s.by).add("via", "fleet")));
    rt_.events->publish("revive", "",
                        json::serialize(json::object{{"reason", s.reason}, {"by", s.by}}));
    co_return 0;
}

awaitable<std::size_t> kill_switch::engage_local(const std::string& reason) {
    local_ = true;
    engaged_.store(true);
    rt_.stats.set_kill_switch_engaged(true);
    const std::function<bool(const live_connection&)> all = [](const live_connection&) {
        return true;
    };
    const std::string why = "kill_switch";
    const std::size_t closed = co_await rt_.connections.close_where(all, why);
    rt_.audit_durable(
        std::move(rt_.record("kill.network")
                      .add("reason", reason)
                      .add("by", "cordon")
                      .add("local", true)
                      .add("connections_closed", static_cast<std::uint64_t>(closed))));
    rt_.events->publish("kill.network", "",
                        json::serialize(json::object{{"reason", reason}, {"by", "cordon"}}));
    co_return closed;
}

void kill_switch::release_local() {
    if (!local_) {
        return;
    }
    local_ = false;
    engaged_.store(info_.engaged);
    rt_.stats.set_kill_switch_engaged(info_.engaged);
    rt_.audit(std::move(rt_.record("revive")
                            .add("reason", "cluster store back")
                            .add("by", "cordon")
                            .add("local", true)));
    if (!info_.engaged) {
        rt_.events->publish(
            "revive", "",
            json::serialize(json::object{{"reason", "cluster store back"}, {"by", "cordon"}}));
    }
}

}  // namespace cordon::proxy::control
