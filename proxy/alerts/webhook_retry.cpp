#include "proxy/alerts/webhook_retry.hpp"
#include "common/time.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <ctime>

namespace cordon::proxy::alerts {

delivery_outcome outcome_of_status(unsigned status) noexcept {
    if (status >= 200 && status <= 299) {
        return delivery_outcome::delivered;
    }
    if (status == 429 || (status >= 500 && status <= 599)) {
        return delivery_outcome::retry;
    }
    return delivery_outcome::give_up;
}

std::chrono::milliseconds retry_delay(unsigned attempt, double unit,
                                      std::optional<std::chrono::milliseconds> retry_after) {
    using std::chrono::milliseconds;
    unit = std::clamp(unit, 0.0, 1.0);
    const unsigned shift = std::min(attempt == 0 ? 0u : attempt - 1, 16u);
    const std::int64_t full = std::min<std::int64_t>(
        retry_cap.count(), retry_base.count() * (std::int64_t{1} << shift));
    const std::int64_t half = full / 2;
    milliseconds d(half + static_cast<std::int64_t>(static_cast<double>(full - half) * unit));
    if (retry_after && *retry_after > d) {
        d = std::min(*retry_after, max_retry_after);
    }
    return d;
}

namespace {

bool digits(std::string_view s, int& out) {
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

}  // namespace

std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view v,
                                                           common::wall_clock::time_point now) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) {
        v.remove_prefix(1);
    }
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) {
        v.remove_suffix(1);
    }
    if (v.empty()) {
        return std::nullopt;
    }
    if (v.front() >= '0' && v.front() <= '9') {
        if (v.size() > 9) {
            return max_retry_after;  // a huge number: as long as we ever wait
        }
        int s = 0;
        if (!digits(v, s)) {
            return std::nullopt;
        }
        return std::chrono::seconds(s);
    }
    // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" (29 characters).
    if (v.size() != 29 || v[3] != ',' || v[4] != ' ' || v[7] != ' ' || v[11] != ' ' ||
        v[16] != ' ' || v[19] != ':' || v[22] != ':' || v.substr(25) != " GMT") {
        return std::nullopt;
    }
    static constexpr std::array<std::string_view, 12> months = {
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    const auto m = std::find(months.begin(), months.end(), v.substr(8, 3));
    int day = 0;
    int year = 0;
    int hour = 0;
    int minute = 0;
    int second = 0;
    if (m == months.end() || !digits(v.substr(5, 2), day) || !digits(v.substr(12, 4), year) ||
        !digits(v.substr(17, 2), hour) || !digits(v.substr(20, 2), minute) ||
        !digits(v.substr(23, 2), second) || day < 1 || day > 31 || hour > 23 || minute > 59 ||
        second > 60 || year < 1970) {
        return std::nullopt;
    }
    std::tm tm{};
    tm.tm_year = year - 1900;
    tm.tm_mon = static_cast<int>(m - months.begin());
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = minute;
    tm.tm_sec = second;
    const std::time_t t = timegm(&tm);
    const auto at = common::wall_clock::from_time_t(t);
    if (at <= now) {
        return std::chrono::milliseconds(0);
    }
    return std::chrono::duration_cast<std::chrono::milliseconds>(at - now);
}

}  // namespace cordon::proxy::alerts
