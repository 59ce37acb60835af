#pragma once
// The session and token registry of the daemon: who may use the proxy, as which job, until
// when. Pure logic plus OpenSSL randomness and hashing: no sockets, no Asio. snapshot(),
// restore() and stored() hand the whole state out as plain structs for persistence
// (proxy/control/state_store.hpp), so kills, revocations and sessions survive a restart.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/time.hpp"
#include "proxy/control/tokens.hpp"

namespace cordon::proxy::control {

/// Where a session is in its life. `ended` covers both DELETE /v1/sessions/ID and expiry
/// (end_reason "expired"); `killed` is a session kill and is never undone.
enum class session_state : std::uint8_t { active, ended, killed };

/// The outcome of checking a client's SESSION:TOKEN.
enum class auth_status : std::uint8_t {
    ok,
    bad_credentials,  ///< unknown session or wrong token (deliberately not told apart)
    token_expired,
    token_revoked,
    session_ended,
    session_killed,
};

/// The outcome of revoking one token.
enum class revoke_result : std::uint8_t {
    revoked,          ///< revoked by this call
    already_revoked,  ///< it was revoked before (also by end/kill of its session); unchanged
    unknown,          ///< no such session, or no such token in it
};

/// "active", "ended", "killed".
std::string_view to_string(session_state s) noexcept;
/// "ok", "bad_credentials", "token_expired", "token_revoked", "session_ended",
/// "session_killed".
std::string_view to_string(auth_status s) noexcept;
/// "revoked", "already_revoked", "unknown".
std::string_view to_string(revoke_result r) noexcept;

/// A token as the admin API shows it: never the secret, never its hash.
struct token_info {
    std::string id;  ///< "t-" + 12 hex; unique within its session only
    common::wall_clock::time_point created;
    common::wall_clock::time_point expires_at;  ///< expired when now >= expires_at
    bool revoked = false;
    std::string revoked_reason;  ///< the revoke reason, or the end/kill reason of the session
};

/// A session as the admin API shows it.
struct session_info {
    std::string id;  ///< "s-" + 16 hex (64 random bits)
    std::string job;
    common::wall_clock::time_point created;
    common::wall_clock::time_point expires_at;  ///< the latest expires_at of its tokens
    session_state state = session_state::active;
    std::string end_reason;  ///< empty while active
    common::wall_clock::time_point
        ended_at{};                  ///< when it left active or became killed; else epoch
    std::vector<token_info> tokens;  ///< in minting order
};

/// What create() and add_token() hand out. `token` is the secret: it is returned here once and
/// never stored (only its SHA-256 is).
struct minted {
    std::string session_id;
    std::string token_id;
    std::string token;  ///< 64 lower-case hex chars (256 random bits)
    common::wall_clock::time_point expires_at;
};

/// The answer to authenticate(). `job` and `token_id` are empty for bad_credentials.
struct auth_result {
    auth_status status = auth_status::bad_credentials;
    std::string job;
    std::string token_id;
    bool ok() const noexcept { return status == auth_status::ok; }
};

/// create() throws this when `max_active_sessions` sessions are already active (the admin API
/// answers 429/503). The registry is unchanged.
class session_limit_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A token as persisted: everything the registry knows of it, the hash of its secret included
/// (never the secret itself).
struct stored_token {
    std::string id;
    secret_hash hash{};
    common::wall_clock::time_point created;
    common::wall_clock::time_point expires_at;
    bool revoked = false;
    std::string revoked_reason;
    bool expiry_reported = false;  ///< sweep_expired() has reported it
};

/// A session as persisted, tokens in minting order.
struct stored_session {
    std::string id;
    std::string job;
    common::wall_clock::time_point created;
    common::wall_clock::time_point expires_at;
    session_state state = session_state::active;
    std::string end_reason;
    common::wall_clock::time_point ended_at{};
    std::uint64_t seq = 0;  ///< creation order within the registry (list() sorts by it)
    std::vector<stored_token> tokens;
};

/// Sessions and their short-lived tokens. Thread-safe: one std::shared_mutex; authenticate(),
/// get(), list() and active_count() take the shared lock only, the rest the exclusive lock.
/// `now` is injected (a fake clock in tests); it is called outside the lock, possibly from
/// several threads at once, so it must be thread-safe.
class session_registry {
public:
    using clock_fn = std::function<common::wall_clock::time_point()>;

