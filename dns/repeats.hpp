#pragma once
// Coalescing of identical DNS audit lines. A client that asks the same name
// again and again (a retry loop, a cache-less library, a flood) would write one
// audit line per query; the filter lets the first of a kind through and counts
// the identical ones that follow in the same window, to be written as one line
// with their count when the window ends. A post-mortem still sees every
// distinct query at the time it was first asked, and a flood costs at most two
// lines per distinct query per window. Pure: no I/O, no clock of its own.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "config/ip.hpp"
#include "dns/server.hpp"
#include "dns/wire.hpp"

namespace cordon::dns {

class repeat_filter {
public:
    using clock = std::chrono::steady_clock;

    /// What a coalesced line says: the query's kind and how many identical ones
    /// followed.
    struct entry {
        config::ip_address client;
        question q;
        verdict v;
        rcode rc = rcode::noerror;
        bool cached = false;
        std::uint64_t repeats = 0;  ///< identical queries after the one written at once
    };

    /// `max_entries` bounds memory: once that many kinds are tracked in a window,
    /// further new kinds are written at once and not tracked (nothing is lost,
    /// only not coalesced).
    explicit repeat_filter(clock::duration window = std::chrono::seconds(1),
                           std::size_t max_entries = 4096);

    /// True: write this query's audit line now (the first of its kind in the
    /// window, or not trackable). False: counted as a repeat of a line already
    /// written. Call expire() first when the window may have ended.
    bool admit(const config::ip_address& client, const question& q, const verdict& v, rcode rc,
               bool cached, clock::time_point now);

    /// When the window that began at the first admit() has ended by `now`: calls
    /// `fn(const entry&)` for each kind that counted repeats, forgets every kind
    /// and starts a new window. `force` ends the window now (at shutdown).
    template <class F>
    void expire(clock::time_point now, F&& fn, bool force = false) {
        if (entries_.empty() || (!force && now - window_start_ < window_)) {
            return;
        }
        for (const entry& e : entries_) {
            if (e.repeats > 0) {
                fn(e);
            }
        }
        entries_.clear();
        std::fill(slots_.begin(), slots_.end(), slot{});
    }

    /// Kinds tracked in the current window.
    std::size_t size() const noexcept { return entries_.size(); }
    clock::duration window() const noexcept { return window_; }

private:
    clock::duration window_;
    std::size_t max_entries_;
    clock::time_point window_start_{};
    std::vector<entry> entries_;
    // Open addressing (linear probing, at most half full): hash of a kind -> 1 + its index
    // in entries_ (0: free). A hash shared by two different kinds leaves the second
    // untracked (written every time): correct, only not coalesced.
    struct slot {
        std::uint64_t hash = 0;
        std::uint32_t index = 0;
    };
    std::vector<slot> slots_;
};

// ---- implementation (header-only: small, and on the hot path of every query)
// ----
namespace repeats_detail {

inline std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
    // boost::hash_combine's 64-bit step.
    return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 12) + (h >> 4));
}

inline std::uint64_t hash_of(const config::ip_address& client, const question& q, const verdict& v,
                             rcode rc, bool cached) {
    const std::hash<std::string_view> hs;
    const auto& b = client.bytes();
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;
    for (std::size_t i = 0; i < 8; ++i) {
        lo = (lo << 8) | b[i];
        hi = (hi << 8) | b[i + 8];
    }
    std::uint64_t h = hs(q.name);
    h = mix(h, lo);
    h = mix(h, hi);
    h = mix(h, (std::uint64_t{q.qtype} << 32) | (std::uint64_t{q.qclass} << 16) |
                   (std::uint64_t{static_cast<std::uint8_t>(rc)} << 8) |
                   (std::uint64_t{v.allow} << 1) | std::uint64_t{cached});
    // The verdict's strings only by their lengths; same() compares them. For one
    // client and name they rarely differ within a second, and a collision only
    // leaves a kind untracked.
    return mix(h, v.reason.size() | (v.job.size() << 16) | (std::uint64_t{v.session.size()} << 32));
}

inline bool same(const repeat_filter::entry& e, const config::ip_address& client, const question& q,
                 const verdict& v, rcode rc, bool cached) {
    return e.rc == rc && e.cached == cached && e.v.allow == v.allow && e.q.qtype == q.qtype &&
           e.q.qclass == q.qclass && e.client == client && e.q.name == q.name &&
           e.v.reason == v.reason && e.v.job == v.job && e.v.session == v.session;
}

}  // namespace repeats_detail

inline repeat_filter::repeat_filter(clock::duration window, std::size_t max_entries)
    : window_(window), max_entries_(max_entries) {
    std::size_t n = 16;
    while (n < 2 * max_entries_) {
        n *= 2;
    }
    slots_.resize(n);
    entries_.reserve(std::min<std::size_t>(max_entries_, 1024));
}

inline bool repeat_filter::admit(const config::ip_address& client, const question& q,
                                 const verdict& v, rcode rc, bool cached, clock::time_point now) {
    if (window_ <= clock::duration::zero()) {
        return true;  // coalescing off
    }
    const std::uint64_t h = repeats_detail::hash_of(client, q, v, rc, cached);
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = static_cast<std::size_t>(h ^ (h >> 29)) & mask;
    for (; slots_[i].index != 0; i = (i + 1) & mask) {
        if (slots_[i].hash != h) {
            continue;
        }
        entry& e = entries_[slots_[i].index - 1];
        if (!repeats_detail::same(e, client, q, v, rc, cached)) {
            return true;  // another kind with the same hash: not tracked
        }
        ++e.repeats;
        return false;
    }
    if (entries_.size() >= max_entries_) {
        return true;
    }
    if (entries_.empty()) {
        window_start_ = now;
    }
    entries_.push_back(entry{client, q, v, rc, cached, 0});
    slots_[i] = slot{h, static_cast<std::uint32_t>(entries_.size())};
    return true;
}

}  // namespace cordon::dns
