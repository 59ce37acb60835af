// Tests of the request-target parsers: CONNECT authorities, absolute-form URIs and the Host
// header check. Every accepted and every refused form, each with the message the client sees.
#include "config/target.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace cordon::config;
using namespace std::string_literals;

constexpr std::size_t max_target = 8192;

// The messages the parsers give, so a changed wording fails in one place.
constexpr std::string_view connect_form = "the CONNECT target must be host:port";
constexpr std::string_view not_a_url = "the CONNECT target must be host:port, not a URL";
constexpr std::string_view needs_port = "the target needs a port, e.g. example.com:443";
constexpr std::string_view bad_port = "the port must be a number 1..65535";
constexpr std::string_view no_host = "the target has no host";
constexpr std::string_view unterminated = "unterminated '[' in the target";
constexpr std::string_view after_bracket = "unexpected characters after ']' in the target";
constexpr std::string_view brackets_v6 = "brackets are only for IPv6 addresses";
constexpr std::string_view v6_brackets = "write IPv6 addresses in brackets, e.g. [2001:db8::1]:443";
constexpr std::string_view too_long_or_ctl =
    "the request target is too long or has control characters";
constexpr std::string_view is_proxy =
    "this is a proxy: send absolute-form requests (GET http://host/path)";
constexpr std::string_view not_absolute = "the request target must be an absolute http:// URL";
constexpr std::string_view https_connect =
    "https is proxied with CONNECT, not as an absolute-form request";
constexpr std::string_view only_http = "only http:// URLs are forwarded";
constexpr std::string_view userinfo =
    "credentials in the URL are not forwarded; remove the user@ part";
constexpr std::string_view fragment = "a fragment (#...) is never sent to a server";

struct accepted_connect {
    const char* name;
    std::string in;
    std::string host;
    std::uint16_t port;
};

struct refused {
    const char* name;
    std::string in;
    std::string_view error;
};

struct accepted_uri {
    const char* name;
    std::string in;
    std::string host;
    std::uint16_t port;
    std::string origin_form;
    std::string authority;
};

target parsed_uri(std::string_view uri) {
    const target_result r = parse_absolute_uri(uri);
    REQUIRE(r.value);
    return *r.value;
}

}  // namespace

TEST_CASE("target: CONNECT accepts host:port and [v6]:port", "[target]") {
    const std::string long_host(max_target - 4, 'a');
    const auto c = GENERATE_COPY(values<accepted_connect>({
        {"name and port", "example.com:443", "example.com", 443},
        {"case kept as sent", "ExAmPlE.CoM:443", "ExAmPlE.CoM", 443},
        {"single-label name", "a:80", "a", 80},
        {"IPv4 literal", "192.0.2.1:8443", "192.0.2.1", 8443},
        {"port 1", "example.com:1", "example.com", 1},
        {"port 65535", "example.com:65535", "example.com", 65535},
        {"port 10", "example.com:10", "example.com", 10},
        {"IPv6 literal", "[2001:db8::1]:443", "2001:db8::1", 443},
        {"IPv6 loopback", "[::1]:8080", "::1", 8080},
        {"IPv6 upper case kept", "[2001:DB8::A]:443", "2001:DB8::A", 443},
        {"IPv4-mapped IPv6", "[::ffff:192.0.2.1]:443", "::ffff:192.0.2.1", 443},
        {"exactly 8 KiB", long_host + ":443", long_host, 443},
    }));
    INFO(c.name);
    REQUIRE(c.in.size() <= max_target);
    const target_result r = parse_connect_target(c.in);
    REQUIRE(r.value);
    CHECK(r.error.empty());
    CHECK(r.value->host == c.host);
    CHECK(r.value->port == c.port);
    CHECK(r.value->origin_form.empty());
    CHECK(r.value->authority.empty());
}

