// Fuzzes the SOCKS5 handshake parsers as the proxy runs them: a greeting, RFC 1929
// credentials when offered, then a request, each on what the one before left. Checks that
// nothing is consumed beyond the input, that every good message's prefixes are need_more
// (a parser never decides on bytes it has not seen), that a bad message answers, and that a
// good request's target text reads back through the CONNECT parser as the same host and port
// (a name can smuggle nothing into the CONNECT path). The input is also judged as the first
// bytes of an ssh rule's tunnel (ssh_ident.hpp). Any violation traps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "config/target.hpp"
#include "proxy/data/socks5.hpp"
#include "proxy/data/ssh_ident.hpp"

namespace {

using namespace cordon;
using namespace cordon::proxy::data;
using namespace cordon::proxy::data::socks5;

void check(bool ok, const char* what, std::size_t size) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s (input %zu bytes)\n", what, size);
        __builtin_trap();
    }
}

template <class Parse>
void check_prefixes(Parse parse, std::span<const std::uint8_t> in, std::size_t consumed) {
    for (std::size_t n = 0; n < consumed; ++n) {
        check(parse(in.first(n)).st == status::need_more, "a good message's prefix is need_more",
              in.size());
    }
}

}  // namespace

/// The same bytes as the first of an ssh rule's tunnel: a match is a whole SSH 2.0 line
/// within 255 bytes, and the verdict never changes once given.
void fuzz_ssh(std::span<const std::uint8_t> in) {
    const ssh_verdict v = check_ssh_ident(in);
    if (v == ssh_verdict::match) {
        const std::string_view s(reinterpret_cast<const char*>(in.data()), in.size());
        const auto lf = s.find('\n');
        check(s.starts_with("SSH-2.0-") && lf != std::string_view::npos && lf < max_ssh_ident,
              "a match is a line of SSH 2.0 within 255 bytes", in.size());
    }
    if (v != ssh_verdict::need_more && !in.empty()) {
        check(check_ssh_ident(in.first(in.size() - 1)) !=
                  (v == ssh_verdict::match ? ssh_verdict::mismatch : ssh_verdict::match),
              "a verdict is never reversed by more bytes", in.size());
    }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::span<const std::uint8_t> in(data, size);
    fuzz_ssh(in);
    const greeting g = parse_greeting(in);
    if (g.st != status::good) {
        check(g.st == status::need_more || !g.error.empty(), "a bad greeting says why", size);
        return 0;
    }
    check(g.consumed >= 3 && g.consumed <= in.size() && g.consumed <= 257, "greeting size", size);
    check_prefixes(parse_greeting, in, g.consumed);
    in = in.subspan(g.consumed);
    if (g.userpass) {
        const credentials c = parse_credentials(in);
        if (c.st != status::good) {
            check(c.user.empty() && c.password.empty(), "no credentials unless good", size);
            return 0;
        }
        check(c.consumed == 3 + c.user.size() + c.password.size() && c.consumed <= in.size(),
              "credentials size", size);
        check(!c.user.empty() && c.user.size() <= 255 && !c.password.empty() &&
                  c.password.size() <= 255,
              "field lengths", size);
        check_prefixes(parse_credentials, in, c.consumed);
        in = in.subspan(c.consumed);
    }
    const request r = parse_request(in);
    if (r.st != status::good) {
        check(r.st == status::need_more || (!r.error.empty() && r.host.empty()),
              "a bad request says why and names nothing", size);
        return 0;
    }
    check(r.consumed <= in.size() && r.consumed <= 262 && r.port != 0, "request size", size);
    check_prefixes(parse_request, in, r.consumed);
    const std::string text = target_text(r);
    const config::target_result t = config::parse_connect_target(text);
    if (t.value) {
        check(t.value->host == r.host && t.value->port == r.port,
              "the CONNECT parser reads the same host and port", size);
    } else {
        // Refused by the CONNECT path (bad_request) is fine: never read as another target.
        check(r.name, "an address target always parses", size);
    }
    return 0;
}
