// A fleet instance's copy of the state in etcd: the facts under the prefix, folded from events.

#include "proxy/control/fleet_state.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <limits>

#include "common/percent.hpp"

namespace cordon::proxy::control {
namespace {

namespace json = boost::json;
using std::chrono::milliseconds;

constexpr std::size_t max_text = 4096;  // a reason, a name, an address in a value

std::int64_t to_ms(common::wall_clock::time_point t) {
    return std::chrono::floor<milliseconds>(t.time_since_epoch()).count();
}

common::wall_clock::time_point from_ms(std::int64_t ms) {
    // Bounded to about +-292 years, within what the clock holds.
    constexpr std::int64_t bound = std::int64_t{9'000'000'000'000'000} / 1000;
    ms = std::clamp<std::int64_t>(ms, -bound, bound);
    return common::wall_clock::time_point(
        std::chrono::duration_cast<common::wall_clock::duration>(milliseconds(ms)));
}

std::optional<json::object> parse(std::string_view v) {
    if (v.size() > etcd::max_value) {
        return std::nullopt;
    }
    boost::system::error_code ec;
    json::value j = json::parse(v, ec);
    if (ec || !j.is_object()) {
        return std::nullopt;
    }
    return std::move(j.as_object());
}

bool get_text(const json::object& o, std::string_view name, std::string& out) {
    const auto* v = o.if_contains(name);
    if (v == nullptr) {
        out.clear();
        return true;
    }
    if (!v->is_string() || v->as_string().size() > max_text) {
        return false;
    }
    out = std::string(v->as_string());
    return true;
}

// A number cordon wrote (a JSON integer, never a string). Absent: 0.
bool get_int(const json::object& o, std::string_view name, std::int64_t& out) {
    out = 0;
    const auto* v = o.if_contains(name);
    if (v == nullptr) {
        return true;
    }
    const auto n = etcd::integer<std::int64_t>(*v, false);
    out = n.value_or(0);
    return n.has_value();
}

bool get_time(const json::object& o, std::string_view name, common::wall_clock::time_point& out) {
    std::int64_t ms = 0;
    if (!get_int(o, name, ms)) {
        return false;
    }
    out = from_ms(ms);
    return true;
}

std::string hex(const secret_hash& h) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s;
    s.reserve(h.size() * 2);
    for (const auto b : h) {
        s += digits[b >> 4];
        s += digits[b & 15];
    }
    return s;
}

bool unhex(std::string_view s, secret_hash& out) {
    if (s.size() != out.size() * 2) {
        return false;
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
        const int hi = common::hex_value(s[2 * i]);
        const int lo = common::hex_value(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            return false;
        }
        out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
    }
    return true;
}

// A name in a key: what the registry and the admin API accept (no '/', bounded).
bool valid_part(std::string_view s) {
    if (s.empty() || s.size() > 128) {
        return false;
    }
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '_' || c == '.';
    });
}

}  // namespace

namespace fleet_keys {
std::string session(std::string_view sid) { return "s/" + std::string(sid); }
std::string token(std::string_view sid, std::string_view tid) {
    return "t/" + std::string(sid) + "/" + std::string(tid);
}
std::string revoked(std::string_view sid, std::string_view tid) {
    return "r/" + std::string(sid) + "/" + std::string(tid);
}
std::string ended(std::string_view sid) { return "e/" + std::string(sid); }
std::string killed(std::string_view sid) { return "k/" + std::string(sid); }
std::string network() { return "net"; }
std::string kill_record(std::string_view kid) { return "kr/" + std::string(kid); }
std::string confirm(std::string_view kid, std::string_view instance) {
    return "kc/" + std::string(kid) + "/" + std::string(instance);
}
std::string instance(std::string_view name) { return "i/" + std::string(name); }
std::string timing(std::string_view instance, std::string_view scope) {
    return "tm/" + std::string(instance) + "/" + std::string(scope);
}
}  // namespace fleet_keys

