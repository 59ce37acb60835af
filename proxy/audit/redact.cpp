#include "proxy/audit/redact.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "common/percent.hpp"

namespace cordon::proxy::audit {
namespace {

constexpr std::size_t npos = std::string_view::npos;

constexpr char lower(char c) noexcept {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}
constexpr bool is_upper(char c) noexcept { return c >= 'A' && c <= 'Z'; }
constexpr bool is_alpha(char c) noexcept { return is_upper(c) || (c >= 'a' && c <= 'z'); }
constexpr bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
constexpr bool is_alnum(char c) noexcept { return is_alpha(c) || is_digit(c); }
bool is_lower_hex(char c) noexcept { return is_digit(c) || (c >= 'a' && c <= 'f'); }
bool is_upper_alnum(char c) noexcept { return is_upper(c) || is_digit(c); }
bool is_word(char c) noexcept { return is_alnum(c) || c == '_'; }
bool is_b64url(char c) noexcept { return is_alnum(c) || c == '-' || c == '_'; }
bool is_slack(char c) noexcept { return is_alnum(c) || c == '-'; }
constexpr bool is_ident(char c) noexcept { return is_alnum(c) || c == '-' || c == '_' || c == '.'; }
bool is_quote(char c) noexcept { return c == '"' || c == '\''; }
bool is_blank(char c) noexcept { return c == ' ' || c == '\t'; }
bool is_token68(char c) noexcept {
    return is_alnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' ||
           c == '=';
}

bool starts_with_nocase(std::string_view s, std::size_t at, std::string_view prefix) noexcept {
    if (s.size() - at < prefix.size()) {
        return false;
    }
    for (std::size_t k = 0; k < prefix.size(); ++k) {
        if (lower(s[at + k]) != prefix[k]) {
            return false;
        }
    }
    return true;
}

// End of the run of characters of class `in` starting at `from`.
template <typename Pred>
std::size_t run_end(std::string_view s, std::size_t from, Pred in) noexcept {
    while (from < s.size() && in(s[from])) {
        ++from;
    }
    return from;
}

// True when the character before `at` would continue a token of class `in` (no boundary).
template <typename Pred>
bool continues(std::string_view s, std::size_t at, Pred in) noexcept {
    return at > 0 && in(s[at - 1]);
}

bool squashed_out(char c) noexcept { return c == '-' || c == '_' || c == '.' || c == ' '; }

// Lower case, without the separators people vary freely: '-', '_', '.', ' '.
std::string squash(std::string_view name) {
    std::string out;
    out.reserve(name.size());
    for (const char c : name) {
        if (!squashed_out(c)) {
            out.push_back(lower(c));
        }
    }
    return out;
}

// squash() into a buffer of the caller's for the names every record's fields and every word
// of redacted text are tested against (no allocation); "" when the name does not fit, and
// the caller squashes on the heap.
template <std::size_t N>
std::string_view squash_into(std::string_view name, std::array<char, N>& buf) noexcept {
    std::size_t n = 0;
    for (const char c : name) {
        if (!squashed_out(c)) {
            if (n == N) {
                return {};
            }
            buf[n++] = lower(c);
        }
    }
    return {buf.data(), n};
}

std::string percent_decode(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() && common::hex_value(s[i + 1]) >= 0 &&
            common::hex_value(s[i + 2]) >= 0) {
            out.push_back(
                static_cast<char>(common::hex_value(s[i + 1]) * 16 + common::hex_value(s[i + 2])));
            i += 2;
        } else if (s[i] == '+') {
            out.push_back(' ');
        } else {
            out.push_back(s[i]);
        }
    }
    return out;
}

bool contains_any(std::string_view s, const auto& words) noexcept {
    for (const std::string_view w : words) {
        if (s.find(w) != npos) {
            return true;
        }
    }
    return false;
}

bool ends_with_any(std::string_view s, const auto& words) noexcept {
    for (const std::string_view w : words) {
        if (s.ends_with(w)) {
            return true;
        }
    }
    return false;
}

