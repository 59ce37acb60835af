#include "config/learn/learn.hpp"

#include <algorithm>

#include "config/http_rules.hpp"

namespace cordon::learn {

bool is_policy_reason(std::string_view reason) noexcept {
    return reason == "no_rule" || reason == "port" || reason == "protocol" || reason == "method" ||
           reason == "http_rule" || reason == "private_address" || reason == "unknown_job";
}

bool is_tool_reason(std::string_view reason) noexcept {
    return reason == "mcp_tool" || reason == "mcp_tool_changed";
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

std::optional<recorded_path> parse_recorded_path(std::string_view raw) {
    recorded_path out;
    raw = raw.substr(0, raw.find('?'));
    constexpr std::string_view truncated = "...(truncated)";  // audit_record's mark
    if (raw.ends_with(truncated)) {
        raw.remove_suffix(truncated.size());
        out.cut = true;
    }
    if (raw.size() > max_recorded_path) {
        raw = raw.substr(0, max_recorded_path + 1);
        out.cut = true;
    }
    if (out.cut) {
        // The last segment may be partial: keep only the whole ones before it.
        const std::size_t slash = raw.rfind('/');
        raw = raw.substr(0, slash == std::string_view::npos ? 0 : slash);
        if (raw.empty()) {
            raw = "/";
        }
    }
    const config::normal_path np = config::normalise_path(raw);
    if (!np.ok() || np.has_query || np.path != raw) {
        return std::nullopt;
    }
    out.path = np.path;
    if (out.cut && out.path.size() > 1 && out.path.back() == '/') {
        out.path.pop_back();
    }
    return out;
}

recorded_path fold_path(const recorded_path& p, std::size_t segments) {
    recorded_path out;
    out.cut = true;
    std::size_t i = 0;
    for (std::size_t n = 0; n < segments && i < p.path.size(); ++n) {
        const std::size_t next = std::min(p.path.find('/', i + 1), p.path.size());
        i = next;
    }
    out.path = i == 0 ? "/" : p.path.substr(0, i);
    if (i >= p.path.size()) {
        out.cut = p.cut;  // nothing was cut off
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
