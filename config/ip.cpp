// IP addresses and CIDR prefixes. The IPv4 forms (canonical and lenient) are parsed here by
// hand; IPv6 syntax goes to inet_pton once brackets and zone are gone and the characters
// have been checked, so it never sees a NUL or an unbounded string.
#include "config/ip.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>
#include <utility>

#include "common/percent.hpp"

namespace cordon::config {

namespace {

using bytes16 = std::array<std::uint8_t, 16>;

// Longest IPv6 text: "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255".
constexpr std::size_t max_v6_text = 45;
constexpr std::size_t max_zone = 64;

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

bool is_hex(char c) noexcept {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool is_mapped(const bytes16& b) noexcept {
    for (int i = 0; i < 10; ++i) {
        if (b[i] != 0) {
            return false;
        }
    }
    return b[10] == 0xff && b[11] == 0xff;
}

// Four decimal parts 0..255, no leading zeros, nothing else.
std::optional<std::uint32_t> parse_canonical_v4(std::string_view s) noexcept {
    std::uint32_t value = 0;
    std::size_t pos = 0;
    for (int part = 0; part < 4; ++part) {
        if (part > 0) {
            if (pos >= s.size() || s[pos] != '.') {
                return std::nullopt;
            }
            ++pos;
        }
        const std::size_t start = pos;
        unsigned n = 0;
        while (pos < s.size() && is_digit(s[pos]) && pos - start < 3) {
            n = n * 10 + static_cast<unsigned>(s[pos] - '0');
            ++pos;
        }
        const std::size_t len = pos - start;
        if (len == 0 || n > 255 || (len > 1 && s[start] == '0')) {
            return std::nullopt;
        }
        value = (value << 8) | n;
    }
    if (pos != s.size()) {
        return std::nullopt;
    }
    return value;
}

// One part of an inet_aton address: decimal, octal (leading 0) or hex (0x, digits may be
// empty as in WHATWG and glibc). The value saturates just above 32 bits, so any digit
// string is safe; callers range-check.
std::optional<std::uint64_t> parse_aton_part(std::string_view p) noexcept {
    constexpr std::uint64_t saturated = std::uint64_t{1} << 33;
    if (p.empty()) {
        return std::nullopt;
    }
    unsigned base = 10;
    std::size_t i = 0;
    if (p.size() >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        i = 2;
    } else if (p.size() >= 2 && p[0] == '0') {
        base = 8;
        i = 1;
    }
    std::uint64_t v = 0;
    for (; i < p.size(); ++i) {
        if (!is_hex(p[i]) || static_cast<unsigned>(common::hex_value(p[i])) >= base) {
            return std::nullopt;
        }
        v = v * base + static_cast<unsigned>(common::hex_value(p[i]));
        if (v > saturated) {
            v = saturated;
        }
    }
    return v;
}

// inet_aton / WHATWG IPv4: 1 to 4 parts, the last filling the remaining bytes. `s` has
// already lost its one allowed trailing dot.
std::optional<std::uint32_t> parse_lenient_v4(std::string_view s) noexcept {
    std::array<std::uint64_t, 4> parts{};
    std::size_t count = 0;
    std::size_t start = 0;
    while (true) {
        if (count == parts.size()) {
            return std::nullopt;
        }
        const std::size_t dot = s.find('.', start);
        const std::string_view p = s.substr(
            start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
        const auto v = parse_aton_part(p);
        if (!v) {
            return std::nullopt;
        }
        parts[count++] = *v;
        if (dot == std::string_view::npos) {
            break;
        }
        start = dot + 1;
    }
    std::uint64_t value = 0;
    for (std::size_t i = 0; i + 1 < count; ++i) {
        if (parts[i] > 255) {
            return std::nullopt;
        }
        value |= parts[i] << (8 * (3 - i));
    }
    const std::uint64_t last_limit = std::uint64_t{1} << (8 * (5 - count));
    if (parts[count - 1] >= last_limit) {
        return std::nullopt;
    }
    value |= parts[count - 1];
    return static_cast<std::uint32_t>(value);
}

// WHATWG "ends in a number": the last label, after dropping one trailing dot, is all
// decimal digits, or 0x / 0X followed by zero or more hex digits.
bool ends_in_number(std::string_view host) noexcept {
    if (!host.empty() && host.back() == '.') {
        host.remove_suffix(1);
    }
    const std::size_t dot = host.rfind('.');
    const std::string_view last = dot == std::string_view::npos ? host : host.substr(dot + 1);
    if (last.empty()) {
        return false;
    }
    std::size_t i = 0;
    bool hex = false;
    if (last.size() >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X')) {
        hex = true;
        i = 2;
    }
    for (; i < last.size(); ++i) {
        if (hex ? !is_hex(last[i]) : !is_digit(last[i])) {
            return false;
        }
    }
    return true;
}

// IPv6 syntax without brackets or zone. The character and length checks keep NULs and
// huge strings away from inet_pton.
std::optional<bytes16> parse_v6_bytes(std::string_view s) noexcept {
    if (s.size() < 2 || s.size() > max_v6_text) {
        return std::nullopt;
    }
    for (const char c : s) {
        if (!is_hex(c) && c != ':' && c != '.') {
            return std::nullopt;
        }
    }
    char buf[max_v6_text + 1];
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = '\0';
    in6_addr a{};
    if (inet_pton(AF_INET6, buf, &a) != 1) {
        return std::nullopt;
    }
    bytes16 b{};
    std::memcpy(b.data(), &a, b.size());
    return b;
}

bool valid_zone(std::string_view z) noexcept {
    if (z.empty() || z.size() > max_zone) {
        return false;
    }
    for (const char c : z) {
        const bool ok = is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        c == '.' || c == '_' || c == '~' || c == '-';
        if (!ok) {
            return false;
        }
    }
    return true;
}

struct v6_with_zone {
    bytes16 bytes{};
    std::string zone;
};

// "addr", "addr%zone" or "addr%25zone". A zone starting "25" is read as the URL encoding
// of '%' (RFC 6874) and loses it, for bare and bracketed forms alike: "%25eth0" is "eth0",
// "%25" alone is an empty zone and so invalid, and a zone really named "25" is "%2525".
std::optional<v6_with_zone> parse_v6_zoned(std::string_view s) {
    std::string_view zone;
    const std::size_t pct = s.find('%');
    if (pct != std::string_view::npos) {
        zone = s.substr(pct + 1);
        s = s.substr(0, pct);
        if (zone.substr(0, 2) == "25") {
            zone.remove_prefix(2);
        }
        if (!valid_zone(zone)) {
            return std::nullopt;
        }
    }
    const auto b = parse_v6_bytes(s);
    if (!b) {
        return std::nullopt;
    }
    return v6_with_zone{*b, std::string(zone)};
}

// Clears every bit past `prefix_len` (0..128) of an IPv6 address.
void mask_bytes(bytes16& b, int prefix_len) noexcept {
    for (int i = 0; i < 16; ++i) {
        const int keep = prefix_len - 8 * i;  // bits of this byte inside the prefix
        auto& byte = b[static_cast<std::size_t>(i)];
        if (keep <= 0) {
            byte = 0;
        } else if (keep < 8) {
            byte = static_cast<std::uint8_t>(byte & (0xff << (8 - keep)));
        }
    }
}

void append_decimal(std::string& out, unsigned v) {
    char buf[16];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

void append_hex(std::string& out, unsigned v) {
    char buf[16];
    const auto r = std::to_chars(buf, buf + sizeof buf, v, 16);  // lower case
    out.append(buf, r.ptr);
}

// Error-message quoting for untrusted text: printable ASCII kept, everything else \xNN,
// and long input cut short.
std::string quote(std::string_view s) {
    constexpr std::size_t limit = 64;
    std::string out = "'";
    for (std::size_t i = 0; i < s.size() && i < limit; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
            out += static_cast<char>(c);
        } else {
            static constexpr char digits[] = "0123456789abcdef";
            out += "\\x";
            out += digits[c >> 4];
            out += digits[c & 0xf];
        }
    }
    if (s.size() > limit) {
        out += "...";
    }
    out += "'";
    return out;
}

// Why an address in a prefix was refused, as helpfully as we can say it.
std::string explain_bad_address(std::string_view text) {
    const literal lit = parse_literal(text);
    if (lit.kind == literal_kind::non_canonical) {
        return quote(text) + " is not a canonical IPv4 address; write " + lit.address.to_string() +
               " if that is what you mean";
    }
    if (lit.kind == literal_kind::ipv6 && !text.empty() && text.front() == '[') {
        return quote(text) + ": write IPv6 prefixes without brackets";
    }
    if (lit.kind == literal_kind::ipv6) {
        return quote(text) + ": a zone (%...) is not allowed in a prefix";
    }
    return quote(text) + " is not an IP address";
}

cidr_result fail(std::string message) { return cidr_result{std::nullopt, std::move(message)}; }

}  // namespace

ip_address ip_address::v4(std::uint32_t host_order) {
    ip_address a;
    a.family_ = family::v4;
    a.bytes_[0] = static_cast<std::uint8_t>(host_order >> 24);
    a.bytes_[1] = static_cast<std::uint8_t>(host_order >> 16);
    a.bytes_[2] = static_cast<std::uint8_t>(host_order >> 8);
    a.bytes_[3] = static_cast<std::uint8_t>(host_order);
    return a;
}

ip_address ip_address::v4(std::array<std::uint8_t, 4> b) {
    ip_address a;
    a.family_ = family::v4;
    for (std::size_t i = 0; i < b.size(); ++i) {
        a.bytes_[i] = b[i];
    }
    return a;
}

ip_address ip_address::v6(const std::array<std::uint8_t, 16>& b) {
    if (is_mapped(b)) {
        return v4(std::array<std::uint8_t, 4>{b[12], b[13], b[14], b[15]});
    }
    ip_address a;
    a.family_ = family::v6;
    a.bytes_ = b;
    return a;
}

std::uint32_t ip_address::v4_value() const noexcept {
    if (!is_v4()) {
        return 0;
    }
    return (std::uint32_t{bytes_[0]} << 24) | (std::uint32_t{bytes_[1]} << 16) |
           (std::uint32_t{bytes_[2]} << 8) | std::uint32_t{bytes_[3]};
}

bool ip_address::bit(int i) const noexcept {
    if (i < 0 || i >= bits()) {
        return false;
    }
    const auto byte = bytes_[static_cast<std::size_t>(i / 8)];
    return ((byte >> (7 - i % 8)) & 1) != 0;
}

// IPv6 is written in plain RFC 5952 hex, never with an embedded dotted quad: mapped
// addresses are IPv4 here, and "::102:304" reads the same to every parser.
std::string ip_address::to_string() const {
    std::string out;
    if (is_v4()) {
        for (std::size_t i = 0; i < 4; ++i) {
            if (i > 0) {
                out += '.';
            }
            append_decimal(out, bytes_[i]);
        }
        return out;
    }
    std::array<unsigned, 8> words{};
    for (std::size_t i = 0; i < 8; ++i) {
        words[i] = (unsigned{bytes_[2 * i]} << 8) | bytes_[2 * i + 1];
    }
    // The longest run of two or more zero groups, the first one on a tie.
    int best = -1;
    int best_len = 0;
    for (int i = 0; i < 8;) {
        if (words[static_cast<std::size_t>(i)] != 0) {
            ++i;
            continue;
        }
        int j = i;
        while (j < 8 && words[static_cast<std::size_t>(j)] == 0) {
            ++j;
        }
        if (j - i >= 2 && j - i > best_len) {
            best = i;
            best_len = j - i;
        }
        i = j;
    }
    for (int i = 0; i < 8;) {
        if (i == best) {
            out += "::";
            i += best_len;
            continue;
        }
        if (!out.empty() && out.back() != ':') {
            out += ':';
        }
        append_hex(out, words[static_cast<std::size_t>(i)]);
        ++i;
    }
    return out;
}

ip_address mask(const ip_address& a, int prefix_len) noexcept {
    const int bits = a.bits();
    if (prefix_len < 0) {
        prefix_len = 0;
    }
    if (prefix_len >= bits) {
        return a;
    }
    if (a.is_v4()) {
        const std::uint32_t m = prefix_len == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix_len);
        return ip_address::v4(a.v4_value() & m);
    }
    bytes16 b = a.bytes();
    mask_bytes(b, prefix_len);
    // Clearing bits of a non-mapped address never yields a mapped one (a length of 96 or
    // more keeps bytes 0..11; a shorter one clears part of the ffff), so this stays IPv6.
    return ip_address::v6(b);
}

bool cidr::contains(const ip_address& a) const noexcept {
    if (a.fam() != network.fam() || prefix_len < 0 || prefix_len > a.bits()) {
        return false;
    }
    return mask(a, prefix_len) == mask(network, prefix_len);
}

bool cidr::contains(const cidr& inner) const noexcept {
    if (inner.network.fam() != network.fam() || inner.prefix_len < prefix_len ||
        inner.prefix_len > inner.network.bits()) {
        return false;
    }
    return contains(inner.network);
}

std::string cidr::to_string() const {
    std::string out = network.to_string();
    out += '/';
    out += std::to_string(prefix_len);
    return out;
}

literal parse_literal(std::string_view host) {
    literal out;
    if (host.empty()) {
        return out;
    }
    if (host.front() == '[') {
        // Brackets promise IPv6; anything else inside them is no address.
        out.kind = literal_kind::invalid;
        if (host.size() < 2 || host.back() != ']') {
            return out;
        }
        auto v6 = parse_v6_zoned(host.substr(1, host.size() - 2));
        if (v6) {
            out.kind = literal_kind::ipv6;
            out.address = ip_address::v6(v6->bytes);
            out.zone = std::move(v6->zone);
        }
        return out;
    }
    if (host.find(':') != std::string_view::npos) {
        // A bare host with ':' that is not IPv6 falls through: no DNS name has a ':', so
        // it is either an invalid IPv4 attempt (numeric last label) or garbage for the host
        // validator (not_ip).
        auto v6 = parse_v6_zoned(host);
        if (v6) {
            out.kind = literal_kind::ipv6;
            out.address = ip_address::v6(v6->bytes);
            out.zone = std::move(v6->zone);
            return out;
        }
    }
    if (!ends_in_number(host)) {
        return out;  // not_ip
    }
    if (const auto v = parse_canonical_v4(host)) {
        out.kind = literal_kind::ipv4;
        out.address = ip_address::v4(*v);
        return out;
    }
    std::string_view body = host;
    if (body.back() == '.') {
        body.remove_suffix(1);
    }
    if (const auto v = parse_lenient_v4(body)) {
        out.kind = literal_kind::non_canonical;
        out.address = ip_address::v4(*v);
        return out;
    }
    out.kind = literal_kind::invalid;
    return out;
}

std::optional<ip_address> parse_ip(std::string_view text) {
    if (const auto v = parse_canonical_v4(text)) {
        return ip_address::v4(*v);
    }
    if (const auto b = parse_v6_bytes(text)) {
        return ip_address::v6(*b);
    }
    return std::nullopt;
}

// An IPv6-written prefix whose network is IPv4-mapped (::ffff:a.b.c.d/96..128) becomes the
// IPv4 prefix a.b.c.d/(len-96), because every parser here turns mapped addresses into IPv4
// and a v6 prefix would never match them. A mapped network with a length under 96 always
// has host bits set (bits len..95 hold the ffff), so it is refused and no shorter
// "mapped prefix" exists. Plain IPv6 prefixes that cover mapped space (::/0, ::/80) stay
// IPv6 and, like every IPv6 prefix, never contain an IPv4 address.
cidr_result parse_cidr(std::string_view text) {
    const std::size_t slash = text.find('/');
    if (slash == std::string_view::npos) {
        if (text.empty()) {
            return fail("expected ADDRESS/LENGTH, got an empty string");
        }
        if (const auto a = parse_ip(text)) {
            return fail("expected ADDRESS/LENGTH, got " + quote(text) + ": write " +
                        a->to_string() + "/" + std::to_string(a->bits()) + " for a single address");
        }
        return fail("expected ADDRESS/LENGTH, got " + quote(text));
    }
    const std::string_view addr_text = text.substr(0, slash);
    const std::string_view len_text = text.substr(slash + 1);
    if (len_text.find('/') != std::string_view::npos) {
        return fail("expected ADDRESS/LENGTH, got " + quote(text) + " with more than one '/'");
    }
    if (addr_text.empty()) {
        return fail("expected ADDRESS/LENGTH, got " + quote(text) + " with no address");
    }

    const bool written_v6 = addr_text.find(':') != std::string_view::npos;
    std::optional<ip_address> addr;
    bytes16 raw{};  // the address as written, before mapped becomes IPv4
    if (written_v6) {
        if (const auto b = parse_v6_bytes(addr_text)) {
            raw = *b;
            addr = ip_address::v6(raw);
        }
    } else if (const auto v = parse_canonical_v4(addr_text)) {
        addr = ip_address::v4(*v);
    }
    if (!addr) {
        return fail(explain_bad_address(addr_text));
    }

    if (len_text.empty()) {
        return fail("expected ADDRESS/LENGTH, got " + quote(text) + " with no length after '/'");
    }
    int len = 0;
    for (const char c : len_text) {
        if (!is_digit(c)) {
            return fail("prefix length " + quote(len_text) + " is not a decimal number");
        }
        if (len <= 1000) {
            len = len * 10 + (c - '0');
        }
    }
    if (len_text.size() > 1 && len_text.front() == '0') {
        return fail("prefix length " + quote(len_text) + " has a leading zero");
    }
    const int max_len = written_v6 ? 128 : 32;
    if (len > max_len) {
        const std::string shown = len_text.size() > 10 ? quote(len_text) : std::string(len_text);
        return fail("prefix length " + shown + " is out of range 0.." + std::to_string(max_len) +
                    " for " + (written_v6 ? "IPv6" : "IPv4"));
    }

    if (written_v6 && addr->is_v4()) {
        if (len < 96) {
            bytes16 b = raw;
            mask_bytes(b, len);  // clears part of the ffff, so this is IPv6 again
            const ip_address suggestion = ip_address::v6(b);
            return fail(std::string(text) + " has host bits set; did you mean " +
                        suggestion.to_string() + "/" + std::to_string(len) +
                        "? (an IPv4-mapped prefix needs a length of 96 or more)");
        }
        len -= 96;
    }
    const ip_address network = mask(*addr, len);
    if (network != *addr) {
        return fail(std::string(text) + " has host bits set; did you mean " + network.to_string() +
                    "/" + std::to_string(len) + "?");
    }
    return cidr_result{cidr{network, len}, {}};
}

}  // namespace cordon::config