TEST_CASE("target: CONNECT refuses everything else, saying why", "[target]") {
    const std::string long_host(max_target - 3, 'a');
    const auto c = GENERATE_COPY(values<refused>({
        {"empty", "", connect_form},
        {"missing port", "example.com", needs_port},
        {"empty port", "example.com:", bad_port},
        {"port 0", "example.com:0", bad_port},
        {"port 00", "example.com:00", bad_port},
        {"port 65536", "example.com:65536", bad_port},
        {"port 99999", "example.com:99999", bad_port},
        {"port with six digits", "example.com:100000", bad_port},
        {"port with a leading zero", "example.com:0443", bad_port},
        {"port with a plus sign", "example.com:+443", bad_port},
        {"negative port", "example.com:-1", bad_port},
        {"hex port", "example.com:0x1bb", bad_port},
        {"non-digit in port", "example.com:44a", bad_port},
        {"named port", "example.com:https", bad_port},
        {"two ports", "example.com:443:443", v6_brackets},
        {"empty host", ":443", no_host},
        {"only a colon", ":", no_host},
        {"unbracketed IPv6", "2001:db8::1:443", v6_brackets},
        {"unbracketed loopback", "::1:443", v6_brackets},
        {"IPv6 without port", "[::1]", needs_port},
        {"IPv6 with empty port", "[::1]:", bad_port},
        {"IPv6 with port 0", "[::1]:0", bad_port},
        {"IPv6 with port 65536", "[::1]:65536", bad_port},
        {"IPv6 port without colon", "[::1]443", after_bracket},
        {"junk after bracket", "[::1]x:443", after_bracket},
        {"two closing brackets", "[::1]]:443", after_bracket},
        {"unterminated bracket", "[::1:443", unterminated},
        {"lone bracket", "[", unterminated},
        {"empty brackets", "[]:443", brackets_v6},
        {"name in brackets", "[example.com]:443", brackets_v6},
        {"IPv4 in brackets", "[192.0.2.1]:443", brackets_v6},
        {"slash", "example.com/:443", not_a_url},
        {"path", "example.com:443/", not_a_url},
        {"URL", "http://example.com:443", not_a_url},
        {"userinfo", "user@example.com:443", not_a_url},
        {"userinfo with password", "user:pw@example.com:443", not_a_url},
        {"space in host", "exa mple.com:443", connect_form},
        {"leading space", " example.com:443", connect_form},
        {"trailing space", "example.com:443 ", connect_form},
        {"tab", "example.com:\t443", connect_form},
        {"CR LF", "example.com:443\r\n", connect_form},
        {"NUL in host", "exa\0mple.com:443"s, connect_form},
        {"NUL after port", "example.com:443\0"s, connect_form},
        {"control byte", "exa\x01mple.com:443", connect_form},
        {"DEL", "exa\x7fmple.com:443", connect_form},
        {"UTF-8 host", "b\xc3\xbcro.example:443", connect_form},
        {"byte 0xff", "\xff:443", connect_form},
        {"one byte over 8 KiB", long_host + ":443", connect_form},
        {"far over 8 KiB", std::string(100000, 'a') + ":443", connect_form},
    }));
    INFO(c.name);
    const target_result r = parse_connect_target(c.in);
    CHECK_FALSE(r.value);
    CHECK(r.error == c.error);
}

TEST_CASE("target: absolute-form http URIs are split into host, port and origin-form", "[target]") {
    const std::string long_path(max_target - std::string_view("http://h/").size(), 'p');
    const auto c = GENERATE_COPY(values<accepted_uri>({
        {"root path", "http://example.com/", "example.com", 80, "/", "example.com"},
        {"empty path becomes /", "http://example.com", "example.com", 80, "/", "example.com"},
        {"query without path", "http://example.com?q=1", "example.com", 80, "/?q=1", "example.com"},
        {"empty query without path", "http://example.com?", "example.com", 80, "/?", "example.com"},
        {"path and query", "http://example.com/a/b?c=d&e", "example.com", 80, "/a/b?c=d&e",
         "example.com"},
        {"upper-case scheme", "HTTP://example.com/x", "example.com", 80, "/x", "example.com"},
        {"mixed-case scheme", "HtTp://example.com/x", "example.com", 80, "/x", "example.com"},
        {"host case kept", "http://ExAmPle.COM/Path", "ExAmPle.COM", 80, "/Path", "ExAmPle.COM"},
        {"explicit port", "http://example.com:8080/x", "example.com", 8080, "/x",
         "example.com:8080"},
        {"explicit default port kept as written", "http://example.com:80/", "example.com", 80, "/",
         "example.com:80"},
        {"port 1", "http://example.com:1", "example.com", 1, "/", "example.com:1"},
        {"port 65535", "http://example.com:65535/", "example.com", 65535, "/", "example.com:65535"},
        {"port and query", "http://example.com:81?x", "example.com", 81, "/?x", "example.com:81"},
        {"IPv4 literal", "http://192.0.2.1/", "192.0.2.1", 80, "/", "192.0.2.1"},
        {"IPv6 literal", "http://[2001:db8::1]/", "2001:db8::1", 80, "/", "[2001:db8::1]"},
        {"IPv6 with port", "http://[::1]:8080/x?y", "::1", 8080, "/x?y", "[::1]:8080"},
        {"IPv6 without path", "http://[::1]", "::1", 80, "/", "[::1]"},
        {"@ in the path is not userinfo", "http://example.com/a@b", "example.com", 80, "/a@b",
         "example.com"},
        {"URL in the query", "http://example.com/r?to=http://other/", "example.com", 80,
         "/r?to=http://other/", "example.com"},
        {"double slash path", "http://example.com//x", "example.com", 80, "//x", "example.com"},
        {"percent escapes kept", "http://example.com/%2e%2e/a%20b", "example.com", 80,
         "/%2e%2e/a%20b", "example.com"},
        {"exactly 8 KiB", "http://h/" + long_path, "h", 80, "/" + long_path, "h"},
    }));
    INFO(c.name);
    REQUIRE(c.in.size() <= max_target);
    const target_result r = parse_absolute_uri(c.in);
    REQUIRE(r.value);
    CHECK(r.error.empty());
    CHECK(r.value->host == c.host);
    CHECK(r.value->port == c.port);
    CHECK(r.value->origin_form == c.origin_form);
    CHECK(r.value->authority == c.authority);
}

