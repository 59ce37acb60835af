#include "proxy/control/sessions.hpp"
#include "common/time.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_set>

namespace cordon::proxy::control {
namespace {

constexpr std::size_t session_id_bytes = 8;  // "s-" + 16 hex: 64 random bits
constexpr std::size_t token_id_bytes = 6;    // "t-" + 12 hex
constexpr std::size_t token_bytes = 32;      // 64 hex: 256 bits, >= the 128 required

}  // namespace

std::string_view to_string(session_state s) noexcept {
    switch (s) {
        case session_state::active: return "active";
        case session_state::ended: return "ended";
        case session_state::killed: return "killed";
    }
    return "unknown";
}

std::string_view to_string(auth_status s) noexcept {
    switch (s) {
        case auth_status::ok: return "ok";
        case auth_status::bad_credentials: return "bad_credentials";
        case auth_status::token_expired: return "token_expired";
        case auth_status::token_revoked: return "token_revoked";
        case auth_status::session_ended: return "session_ended";
        case auth_status::session_killed: return "session_killed";
    }
    return "unknown";
}

std::string_view to_string(revoke_result r) noexcept {
    switch (r) {
        case revoke_result::revoked: return "revoked";
        case revoke_result::already_revoked: return "already_revoked";
        case revoke_result::unknown: return "unknown";
    }
    return "unknown";
}

session_registry::session_registry(clock_fn now, std::size_t max_active_sessions)
    : now_(std::move(now)), max_active_sessions_(max_active_sessions) {
    if (!now_) {
        now_ = [] { return common::wall_clock::now(); };
    }
}

void session_registry::check_ttl(std::chrono::milliseconds ttl) {
    if (ttl <= std::chrono::milliseconds::zero() || ttl > max_ttl) {
        throw std::invalid_argument("token ttl must be positive and at most 366 days");
    }
}

session_info session_registry::to_info(const session_record& s) {
    session_info out;
    out.id = s.id;
    out.job = s.job;
    out.created = s.created;
    out.expires_at = s.expires_at;
    out.state = s.state;
    out.end_reason = s.end_reason;
    out.ended_at = s.ended_at;
    out.tokens.reserve(s.tokens.size());
    for (const auto& t : s.tokens) {
        out.tokens.push_back(t.info);
    }
    return out;
}

session_registry::fresh_secret session_registry::make_secret() {
    fresh_secret out;
    out.token = random_hex(token_bytes);
    out.hash = hash_secret(out.token);
    return out;
}

minted session_registry::mint(session_record& s, common::wall_clock::time_point now,
                              std::chrono::milliseconds ttl, fresh_secret&& secret) {
    // Only the id may throw (CSPRNG failure); draw it before changing `s`.
    std::string token_id;
    const auto taken = [&s](std::string_view id) {
        return std::any_of(s.tokens.begin(), s.tokens.end(),
                           [id](const token_record& t) { return t.info.id == id; });
    };
    do {
        token_id = "t-" + random_hex(token_id_bytes);
    } while (taken(token_id));

    token_record t;
    t.info.id = token_id;
    t.info.created = now;
    t.info.expires_at = now + ttl;
    t.hash = secret.hash;
    s.tokens.push_back(std::move(t));
    s.expires_at = std::max(s.expires_at, now + ttl);

    minted out;
    out.session_id = s.id;
    out.token_id = std::move(token_id);
    out.token = std::move(secret.token);
    out.expires_at = now + ttl;
    return out;
}

minted session_registry::create(std::string job, std::chrono::milliseconds ttl) {
    if (job.empty()) {
        throw std::invalid_argument("session job must not be empty");
    }
    check_ttl(ttl);
    const auto now = now_();
    // The expensive parts (CSPRNG, SHA-256) run before the lock.
    auto secret = make_secret();
    std::string id = "s-" + random_hex(session_id_bytes);

    std::unique_lock lock(mutex_);
    if (active_ >= max_active_sessions_) {
        throw session_limit_error("too many active sessions (limit " +
                                  std::to_string(max_active_sessions_) + ")");
    }
    while (sessions_.find(id) != sessions_.end()) {
        id = "s-" + random_hex(session_id_bytes);
    }
    session_record s;
    s.seq = next_seq_;
    s.id = id;
    s.job = std::move(job);
    s.created = now;
    s.expires_at = now;
    s.tokens.reserve(1);
    minted out = mint(s, now, ttl, std::move(secret));
    sessions_.emplace(std::move(id), std::move(s));
    ++next_seq_;
    ++active_;
    return out;
}

std::optional<minted> session_registry::add_token(std::string_view session_id,
                                                  std::chrono::milliseconds ttl) {
    check_ttl(ttl);
    const auto now = now_();
    auto secret = make_secret();

    std::unique_lock lock(mutex_);
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
        return std::nullopt;
    }
    session_record& s = it->second;
    if (s.state != session_state::active || now >= s.expires_at ||
        s.tokens.size() >= max_tokens_per_session) {
        return std::nullopt;
    }
    return mint(s, now, ttl, std::move(secret));
}

