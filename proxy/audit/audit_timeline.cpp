#include "proxy/audit/audit_timeline.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/time.hpp"
#include "config/units.hpp"
#include "proxy/audit/audit.hpp"
#include "proxy/audit/audit_files.hpp"

namespace cordon::proxy::audit {
namespace {

namespace json = boost::json;

// Two bytes of a needle that identify it well: the first byte of its value (after the
// last `":"`, past the JSON punctuation every line is full of) and its last byte before a
// closing quote.
std::pair<std::size_t, std::size_t> anchors(std::string_view n) {
    const std::size_t colon = n.rfind("\":\"");
    std::size_t last = n.size() - 1;
    if (n.back() == '"' && last > 0) {
        --last;
    }
    std::size_t first = colon == std::string_view::npos ? 0 : colon + 3;
    if (first >= last) {
        first = 0;
    }
    return {first, last};
}

template <typename T>
bool num(std::string_view s, std::size_t at, std::size_t len, T& out) {
    if (at + len > s.size()) {
        return false;
    }
    for (std::size_t k = at; k < at + len; ++k) {
        if (s[k] < '0' || s[k] > '9') {
            return false;
        }
    }
    const auto [p, ec] = std::from_chars(s.data() + at, s.data() + at + len, out);
    return ec == std::errc{} && p == s.data() + at + len;
}

std::optional<common::wall_clock::time_point> parse_rfc3339(std::string_view s) {
    using namespace std::chrono;
    int y = 0;
    unsigned mo = 0;
    unsigned d = 0;
    if (s.size() < 10 || !num(s, 0, 4, y) || s[4] != '-' || !num(s, 5, 2, mo) || s[7] != '-' ||
        !num(s, 8, 2, d)) {
        return std::nullopt;
    }
    const year_month_day ymd{year{y}, month{mo}, day{d}};
    if (!ymd.ok()) {
        return std::nullopt;
    }
    sys_time<nanoseconds> t = sys_days{ymd};
    if (s.size() == 10) {
        return time_point_cast<common::wall_clock::duration>(t);
    }
    int hh = 0;
    int mm = 0;
    int ss = 0;
    const char sep = s[10];
    if ((sep != 'T' && sep != 't' && sep != ' ') || !num(s, 11, 2, hh) || s.size() < 19 ||
        s[13] != ':' || !num(s, 14, 2, mm) || s[16] != ':' || !num(s, 17, 2, ss) || hh > 23 ||
        mm > 59 || ss > 60) {
        return std::nullopt;
    }
    t += hours{hh} + minutes{mm} + seconds{ss};
    std::size_t at = 19;
    if (at < s.size() && s[at] == '.') {
        ++at;
        std::int64_t frac = 0;
        int digits = 0;
        while (at < s.size() && s[at] >= '0' && s[at] <= '9') {
            if (digits < 9) {
                frac = frac * 10 + (s[at] - '0');
                ++digits;
            }
            ++at;
        }
        if (digits == 0) {
            return std::nullopt;
        }
        for (int k = digits; k < 9; ++k) {
            frac *= 10;
        }
        t += nanoseconds{frac};
    }
    if (at == s.size()) {
        return std::nullopt;  // RFC 3339 needs a zone
    }
    if ((s[at] == 'Z' || s[at] == 'z') && at + 1 == s.size()) {
        return time_point_cast<common::wall_clock::duration>(t);
    }
    int oh = 0;
    int om = 0;
    if ((s[at] != '+' && s[at] != '-') || s.size() != at + 6 || !num(s, at + 1, 2, oh) ||
        s[at + 3] != ':' || !num(s, at + 4, 2, om) || oh > 23 || om > 59) {
        return std::nullopt;
    }
    const minutes off{oh * 60 + om};
    t += s[at] == '+' ? -off : off;  // local time minus its offset is UTC
    return time_point_cast<common::wall_clock::duration>(t);
}

}  // namespace

std::pair<std::size_t, std::size_t> line_at(std::string_view data, std::size_t at) {
    const auto offset = [&data](const void* p) {
        return static_cast<std::size_t>(static_cast<const char*>(p) - data.data());
    };
    const void* nl = ::memrchr(data.data(), '\n', at);
    const std::size_t start = nl == nullptr ? 0 : offset(nl) + 1;
    const void* e = std::memchr(data.data() + at, '\n', data.size() - at);
    const std::size_t end = e == nullptr ? std::string_view::npos : offset(e);
    return {start, end};
}

std::optional<common::wall_clock::time_point> parse_time_arg(std::string_view text,
                                                             common::wall_clock::time_point now) {
    if (text.size() >= 10 && text[4] == '-') {
        return parse_rfc3339(text);
    }
    const auto d = config::parse_duration(text);
    if (!d) {
        return std::nullopt;
    }
    return now - std::chrono::duration_cast<common::wall_clock::duration>(*d);
}

std::optional<time_window> parse_time_window(std::optional<std::string_view> since_text,
                                             std::optional<std::string_view> until_text,
                                             common::wall_clock::time_point now,
                                             std::string& error) {
    const auto read = [&](std::string_view flag, std::optional<std::string_view> text,
                          std::optional<common::wall_clock::time_point>& out) {
        if (text && !(out = parse_time_arg(*text, now))) {
            error = std::string(flag) + ": '" + std::string(*text) +
                    "' is neither RFC 3339 nor a duration like 2h";
            return false;
        }
        return true;
    };
    time_window w;
    if (!read("--since", since_text, w.since) || !read("--until", until_text, w.until)) {
        return std::nullopt;
    }
    return w;
}

void find_needles(std::string_view data, const std::vector<std::string>& needles,
                  std::vector<std::size_t>& hits) {
    const char* const p = data.data();
    const std::size_t size = data.size();
    std::size_t longest = 0;
    for (const auto& n : needles) {
        longest = std::max(longest, n.size());
    }
    std::size_t i = 0;
#if defined(__SSE2__)
    // One pass for every needle (after Wojciech Mula's "SIMD-friendly algorithms for substring
    // searching"): 16 positions at a time, a position is a candidate when both anchor bytes
    // of a needle match there; candidates are confirmed with memcmp.
    struct probe {
        const std::string* needle;
        std::size_t a0;
        std::size_t a1;
        __m128i c0;
        __m128i c1;
    };
    std::vector<probe> probes;
    for (const auto& n : needles) {
        if (n.empty()) {
            continue;
        }
        const auto [a0, a1] = anchors(n);
        probes.push_back(probe{&n, a0, a1, _mm_set1_epi8(n[a0]), _mm_set1_epi8(n[a1])});
    }
    // Loads at i + a1 + 15 < size and candidates within the data: i + longest + 15 <= size.
    for (; i + longest + 16 <= size; i += 16) {
        for (const probe& pr : probes) {
            const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + pr.a0));
            const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + pr.a1));
            auto mask = static_cast<unsigned>(_mm_movemask_epi8(
                _mm_and_si128(_mm_cmpeq_epi8(b0, pr.c0), _mm_cmpeq_epi8(b1, pr.c1))));
            while (mask != 0) {
                const std::size_t at = i + static_cast<std::size_t>(__builtin_ctz(mask));
                if (std::memcmp(p + at, pr.needle->data(), pr.needle->size()) == 0) {
                    hits.push_back(at);
                }
                mask &= mask - 1;
            }
        }
    }