TEST_CASE("target: absolute-form URIs refuse other schemes, userinfo and fragments", "[target]") {
    const std::string long_path(max_target - std::string_view("http://h/").size() + 1, 'p');
    const auto c = GENERATE_COPY(values<refused>({
        {"https", "https://example.com/", https_connect},
        {"HTTPS", "HTTPS://example.com/", https_connect},
        {"https with port", "https://example.com:443/", https_connect},
        {"ftp", "ftp://example.com/", only_http},
        {"ws", "ws://example.com/", only_http},
        {"httpx", "httpx://example.com/", only_http},
        {"empty scheme", "://example.com/", only_http},
        {"origin-form", "/x", is_proxy},
        {"origin-form root", "/", is_proxy},
        {"origin-form with query", "/search?q=1", is_proxy},
        {"origin-form with a URL in the query", "/login?next=http://example.com/", is_proxy},
        {"origin-form with an https URL in the query", "/r?u=https://example.com/", is_proxy},
        {"empty", "", not_absolute},
        {"asterisk-form", "*", not_absolute},
        {"authority-form", "example.com:80", not_absolute},
        {"no scheme", "example.com/path", not_absolute},
        {"one slash", "http:/example.com/", not_absolute},
        {"no slashes", "http:example.com", not_absolute},
        {"userinfo", "http://user@example.com/", userinfo},
        {"userinfo with password", "http://user:pass@example.com/", userinfo},
        {"empty userinfo", "http://@example.com/", userinfo},
        {"userinfo before a port", "http://example.com:80@evil.example/", userinfo},
        {"fragment", "http://example.com/#frag", fragment},
        {"fragment without path", "http://example.com#frag", fragment},
        {"fragment after query", "http://example.com/a?b#c", fragment},
        {"empty fragment", "http://example.com/#", fragment},
        {"empty authority", "http:///path", no_host},
        {"nothing after scheme", "http://", no_host},
        {"port without host", "http://:80/", no_host},
        {"query without host", "http://?q", no_host},
        {"empty port", "http://example.com:/", bad_port},
        {"port 0", "http://example.com:0/", bad_port},
        {"port 65536", "http://example.com:65536/", bad_port},
        {"port with a leading zero", "http://example.com:080/", bad_port},
        {"non-digit port", "http://example.com:8o/", bad_port},
        {"unbracketed IPv6", "http://2001:db8::1/", v6_brackets},
        {"unterminated IPv6", "http://[2001:db8::1/", unterminated},
        {"name in brackets", "http://[example.com]/", brackets_v6},
        {"junk after bracket", "http://[::1]x/", after_bracket},
        {"IPv6 with bad port", "http://[::1]:0/", bad_port},
        {"space in host", "http://exa mple.com/", too_long_or_ctl},
        {"space in path", "http://example.com/a b", too_long_or_ctl},
        {"CR LF in path", "http://example.com/\r\nX: y", too_long_or_ctl},
        {"NUL in path", "http://example.com/\0"s, too_long_or_ctl},
        {"control byte in host", "http://exa\x01mple.com/", too_long_or_ctl},
        {"DEL", "http://example.com/\x7f", too_long_or_ctl},
        {"UTF-8 in path", "http://example.com/\xc3\xa9", too_long_or_ctl},
        {"one byte over 8 KiB", "http://h/" + long_path, too_long_or_ctl},
        {"control byte in origin-form", "/\x01", too_long_or_ctl},
    }));
    INFO(c.name);
    const target_result r = parse_absolute_uri(c.in);
    CHECK_FALSE(r.value);
    CHECK(r.error == c.error);
}