auth_result session_registry::authenticate(std::string_view session_id,
                                           std::string_view token) const {
    const auto now = now_();
    // Hashed whether or not the session exists, so both failures cost about the same.
    const secret_hash hash = hash_secret(token);

    std::shared_lock lock(mutex_);
    auth_result out;
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
        return out;
    }
    const session_record& s = it->second;
    // Compare with every token, no early exit: the time does not tell which one matched.
    const token_record* match = nullptr;
    for (const auto& t : s.tokens) {
        if (equal_constant_time(t.hash, hash)) {
            match = &t;
        }
    }
    if (match == nullptr) {
        return out;
    }
    out.job = s.job;
    out.token_id = match->info.id;
    if (s.state == session_state::killed) {
        out.status = auth_status::session_killed;
    } else if (!match->info.revoked && now >= match->info.expires_at) {
        out.status = auth_status::token_expired;
    } else if (s.state == session_state::ended) {
        out.status = auth_status::session_ended;
    } else if (match->info.revoked) {
        out.status = auth_status::token_revoked;
    } else {
        out.status = auth_status::ok;
    }
    return out;
}

revoke_result session_registry::revoke_token(std::string_view session_id, std::string_view token_id,
                                             std::string reason) {
    std::unique_lock lock(mutex_);
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
        return revoke_result::unknown;
    }
    for (auto& t : it->second.tokens) {
        if (t.info.id != token_id) {
            continue;
        }
        if (t.info.revoked) {
            return revoke_result::already_revoked;
        }
        t.info.revoked = true;
        t.info.revoked_reason = std::move(reason);
        return revoke_result::revoked;
    }
    return revoke_result::unknown;
}

bool session_registry::finish(std::string_view session_id, session_state to, std::string reason) {
    const auto now = now_();
    std::unique_lock lock(mutex_);
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
        return false;
    }
    session_record& s = it->second;
    if (s.state == session_state::killed || s.state == to) {
        return true;
    }
    if (s.state == session_state::active) {
        --active_;
    }
    s.state = to;
    s.ended_at = now;
    for (auto& t : s.tokens) {
        if (!t.info.revoked) {
            t.info.revoked = true;
            t.info.revoked_reason = reason;
        }
    }
    s.end_reason = std::move(reason);
    return true;
}

bool session_registry::end(std::string_view session_id, std::string reason) {
    return finish(session_id, session_state::ended, std::move(reason));
}

bool session_registry::kill(std::string_view session_id, std::string reason) {
    return finish(session_id, session_state::killed, std::move(reason));
}

std::optional<session_info> session_registry::get(std::string_view session_id) const {
    std::shared_lock lock(mutex_);
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
        return std::nullopt;
    }
    return to_info(it->second);
}

std::vector<session_info> session_registry::list() const {
    std::shared_lock lock(mutex_);
    std::vector<const session_record*> order;
    order.reserve(sessions_.size());
    for (const auto& [id, s] : sessions_) {
        order.push_back(&s);
    }
    std::sort(order.begin(), order.end(),
              [](const session_record* a, const session_record* b) { return a->seq > b->seq; });
    std::vector<session_info> out;
    out.reserve(order.size());
    for (const auto* s : order) {
        out.push_back(to_info(*s));
    }
    return out;
}

std::size_t session_registry::active_count() const {
    std::shared_lock lock(mutex_);
    return active_;
}