std::string session_value(const stored_session& s) {
    return json::serialize(json::object{{"job", s.job}, {"created", to_ms(s.created)}});
}

std::string token_value(const stored_token& t) {
    return json::serialize(json::object{
        {"hash", hex(t.hash)}, {"created", to_ms(t.created)}, {"expires", to_ms(t.expires_at)}});
}

std::string reason_value(const std::string& reason, const std::string& by,
                         common::wall_clock::time_point at, const std::string& kill_id) {
    json::object o{{"reason", reason.substr(0, max_text)}, {"at", to_ms(at)}};
    if (!by.empty()) {
        o["by"] = by.substr(0, max_text);
    }
    if (!kill_id.empty()) {
        o["kill"] = kill_id;
    }
    return json::serialize(o);
}

std::string network_value(const kill_state& k, const std::string& kill_id) {
    json::object o{{"engaged", k.engaged},
                   {"reason", k.reason.substr(0, max_text)},
                   {"by", k.by.substr(0, max_text)},
                   {"at", to_ms(k.at)}};
    if (!kill_id.empty()) {
        o["kill"] = kill_id;
    }
    return json::serialize(o);
}

std::string kill_record_value(const fleet_kill& k) {
    return json::serialize(json::object{{"scope", k.scope},
                                        {"session", k.session},
                                        {"reason", k.reason.substr(0, max_text)},
                                        {"by", k.by.substr(0, max_text)},
                                        {"origin", k.origin},
                                        {"at", to_ms(k.at)}});
}

std::string confirm_value(const instance_confirmation& c) {
    return json::serialize(
        json::object{{"closed", c.connections_closed},
                     {"elapsed_us", static_cast<std::int64_t>(c.elapsed_ms * 1000)}});
}

std::string instance_value(const fleet_instance& i) {
    return json::serialize(json::object{
        {"admin", i.admin}, {"proxy", i.proxy}, {"pid", i.pid}, {"started", to_ms(i.started)}});
}

std::string timing_value(const kill_timing& t) {
    return json::serialize(
        json::object{{"elapsed_us", static_cast<std::int64_t>(t.elapsed_ms * 1000)},
                     {"closed", t.connections_closed},
                     {"at", to_ms(t.at)}});
}

void fleet_state::clear() {
    sessions_.clear();
    network_ = kill_state{};
    network_kill_id_.clear();
    kills_.clear();
    confirms_.clear();
    instances_.clear();
    timings_.clear();
    raw_.clear();
    revision_ = 0;
}

