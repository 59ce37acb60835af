#include "config/learn/public_suffix.hpp"

#include <cstdint>
#include <vector>

#include "common/utf8.hpp"

namespace cordon::learn {
namespace {

// RFC 3492 section 6.1.
std::uint32_t adapt(std::uint32_t delta, std::uint32_t points, bool first) {
    delta = first ? delta / 700 : delta / 2;
    delta += delta / points;
    std::uint32_t k = 0;
    while (delta > ((36 - 1) * 26) / 2) {
        delta /= 36 - 1;
        k += 36;
    }
    return k + (36 * delta) / (delta + 38);
}

char digit(std::uint32_t d) { return static_cast<char>(d < 26 ? 'a' + d : '0' + (d - 26)); }

std::string lower_ascii(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        if (c >= 'A' && c <= 'Z') {
            c = static_cast<char>(c - 'A' + 'a');
        }
    }
    return out;
}

}  // namespace

std::optional<std::string> to_a_label(std::string_view utf8_label) {
    std::vector<std::uint32_t> cps;
    if (!common::utf8::decode(utf8_label, cps)) {
        return std::nullopt;
    }
    std::string out;
    for (const std::uint32_t cp : cps) {
        if (cp < 0x80) {
            out.push_back(static_cast<char>(cp));
        }
    }
    const std::size_t basic = out.size();
    if (basic == cps.size()) {
        return out;  // ASCII: no encoding
    }
    if (basic > 0) {
        out.push_back('-');
    }
    // RFC 3492 section 6.3, with overflow checks (labels are short; a hostile list is not).
    std::uint32_t n = 0x80;
    std::uint32_t delta = 0;
    std::uint32_t bias = 72;
    std::size_t handled = basic;
    while (handled < cps.size()) {
        std::uint32_t m = 0x10ffff + 1;
        for (const std::uint32_t cp : cps) {
            if (cp >= n && cp < m) {
                m = cp;
            }
        }
        const std::uint64_t step = std::uint64_t{m - n} * (handled + 1);
        if (step + delta > 0xffffffffull) {
            return std::nullopt;
        }
        delta += static_cast<std::uint32_t>(step);
        n = m;
        for (const std::uint32_t cp : cps) {
            if (cp < n && ++delta == 0) {
                return std::nullopt;
            }
            if (cp == n) {
                std::uint32_t q = delta;
                for (std::uint32_t k = 36;; k += 36) {
                    const std::uint32_t t = k <= bias ? 1 : (k >= bias + 26 ? 26 : k - bias);
                    if (q < t) {
                        break;
                    }
                    out.push_back(digit(t + (q - t) % (36 - t)));
                    q = (q - t) / (36 - t);
                }
                out.push_back(digit(q));
                bias = adapt(delta, static_cast<std::uint32_t>(handled + 1), handled == basic);
                delta = 0;
                ++handled;
            }
        }
        ++delta;
        ++n;
    }
    return "xn--" + out;
}

public_suffix_list public_suffix_list::parse(std::string_view text) {
    public_suffix_list l;
    std::size_t at = 0;
    while (at < text.size()) {
        std::size_t end = text.find('\n', at);
        if (end == std::string_view::npos) {
            end = text.size();
        }
        std::string_view line = text.substr(at, end - at);
        at = end + 1;
        const std::size_t ws = line.find_first_of(" \t\r");
        line = line.substr(0, ws);
        if (line.empty() || line.starts_with("//")) {
            continue;
        }
        bool exception = false;
        if (line.front() == '!') {
            exception = true;
            line.remove_prefix(1);
        }
        // Punycode each label; '*' only as a whole label, and only leftmost (the list's
        // wildcards are all of that form; anything else is skipped rather than guessed at).
        std::string rule;
        bool ok = !line.empty() && line.back() != '.';
        bool wildcard = false;
        std::size_t from = 0;
        while (ok && from <= line.size()) {
            std::size_t dot = line.find('.', from);
            if (dot == std::string_view::npos) {
                dot = line.size();
            }
            const std::string_view label = line.substr(from, dot - from);
            if (label == "*") {
                // The '*' label is not stored: wildcards_ holds the suffix after it.
                ok = from == 0 && !exception && dot < line.size();
                wildcard = true;
            } else if (const auto a = label.empty() || label.find('*') != std::string_view::npos
                                          ? std::nullopt
                                          : to_a_label(label)) {
                if (!rule.empty()) {
                    rule.push_back('.');
                }
                rule += lower_ascii(*a);
            } else {
                ok = false;  // an empty label, '*' inside a label, or no A-label for it
            }
            from = dot + 1;
        }
        if (!ok || rule.empty()) {
            ++l.skipped_;
            continue;
        }
        for (std::size_t dot = rule.find('.'); dot != std::string::npos;
             dot = rule.find('.', dot + 1)) {
            l.ancestors_.insert(rule.substr(dot + 1));
        }
        if (wildcard) {
            l.ancestors_.insert(rule);  // "*.ck": every x.ck is a suffix below "ck"
        }
        if (exception) {
            if (rule.find('.') == std::string::npos) {
                ++l.skipped_;  // "!com" would leave no public suffix at all
                continue;
            }
            l.exceptions_.insert(std::move(rule));
        } else if (wildcard) {
            l.wildcards_.insert(std::move(rule));
        } else {
            l.rules_.insert(std::move(rule));
        }
    }
    return l;
}

std::string_view public_suffix_list::public_suffix(std::string_view host) const {
    if (host.empty()) {
        return host;
    }
    // Suffixes of host from the longest (host itself) to the shortest (its last label).
    // A rule of k labels matches the suffix of k labels; a wildcard "*.p" matches every
    // suffix "x.p". The first match found going from longest down is the one with the most
    // labels; an exception anywhere beats every rule.
    std::string key;
    std::string_view best;  // the suffix the prevailing normal/wildcard rule names
    std::size_t from = 0;
    for (;;) {
        const std::string_view s = host.substr(from);
        key.assign(s);
        if (exceptions_.contains(key)) {
            const std::size_t dot = s.find('.');
            return s.substr(dot + 1);  // exceptions always have a dot (parse() checks)
        }
        if (best.empty()) {
            if (rules_.contains(key)) {
                best = s;
            } else if (const std::size_t dot = s.find('.'); dot != std::string_view::npos) {
                key.assign(s.substr(dot + 1));
                if (wildcards_.contains(key)) {
                    best = s;
                }
            }
        }
        const std::size_t dot = s.find('.');
        if (dot == std::string_view::npos) {
            break;
        }
        from += dot + 1;
    }
    if (!best.empty()) {
        return best;
    }
    const std::size_t last = host.rfind('.');
    return last == std::string_view::npos ? host : host.substr(last + 1);  // rule "*"
}

std::optional<std::string_view> public_suffix_list::registrable_domain(
    std::string_view host) const {
    const std::string_view ps = public_suffix(host);
    if (ps.size() >= host.size()) {
        return std::nullopt;
    }
    // host = "...label." + ps: the registrable domain is that label and ps.
    const std::string_view head = host.substr(0, host.size() - ps.size() - 1);
    const std::size_t dot = head.rfind('.');
    return host.substr(dot == std::string_view::npos ? 0 : dot + 1);
}

}  // namespace cordon::learn