std::vector<std::pair<std::string, std::string>> session_registry::sweep_expired(
    std::vector<std::string>* ended) {
    const auto now = now_();
    std::vector<std::pair<std::string, std::string>> out;
    std::unique_lock lock(mutex_);
    for (auto& [id, s] : sessions_) {
        if (s.state != session_state::active) {
            continue;
        }
        for (auto& t : s.tokens) {
            if (!t.info.revoked && !t.expiry_reported && now >= t.info.expires_at) {
                t.expiry_reported = true;
                out.emplace_back(s.id, t.info.id);
            }
        }
        if (now >= s.expires_at) {
            s.state = session_state::ended;
            s.end_reason = std::string(expired_reason);
            s.ended_at = now;
            --active_;
            if (ended != nullptr) {
                ended->push_back(s.id);
            }
        }
    }
    lock.unlock();
    std::sort(out.begin(), out.end());
    return out;
}

std::size_t session_registry::prune(std::chrono::milliseconds keep) {
    const auto now = now_();
    std::unique_lock lock(mutex_);
    return std::erase_if(sessions_, [&](const auto& entry) {
        const session_record& s = entry.second;
        return s.state != session_state::active && now - s.ended_at >= keep;
    });
}

stored_session session_registry::to_stored(const session_record& s) {
    stored_session out;
    out.id = s.id;
    out.job = s.job;
    out.created = s.created;
    out.expires_at = s.expires_at;
    out.state = s.state;
    out.end_reason = s.end_reason;
    out.ended_at = s.ended_at;
    out.seq = s.seq;
    out.tokens.reserve(s.tokens.size());
    for (const auto& t : s.tokens) {
        stored_token st;
        st.id = t.info.id;
        st.hash = t.hash;
        st.created = t.info.created;
        st.expires_at = t.info.expires_at;
        st.revoked = t.info.revoked;
        st.revoked_reason = t.info.revoked_reason;
        st.expiry_reported = t.expiry_reported;
        out.tokens.push_back(std::move(st));
    }
    return out;
}

session_registry::session_record session_registry::from_stored(stored_session&& s) {
    session_record out;
    out.seq = s.seq;
    out.id = std::move(s.id);
    out.job = std::move(s.job);
    out.created = s.created;
    out.expires_at = s.expires_at;
    out.state = s.state;
    out.end_reason = std::move(s.end_reason);
    out.ended_at = s.ended_at;
    out.tokens.reserve(s.tokens.size());
    for (auto& st : s.tokens) {
        token_record t;
        t.info.id = std::move(st.id);
        t.info.created = st.created;
        t.info.expires_at = st.expires_at;
        t.info.revoked = st.revoked;
        t.info.revoked_reason = std::move(st.revoked_reason);
        t.hash = st.hash;
        t.expiry_reported = st.expiry_reported;
        out.tokens.push_back(std::move(t));
    }
    return out;
}

std::vector<stored_session> session_registry::snapshot() const {
    std::shared_lock lock(mutex_);
    std::vector<const session_record*> order;
    order.reserve(sessions_.size());
    for (const auto& [id, s] : sessions_) {
        order.push_back(&s);
    }
    std::sort(order.begin(), order.end(),
              [](const session_record* a, const session_record* b) { return a->seq < b->seq; });
    std::vector<stored_session> out;
    out.reserve(order.size());
    for (const auto* s : order) {
        out.push_back(to_stored(*s));
    }
    return out;
}

void session_registry::restore(std::vector<stored_session> sessions) {
    // Checked and built outside the lock; the swap under it cannot throw.
    session_map fresh;
    fresh.reserve(sessions.size());
    std::size_t active = 0;
    std::uint64_t next_seq = 0;
    for (auto& s : sessions) {
        if (s.id.empty() || s.job.empty()) {
            throw std::invalid_argument("restore: a session has an empty id or job");
        }
        std::unordered_set<std::string_view> token_ids;
        for (const auto& t : s.tokens) {
            if (!token_ids.insert(t.id).second) {
                throw std::invalid_argument("restore: session " + s.id +
                                            " has two tokens with id " + t.id);
            }
        }
        if (fresh.find(s.id) != fresh.end()) {
            throw std::invalid_argument("restore: two sessions with id " + s.id);
        }
        if (s.state == session_state::active) {
            ++active;
        }
        next_seq = std::max(next_seq, s.seq + 1);
        std::string id = s.id;
        fresh.emplace(std::move(id), from_stored(std::move(s)));
    }

    std::unique_lock lock(mutex_);
    sessions_.swap(fresh);
    active_ = active;
    next_seq_ = next_seq;
    lock.unlock();
    // `fresh` now holds the old contents and is destroyed outside the lock.
}