#endif
    // The rest (or everything, without SSE2): memmem from the first position not yet tried.
    for (const auto& n : needles) {
        if (n.empty()) {
            continue;
        }
        for (std::size_t pos = i; pos < size && size - pos >= n.size();) {
            const void* hit = ::memmem(p + pos, size - pos, n.data(), n.size());
            if (hit == nullptr) {
                break;
            }
            const auto at = static_cast<std::size_t>(static_cast<const char*>(hit) - p);
            hits.push_back(at);
            pos = at + 1;
        }
    }
}

void scan_timeline(std::string_view data, const timeline_query& q, std::vector<timeline_event>& out,
                   timeline_stats& stats) {
    std::string session_needle = "\"session\":";
    common::append_json_string(session_needle, q.session);
    const std::vector<std::string> needles{session_needle, "\"event\":\"kill.network\"",
                                           "\"event\":\"revive\""};
    const std::string since = q.since ? common::format_rfc3339(*q.since) : std::string();
    const std::string until = q.until ? common::format_rfc3339(*q.until) : std::string();
    stats.bytes += data.size();

    std::vector<std::size_t> hits;
    find_needles(data, needles, hits);
    std::vector<std::pair<std::size_t, std::size_t>> lines;  // [start, end) of candidates
    lines.reserve(hits.size());
    for (const std::size_t at : hits) {
        const auto [start, end] = line_at(data, at);
        if (end != std::string_view::npos) {  // else the line being written: not yet an event
            lines.emplace_back(start, end);
        }
    }
    std::sort(lines.begin(), lines.end());
    lines.erase(std::unique(lines.begin(), lines.end()), lines.end());

    for (const auto& [start, end] : lines) {
        const std::string_view line = data.substr(start, end - start);
        ++stats.parsed;
        boost::system::error_code ec;
        const json::value v = json::parse(line, ec);
        if (ec || !v.is_object()) {
            ++stats.malformed;
            continue;
        }
        const json::object& o = v.as_object();
        const json::value* ts = o.if_contains("ts");
        const json::value* ev = o.if_contains("event");
        if (ts == nullptr || !ts->is_string() || ev == nullptr || !ev->is_string()) {
            ++stats.malformed;
            continue;
        }
        const std::string_view tss(ts->as_string());
        if ((!since.empty() && tss < since) || (!until.empty() && tss > until)) {
            continue;
        }
        const json::value* sv = o.if_contains("session");
        timeline_event e;
        if (sv != nullptr && sv->is_string() && sv->as_string() == q.session) {
            e.network = false;
        } else if (sv == nullptr &&
                   (ev->as_string() == "kill.network" || ev->as_string() == "revive")) {
            e.network = true;
        } else {
            continue;  // the needle was inside another value
        }
        e.ts = std::string(tss);
        e.line = std::string(line);
        out.push_back(std::move(e));
    }
}

void finish_timeline(std::vector<timeline_event>& events) {
    std::stable_sort(events.begin(), events.end(),
                     [](const timeline_event& a, const timeline_event& b) { return a.ts < b.ts; });
    std::string first;
    std::string last;
    for (const auto& e : events) {
        if (!e.network) {
            if (first.empty()) {
                first = e.ts;
            }
            last = e.ts;
        }
    }
    std::erase_if(events, [&](const timeline_event& e) {
        return e.network && (first.empty() || e.ts < first || e.ts > last);
    });
}

std::vector<timeline_event> read_timeline(const std::string& dir, const timeline_query& q,
                                          timeline_stats& stats, std::string& error) {
    std::vector<timeline_event> out;
    stats.files += map_audit_files(
        dir, q.since, q.until,
        [&](const audit_file&, std::string_view data) { scan_timeline(data, q, out, stats); },
        error);
    if (!error.empty()) {
        return out;
    }
    finish_timeline(out);
    return out;
}

}  // namespace cordon::proxy::audit