bool authorization_name(std::string_view name) { return squash(name).ends_with("authorization"); }
bool cookie_name(std::string_view name) { return squash(name).find("cookie") != npos; }

// Appends the parameters of `s` (separated by '&' or ';'), hiding secret values.
void redact_params(std::string_view s, std::string& out) {
    std::size_t i = 0;
    while (true) {
        const std::size_t sep = s.find_first_of("&;", i);
        const std::string_view piece = s.substr(i, sep == npos ? npos : sep - i);
        const std::size_t eq = piece.find('=');
        if (eq != npos && eq + 1 < piece.size() && secret_query_name(piece.substr(0, eq))) {
            out.append(piece.substr(0, eq + 1));
            out.append(redacted);
        } else {
            out.append(piece);
        }
        if (sep == npos) {
            return;
        }
        out.push_back(s[sep]);
        i = sep + 1;
    }
}

// Appends a URL path, hiding secret ';' parameters of its segments ("/app;jsessionid=X").
void redact_path(std::string_view p, std::string& out) {
    std::size_t i = 0;
    while (i < p.size()) {
        const std::size_t semi = p.find(';', i);
        if (semi == npos) {
            out.append(p.substr(i));
            return;
        }
        out.append(p.substr(i, semi + 1 - i));
        std::size_t end = p.find('/', semi + 1);
        if (end == npos) {
            end = p.size();
        }
        redact_params(p.substr(semi + 1, end - semi - 1), out);
        i = end;
    }
}

bool valid_scheme(std::string_view s) noexcept {
    if (s.empty() || !is_alpha(s[0])) {
        return false;
    }
    for (const char c : s) {
        if (!is_alnum(c) && c != '+' && c != '-' && c != '.') {
            return false;
        }
    }
    return true;
}

// --- redact_text scanners -------------------------------------------------------------------
// Each returns the match at `i`: `keep` bytes are copied, then "REDACTED" replaces the bytes
// up to `end`. Every scanner starts only where the previous character cannot continue its
// token, so a run is scanned a bounded number of times and the whole pass stays linear.

struct match {
    std::size_t keep = 0;
    std::size_t end = 0;
};
using maybe_match = std::optional<match>;

maybe_match match_pem(std::string_view s, std::size_t i) {
    constexpr std::string_view begin = "-----BEGIN ";
    constexpr std::size_t max_label = 80;
    if (s.compare(i, begin.size(), begin) != 0) {
        return std::nullopt;
    }
    const std::size_t label_at = i + begin.size();
    const std::size_t close = s.substr(label_at, max_label).find("-----");
    if (close == npos) {
        return std::nullopt;
    }
    if (s.substr(label_at, close).find("PRIVATE KEY") == npos) {
        return std::nullopt;
    }
    const std::size_t end_line = s.find("-----END ", label_at + close + 5);
    if (end_line == npos) {
        return match{0, s.size()};  // truncated key: hide everything after BEGIN
    }
    const std::size_t end_close = s.substr(end_line + 9, max_label).find("-----");
    if (end_close == npos) {
        return match{0, s.size()};
    }
    return match{0, end_line + 9 + end_close + 5};
}

maybe_match match_jwt(std::string_view s, std::size_t i) {
    constexpr std::size_t min_segment = 8;
    if (continues(s, i, is_b64url) || s.compare(i, 3, "eyJ") != 0) {
        return std::nullopt;
    }
    const std::size_t header_end = run_end(s, i, is_b64url);
    if (header_end - i < min_segment || header_end >= s.size() || s[header_end] != '.' ||
        s.compare(header_end + 1, 3, "eyJ") != 0) {
        return std::nullopt;
    }
    const std::size_t payload_end = run_end(s, header_end + 1, is_b64url);
    if (payload_end - header_end - 1 < min_segment) {
        return std::nullopt;
    }
    if (payload_end < s.size() && s[payload_end] == '.') {
        const std::size_t sig_end = run_end(s, payload_end + 1, is_b64url);
        if (sig_end > payload_end + 1) {
            return match{0, sig_end};
        }
    }
    return match{0, payload_end};
}

