#include "proxy/alerts/denial_bursts.hpp"

#include <algorithm>
#include <tuple>

namespace cordon::proxy::alerts {

namespace {

constexpr std::int64_t minute_ms = 60'000;

void cut(std::string& s, std::size_t n) {
    if (s.size() > n) {
        s.resize(n);
    }
}

std::string key_of(const denial_event& e) {
    // Session ids never start with a control character, so the two spaces cannot meet.
    return e.session.empty() ? "\x01" + e.job : e.session;
}

}  // namespace

void denial_event::bound() {
    cut(job, 128);
    cut(session, 128);
    cut(reason, 128);
    cut(target, 256);
    cut(kind, 128);
}

void rate_limiter::set_limit(std::uint32_t per_minute) { per_minute_ = per_minute; }

void rate_limiter::expire(std::int64_t now_ms) {
    while (!taken_.empty() && taken_.front() <= now_ms - minute_ms) {
        taken_.pop_front();
    }
    while (taken_.size() > per_minute_) {  // the limit was lowered
        taken_.pop_front();
    }
}

bool rate_limiter::try_take(std::int64_t now_ms) {
    expire(now_ms);
    if (taken_.size() >= per_minute_) {
        return false;
    }
    taken_.push_back(now_ms);
    return true;
}

std::int64_t rate_limiter::next_free(std::int64_t now_ms) {
    expire(now_ms);
    if (taken_.size() < per_minute_) {
        return now_ms;
    }
    return taken_.front() + minute_ms + 1;
}

denial_bursts::denial_bursts(burst_settings s) : s_(s), limiter_(s.max_per_minute) {}

void denial_bursts::configure(const burst_settings& s) {
    const bool ring_changed = s.burst_threshold != s_.burst_threshold;
    s_ = s;
    limiter_.set_limit(s.max_per_minute);
    for (auto& [k, e] : entries_) {
        if (ring_changed) {
            resize_ring(e);
        }
        if (!s_.windows) {
            e.win = {};
        }
    }
    if (!s_.windows) {
        dropped_ = 0;
    }
}

void denial_bursts::resize_ring(entry& e) const {
    e.ring.clear();
    e.ring.reserve(std::min<std::size_t>(s_.burst_threshold, 64));
    e.ring_next = 0;
}

bool denial_bursts::add(const denial_event& ev) {
    if (ev.count == 0) {
        return false;
    }
    std::string key = key_of(ev);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
        if (entries_.size() >= s_.max_keys) {
            evict_idle(ev.mono_ms);
        }
        if (entries_.size() >= s_.max_keys) {
            untracked_ += ev.count;
            count_dropped(ev.count);
            return false;
        }
        it = entries_.emplace(std::move(key), entry{}).first;
        it->second.job = ev.job;
        it->second.session = ev.session;
        resize_ring(it->second);
    }
    entry& e = it->second;

    // Burst: the last burst_threshold denials all fall within burst_window. `count`
    // denials at one time are min(count, burst_threshold) entries of the ring (more would
    // only overwrite each other).
    const std::int64_t span = s_.burst_window.count();
    if (e.ring.empty() || ev.mono_ms - e.last_mono > span) {
        e.in_burst = false;  // quiet for a whole window: any burst is over
    }
    const std::uint64_t pushes = std::min<std::uint64_t>(ev.count, s_.burst_threshold);
    for (std::uint64_t i = 0; i < pushes; ++i) {
        if (e.ring.size() < s_.burst_threshold) {
            e.ring.push_back(ev.mono_ms);
        } else {
            e.ring[e.ring_next] = ev.mono_ms;
            e.ring_next = (e.ring_next + 1) % e.ring.size();
        }
    }
    e.last_mono = std::max(e.last_mono, ev.mono_ms);
    // Full ring: ring_next is the oldest (0 right after it filled up, i.e. front()).
    const bool condition = !e.ring.empty() && e.ring.size() >= s_.burst_threshold &&
                           ev.mono_ms - e.ring[e.ring_next] <= span;
    bool started = false;
    if (condition && !e.in_burst) {
        started = true;
        e.in_burst = true;
    } else if (!condition) {
        e.in_burst = false;
    }
    if (!s_.windows) {
        return started;
    }

