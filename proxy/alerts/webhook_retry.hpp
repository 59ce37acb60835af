#pragma once
// When the webhook sender tries again: which answers are retried, the exponential backoff
// with jitter, and the receiver's Retry-After. Pure.

#include <chrono>
#include <optional>
#include <string_view>

#include "common/time.hpp"

namespace cordon::proxy::alerts {

/// First retry after about 1 s, doubling, at most 30 s (before jitter).
inline constexpr std::chrono::milliseconds retry_base{1'000};
inline constexpr std::chrono::milliseconds retry_cap{30'000};
/// A receiver's Retry-After is honoured up to this; longer ones are cut to it.
inline constexpr std::chrono::milliseconds max_retry_after{120'000};

enum class delivery_outcome {
    delivered,  ///< 2xx
    retry,      ///< 429, 5xx, or no answer (connect, TLS, timeout)
    give_up,    ///< any other status (3xx, 4xx): trying again would not help
};
delivery_outcome outcome_of_status(unsigned status) noexcept;

/// Delay before retry `attempt` (1 = the first retry): min(cap, base × 2^(attempt-1)),
/// half of it fixed and half scaled by `unit` in [0, 1) ("equal jitter", so receivers that
/// failed together are not hit together again). A `retry_after` longer than that wins, up
/// to max_retry_after.
std::chrono::milliseconds retry_delay(unsigned attempt, double unit,
                                      std::optional<std::chrono::milliseconds> retry_after);

/// Retry-After (RFC 9110): delay-seconds ("120") or an IMF-fixdate ("Sun, 06 Nov 1994
/// 08:49:37 GMT", relative to `now`; a date in the past gives 0). nullopt when it is neither.
std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view value,
                                                           common::wall_clock::time_point now);

}  // namespace cordon::proxy::alerts