fleet_state::change fleet_state::apply(const etcd::event& e, std::string_view prefix) {
    revision_ = std::max(revision_, e.kv.mod_revision);
    std::string_view key = e.kv.key;
    if (key.substr(0, prefix.size()) != prefix) {
        return {};
    }
    key.remove_prefix(prefix.size());
    if (e.deleted) {
        raw_.erase(std::string(key));
    } else {
        auto& r = raw_[std::string(key)];
        r = e.kv;
        r.key = std::string(key);
    }
    const auto slash = key.find('/');
    const std::string_view kind = key.substr(0, slash);
    const std::string_view rest = slash == std::string_view::npos ? std::string_view()
                                                                  : key.substr(slash + 1);
    if (kind == "net" && slash == std::string_view::npos) {
        kill_state k;
        std::string kid;
        if (e.deleted) {
            // Never written by cordon: a network kill deleted by hand is not a revive.
            k = kill_state{true, "the network kill's key was deleted from etcd", "etcd", {}};
        } else if (auto o = parse(e.kv.value)) {
            const auto* en = o->if_contains("engaged");
            if (en == nullptr || !en->is_bool() || !get_text(*o, "reason", k.reason) ||
                !get_text(*o, "by", k.by) || !get_time(*o, "at", k.at) ||
                !get_text(*o, "kill", kid)) {
                ++bad_values_;
                k = kill_state{true, "the network kill's value in etcd does not parse", "etcd", {}};
            } else {
                k.engaged = en->as_bool();
            }
        } else {
            ++bad_values_;
            k = kill_state{true, "the network kill's value in etcd does not parse", "etcd", {}};
        }
        const bool same = k.engaged == network_.engaged && k.reason == network_.reason &&
                          k.by == network_.by && k.at == network_.at && kid == network_kill_id_;
        network_ = std::move(k);
        network_kill_id_ = std::move(kid);
        return same ? change{} : change{what::network, network_kill_id_, {}};
    }
    if (kind.size() == 1 && std::string_view("strek").find(kind[0]) != std::string_view::npos) {
        return apply_session_key(kind[0], rest, e);
    }
    if (kind == "kr" && valid_part(rest)) {
        if (e.deleted) {
            kills_.erase(std::string(rest));
            confirms_.erase(std::string(rest));
            return {};
        }
        fleet_kill k;
        k.id = std::string(rest);
        auto o = parse(e.kv.value);
        if (!o || !get_text(*o, "scope", k.scope) || !get_text(*o, "session", k.session) ||
            !get_text(*o, "reason", k.reason) || !get_text(*o, "by", k.by) ||
            !get_text(*o, "origin", k.origin) || !get_time(*o, "at", k.at)) {
            ++bad_values_;
        }
        kills_[k.id] = k;
        return {what::kill_record, k.id, {}};
    }
    if (kind == "kc") {
        const auto s2 = rest.find('/');
        const std::string_view kid = rest.substr(0, s2);
        const std::string_view inst = s2 == std::string_view::npos ? std::string_view()
                                                                   : rest.substr(s2 + 1);
        if (!valid_part(kid) || !valid_part(inst)) {
            return {};
        }
        if (e.deleted) {
            if (auto it = confirms_.find(kid); it != confirms_.end()) {
                it->second.erase(std::string(inst));
            }
            return {};
        }
        instance_confirmation c;
        c.instance = std::string(inst);
        std::int64_t closed = 0;
        std::int64_t us = 0;
        auto o = parse(e.kv.value);
        if (!o || !get_int(*o, "closed", closed) || !get_int(*o, "elapsed_us", us) || closed < 0 ||
            us < 0) {
            ++bad_values_;
            closed = 0;
            us = 0;
        }
        c.connections_closed = static_cast<std::uint64_t>(closed);
        c.elapsed_ms = static_cast<double>(us) / 1000.0;
        confirms_[std::string(kid)][c.instance] = c;
        return {what::confirm, std::string(kid), c.instance};
    }
    if (kind == "i" && valid_part(rest)) {
        if (e.deleted) {
            return instances_.erase(std::string(rest)) > 0
                       ? change{what::instance_gone, std::string(rest), {}}
                       : change{};
        }
        fleet_instance i;
        i.name = std::string(rest);
        i.revision = e.kv.mod_revision;
        auto o = parse(e.kv.value);
        if (!o || !get_text(*o, "admin", i.admin) || !get_text(*o, "proxy", i.proxy) ||
            !get_int(*o, "pid", i.pid) || !get_time(*o, "started", i.started)) {
            ++bad_values_;  // still an instance: it is registered, its details unreadable
        }
        instances_[i.name] = i;
        return {what::instance, i.name, {}};
    }
    if (kind == "tm") {
        if (e.deleted) {
            timings_.erase(std::string(rest));
            return {};
        }
        const auto s2 = rest.find('/');
        if (s2 == std::string_view::npos) {
            return {};
        }
        kill_timing t;
        t.scope = std::string(rest.substr(s2 + 1));
        std::int64_t us = 0;
        std::int64_t closed = 0;
        auto o = parse(e.kv.value);
        if ((t.scope != "network" && t.scope != "session") || !o ||
            !get_int(*o, "elapsed_us", us) || !get_int(*o, "closed", closed) ||
            !get_time(*o, "at", t.at) || us < 0 || closed < 0) {
            ++bad_values_;
            return {};
        }
        t.elapsed_ms = static_cast<double>(us) / 1000.0;
        t.connections_closed = static_cast<std::uint64_t>(closed);
        timings_[std::string(rest)] = t;
        return {what::timing, std::string(rest), {}};
    }
    return {};
}