maybe_match match_aws(std::string_view s, std::size_t i) {
    if (continues(s, i, is_alnum) ||
        (s.compare(i, 4, "AKIA") != 0 && s.compare(i, 4, "ASIA") != 0)) {
        return std::nullopt;
    }
    const std::size_t end = run_end(s, i, is_upper_alnum);
    if (end - i < 20) {
        return std::nullopt;
    }
    return match{0, end};
}

maybe_match match_github(std::string_view s, std::size_t i) {
    constexpr std::size_t min_body = 20;
    if (continues(s, i, is_word)) {
        return std::nullopt;
    }
    std::size_t body = 0;
    if (s.compare(i, 11, "github_pat_") == 0) {
        body = i + 11;
    } else if (s.size() - i >= 4 && s[i] == 'g' && s[i + 1] == 'h' &&
               std::string_view("pousr").find(s[i + 2]) != npos && s[i + 3] == '_') {
        body = i + 4;
    } else {
        return std::nullopt;
    }
    const std::size_t end = run_end(s, body, is_word);
    if (end - body < min_body) {
        return std::nullopt;
    }
    return match{0, end};
}

maybe_match match_slack(std::string_view s, std::size_t i) {
    if (continues(s, i, is_slack) || s.size() - i < 5 || s.compare(i, 3, "xox") != 0 ||
        std::string_view("abprs").find(s[i + 3]) == npos || s[i + 4] != '-') {
        return std::nullopt;
    }
    const std::size_t end = run_end(s, i + 5, is_slack);
    if (end - (i + 5) < 10) {
        return std::nullopt;
    }
    return match{0, end};
}

maybe_match match_sk(std::string_view s, std::size_t i) {
    if (continues(s, i, is_b64url) || s.compare(i, 3, "sk-") != 0) {
        return std::nullopt;
    }
    const std::size_t end = run_end(s, i + 3, is_b64url);
    if (end - (i + 3) < 20) {
        return std::nullopt;
    }
    return match{0, end};
}

// The credential broker's placeholders (proxy/inspect/secrets.hpp): "cordon-ph-" and 40 hex
// digits. Bound to one session and worthless outside it, but never written all the same:
// wherever they start, glued to other letters too ("/v1/xcordon-ph-...").
maybe_match match_placeholder(std::string_view s, std::size_t i) {
    constexpr std::string_view prefix = "cordon-ph-";
    if (s.compare(i, prefix.size(), prefix) != 0) {
        return std::nullopt;
    }
    const std::size_t end = run_end(s, i + prefix.size(), is_lower_hex);
    if (end - (i + prefix.size()) < 16) {
        return std::nullopt;
    }
    return match{0, end};
}

maybe_match match_bearer(std::string_view s, std::size_t i) {
    if (continues(s, i, is_alnum) || !starts_with_nocase(s, i, "bearer")) {
        return std::nullopt;
    }
    const std::size_t cred = run_end(s, i + 6, is_blank);
    if (cred == i + 6) {
        return std::nullopt;
    }
    const std::size_t end = run_end(s, cred, is_token68);
    if (end - cred < 8) {
        return std::nullopt;
    }
    return match{cred - i, end};
}

maybe_match match_userinfo(std::string_view s, std::size_t i) {
    if (s.compare(i, 3, "://") != 0) {
        return std::nullopt;
    }
    std::size_t j = i + 3;
    while (j < s.size()) {
        const char c = s[j];
        const auto u = static_cast<unsigned char>(c);
        if (c == '/' || c == '?' || c == '#' || c == '@' || u <= 0x20 || u == 0x7f || is_quote(c) ||
            c == '<' || c == '>' || c == '\\') {
            break;
        }
        ++j;
    }
    if (j == i + 3 || j >= s.size() || s[j] != '@') {
        return std::nullopt;
    }
    return match{3, j};
}

maybe_match match_hex_token(std::string_view s, std::size_t i) {
    constexpr std::size_t token_length = 64;
    if (continues(s, i, is_alnum)) {
        return std::nullopt;
    }
    const std::size_t end = run_end(s, i, is_lower_hex);
    if (end - i != token_length || (end < s.size() && is_alnum(s[end]))) {
        return std::nullopt;
    }
    return match{0, end};
}

