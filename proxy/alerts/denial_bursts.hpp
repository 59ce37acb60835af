#pragma once
// The denial bookkeeping, without I/O or clocks: bursts of a session detected over a
// sliding window (always, webhook or not), and, for the webhook, denials coalesced per
// session into one alert per `interval` with the max-per-minute limit on alerts across all
// sessions. Times are passed in (milliseconds of a steady clock for windows, of the wall
// clock for what the alert shows). Pure.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cordon::proxy::alerts {

struct burst_settings {
    std::chrono::milliseconds interval{60'000};      ///< one alert per session per interval
    std::uint32_t max_per_minute = 30;               ///< alerts across all sessions
    std::uint32_t burst_threshold = 10;              ///< denials of one session within
    std::chrono::milliseconds burst_window{60'000};  ///< burst_window: a burst
    std::size_t max_keys = 4096;   ///< sessions (and unattributed jobs) tracked at once
    std::size_t max_targets = 32;  ///< distinct targets counted per window
    std::size_t max_reasons = 16;  ///< distinct reasons counted per window
    std::size_t top_targets = 5;   ///< targets an alert lists
    /// false (no webhook): bursts are detected and nothing else is kept; no alert windows.
    bool windows = true;
};

/// One denied attempt as the notifier queues it: owned and bounded (see bound()).
struct denial_event {
    std::string job;      ///< "" when unattributed
    std::string session;  ///< "" for clients attributed by `sources` or not at all
    std::string reason;
    std::string target;  ///< "host:port", or the name for DNS
    std::string kind;    ///< "connect", "http", "dns"
    std::int64_t mono_ms = 0;
    std::int64_t wall_ms = 0;
    std::uint64_t count = 1;  ///< identical denials this event stands for (0: none)

    /// Cuts every field to a sane length (target 256 bytes, others 128).
    void bound();
};

struct target_count {
    std::string target;
    std::string kind;
    std::uint64_t count = 0;
};

/// What one POST reports: one session's (or one unattributed job's) denials of a window.
struct denial_alert {
    std::string job;
    std::string session;
    std::uint64_t denials = 0;
    std::vector<std::pair<std::string, std::uint64_t>> reasons;  ///< most frequent first
    std::vector<target_count> top_targets;                       ///< most frequent first
    std::uint64_t other_targets = 0;  ///< denials whose target is not in top_targets
    std::int64_t first_wall_ms = 0;
    std::int64_t last_wall_ms = 0;
    std::int64_t window_ms = 0;  ///< from the first denial to the window's close
    bool burst = false;          ///< the session reached burst_threshold in the window
    std::uint64_t dropped = 0;   ///< denials lost before counting since the last alert
};

/// At most `per_minute` events in any 60 s (a sliding log: exact, bounded by per_minute).
class rate_limiter {
public:
    explicit rate_limiter(std::uint32_t per_minute) : per_minute_(per_minute) {}
    void set_limit(std::uint32_t per_minute);
    /// Takes a slot at `now_ms` if one is free.
    bool try_take(std::int64_t now_ms);
    /// The first time a slot is free (now_ms when one is).
    std::int64_t next_free(std::int64_t now_ms);

private:
    void expire(std::int64_t now_ms);
    std::uint32_t per_minute_;
    std::deque<std::int64_t> taken_;
};

/// Coalesces denials per session. Not thread-safe: one thread (the notifier's) owns it.
class denial_bursts {
public:
    explicit denial_bursts(burst_settings s);

    /// New settings; open windows and burst history are kept (burst history is reset when
    /// burst_threshold changes; open windows are discarded when `windows` turns false).
    void configure(const burst_settings& s);
    const burst_settings& settings() const noexcept { return s_; }

    /// Counts `e.count` denials, all at e.mono_ms. Returns true when they start a burst of
    /// their session (the caller counts cordon_denial_bursts_total{job} once per burst). A
    /// burst lasts while the session keeps burst_threshold denials within burst_window.
    bool add(const denial_event& e);
    /// Denials lost before they reached add() (a full queue); reported in the next alert.
    /// Ignored without windows (nothing to report them in).
    void count_dropped(std::uint64_t n) {
        if (s_.windows) {
            dropped_ += n;
        }
    }
    /// Forgets sessions with no open window, idle for longer than interval and burst_window
    /// (burst_window only without windows). take_due() does it too.
    void forget_idle(std::int64_t now_ms) { evict_idle(now_ms); }

    /// Closes the windows whose interval has passed, oldest first, as long as the rate
    /// limit allows; the others stay open and keep counting until a slot is free. At most
    /// `max` alerts. Also forgets sessions idle for longer than interval and burst_window.
    std::vector<denial_alert> take_due(std::int64_t now_ms, std::size_t max);
    /// Like take_due but for every open window, due or not (shutdown). Rate-limited too.
    std::vector<denial_alert> take_all(std::int64_t now_ms, std::size_t max);
    /// Milliseconds of the steady clock when the next window falls due (or -1: none open).
    std::int64_t next_due() const;

    std::size_t open_windows() const;
    std::size_t tracked() const noexcept { return entries_.size(); }
    /// Denials (weighted by count) add() refused because max_keys sessions were tracked.
    std::uint64_t untracked() const noexcept { return untracked_; }
    std::uint64_t rate_limited() const noexcept { return rate_limited_; }

private:
    struct window {
        bool open = false;
        std::int64_t opened_mono = 0;
        std::uint64_t opened_seq = 0;  ///< order of opening: ties within a millisecond
        std::int64_t first_wall = 0;
        std::int64_t last_wall = 0;
        std::uint64_t denials = 0;
        std::vector<std::pair<std::string, std::uint64_t>> reasons;
        std::vector<target_count> targets;
        std::uint64_t other_targets = 0;
        bool burst = false;
    };
    struct entry {
        std::string job;
        std::string session;
        std::vector<std::int64_t> ring;  ///< the last burst_threshold denial times
        std::size_t ring_next = 0;
        bool in_burst = false;
        std::int64_t last_mono = 0;
        window win;
    };

    std::vector<denial_alert> take(std::int64_t now_ms, std::size_t max, bool all);
    denial_alert close(entry& e, std::int64_t now_ms);
    void evict_idle(std::int64_t now_ms);
    void resize_ring(entry& e) const;

    burst_settings s_;
    rate_limiter limiter_;
    std::unordered_map<std::string, entry> entries_;
    std::uint64_t next_seq_ = 0;
    std::uint64_t dropped_ = 0;
    std::uint64_t untracked_ = 0;
    std::uint64_t rate_limited_ = 0;
};

}  // namespace cordon::proxy::alerts