    // The alert window.
    const std::uint64_t n = ev.count;
    window& w = e.win;
    if (!w.open) {
        w = {};
        w.open = true;
        w.opened_mono = ev.mono_ms;
        w.opened_seq = next_seq_++;
        w.first_wall = ev.wall_ms;
    }
    w.last_wall = std::max(w.last_wall, ev.wall_ms);
    w.denials += n;
    w.burst = w.burst || e.in_burst;
    auto r = std::find_if(w.reasons.begin(), w.reasons.end(),
                          [&](const auto& p) { return p.first == ev.reason; });
    if (r != w.reasons.end()) {
        r->second += n;
    } else if (w.reasons.size() < s_.max_reasons) {
        w.reasons.emplace_back(ev.reason, n);
    } else {
        auto other = std::find_if(w.reasons.begin(), w.reasons.end(),
                                  [](const auto& p) { return p.first == "other"; });
        if (other == w.reasons.end()) {
            w.reasons.back() = {"other", w.reasons.back().second + n};
        } else {
            other->second += n;
        }
    }
    auto t = std::find_if(w.targets.begin(), w.targets.end(), [&](const target_count& c) {
        return c.target == ev.target && c.kind == ev.kind;
    });
    if (t != w.targets.end()) {
        t->count += n;
    } else if (w.targets.size() < s_.max_targets) {
        w.targets.push_back({ev.target, ev.kind, n});
    } else {
        w.other_targets += n;
    }
    return started;
}

denial_alert denial_bursts::close(entry& e, std::int64_t now_ms) {
    window& w = e.win;
    denial_alert a;
    a.job = e.job;
    a.session = e.session;
    a.denials = w.denials;
    a.reasons = std::move(w.reasons);
    std::stable_sort(a.reasons.begin(), a.reasons.end(),
                     [](const auto& x, const auto& y) { return x.second > y.second; });
    std::stable_sort(w.targets.begin(), w.targets.end(),
                     [](const auto& x, const auto& y) { return x.count > y.count; });
    a.other_targets = w.other_targets;
    for (std::size_t i = 0; i < w.targets.size(); ++i) {
        if (i < s_.top_targets) {
            a.top_targets.push_back(std::move(w.targets[i]));
        } else {
            a.other_targets += w.targets[i].count;
        }
    }
    a.first_wall_ms = w.first_wall;
    a.last_wall_ms = w.last_wall;
    a.window_ms = std::max<std::int64_t>(0, now_ms - w.opened_mono);
    a.burst = w.burst;
    a.dropped = dropped_;
    dropped_ = 0;
    w = {};
    return a;
}

std::vector<denial_alert> denial_bursts::take(std::int64_t now_ms, std::size_t max, bool all) {
    std::vector<entry*> due;
    for (auto& [k, e] : entries_) {
        if (e.win.open && (all || now_ms - e.win.opened_mono >= s_.interval.count())) {
            due.push_back(&e);
        }
    }
    std::sort(due.begin(), due.end(), [](const entry* x, const entry* y) {
        return std::tie(x->win.opened_mono, x->win.opened_seq) <
               std::tie(y->win.opened_mono, y->win.opened_seq);
    });
    std::vector<denial_alert> out;
    for (entry* e : due) {
        if (out.size() >= max) {
            break;
        }
        if (!limiter_.try_take(now_ms)) {
            rate_limited_ += due.size() - out.size();
            break;
        }
        out.push_back(close(*e, now_ms));
    }
    evict_idle(now_ms);
    return out;
}

std::vector<denial_alert> denial_bursts::take_due(std::int64_t now_ms, std::size_t max) {
    return take(now_ms, max, false);
}

std::vector<denial_alert> denial_bursts::take_all(std::int64_t now_ms, std::size_t max) {
    return take(now_ms, max, true);
}

std::int64_t denial_bursts::next_due() const {
    std::int64_t next = -1;
    for (const auto& [k, e] : entries_) {
        if (e.win.open) {
            const std::int64_t due = e.win.opened_mono + s_.interval.count();
            next = next < 0 ? due : std::min(next, due);
        }
    }
    return next;
}

std::size_t denial_bursts::open_windows() const {
    return static_cast<std::size_t>(std::count_if(
        entries_.begin(), entries_.end(), [](const auto& kv) { return kv.second.win.open; }));
}

void denial_bursts::evict_idle(std::int64_t now_ms) {
    const std::int64_t idle = s_.windows ? std::max(s_.interval.count(), s_.burst_window.count())
                                         : s_.burst_window.count();
    std::erase_if(entries_, [&](const auto& kv) {
        return !kv.second.win.open && now_ms - kv.second.last_mono > idle;
    });
}

}  // namespace cordon::proxy::alerts