TEST_CASE("target: the Host header must name the URI's authority", "[target]") {
    struct host_case {
        const char* name;
        std::string header;
        std::string uri;
        bool matches;
    };
    const auto c = GENERATE(values<host_case>({
        {"same host", "example.com", "http://example.com/", true},
        {"host case-insensitive", "EXAMPLE.com", "http://example.com/", true},
        {"URI host case-insensitive", "example.com", "http://ExAmPlE.CoM/", true},
        {"default port in the header", "example.com:80", "http://example.com/", true},
        {"default port in the URI", "example.com", "http://example.com:80/", true},
        {"same explicit port", "example.com:8080", "http://example.com:8080/x", true},
        {"header lacks the explicit port", "example.com", "http://example.com:8080/", false},
        {"header has another port", "example.com:8080", "http://example.com/", false},
        {"port 81 versus 80", "example.com:81", "http://example.com:80/", false},
        {"other host", "example.org", "http://example.com/", false},
        {"shorter host", "example.co", "http://example.com/", false},
        {"longer host", "example.comm", "http://example.com/", false},
        {"trailing dot", "example.com.", "http://example.com/", false},
        {"subdomain", "www.example.com", "http://example.com/", false},
        {"empty header", "", "http://example.com/", false},
        {"header with empty host", ":80", "http://example.com/", false},
        {"header with empty port", "example.com:", "http://example.com/", false},
        {"header port with a leading zero", "example.com:080", "http://example.com/", false},
        {"header port 0", "example.com:0", "http://example.com/", false},
        {"header with userinfo", "u@example.com", "http://example.com/", false},
        {"IPv4", "192.0.2.1:80", "http://192.0.2.1/", true},
        {"IPv6", "[2001:db8::1]", "http://[2001:db8::1]/", true},
        {"IPv6 case-insensitive, default port", "[2001:DB8::1]:80", "http://[2001:db8::1]/", true},
        {"IPv6 with port", "[::1]:8080", "http://[::1]:8080/", true},
        {"IPv6 missing port", "[::1]", "http://[::1]:8080/", false},
        {"IPv6 other port", "[::1]:8081", "http://[::1]:8080/", false},
        {"IPv6 other address", "[2001:db8::2]", "http://[2001:db8::1]/", false},
        {"IPv6 unbracketed", "2001:db8::1", "http://[2001:db8::1]/", false},
        {"IPv6 unterminated", "[2001:db8::1", "http://[2001:db8::1]/", false},
        {"IPv6 spelled differently is not normalised", "[2001:db8:0::1]", "http://[2001:db8::1]/",
         false},
        {"IPv6 brackets around a name", "[example.com]", "http://example.com/", false},
    }));
    INFO(c.name);
    const target t = parsed_uri(c.uri);
    CHECK(host_header_matches(c.header, t) == c.matches);
}

TEST_CASE("target: every accepted URI's own authority matches as its Host header", "[target]") {
    const auto uri = GENERATE(as<std::string>{}, "http://example.com/", "http://EXAMPLE.com:80",
                              "http://example.com:8080/?q", "http://[::1]/",
                              "http://[2001:DB8::1]:443/x", "http://192.0.2.1:65535");
    const target t = parsed_uri(uri);
    CHECK(host_header_matches(t.authority, t));
    // And CONNECT to host:port names the same place.
    const std::string hostport = (t.host.find(':') != std::string::npos ? "[" + t.host + "]"
                                                                        : t.host) +
                                 ":" + std::to_string(t.port);
    const target_result c = parse_connect_target(hostport);
    REQUIRE(c.value);
    CHECK(c.value->host == t.host);
    CHECK(c.value->port == t.port);
}
