// Tests of the parent proxy's pure parts: the CONNECT it sends, how much of its answer may be
// read (never past the head), its status line; and no_proxy.
#include "proxy/data/parent_proxy.hpp"

#include <catch2/catch.hpp>

#include <string>

#include "config/ip.hpp"

namespace {

using namespace cordon;
using namespace cordon::proxy::data;

}  // namespace

TEST_CASE("parent_proxy: the CONNECT request", "[parent_proxy]") {
    CHECK(parent_connect_request("203.0.113.5:443", "") ==
          "CONNECT 203.0.113.5:443 HTTP/1.1\r\nHost: 203.0.113.5:443\r\n\r\n");
    CHECK(parent_connect_request("[2001:db8::1]:22", "cordon:s3cret") ==
          "CONNECT [2001:db8::1]:22 HTTP/1.1\r\nHost: [2001:db8::1]:22\r\n"
          "Proxy-Authorization: Basic Y29yZG9uOnMzY3JldA==\r\n\r\n");
}

TEST_CASE("parent_proxy: the answer is read up to its blank line, never past it",
          "[parent_proxy]") {
    const std::string answer = "HTTP/1.1 200 Connection established\r\n\r\n";
    const std::string behind = "SSH-2.0-OpenSSH_9.2p1\r\n";  // the target speaks first
    const std::string wire = answer + behind;
    // Reading as the connector does: each read takes at most parent_head_need bytes.
    for (std::size_t per_read = 1; per_read <= wire.size(); ++per_read) {
        CAPTURE(per_read);
        std::string head;
        std::size_t at = 0;
        for (std::size_t need = parent_head_need(head); need > 0; need = parent_head_need(head)) {
            const std::size_t n = std::min({need, per_read, wire.size() - at});
            REQUIRE(n > 0);
            head += wire.substr(at, n);
            at += n;
        }
        CHECK(head == answer);
    }
    CHECK(parent_head_need("") == 17);
    CHECK(parent_head_need("HTTP/1.1 200 OK\r\n") == 2);
    CHECK(parent_head_need("HTTP/1.1 200 OK\r\n\r") == 1);
    CHECK(parent_head_need("HTTP/1.1 200 OK\r\n\r\n") == 0);
}

TEST_CASE("parent_proxy: status lines", "[parent_proxy]") {
    CHECK(parent_status("HTTP/1.1 200 Connection established\r\n\r\n") == 200);
    CHECK(parent_status("HTTP/1.0 200\r\n\r\n") == 200);
    CHECK(parent_status("HTTP/1.1 407 Proxy Authentication Required\r\n\r\n") == 407);
    CHECK(parent_status("HTTP/1.1 403 Forbidden\r\n\r\n") == 403);
    CHECK(parent_status("HTTP/2 200\r\n\r\n") == 0);
    CHECK(parent_status("HTTP/1.1 2000 x\r\n\r\n") == 0);
    CHECK(parent_status("SSH-2.0-x\r\n\r\n") == 0);
    CHECK(parent_status("HTTP/1.1 09x\r\n\r\n") == 0);
}

TEST_CASE("parent_proxy: errors say what the parent did", "[parent_proxy]") {
    CHECK(make_error(parent_error::auth_required).message().find("407") != std::string::npos);
    CHECK(make_error(parent_error::refused).message() == "the upstream proxy refused the CONNECT");
}

TEST_CASE("upstream_proxy: no_proxy", "[parent_proxy]") {
    config::upstream_proxy_spec up;
    up.host = "proxy.corp.example";
    up.port = 8080;
    up.no_proxy_nets.push_back(*config::parse_cidr("10.0.0.0/8").value);
    up.no_proxy_names = {".corp.example", "exact.example"};
    const auto a = [](const char* s) { return config::parse_literal(s).address; };
    CHECK(up.direct("anything.example", a("10.1.2.3")));
    CHECK_FALSE(up.direct("anything.example", a("11.1.2.3")));
    CHECK(up.direct("git.corp.example", a("203.0.113.1")));
    CHECK_FALSE(up.direct("corp.example", a("203.0.113.1")));  // below, not the apex
    CHECK_FALSE(up.direct("evilcorp.example", a("203.0.113.1")));
    CHECK(up.direct("exact.example", a("203.0.113.1")));
    CHECK_FALSE(up.direct("sub.exact.example", a("203.0.113.1")));
    CHECK(up.display() == "proxy.corp.example:8080");
}
