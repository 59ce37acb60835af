#include "common/time.hpp"

#include <cstdio>

namespace cordon::common {

void append_rfc3339(std::string& out, wall_clock::time_point t) {
    using namespace std::chrono;
    const auto ms = floor<milliseconds>(t);
    const auto day = floor<days>(ms);
    const year_month_day ymd{day};
    const hh_mm_ss hms{ms - day};
    const int year = static_cast<int>(ymd.year());
    if (year < 0 || year > 9999) {
        // Rare: the year does not fit 4 digits (or is negative); snprintf's %04d.
        char buf[64];
        const int n = std::snprintf(
            buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ", year,
            static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
            static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
            static_cast<int>(hms.seconds().count()), static_cast<int>(hms.subseconds().count()));
        out.append(buf, static_cast<std::size_t>(n));
        return;
    }
    // Digits put in place, without snprintf: the audit log writes one per record.
    char buf[25] = "0000-00-00T00:00:00.000Z";
    const auto put = [&buf](std::size_t at, unsigned v, int digits) {
        for (int i = digits - 1; i >= 0; --i) {
            buf[at + static_cast<std::size_t>(i)] = static_cast<char>('0' + v % 10);
            v /= 10;
        }
    };
    put(0, static_cast<unsigned>(year), 4);
    put(5, static_cast<unsigned>(ymd.month()), 2);
    put(8, static_cast<unsigned>(ymd.day()), 2);
    put(11, static_cast<unsigned>(hms.hours().count()), 2);
    put(14, static_cast<unsigned>(hms.minutes().count()), 2);
    put(17, static_cast<unsigned>(hms.seconds().count()), 2);
    put(20, static_cast<unsigned>(hms.subseconds().count()), 3);
    out.append(buf, sizeof buf - 1);
}

std::string format_rfc3339(wall_clock::time_point t) {
    std::string out;
    append_rfc3339(out, t);
    return out;
}

}  // namespace cordon::common
