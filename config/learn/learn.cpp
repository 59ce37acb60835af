#include "config/learn/learn.hpp"

#include <algorithm>

namespace cordon::learn {

bool is_policy_reason(std::string_view reason) noexcept {
    return reason == "no_rule" || reason == "port" || reason == "protocol" || reason == "method" ||
           reason == "http_rule" || reason == "private_address" || reason == "unknown_job";
}

std::optional<std::vector<config::ip_address>> recorded_addresses(std::string_view text) {
    std::vector<config::ip_address> out;
    while (!text.empty()) {
        const std::size_t end = std::min(text.find(' '), text.size());
        const auto a = config::parse_ip(text.substr(0, end));
        if (!a) {
            return std::nullopt;
        }
        out.push_back(*a);
        text.remove_prefix(std::min(end + 1, text.size()));
    }
    return out;
}

std::string_view known_reason(std::string_view reason) noexcept {
    for (std::size_t i = 1; i < config::deny_reason_count; ++i) {
        const std::string_view name = config::to_string(static_cast<config::deny_reason>(i));
        if (name == reason) {
            return name;
        }
    }
    return "other";
}

}  // namespace cordon::learn
