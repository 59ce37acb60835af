#include "config/units.hpp"

#include <array>
#include <limits>
#include <utility>

namespace cordon::config {
namespace {

// Reads a run of decimal digits at the front of `s` into `out`; false on none or overflow.
bool take_number(std::string_view& s, std::uint64_t& out) {
    std::size_t i = 0;
    std::uint64_t v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        const auto d = static_cast<std::uint64_t>(s[i] - '0');
        if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
            return false;
        }
        v = v * 10 + d;
        ++i;
    }
    if (i == 0) {
        return false;
    }
    s.remove_prefix(i);
    out = v;
    return true;
}

bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
    if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) {
        return false;
    }
    out = a * b;
    return true;
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
    std::uint64_t n = 0;
    if (!take_number(text, n)) {
        return std::nullopt;
    }
    static constexpr std::array<std::pair<std::string_view, std::uint64_t>, 10> units{{
        {"", 1},
        {"B", 1},
        {"KB", 1000ULL},
        {"MB", 1000ULL * 1000},
        {"GB", 1000ULL * 1000 * 1000},
        {"TB", 1000ULL * 1000 * 1000 * 1000},
        {"KiB", 1ULL << 10},
        {"MiB", 1ULL << 20},
        {"GiB", 1ULL << 30},
        {"TiB", 1ULL << 40},
    }};
    for (const auto& [suffix, factor] : units) {
        if (text == suffix) {
            std::uint64_t out = 0;
            if (!checked_mul(n, factor, out)) {
                return std::nullopt;
            }
            return out;
        }
    }
    return std::nullopt;
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
    if (text.empty()) {
        return std::nullopt;
    }
    static constexpr std::array<std::pair<std::string_view, std::uint64_t>, 5> units{{
        {"ms", 1},
        {"s", 1000},
        {"m", 60 * 1000},
        {"h", 60 * 60 * 1000},
        {"d", 24 * 60 * 60 * 1000},
    }};
    std::uint64_t total = 0;
    while (!text.empty()) {
        std::uint64_t n = 0;
        if (!take_number(text, n)) {
            return std::nullopt;
        }
        std::size_t len = 0;
        while (len < text.size() && text[len] >= 'a' && text[len] <= 'z') {
            ++len;
        }
        const std::string_view unit = text.substr(0, len);
        text.remove_prefix(len);
        bool found = false;
        for (const auto& [name, factor] : units) {
            if (unit == name) {
                // The sum must fit std::chrono::milliseconds (int64): compare in uint64, as
                // max_ms - part would wrap for a part above max_ms.
                constexpr auto max_ms = static_cast<std::uint64_t>(
                    std::numeric_limits<std::int64_t>::max());
                std::uint64_t part = 0;
                if (!checked_mul(n, factor, part) || part > max_ms || total > max_ms - part) {
                    return std::nullopt;
                }
                total += part;
                found = true;
                break;
            }
        }
        if (!found) {
            return std::nullopt;
        }
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(total));
}

std::string format_duration(std::chrono::milliseconds d) {
    auto ms = static_cast<std::uint64_t>(d.count() < 0 ? 0 : d.count());
    if (ms == 0) {
        return "0s";
    }
    std::string out;
    static constexpr std::array<std::pair<std::string_view, std::uint64_t>, 5> units{{
        {"d", 24 * 60 * 60 * 1000},
        {"h", 60 * 60 * 1000},
        {"m", 60 * 1000},
        {"s", 1000},
        {"ms", 1},
    }};
    for (const auto& [name, factor] : units) {
        if (ms >= factor) {
            out += std::to_string(ms / factor);
            out += name;
            ms %= factor;
        }
    }
    return out;
}

}  // namespace cordon::config
