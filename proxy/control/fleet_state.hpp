#pragma once
// A fleet instance's copy of the state in etcd (docs/fleet.md "Keys"): what each key under the
// prefix says, folded from the etcd events that made it (the load at start, then the watch).
// Each fact has a key of its own and is written once: a session, a token, a revocation, an
// end, a kill; so two instances never overwrite each other, and the state only moves forward.
// A fact's presence decides: a kill or revocation whose value does not parse still kills or
// revokes (fail closed); a token whose value does not parse is never accepted. Pure: no
// sockets, no clock, no Asio; control thread.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/control/etcd_codec.hpp"
#include "proxy/control/state_backend.hpp"

namespace cordon::proxy::control {

/// An instance in the fleet's registry (key i/NAME, leased).
struct fleet_instance {
    std::string name;
    std::string admin;  ///< its admin listener, "HOST:PORT" (may be empty)
    std::string proxy;
    std::int64_t pid = 0;
    common::wall_clock::time_point started{};
    std::int64_t revision = 0;  ///< when it (re)registered
};

/// A kill's record (key kr/KILL): who gave it, where, on what.
struct fleet_kill {
    std::string id;
    std::string scope;    ///< "network" or "session"
    std::string session;  ///< session kills
    std::string reason;
    std::string by;
    std::string origin;  ///< the instance that took the call
    common::wall_clock::time_point at{};
};

/// The keys, relative to the prefix (docs/fleet.md "Keys").
namespace fleet_keys {
std::string session(std::string_view sid);                              ///< s/SID
std::string token(std::string_view sid, std::string_view tid);          ///< t/SID/TID
std::string revoked(std::string_view sid, std::string_view tid);        ///< r/SID/TID
std::string ended(std::string_view sid);                                ///< e/SID
std::string killed(std::string_view sid);                               ///< k/SID
std::string network();                                                  ///< net
std::string kill_record(std::string_view kid);                          ///< kr/KID
std::string confirm(std::string_view kid, std::string_view instance);   ///< kc/KID/INSTANCE
std::string instance(std::string_view name);                            ///< i/NAME
std::string timing(std::string_view instance, std::string_view scope);  ///< tm/INSTANCE/SCOPE
}  // namespace fleet_keys

// The values, as JSON (fleet_state.cpp): what each fact says.
std::string session_value(const stored_session& s);
std::string token_value(const stored_token& t);
std::string reason_value(const std::string& reason, const std::string& by,
                         common::wall_clock::time_point at, const std::string& kill_id);
std::string network_value(const kill_state& k, const std::string& kill_id);
std::string kill_record_value(const fleet_kill& k);
std::string confirm_value(const instance_confirmation& c);
std::string instance_value(const fleet_instance& i);
std::string timing_value(const kill_timing& t);

/// The copy. apply() takes etcd's events in revision order.
class fleet_state {
public:
    /// What one event changed, for the caller to act on.
    enum class what : std::uint8_t {
        nothing,       ///< a key of no interest, or a value the same as before
        session,       ///< a session's facts changed: session(id) is its new view
        session_gone,  ///< its lease ran out: every fact of the session is gone
        network,       ///< the network kill state changed: network()
        kill_record,   ///< kill(id) is known
        confirm,       ///< an instance (sub) confirmed kill `id`
        instance,      ///< an instance (id) registered or changed
        instance_gone,
        timing,
    };
    struct change {
        what kind = what::nothing;
        std::string id;
        std::string sub;
    };

    /// Applies one event whose key is `prefix` + a key of fleet_keys. Keys outside the prefix
    /// or of no known shape change nothing. Never fails: a value that does not parse is taken
    /// as fail-closed (see above) and counted in bad_values().
    change apply(const etcd::event& e, std::string_view prefix);
    /// Forgets everything (before a whole reload).
    void clear();

    /// The session as the registry keeps it (stored_session), from its facts; nullopt if the
    /// fleet has no s/SID for it. seq is the session key's create revision.
    std::optional<stored_session> session(std::string_view sid) const;
    /// Every session, by seq.
    std::vector<stored_session> sessions() const;
    /// The network kill as last written (not engaged if never). A value that does not parse
    /// reads engaged.
    const kill_state& network() const noexcept { return network_; }
    const std::string& network_kill_id() const noexcept { return network_kill_id_; }
    const fleet_kill* kill(std::string_view kid) const;
    /// Confirmations of kill `kid`, by instance.
    const std::map<std::string, instance_confirmation>* confirms(std::string_view kid) const;
    /// The kill a session's k/SID names (its kill id), empty if none.
    std::string session_kill_id(std::string_view sid) const;
    const std::map<std::string, fleet_instance, std::less<>>& instances() const noexcept {
        return instances_;
    }
    std::vector<kill_timing> timings() const;
    /// The largest mod_revision applied.
    std::int64_t revision() const noexcept { return revision_; }
    /// A key (relative to the prefix) as last put, or null.
    const etcd::key_value* raw(std::string_view key) const;
    /// Every key held (relative), for a whole reload to find what went.
    std::vector<std::string> keys() const;
    /// The keys of one session's facts (s/, t/, r/, e/, k/ of SID).
    std::vector<const etcd::key_value*> session_keys(std::string_view sid) const;
    std::uint64_t bad_values() const noexcept { return bad_values_; }

private:
    struct reason_fact {
        std::string reason;
        std::string by;
        std::string kill_id;
        common::wall_clock::time_point at{};
    };
    struct token_fact {
        stored_token token;
        std::int64_t revision = 0;
        bool usable = false;  ///< its value parsed
    };
    struct session_facts {
        bool has_session = false;
        std::string job;
        common::wall_clock::time_point created{};
        std::int64_t revision = 0;
        std::map<std::string, token_fact, std::less<>> tokens;
        std::map<std::string, reason_fact, std::less<>> revoked;
        std::optional<reason_fact> ended;
        std::optional<reason_fact> killed;
        bool empty() const {
            return !has_session && tokens.empty() && revoked.empty() && !ended && !killed;
        }
    };

    change apply_session_key(char kind, std::string_view rest, const etcd::event& e);

    std::map<std::string, session_facts, std::less<>> sessions_;
    kill_state network_;
    std::string network_kill_id_;
    std::map<std::string, fleet_kill, std::less<>> kills_;
    std::map<std::string, std::map<std::string, instance_confirmation>, std::less<>> confirms_;
    std::map<std::string, fleet_instance, std::less<>> instances_;
    std::map<std::string, kill_timing, std::less<>> timings_;
    std::map<std::string, etcd::key_value, std::less<>> raw_;  // relative key -> as put
    std::int64_t revision_ = 0;
    std::uint64_t bad_values_ = 0;
};

}  // namespace cordon::proxy::control