std::optional<stored_session> session_registry::stored(std::string_view session_id) const {
    std::shared_lock lock(mutex_);
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
        return std::nullopt;
    }
    return to_stored(it->second);
}

}  // namespace cordon::proxy::control

namespace cordon::proxy::control {

session_registry::merge_result session_registry::merge(const stored_session& s) {
    if (s.id.empty() || s.job.empty()) {
        throw std::invalid_argument("merge: a session has an empty id or job");
    }
    merge_result r;
    std::unique_lock lock(mutex_);
    auto it = sessions_.find(s.id);
    if (it == sessions_.end()) {
        stored_session copy = s;
        copy.seq = next_seq_++;
        std::string id = copy.id;
        it = sessions_.emplace(std::move(id), from_stored(std::move(copy))).first;
        if (it->second.state == session_state::active) {
            ++active_;
        }
        r.added = true;
        return r;
    }
    session_record& mine = it->second;
    for (const auto& st : s.tokens) {
        auto t = std::find_if(mine.tokens.begin(), mine.tokens.end(),
                              [&](const token_record& x) { return x.info.id == st.id; });
        if (t == mine.tokens.end()) {
            if (mine.tokens.size() >= max_tokens_per_session) {
                continue;  // bounded as add_token is: one more is never accepted here
            }
            token_record& nt = mine.tokens.emplace_back();
            nt.info.id = st.id;
            nt.info.created = st.created;
            nt.info.expires_at = st.expires_at;
            nt.info.revoked = st.revoked;
            nt.info.revoked_reason = st.revoked_reason;
            nt.hash = st.hash;
            mine.expires_at = std::max(mine.expires_at, st.expires_at);
            continue;
        }
        // A token is written once: only its revocation can follow.
        if (st.revoked && !t->info.revoked) {
            t->info.revoked = true;
            t->info.revoked_reason = st.revoked_reason;
            if (s.state == session_state::active) {
                r.revoked.push_back(t->info.id);
            }
        }
    }
    const auto rank = [](session_state x) {
        return x == session_state::killed ? 2 : x == session_state::ended ? 1 : 0;
    };
    if (rank(s.state) > rank(mine.state)) {
        if (mine.state == session_state::active) {
            --active_;
        }
        mine.state = s.state;
        mine.end_reason = s.end_reason;
        mine.ended_at = s.ended_at;
        (s.state == session_state::killed ? r.killed : r.ended) = true;
        for (auto& t : mine.tokens) {
            if (!t.info.revoked) {
                t.info.revoked = true;
                t.info.revoked_reason = s.end_reason;
            }
        }
    }
    return r;
}

bool session_registry::forget(std::string_view session_id) {
    std::unique_lock lock(mutex_);
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
        return false;
    }
    if (it->second.state == session_state::active) {
        --active_;
    }
    sessions_.erase(it);
    return true;
}

std::vector<std::string> session_registry::expire_now(std::string_view session_id) {
    const auto now = now_();
    std::vector<std::string> valid;
    std::unique_lock lock(mutex_);
    const auto it = sessions_.find(session_id);
    if (it == sessions_.end()) {
        return valid;
    }
    session_record& s = it->second;
    for (auto& t : s.tokens) {
        if (!t.info.revoked && t.info.expires_at > now) {
            t.info.expires_at = now;
            t.expiry_reported = true;  // the caller closes its tunnels now
            valid.push_back(t.info.id);
        }
    }
    if (s.expires_at > now) {
        s.expires_at = now;
    }
    if (s.state == session_state::active) {
        --active_;
        s.state = session_state::ended;
        s.end_reason = std::string(expired_reason);
        s.ended_at = now;
    }
    return valid;
}

}  // namespace cordon::proxy::control
