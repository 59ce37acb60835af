// The kill switch: network kill, revive and session kill. Each is durable before it returns
// (state store), closes what it cuts on every worker's own thread, and is audited (its record
// fdatasync()ed before the call returns: runtime::audit_durable), counted and published on
// the event stream.

#include <boost/json.hpp>

#include <iostream>

#include "common/time.hpp"
#include "proxy/control/runtime.hpp"

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
void save_timing(state_store* store, const char* scope, const kill_outcome& out,
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

bool runtime::persist_session(const std::string& id) {
    const auto s = sessions.stored(id);
    if (!s) {
        unsaved_sessions.erase(id);
        return false;
    }
    std::string error;
    if (!store || !store->save_session(*s, error)) {
        if (store) {
            std::cerr << "cordon: state store: " << error << '\n';
        }
        unsaved_sessions.insert(id);
        return false;
    }
    unsaved_sessions.erase(id);
    return true;
}

void runtime::retry_unsaved() {
    if (!store || (!kill_unsaved && unsaved_sessions.empty())) {
        return;
    }
    std::string error;
    if (kill_unsaved) {
        if (!store->save_kill(kill_info, error)) {
            return;  // still failing: the next second tries again
        }
        kill_unsaved = false;
    }
    // Quietly: the failure was said when it happened, and the sweep says when it ends.
    const std::vector<std::string> ids(unsaved_sessions.begin(), unsaved_sessions.end());
    for (const auto& id : ids) {
        const auto s = sessions.stored(id);
        if (s && !store->save_session(*s, error)) {
            return;
        }
        unsaved_sessions.erase(id);
    }
}

bool runtime::state_durable(std::string& why) {
    if (!store) {
        why = store_error;
        return false;
    }
    if (!store->check(why)) {
        return false;
    }
    if (kill_unsaved || !unsaved_sessions.empty()) {
        why = "changes not yet persisted (" +
              std::string(kill_unsaved ? "the kill state, " : "") +
              std::to_string(unsaved_sessions.size()) + " sessions); retried every second";
        return false;
    }
    return true;
}

awaitable<kill_outcome> runtime::kill_network(const std::string& reason, const std::string& by) {
    const auto t0 = steady::now();
    kill_outcome out;
    // The flag first: from this instant every new request is refused.
    out.already = network_killed.exchange(true);
    if (!out.already) {
        kill_info = kill_state{true, reason, by, now()};
    }
    // The durable write overlaps the workers' closing; both are done before this returns.
    const std::function<void()> persist = [this, &out] {
        std::string error;
        out.persisted = store && store->save_kill(kill_info, error);
        if (store && !out.persisted) {
            std::cerr << "cordon: state store: " << error
                      << " (the network kill is in force in memory, NOT persisted)\n";
        }
        kill_unsaved = !out.persisted;
    };
    const std::function<bool(const live_connection&)> all = [](const live_connection&) {
        return true;
    };
    const std::string why = "kill_switch";
    out.connections_closed = co_await close_where(all, why, persist);
    out.elapsed_ms = ms_since(t0);
    stats.set_kill_switch_engaged(true);
    stats.count_kill(alerts::kill_scope::network, out.elapsed_ms / 1000);
    audit_durable(std::move(record("kill.network")
                                .add("reason", reason)
                                .add("by", by)
                                .add("already_engaged", out.already)
                                .add("connections_closed",
                                     static_cast<std::uint64_t>(out.connections_closed))
                                .add("elapsed_ms", out.elapsed_ms)));
    events->publish("kill.network", "",
                    json::serialize(json::object{{"reason", reason},
                                                 {"by", by},
                                                 {"at", common::format_rfc3339(kill_info.at)}}));
    // After the answer, not before it: the measurement's fsync is no part of the kill.
    const auto ex = co_await net::this_coro::executor;
    net::post(ex, [this, out, at = kill_info.at] { save_timing(store.get(), "network", out, at); });
    co_return out;
}

kill_outcome runtime::revive(const std::string& reason, const std::string& by) {
    kill_outcome out;
    if (!network_killed.load()) {
        out.already = true;
        return out;
    }
    kill_state lifted{false, reason, by, now()};
    if (store) {
        std::string error;
        out.persisted = store->save_kill(lifted, error);
        if (!out.persisted) {
            std::cerr << "cordon: state store: " << error << '\n';
            return out;  // not durable: stay killed
        }
    } else {
        out.persisted = false;
        return out;
    }
    kill_info = lifted;
    kill_unsaved = false;
    network_killed.store(false);
    stats.set_kill_switch_engaged(false);
    audit_durable(std::move(record("revive").add("reason", reason).add("by", by)));
    events->publish("revive", "",
                    json::serialize(json::object{{"reason", reason}, {"by", by}}));
    return out;
}

awaitable<std::optional<kill_outcome>> runtime::kill_session(const std::string& id,
                                                             const std::string& reason,
                                                             const std::string& by) {
    const auto t0 = steady::now();
    const auto before = sessions.get(id);
    if (!before) {
        co_return std::nullopt;
    }
    kill_outcome out;
    out.already = before->state == session_state::killed;
    for (const auto& t : before->tokens) {
        out.tokens_revoked += t.revoked ? 0 : 1;
    }
    sessions.kill(id, reason);  // from here its tokens are refused
    const std::function<void()> persist = [this, &out, &id] { out.persisted = persist_session(id); };
    const std::function<bool(const live_connection&)> of_session =
        [&id](const live_connection& c) { return c.session == id; };
    const std::string why = "session_killed";
    out.connections_closed = co_await close_where(of_session, why, persist);
    out.elapsed_ms = ms_since(t0);
    stats.count_kill(alerts::kill_scope::session, out.elapsed_ms / 1000);
    stats.count_tokens_revoked(out.tokens_revoked);
    audit_durable(std::move(record("kill.session")
                                .add("session", id)
                                .add("job", before->job)
                                .add("reason", reason)
                                .add("by", by)
                                .add("tokens_revoked",
                                     static_cast<std::uint64_t>(out.tokens_revoked))
                                .add("connections_closed",
                                     static_cast<std::uint64_t>(out.connections_closed))
                                .add("elapsed_ms", out.elapsed_ms)));
    events->publish("kill.session", id,
                    json::serialize(json::object{{"session", id},
                                                 {"job", before->job},
                                                 {"reason", reason},
                                                 {"by", by}}));
    forget_usage(id);
    const auto ex = co_await net::this_coro::executor;
    net::post(ex, [this, out, at = now()] { save_timing(store.get(), "session", out, at); });
    co_return out;
}

}  // namespace cordon::proxy::control
