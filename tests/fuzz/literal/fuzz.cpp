// Fuzzes the IP-literal parsers and the classifier: parse_literal, parse_ip and parse_cidr
// on the raw bytes, then checks that what they accept is canonical, round-trips through
// to_string, and classifies into a range that holds it. Any violation aborts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "config/classify.hpp"
#include "config/ip.hpp"

namespace {

using namespace cordon::config;

void check(bool ok, const char* what, std::string_view input) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s (input %zu bytes)\n", what, input.size());
        std::abort();
    }
}

bool valid_zone_char(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
           c == '_' || c == '~' || c == '-';
}

void check_address(const ip_address& a, std::string_view in) {
    const std::string text = a.to_string();
    const auto again = parse_ip(text);
    check(again.has_value(), "to_string() of an address re-parses", in);
    check(*again == a, "to_string() re-parses to the same address", in);
    check(again->to_string() == text, "to_string() is stable", in);
    check(a.is_v4() ? text.find(':') == std::string::npos : text.find(':') != std::string::npos,
          "the family shows in the text", in);

    const classification c = classify(a);
    check(c.range.network.fam() == a.fam(), "the range has the address's family", in);
    check(c.range.contains(a), "the range holds the address", in);
    check(mask(c.range.network, c.range.prefix_len) == c.range.network,
          "the range has no host bits", in);
    check(!c.is_public() || c.range == cidr{a, a.bits()}, "a global range is the host", in);
}

void check_literal(std::string_view in) {
    const literal lit = parse_literal(in);
    check(lit.kind == literal_kind::ipv6 || lit.zone.empty(), "only IPv6 has a zone", in);
    check(lit.zone.size() <= 64, "a zone is at most 64 characters", in);
    for (const char c : lit.zone) {
        check(valid_zone_char(c), "zone characters are [A-Za-z0-9._~-]", in);
    }
    switch (lit.kind) {
        case literal_kind::ipv4:
            check(lit.address.is_v4(), "ipv4 literal is IPv4", in);
            check(lit.address.to_string() == in, "a canonical IPv4 literal is its own to_string()",
                  in);
            check(parse_ip(in) == lit.address, "parse_ip agrees on canonical IPv4", in);
            check_address(lit.address, in);
            break;
        case literal_kind::ipv6: {
            check_address(lit.address, in);
            const std::string bracketed = "[" + lit.address.to_string() + "]";
            if (lit.address.is_v6()) {
                const literal again = parse_literal(bracketed);
                check(again.kind == literal_kind::ipv6 && again.address == lit.address,
                      "a bracketed IPv6 to_string() re-parses as the same literal", in);
            }
            break;
        }
        case literal_kind::non_canonical: {
            check(lit.address.is_v4(), "non_canonical literal is IPv4", in);
            check_address(lit.address, in);
            const literal again = parse_literal(lit.address.to_string());
            check(again.kind == literal_kind::ipv4 && again.address == lit.address,
                  "the resolver's reading of a non_canonical literal is canonical IPv4", in);
            check(in != lit.address.to_string(), "non_canonical text is not canonical", in);
            break;
        }
        case literal_kind::not_ip:
        case literal_kind::invalid:
            check(lit.address == ip_address{}, "no address for not_ip / invalid", in);
            break;
    }
    if (in.size() >= 2 && in.front() == '[') {
        check(lit.kind == literal_kind::ipv6 || lit.kind == literal_kind::invalid,
              "a bracketed host is IPv6 or invalid", in);
    }
}

void check_ip(std::string_view in) {
    const auto a = parse_ip(in);
    if (!a) {
        return;
    }
    check_address(*a, in);
    const literal lit = parse_literal(in);
    check((lit.kind == literal_kind::ipv4 || lit.kind == literal_kind::ipv6) && lit.address == *a &&
              lit.zone.empty(),
          "parse_literal agrees with parse_ip", in);
}

void check_cidr(std::string_view in) {
    const cidr_result r = parse_cidr(in);
    check(r.value.has_value() != !r.error.empty(), "a cidr result is a value or an error", in);
    if (!r.value) {
        check(r.error.size() < 1024, "error messages stay short", in);
        return;
    }
    const cidr& c = *r.value;
    check(c.prefix_len >= 0 && c.prefix_len <= c.network.bits(), "length in range", in);
    check(mask(c.network, c.prefix_len) == c.network, "no host bits", in);
    check(c.contains(c.network), "a prefix holds its network", in);
    check(c.contains(c), "a prefix holds itself", in);
    const cidr_result again = parse_cidr(c.to_string());
    check(again.value.has_value() && *again.value == c, "to_string() re-parses", in);
    check_address(c.network, in);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    check_literal(in);
    check_ip(in);
    check_cidr(in);
    return 0;
}