bool value_delimiter(char c) noexcept {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f || std::string_view("&,;\"'<>()[]{}\\").find(c) != npos;
}

// name=value, name: value, "name": "value", \"name\":\"value\" with a secret-looking name.
maybe_match match_pair(std::string_view s, std::size_t i) {
    if (continues(s, i, is_ident)) {
        return std::nullopt;
    }
    const std::size_t name_end = run_end(s, i, is_ident);
    const std::string_view name = s.substr(i, name_end - i);
    const std::size_t n = s.size();
    std::size_t j = name_end;
    if (j + 1 < n && s[j] == '\\' && is_quote(s[j + 1])) {
        j += 2;
    } else if (j < n && is_quote(s[j])) {
        ++j;
    }
    j = run_end(s, j, is_blank);
    // The separator before the name's test: most words are followed by neither.
    if (j >= n || (s[j] != '=' && s[j] != ':') || !secret_field_name(name)) {
        return std::nullopt;
    }
    j = run_end(s, j + 1, is_blank);
    bool escaped = false;
    char quote = 0;
    if (j + 1 < n && s[j] == '\\' && is_quote(s[j + 1])) {
        escaped = true;
        quote = s[j + 1];
        j += 2;
    } else if (j < n && is_quote(s[j])) {
        quote = s[j];
        ++j;
    }
    const std::size_t value = j;
    const bool auth = authorization_name(name);
    std::size_t end = value;
    if (quote != 0) {
        while (end < n) {
            if (s[end] == '\\' && end + 1 < n) {
                if (escaped && s[end + 1] == quote) {
                    break;
                }
                end += 2;
                continue;
            }
            if (!escaped && s[end] == quote) {
                break;
            }
            ++end;
        }
    } else if (auth || cookie_name(name)) {
        while (end < n && s[end] != '\r' && s[end] != '\n' && s[end] != '"' && s[end] != '\\') {
            ++end;
        }
    } else {
        end = run_end(s, value, [](char c) { return !value_delimiter(c); });
        const std::string_view word = s.substr(value, end - value);
        if (word == "null" || word == "true" || word == "false") {
            return std::nullopt;
        }
    }
    if (end == value) {
        return std::nullopt;
    }
    std::size_t keep = value - i;
    if (auth) {
        const std::size_t scheme_end = run_end(
            s, value, [](char c) { return is_alnum(c) || c == '-' || c == '_' || c == '.'; });
        const std::size_t cred = run_end(s, scheme_end, is_blank);
        if (scheme_end > value && cred > scheme_end && cred < end) {
            keep = cred - i;
        }
    }
    return match{keep, end};
}

