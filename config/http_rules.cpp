#include "config/http_rules.hpp"

#include <algorithm>

#include "common/percent.hpp"

namespace cordon::config {
namespace {

bool unreserved(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

// Visible ASCII but the characters a request-target never holds raw.
bool plain(unsigned char c) { return c > 0x20 && c < 0x7f && c != '#' && c != '\\'; }

// A segment some server reads as "." or "..": also with path parameters ("..;x": Tomcat,
// Jetty and other servlet containers cut ";..." before resolving dot segments) or trailing
// encoded white space a server may trim ("..%20"). `seg` has its escapes in upper case.
bool dot_segment(std::string_view seg) {
    std::string_view base = seg.substr(0, seg.find(';'));
    for (;;) {
        const std::string_view tail = base.size() >= 3 ? base.substr(base.size() - 3) : "";
        if (tail == "%20" || tail == "%09" || tail == "%0A" || tail == "%0B" || tail == "%0C" ||
            tail == "%0D") {
            base.remove_suffix(3);
            continue;
        }
        return base == "." || base == "..";
    }
}

// Classic wildcard match, '*' standing for any run of characters: linear apart from the
// one remembered backtrack point, so no pattern makes it exponential.
template <typename T, typename Eq, typename Star>
bool wildcard(const std::vector<T>& pat, const std::vector<T>& s, Star is_star, Eq eq) {
    std::size_t p = 0;
    std::size_t i = 0;
    std::size_t star = std::string::npos;
    std::size_t mark = 0;
    while (i < s.size()) {
        if (p < pat.size() && !is_star(pat[p]) && eq(pat[p], s[i])) {
            ++p;
            ++i;
        } else if (p < pat.size() && is_star(pat[p])) {
            star = p++;
            mark = i;
        } else if (star != std::string::npos) {
            p = star + 1;
            i = ++mark;
        } else {
            return false;
        }
    }
    while (p < pat.size() && is_star(pat[p])) {
        ++p;
    }
    return p == pat.size();
}

bool segment_matches(std::string_view pat, std::string_view seg) {
    if (pat == "*") {
        return true;
    }
    if (pat.find('*') == std::string_view::npos) {
        return pat == seg;
    }
    const std::vector<char> p(pat.begin(), pat.end());
    const std::vector<char> s(seg.begin(), seg.end());
    return wildcard(
        p, s, [](char c) { return c == '*'; }, [](char a, char b) { return a == b; });
}

}  // namespace

std::vector<std::string_view> path_segments(std::string_view path) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < path.size()) {
        const std::size_t j = std::min(path.find('/', i), path.size());
        if (j > i) {
            out.push_back(path.substr(i, j - i));
        }
        i = j + 1;
    }
    return out;
}

std::string normal_path::origin_form() const { return has_query ? path + "?" + query : path; }

normal_path normalise_path(std::string_view target, std::size_t max_len) {
    normal_path out;
    auto refuse = [&out](std::string why) {
        out.path.clear();
        out.query.clear();
        out.has_query = false;
        out.error = std::move(why);
        return out;
    };
    if (target.size() > max_len) {
        return refuse("the request path is longer than " + std::to_string(max_len) + " bytes");
    }
    if (target.empty() || target.front() != '/') {
        return refuse("the request target is not a path starting with '/'");
    }
    const std::size_t q = target.find('?');
    const std::string_view raw = target.substr(0, q);
    if (q != std::string_view::npos) {
        out.has_query = true;
        out.query = std::string(target.substr(q + 1));
        for (const char c : out.query) {
            if (!plain(static_cast<unsigned char>(c))) {
                return refuse("the query holds a character a URL may not hold raw");
            }
        }
    }
    std::string seg;
    out.path.reserve(raw.size());
    auto flush = [&]() -> bool {
        if (seg.empty()) {
            return true;  // "//" collapses
        }
        if (dot_segment(seg)) {
            return false;
        }
        out.path += '/';
        out.path += seg;
        seg.clear();
        return true;
    };
    for (std::size_t i = 0; i < raw.size(); ++i) {
        const auto c = static_cast<unsigned char>(raw[i]);
        if (c == '/') {
            if (!flush()) {
                return refuse("a '.' or '..' segment in the path");
            }
            continue;
        }
        if (c == '%') {
            const int hi = i + 2 < raw.size() ? common::hex_value(raw[i + 1]) : -1;
            const int lo = hi >= 0 ? common::hex_value(raw[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                return refuse("a bad percent escape in the path");
            }
            const auto v = static_cast<unsigned char>(hi * 16 + lo);
            if (v == '/') {
                return refuse("an encoded '/' (%2F) in the path");
            }
            if (v == '\\') {
                return refuse("an encoded '\\' (%5C) in the path");
            }
            if (v == 0) {
                return refuse("an encoded NUL (%00) in the path");
            }
            if (unreserved(v)) {
                seg += static_cast<char>(v);
            } else {
                static constexpr char digits[] = "0123456789ABCDEF";
                seg += '%';
                seg += digits[v >> 4];
                seg += digits[v & 15];
            }
            i += 2;
            continue;
        }
        if (c == '\\') {
            return refuse("a '\\' in the path");
        }
        if (!plain(c)) {
            return refuse("the path holds a character a URL may not hold raw");
        }
        seg += static_cast<char>(c);
    }
    if (!flush()) {
        return refuse("a '.' or '..' segment in the path");
    }
    if (out.path.empty()) {
        out.path = "/";
    } else if (raw.back() == '/') {
        out.path += '/';
    }
    return out;
}

std::optional<path_glob> path_glob::parse(std::string_view text, std::string& error) {
    if (text.find('?') != std::string_view::npos) {
        error = "a path pattern has no query ('?'); queries are not matched";
        return std::nullopt;
    }
    const normal_path n = normalise_path(text);
    if (!n.ok()) {
        error = n.error;
        return std::nullopt;
    }
    path_glob g;
    g.text_ = n.path;
    for (const std::string_view s : path_segments(n.path)) {
        if (s.find("**") != std::string_view::npos && s != "**") {
            error = "'**' stands for a whole run of segments: write it alone between slashes";
            return std::nullopt;
        }
        if (s == "**" && !g.segments_.empty() && g.segments_.back() == "**") {
            continue;  // "**/**" is "**"
        }
        g.segments_.emplace_back(s);
    }
    return g;
}

bool path_glob::matches(std::string_view normal_path) const {
    const std::vector<std::string_view> segs = path_segments(normal_path);
    std::vector<std::string_view> pat(segments_.begin(), segments_.end());
    return wildcard(
        pat, segs, [](std::string_view s) { return s == "**"; },
        [](std::string_view p, std::string_view s) { return segment_matches(p, s); });
}

bool http_rule::matches(std::string_view method, std::string_view normal_path) const {
    if (!methods.empty() && std::find(methods.begin(), methods.end(), method) == methods.end()) {
        return false;
    }
    if (paths.empty()) {
        return true;
    }
    return std::any_of(paths.begin(), paths.end(),
                       [normal_path](const path_glob& g) { return g.matches(normal_path); });
}

int match_http_rules(const std::vector<http_rule>& rules, std::string_view method,
                     std::string_view normal_path) {
    for (std::size_t i = 0; i < rules.size(); ++i) {
        if (rules[i].matches(method, normal_path)) {
            return static_cast<int>(i);
        }
    }
    return -1;
}

}  // namespace cordon::config