    /// Tokens one session may ever mint (create's token included); add_token beyond that
    /// returns nullopt. Bounds the memory of a session and the cost of authenticate().
    static constexpr std::size_t max_tokens_per_session = 64;
    /// Default bound on active sessions (see create()).
    static constexpr std::size_t default_max_active_sessions = 100000;
    /// The longest ttl create() and add_token() accept (also keeps now + ttl from overflowing).
    static constexpr std::chrono::milliseconds max_ttl = std::chrono::hours(24 * 366);
    /// The end_reason sweep_expired() gives sessions whose tokens have all expired.
    static constexpr std::string_view expired_reason = "expired";

    /// An empty `now` means the system clock.
    explicit session_registry(
        clock_fn now = [] { return common::wall_clock::now(); },
        std::size_t max_active_sessions = default_max_active_sessions);

    session_registry(const session_registry&) = delete;
    session_registry& operator=(const session_registry&) = delete;

    /// New active session for `job` with one token valid for `ttl`; the session's expires_at is
    /// that token's (now + ttl). Throws std::invalid_argument if `job` is empty or `ttl` is not
    /// in (0, max_ttl], session_limit_error if max_active_sessions sessions are active (expired
    /// sessions count until sweep_expired() ends them), std::runtime_error if the CSPRNG fails.
    minted create(std::string job, std::chrono::milliseconds ttl);

    /// Another token, valid for `ttl`, for an active session; the session's expires_at becomes
    /// the later of its own and the new token's. nullopt if the session is unknown, not active,
    /// already expired (now >= expires_at, even if not yet swept: expiry is final), or has
    /// minted max_tokens_per_session tokens. Throws std::invalid_argument for a ttl outside
    /// (0, max_ttl] and std::runtime_error if the CSPRNG fails.
    std::optional<minted> add_token(std::string_view session_id, std::chrono::milliseconds ttl);

    /// Checks the credentials a client sent (Proxy-Authorization: Basic SESSION:TOKEN).
    /// One hash-map lookup, then the token's SHA-256 is compared in constant time with every
    /// token of the session (at most max_tokens_per_session). Unknown session and wrong token
    /// both give bad_credentials, and the token is hashed in both cases. For a matching token
    /// the first of these that holds wins:
    ///   session killed -> session_killed;
    ///   token not revoked and now >= its expires_at -> token_expired (so a session ended by
    ///     expiry answers token_expired whether or not sweep_expired() has run yet);
    ///   session ended -> session_ended;
    ///   token revoked -> token_revoked;
    ///   else ok.
    /// `job` and `token_id` are filled whenever the token matched (every status but
    /// bad_credentials), so denials can be logged with the session's job.
    /// Takes the shared lock only.
    auth_result authenticate(std::string_view session_id, std::string_view token) const;

    /// Revokes one token of a session (whatever the session's state). A revoked token is not
    /// reported by sweep_expired(): the caller closes its tunnels now.
    revoke_result revoke_token(std::string_view session_id, std::string_view token_id,
                               std::string reason);

    /// Ends a session (DELETE /v1/sessions/ID): its not-yet-revoked tokens are revoked with
    /// `reason`, state ended. False only if the session is unknown. Idempotent: ending an
    /// ended or killed session changes nothing (the first reason stays; killed stays killed).
    bool end(std::string_view session_id, std::string reason);

    /// Kills a session: as end() but state killed. Killing an ended session makes it killed
    /// (new reason and ended_at); killing a killed one changes nothing. False only if unknown.
    bool kill(std::string_view session_id, std::string reason);

    /// One session, or nullopt if unknown (or pruned).
    std::optional<session_info> get(std::string_view session_id) const;

    /// Every session in memory, newest first (by creation order).
    std::vector<session_info> list() const;

    /// Sessions in state active (including expired ones sweep_expired() has not ended yet).
    std::size_t active_count() const;

    /// Tokens of active sessions that have expired (now >= expires_at), not been revoked and
    /// not been reported by an earlier call, as (session id, token id) sorted, each reported
    /// once: the caller closes the tunnels opened with them. Also ends, with reason "expired",
    /// the active sessions whose tokens have all expired. Call from a timer. Cost: O(sessions).
    /// `ended`, when given, receives the ids of the sessions this sweep ended (their per-session
    /// state elsewhere, usage and MCP pins, can go).
    std::vector<std::pair<std::string, std::string>> sweep_expired(
        std::vector<std::string>* ended = nullptr);