fleet_state::change fleet_state::apply_session_key(char kind, std::string_view rest,
                                                   const etcd::event& e) {
    const auto s2 = rest.find('/');
    const std::string_view sid = rest.substr(0, s2);
    const std::string_view tid = s2 == std::string_view::npos ? std::string_view()
                                                              : rest.substr(s2 + 1);
    const bool needs_token = kind == 't' || kind == 'r';
    if (!valid_part(sid) || needs_token != !tid.empty() || (needs_token && !valid_part(tid))) {
        return {};
    }
    auto it = sessions_.find(sid);
    if (e.deleted) {
        if (it == sessions_.end()) {
            return {};
        }
        session_facts& f = it->second;
        switch (kind) {
            case 's': f.has_session = false; break;
            case 't': f.tokens.erase(std::string(tid)); break;
            // A revocation, an end or a kill is never undone: their keys go only with the
            // session's lease, together with s/SID.
            default: break;
        }
        if (!f.has_session) {
            sessions_.erase(it);
            return {what::session_gone, std::string(sid), {}};
        }
        return {what::session, std::string(sid), {}};
    }
    if (it == sessions_.end()) {
        it = sessions_.emplace(std::string(sid), session_facts{}).first;
    }
    session_facts& f = it->second;
    const auto o = parse(e.kv.value);
    const auto read_reason = [&](reason_fact& r) {
        if (!o || !get_text(*o, "reason", r.reason) || !get_text(*o, "by", r.by) ||
            !get_text(*o, "kill", r.kill_id) || !get_time(*o, "at", r.at)) {
            ++bad_values_;
            r.reason = "its record in etcd does not parse";
        }
    };
    switch (kind) {
        case 's': {
            std::string job;
            common::wall_clock::time_point created{};
            if (!o || !get_text(*o, "job", job) || job.empty() ||
                !get_time(*o, "created", created)) {
                ++bad_values_;
                job = "(unreadable)";  // no job of the policy: nothing is allowed
            }
            if (f.has_session && f.job == job && f.created == created) {
                return {};
            }
            f.has_session = true;
            f.job = std::move(job);
            f.created = created;
            f.revision = e.kv.create_revision != 0 ? e.kv.create_revision : e.kv.mod_revision;
            break;
        }
        case 't': {
            token_fact t;
            t.token.id = std::string(tid);
            t.revision = e.kv.create_revision != 0 ? e.kv.create_revision : e.kv.mod_revision;
            std::string h;
            t.usable = o && get_text(*o, "hash", h) && unhex(h, t.token.hash) &&
                       get_time(*o, "created", t.token.created) &&
                       get_time(*o, "expires", t.token.expires_at);
            if (!t.usable) {
                ++bad_values_;
                t.token.hash = {};
            }
            if (auto old = f.tokens.find(tid); old != f.tokens.end() &&
                                               old->second.usable == t.usable &&
                                               old->second.token.hash == t.token.hash &&
                                               old->second.token.expires_at == t.token.expires_at) {
                return {};
            }
            f.tokens[std::string(tid)] = t;
            break;
        }
        case 'r': {
            if (f.revoked.count(tid) != 0) {
                return {};
            }
            reason_fact r;
            read_reason(r);
            f.revoked[std::string(tid)] = r;
            break;
        }
        case 'e': {
            if (f.ended) {
                return {};
            }
            reason_fact r;
            read_reason(r);
            f.ended = r;
            break;
        }
        case 'k': {
            if (f.killed) {
                return {};
            }
            reason_fact r;
            read_reason(r);
            f.killed = r;
            break;
        }
        default: return {};
    }
    return f.has_session ? change{what::session, std::string(sid), {}} : change{};
}

