// The session quota's checks (quota.hpp).

#include "proxy/data/quota.hpp"

#include <algorithm>

namespace cordon::proxy::data {

bool session_quota::take_tunnel(const config::job_limits& limits) {
    if (!usage_) {
        return true;
    }
    if (limits.max_tunnels &&
        usage_->tunnels.load() >= static_cast<std::int64_t>(*limits.max_tunnels)) {
        return false;
    }
    ++usage_->tunnels;
    holds_slot_ = true;
    return true;
}

void session_quota::release_tunnel() noexcept {
    if (holds_slot_ && usage_) {
        --usage_->tunnels;
    }
    holds_slot_ = false;
}

std::optional<std::uint64_t> session_quota::budget_left(const config::job_limits& limits) const {
    if (!limits.max_bytes_up || !usage_) {
        return std::nullopt;
    }
    const std::uint64_t used = usage_->bytes_up.load();
    return used >= *limits.max_bytes_up ? 0 : *limits.max_bytes_up - used;
}

bool session_quota::admit_chunk(const config::job_limits& limits, std::uint64_t n) {
    if (const auto left = budget_left(limits); left && n > *left) {
        return false;
    }
    if (usage_) {
        usage_->bytes_up += n;
    }
    return true;
}

std::uint64_t session_quota::admit_up(const config::job_limits& limits, std::uint64_t n) {
    if (!usage_ || !limits.max_bytes_up) {
        return n;
    }
    const std::uint64_t max = *limits.max_bytes_up;
    const std::uint64_t before = usage_->bytes_up.fetch_add(n);
    if (before >= max) {
        return 0;
    }
    return std::min<std::uint64_t>(n, max - before);
}

}  // namespace cordon::proxy::data