    /// Forgets ended and killed sessions whose ended_at is at least `keep` ago, so memory stays
    /// bounded; returns how many. Call from a timer. After this, their ids are unknown
    /// (authenticate answers bad_credentials).
    std::size_t prune(std::chrono::milliseconds keep);

    /// Every session, in creation order (ascending seq), with its tokens and their hashes:
    /// the state to persist. Takes the shared lock.
    std::vector<stored_session> snapshot() const;

    /// Replaces the whole contents with `sessions` (at start-up, from the state store): states,
    /// reasons, revocations and token hashes are taken as they are, so a killed session stays
    /// killed and a revoked token stays revoked; expiry is judged against `now` as always.
    /// Sessions that are active but expired are ended by the next sweep_expired(). The
    /// max_active_sessions bound is not applied (every stored session is kept); later
    /// create() calls get seq values above the largest restored one. Throws
    /// std::invalid_argument, leaving the registry unchanged, if a session id or job is empty,
    /// two sessions share an id, or two tokens of one session share an id.
    void restore(std::vector<stored_session> sessions);

    /// One session as persisted (to save it after a change), or nullopt if unknown.
    /// Takes the shared lock.
    std::optional<stored_session> stored(std::string_view session_id) const;

    /// What merge() changed.
    struct merge_result {
        bool added = false;                ///< the session was not known here
        bool killed = false;               ///< it became killed
        bool ended = false;                ///< it became ended (not killed)
        std::vector<std::string> revoked;  ///< tokens it revoked (not by end or kill)
        bool changed() const noexcept { return added || killed || ended || !revoked.empty(); }
    };
    /// Folds in a session as another instance of a fleet wrote it (docs/fleet.md). Monotone:
    /// an unknown session is added (with a new seq; the max_active_sessions bound is not
    /// applied); a known one gains the tokens it lacks, revocations, and moves forward only
    /// (active -> ended -> killed; killed stays killed); nothing is ever un-revoked. Throws
    /// std::invalid_argument for an empty id or job (unchanged then).
    merge_result merge(const stored_session& s);

    /// Removes a session outright: a create whose write the fleet's store refused (it was
    /// never handed out). False if unknown.
    bool forget(std::string_view session_id);

    /// The fleet's store let the session's lease run out (etcd's clock, not this host's): an
    /// active session ends as expired and every token not revoked expires now. Returns the
    /// ids of the tokens that were still valid (their tunnels close), empty if none or
    /// unknown.
    std::vector<std::string> expire_now(std::string_view session_id);

private:
    struct token_record {
        token_info info;
        secret_hash hash{};
        bool expiry_reported = false;  ///< sweep_expired() has reported it
    };
    struct session_record {
        std::uint64_t seq = 0;  ///< creation order, for list()
        std::string id;
        std::string job;
        common::wall_clock::time_point created;
        common::wall_clock::time_point expires_at;
        session_state state = session_state::active;
        std::string end_reason;
        common::wall_clock::time_point ended_at{};
        std::vector<token_record> tokens;
    };
    /// Lets the map be searched with a string_view without building a std::string.
    struct string_hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept {
            return std::hash<std::string_view>{}(s);
        }
    };
    using session_map =
        std::unordered_map<std::string, session_record, string_hash, std::equal_to<>>;

    /// A new token secret and its hash, made before taking the lock.
    struct fresh_secret {
        std::string token;
        secret_hash hash{};
    };

    static void check_ttl(std::chrono::milliseconds ttl);
    static fresh_secret make_secret();
    static session_info to_info(const session_record& s);
    static stored_session to_stored(const session_record& s);
    static session_record from_stored(stored_session&& s);
    /// Adds a token with `secret` to `s` (exclusive lock held). Token ids are unique within
    /// `s`. Throws only before changing `s`.
    static minted mint(session_record& s, common::wall_clock::time_point now,
                       std::chrono::milliseconds ttl, fresh_secret&& secret);
    /// end() and kill() (exclusive lock held).
    bool finish(std::string_view session_id, session_state to, std::string reason);

    clock_fn now_;
    std::size_t max_active_sessions_;
    mutable std::shared_mutex mutex_;
    session_map sessions_;
    std::size_t active_ = 0;  ///< sessions in state active
    std::uint64_t next_seq_ = 0;
};

}  // namespace cordon::proxy::control