std::optional<stored_session> fleet_state::session(std::string_view sid) const {
    const auto it = sessions_.find(sid);
    if (it == sessions_.end() || !it->second.has_session) {
        return std::nullopt;
    }
    const session_facts& f = it->second;
    stored_session s;
    s.id = it->first;
    s.job = f.job;
    s.created = f.created;
    s.seq = static_cast<std::uint64_t>(std::max<std::int64_t>(0, f.revision));
    std::vector<const token_fact*> order;
    for (const auto& [tid, t] : f.tokens) {
        order.push_back(&t);
    }
    std::sort(order.begin(), order.end(), [](const token_fact* a, const token_fact* b) {
        return a->revision != b->revision ? a->revision < b->revision : a->token.id < b->token.id;
    });
    s.expires_at = f.created;
    const reason_fact* finished = f.killed ? &*f.killed : f.ended ? &*f.ended : nullptr;
    for (const token_fact* t : order) {
        stored_token tok = t->token;
        if (const auto r = f.revoked.find(tok.id); r != f.revoked.end()) {
            tok.revoked = true;
            tok.revoked_reason = r->second.reason;
        } else if (!t->usable) {
            tok.revoked = true;  // unreadable: never accepted
            tok.revoked_reason = "its record in etcd does not parse";
        } else if (finished != nullptr) {
            tok.revoked = true;
            tok.revoked_reason = finished->reason;
        }
        s.expires_at = std::max(s.expires_at, tok.expires_at);
        s.tokens.push_back(std::move(tok));
    }
    if (f.killed) {
        s.state = session_state::killed;
        s.end_reason = f.killed->reason;
        s.ended_at = f.killed->at;
    } else if (f.ended) {
        s.state = session_state::ended;
        s.end_reason = f.ended->reason;
        s.ended_at = f.ended->at;
    }
    return s;
}

std::vector<stored_session> fleet_state::sessions() const {
    std::vector<stored_session> out;
    for (const auto& [sid, f] : sessions_) {
        if (auto s = session(sid)) {
            out.push_back(std::move(*s));
        }
    }
    std::sort(out.begin(), out.end(),
              [](const stored_session& a, const stored_session& b) { return a.seq < b.seq; });
    return out;
}

const fleet_kill* fleet_state::kill(std::string_view kid) const {
    const auto it = kills_.find(kid);
    return it == kills_.end() ? nullptr : &it->second;
}

const std::map<std::string, instance_confirmation>* fleet_state::confirms(
    std::string_view kid) const {
    const auto it = confirms_.find(kid);
    return it == confirms_.end() ? nullptr : &it->second;
}

std::string fleet_state::session_kill_id(std::string_view sid) const {
    const auto it = sessions_.find(sid);
    return it != sessions_.end() && it->second.killed ? it->second.killed->kill_id : std::string();
}

const etcd::key_value* fleet_state::raw(std::string_view key) const {
    const auto it = raw_.find(key);
    return it == raw_.end() ? nullptr : &it->second;
}

std::vector<std::string> fleet_state::keys() const {
    std::vector<std::string> out;
    out.reserve(raw_.size());
    for (const auto& [k, v] : raw_) {
        out.push_back(k);
    }
    return out;
}

std::vector<const etcd::key_value*> fleet_state::session_keys(std::string_view sid) const {
    std::vector<const etcd::key_value*> out;
    const std::string id(sid);
    for (const std::string& one :
         {fleet_keys::session(id), fleet_keys::ended(id), fleet_keys::killed(id)}) {
        if (const auto* kv = raw(one)) {
            out.push_back(kv);
        }
    }
    for (const std::string& p : {"t/" + id + "/", "r/" + id + "/"}) {
        for (auto it = raw_.lower_bound(p);
             it != raw_.end() && it->first.compare(0, p.size(), p) == 0; ++it) {
            out.push_back(&it->second);
        }
    }
    return out;
}

std::vector<kill_timing> fleet_state::timings() const {
    std::vector<kill_timing> out;
    for (const auto& [k, t] : timings_) {
        out.push_back(t);
    }
    return out;
}

}  // namespace cordon::proxy::control
