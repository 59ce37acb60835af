#include "config/learn.hpp"

namespace cordon::config {

bool is_policy_reason(std::string_view reason) noexcept {
    return reason == "no_rule" || reason == "port" || reason == "protocol" ||
           reason == "method" || reason == "private_address" || reason == "unknown_job";
}

std::string_view known_reason(std::string_view reason) noexcept {
    for (std::size_t i = 1; i < deny_reason_count; ++i) {
        const std::string_view name = to_string(static_cast<deny_reason>(i));
        if (name == reason) {
            return name;
        }
    }
    return "other";
}

}  // namespace cordon::config