// False where no scanner of match_at can match, decided from the character and the one
// before it: a quick skip over most of a text. Only '-' (a PEM block), ':' (userinfo) and 'c'
// (a placeholder) begin a match whatever precedes them; every other scanner begins at a
// letter, a digit, '_' or '.' (is_ident) and needs the character before it not to continue
// its token. Each of those token classes holds the letters and digits, so a letter or digit
// after one cannot begin a match; '_' and '.' begin only name=value pairs, whose class
// (is_ident) holds every character of a word.
// One byte per character: what may_begin_match needs (a table, as this runs per byte of
// every audited string).
enum : std::uint8_t { begins_always = 1, alnum_class = 2, ident_class = 4 };
constexpr std::array<std::uint8_t, 256> begin_classes = [] {
    std::array<std::uint8_t, 256> t{};
    for (int c = 0; c < 256; ++c) {
        const char ch = static_cast<char>(c);
        t[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(
            (ch == '-' || ch == ':' || ch == 'c' ? begins_always : 0) |
            (is_alnum(ch) ? alnum_class : 0) | (is_ident(ch) ? ident_class : 0));
    }
    return t;
}();

bool may_begin_match(std::string_view s, std::size_t i) noexcept {
    const std::uint8_t c = begin_classes[static_cast<unsigned char>(s[i])];
    if ((c & begins_always) != 0) {
        return true;
    }
    if ((c & ident_class) == 0) {
        return false;
    }
    if (i == 0) {
        return true;
    }
    const std::uint8_t before = begin_classes[static_cast<unsigned char>(s[i - 1])];
    if ((c & alnum_class) != 0) {
        return (before & alnum_class) == 0;
    }
    return (before & ident_class) == 0;  // '_' or '.'
}

maybe_match match_at(std::string_view s, std::size_t i) {
    const char c = s[i];
    maybe_match m;
    if (c == '-') {
        m = match_pem(s, i);
    } else if (c == 'e') {
        m = match_jwt(s, i);
    } else if (c == 'A') {
        m = match_aws(s, i);
    } else if (c == 'g') {
        m = match_github(s, i);
    } else if (c == 'x') {
        m = match_slack(s, i);
    } else if (c == 'c') {
        m = match_placeholder(s, i);
    } else if (c == 's') {
        m = match_sk(s, i);
    } else if (c == ':') {
        m = match_userinfo(s, i);
    }
    if (!m && (c == 'b' || c == 'B')) {
        m = match_bearer(s, i);
    }
    if (!m && is_lower_hex(c)) {
        m = match_hex_token(s, i);
    }
    if (!m && is_ident(c)) {
        m = match_pair(s, i);
    }
    return m;
}

// may_redact_text's classes: bytes that may begin a match only with what is around them, and
// the lower-case hex digits (a proxy token is 64 of them).
enum : std::uint8_t { quick_hex = 1, quick_prefix = 2, quick_hit = 4 };
constexpr std::array<std::uint8_t, 256> quick_classes = [] {
    std::array<std::uint8_t, 256> t{};
    for (int c = 0; c < 256; ++c) {
        const char ch = static_cast<char>(c);
        t[static_cast<std::size_t>(c)] = static_cast<std::uint8_t>(
            (ch == '-' || ch == ':' || ch == '=' || ch == '_' ? quick_hit : 0) |
            (ch == 'J' || ch == 'A' || ch == 'b' || ch == 'B' ? quick_prefix : 0) |
            ((is_digit(ch) || (ch >= 'a' && ch <= 'f')) ? quick_hex : 0));
    }
    return t;
}();

// Whether the shape marked by s[i] ('J', 'A', 'b' or 'B') is here.
bool quick_prefix_at(std::string_view s, std::size_t i) noexcept {
    switch (s[i]) {
        case 'J': return i >= 2 && s[i - 2] == 'e' && s[i - 1] == 'y';                  // JWT
        case 'A': return s.compare(i, 4, "AKIA") == 0 || s.compare(i, 4, "ASIA") == 0;  // AWS
        default: return starts_with_nocase(s, i, "bearer");
    }
}

}  // namespace

// Every scanner of match_at needs one of: '-' (a PEM block, "sk-", "cordon-ph-", a Slack
// token's "xoxb-"), ':' (userinfo, "name: value"), '=' ("name=value"), '_' (GitHub's "ghp_",
// "github_pat_"), "eyJ" (a JWT), "AKIA"/"ASIA", "bearer" in any case, or a run of 64
// lower-case hex digits. A text with none of them comes out of redact_text as it went in.
bool may_redact_text(std::string_view s) noexcept {
    std::size_t hex_run = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const std::uint8_t c = quick_classes[static_cast<unsigned char>(s[i])];
        hex_run = (c & quick_hex) != 0 ? hex_run + 1 : 0;
        if ((c & ~quick_hex) == 0) {
            if (hex_run >= 64) {
                return true;
            }
            continue;
        }
        if ((c & quick_hit) != 0 || hex_run >= 64 || quick_prefix_at(s, i)) {
            return true;
        }
    }
    return false;
}

bool secret_query_name(std::string_view name) {
    static constexpr std::array<std::string_view, 22> roots{
        "token",  "secret",     "password",  "passwd", "passphrase", "pwd",    "pass", "key",
        "auth",   "credential", "signature", "sig",    "session",    "sessid", "code", "jwt",
        "bearer", "cookie",     "saml",      "ticket", "assertion",  "otp"};
    return contains_any(squash(percent_decode(name)), roots);
}

