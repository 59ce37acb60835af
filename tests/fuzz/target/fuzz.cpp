// Fuzzes parse_connect_target, parse_absolute_uri and host_header_matches on the raw bytes.
// Checks that every result is either a well-formed target or an error, that an accepted
// target can be written back to exactly the input, and that the Host check agrees with a
// spelled-out oracle. Any violation traps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "config/target.hpp"

namespace {

using namespace cordon::config;

constexpr std::size_t max_target = 8192;

void check(bool ok, const char* what, std::size_t size) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s (input %zu bytes)\n", what, size);
        __builtin_trap();
    }
}

bool printable(std::string_view s) {
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (u <= 0x20 || u >= 0x7f) {
            return false;
        }
    }
    return true;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) {
        if (c >= 'A' && c <= 'Z') {
            c = static_cast<char>(c + 32);
        }
    }
    return out;
}

/// "host:port", bracketing a host that holds a colon.
std::string host_port(const target& t) {
    const std::string host = t.host.find(':') != std::string::npos ? "[" + t.host + "]" : t.host;
    return host + ":" + std::to_string(t.port);
}

/// Exactly one of a value and an error; a value has a host and a port.
void check_shape(const target_result& r, std::size_t n) {
    check(r.value.has_value() != !r.error.empty(), "exactly one of value and error", n);
    check(r.error.size() < 200, "errors are short", n);
    if (r.value) {
        check(!r.value->host.empty(), "a target has a host", n);
        check(r.value->port >= 1, "a target has a port 1..65535", n);
    }
}

void fuzz_connect(std::string_view text) {
    const std::size_t n = text.size();
    const target_result r = parse_connect_target(text);
    check_shape(r, n);
    if (!r.value) {
        return;
    }
    const target& t = *r.value;
    check(n <= max_target, "CONNECT target within 8 KiB", n);
    check(printable(text), "CONNECT target is visible ASCII", n);
    check(text.find_first_of("/@") == std::string_view::npos, "CONNECT target has no / or @", n);
    check(t.origin_form.empty() && t.authority.empty(), "CONNECT has no URI parts", n);
    check(host_port(t) == text, "CONNECT target writes back to the input", n);

    // The same text as a Host header names the same place, in any case.
    check(host_header_matches(text, t), "a CONNECT target matches itself as Host", n);
    check(host_header_matches(lower(text), t), "Host matching ignores case", n);

    // As an absolute URI it parses to the same host and port. ('?' and '#' are left to the
    // policy's name check for CONNECT, but end the authority in a URI.)
    const target_result u = parse_absolute_uri("http://" + std::string(text) + "/");
    if (n + 8 <= max_target && text.find_first_of("?#") == std::string_view::npos) {
        check(u.value && u.value->host == t.host && u.value->port == t.port,
              "http://<CONNECT target>/ parses to the same place", n);
    }
}

void fuzz_uri(std::string_view text) {
    const std::size_t n = text.size();
    const target_result r = parse_absolute_uri(text);
    check_shape(r, n);
    if (!r.value) {
        check(!text.starts_with('/') || r.error.starts_with("this is a proxy") ||
                  r.error.find("control") != std::string::npos,
              "origin-form gets the proxy hint", n);
        return;
    }
    const target& t = *r.value;
    check(n <= max_target, "URI within 8 KiB", n);
    check(printable(text), "URI is visible ASCII", n);
    check(lower(text.substr(0, 7)) == "http://", "only the http scheme", n);
    check(t.origin_form.starts_with('/'), "origin-form starts with /", n);
    check(t.origin_form.find('#') == std::string::npos, "no fragment", n);
    check(!t.authority.empty(), "a URI has an authority", n);
    check(t.authority.find_first_of("@/?#") == std::string::npos, "authority is host[:port]", n);

    // The URI writes back to the input: scheme, authority as written, then the path, with
    // "/" added before a bare query or for an empty path.
    check(text.substr(7, t.authority.size()) == t.authority, "authority is as written", n);
    const std::string_view rest = text.substr(7 + t.authority.size());
    const std::string expected =
        rest.empty() ? "/" : (rest[0] == '?' ? "/" + std::string(rest) : std::string(rest));
    check(t.origin_form == expected, "origin-form is the rest of the URI", n);
    if (t.authority == t.host || t.authority == "[" + t.host + "]") {
        check(t.port == 80, "no port means 80", n);
    } else {
        check(t.authority == host_port(t), "authority is host:port", n);
    }

    // The authority matches as its own Host header, and so does host:port.
    check(host_header_matches(t.authority, t), "authority matches itself as Host", n);
    check(host_header_matches(lower(t.authority), t), "Host matching ignores case", n);
    check(host_header_matches(host_port(t), t), "host:port matches as Host", n);
    if (t.port != 80) {
        const std::string bare = host_port(t).substr(0, host_port(t).rfind(':'));
        check(!host_header_matches(bare, t), "a Host without port means 80", n);
    }

    // CONNECT to host:port names the same place.
    const target_result c = parse_connect_target(host_port(t));
    check(c.value && c.value->host == t.host && c.value->port == t.port,
          "CONNECT host:port parses to the same place", n);
}

/// The input as a Host header against fixed targets, with the answer spelled out.
void fuzz_host_header(std::string_view text) {
    const std::size_t n = text.size();
    const std::string l = lower(text);

    target name;
    name.host = "Example.com";
    name.port = 80;
    check(host_header_matches(text, name) == (l == "example.com" || l == "example.com:80"),
          "Host oracle for example.com:80", n);

    target v6;
    v6.host = "2001:db8::a";
    v6.port = 8080;
    check(host_header_matches(text, v6) == (l == "[2001:db8::a]:8080"),
          "Host oracle for [2001:db8::a]:8080", n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    fuzz_connect(text);
    fuzz_uri(text);
    fuzz_host_header(text);
    // Also as the target of an absolute URI, so the fuzzer need not find the scheme.
    if (size <= max_target) {
        fuzz_uri("http://" + std::string(text));
    }
    return 0;
}
