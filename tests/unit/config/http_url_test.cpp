// parse_http_url: the webhook URL. Errors never quote the URL (it may be a secret).
#include "config/http_url.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>

#include <string>

namespace {

using namespace cordon::config;

TEST_CASE("http_url: valid URLs", "[http_url]") {
    struct row {
        std::string text;
        bool tls;
        std::string host;
        std::uint16_t port;
        std::string target;
        std::string origin;
        std::string host_header;
    };
    const row rows[] = {
        {"https://hooks.slack.com/services/T0/B0/SECRET", true, "hooks.slack.com", 443,
         "/services/T0/B0/SECRET", "https://hooks.slack.com", "hooks.slack.com"},
        {"http://127.0.0.1:8080/hook?token=abc", false, "127.0.0.1", 8080, "/hook?token=abc",
         "http://127.0.0.1:8080", "127.0.0.1:8080"},
        {"http://Alerts.Example.COM.", false, "alerts.example.com", 80, "/",
         "http://alerts.example.com", "alerts.example.com"},
        {"https://[::1]:9443/x", true, "::1", 9443, "/x", "https://[::1]:9443", "[::1]:9443"},
        {"https://[::1]/", true, "::1", 443, "/", "https://[::1]", "[::1]"},
        {"http://h.example?q=1", false, "h.example", 80, "/?q=1", "http://h.example", "h.example"},
        {"http://h.example:80/a", false, "h.example", 80, "/a", "http://h.example", "h.example"},
    };
    for (const auto& r : rows) {
        DYNAMIC_SECTION(r.text) {
            const http_url_result u = parse_http_url(r.text);
            INFO(u.error);
            REQUIRE(u.value.has_value());
            CHECK(u.value->tls == r.tls);
            CHECK(u.value->host == r.host);
            CHECK(u.value->port == r.port);
            CHECK(u.value->target == r.target);
            CHECK(u.value->origin() == r.origin);
            CHECK(u.value->host_header() == r.host_header);
        }
    }
}

TEST_CASE("http_url: refused, without quoting the URL", "[http_url]") {
    const std::pair<std::string, std::string> rows[] = {
        {"ftp://h/SECRET", "expected an http:// or https:// URL"},
        {"HTTPS://h/SECRET", "expected an http:// or https:// URL"},
        {"h.example/SECRET", "expected an http:// or https:// URL"},
        {"https://h/SE CRET", "URL contains whitespace"},
        {"https://h/SECRET\x01", "control character"},
        {"https://h/SECRET\xc3\xa9", "non-ASCII"},
        {"https://user:SECRET@h/", "credentials"},
        {"https://h/SECRET#frag", "fragment"},
        {"https:///SECRET", "no host"},
        {"https://:443/SECRET", "no host"},
        {"https://h:0/SECRET", "port must be 1..65535"},
        {"https://h:65536/SECRET", "port must be 1..65535"},
        {"https://h:/SECRET", "empty port"},
        {"https://h:x/SECRET", "port must be 1..65535"},
        {"https://[::1/SECRET", "unclosed"},
        {"https://[1.2.3.4]/SECRET", "invalid IPv6"},
        {"https://[::1]x/SECRET", "after its IPv6 host"},
        {"https://a_b.example/SECRET", "not a valid DNS name"},
        {"https://0x7f.1/SECRET", "not a valid name or canonical IPv4"},
        {"https://" + std::string(9000, 'a'), "longer than 8192"},
    };
    for (const auto& [text, what] : rows) {
        DYNAMIC_SECTION(what << ": " << text.substr(0, 40)) {
            const http_url_result u = parse_http_url(text);
            CHECK_FALSE(u.value.has_value());
            CHECK_THAT(u.error, Catch::Matchers::Contains(what));
            CHECK(u.error.find("SECRET") == std::string::npos);
        }
    }
}

}  // namespace