bool secret_field_name(std::string_view name) {
    static constexpr std::array<std::string_view, 9> contained{
        "password",      "passwd", "passphrase", "secret", "credential",
        "authorization", "cookie", "signature",  "bearer"};
    static constexpr std::array<std::string_view, 5> suffixes{"token", "tokens", "key", "keys",
                                                              "auth"};
    std::array<char, 64> buf;
    std::string heap;
    std::string_view s = squash_into(name, buf);
    if (s.empty() && !name.empty()) {
        heap = squash(name);
        s = heap;
    }
    return contains_any(s, contained) || ends_with_any(s, suffixes) || s == "pwd" || s == "pass" ||
           s == "sig";
}

std::string redact_url(std::string_view url) {
    std::string out;
    out.reserve(url.size() + redacted.size());
    const std::size_t hash = url.find('#');
    const std::string_view before_fragment = url.substr(0, hash);
    const std::size_t question = before_fragment.find('?');
    const std::string_view head = before_fragment.substr(0, question);

    std::size_t authority = npos;
    if (head.starts_with("//")) {
        authority = 2;
    } else if (const std::size_t sep = head.find("://");
               sep != npos && valid_scheme(head.substr(0, sep))) {
        authority = sep + 3;
    } else if (!head.empty() && head[0] != '/') {
        authority = 0;  // authority-form ("host:443", "user:pass@host:443")
    }
    std::size_t path = 0;
    if (authority != npos) {
        std::size_t authority_end = head.find('/', authority);
        if (authority_end == npos) {
            authority_end = head.size();
        }
        const std::string_view hostport = head.substr(authority, authority_end - authority);
        out.append(head.substr(0, authority));
        if (const std::size_t at = hostport.rfind('@'); at != npos) {
            out.append(redacted);
            out.push_back('@');
            out.append(hostport.substr(at + 1));
        } else {
            out.append(hostport);
        }
        path = authority_end;
    }
    redact_path(head.substr(path), out);
    if (question != npos) {
        out.push_back('?');
        redact_params(before_fragment.substr(question + 1), out);
    }
    if (hash != npos) {
        out.push_back('#');
        redact_params(url.substr(hash + 1), out);
    }
    return out;
}

std::string redact_header_value(std::string_view header_name, std::string_view value) {
    if (value.empty()) {
        return {};
    }
    if (authorization_name(header_name)) {
        const std::size_t start = run_end(value, 0, is_blank);
        const std::size_t scheme_end = run_end(
            value, start, [](char c) { return is_alnum(c) || c == '-' || c == '_' || c == '.'; });
        const std::size_t cred = run_end(value, scheme_end, is_blank);
        if (scheme_end > start && cred > scheme_end && cred < value.size()) {
            std::string out(value.substr(start, scheme_end - start));
            out.push_back(' ');
            out.append(redacted);
            return out;
        }
        return std::string(redacted);
    }
    if (secret_field_name(header_name)) {
        return std::string(redacted);
    }
    const std::string name = squash(header_name);
    if (name == "referer" || name == "referrer" || name == "location" ||
        name == "contentlocation") {
        return redact_text(redact_url(value));
    }
    return redact_text(value);
}

std::string redact_text(std::string_view text) {
    if (!may_redact_text(text)) {
        return std::string(text);
    }
    std::string out;
    out.reserve(text.size());
    std::size_t i = 0;
    std::size_t copied = 0;  // text[copied, i) is still to be appended
    while (i < text.size()) {
        if (!may_begin_match(text, i)) {
            ++i;
            continue;
        }
        if (const maybe_match m = match_at(text, i)) {
            out.append(text.substr(copied, i - copied));
            out.append(text.substr(i, m->keep));
            out.append(redacted);
            i = m->end;
            copied = i;
        } else {
            ++i;
        }
    }
    out.append(text.substr(copied));
    return out;
}

}  // namespace cordon::proxy::audit
