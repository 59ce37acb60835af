// Fuzzes the credential broker's checks on hostile request bytes (proxy/data/credentials.hpp).
// The input is split at the first two '\n' into a target, the header field lines ('|' stands
// for CRLF) and a body. A fixed secret and a fixed session placeholder are used. Checked:
// judge_head never lets a head through that holds the secret; when it injects, the
// placeholder is exactly the credentialed field's and splice_credential leaves the secret in
// that one field and no placeholder anywhere; the body scanner finds the secret and the
// placeholder prefix however the body is cut in two; the replacer leaves no secret and
// changes nothing else. Any violation traps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/data/credentials.hpp"

namespace {

using namespace cordon::proxy::data;
using cordon::config::deny_reason;

void check(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s\n", what);
        __builtin_trap();
    }
}

const std::string secret = "sk-fuzz-SECRET-0123456789";
const std::string mine = "cordon-ph-0123456789abcdef0123456789abcdef01234567";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size > 16 * 1024) {
        return 0;
    }
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const std::size_t a = in.find('\n');
    const std::size_t b = a == std::string_view::npos ? a : in.find('\n', a + 1);
    const std::string_view target = in.substr(0, a);
    std::string fields(
        a == std::string_view::npos
            ? std::string_view()
            : in.substr(a + 1, b == std::string_view::npos ? std::string_view::npos : b - a - 1));
    // '|' -> "\r\n": field lines as a parser would have accepted them.
    std::string crlf;
    for (const char c : fields) {
        if (c == '|') {
            crlf += "\r\n";
        } else {
            crlf.push_back(c);
        }
    }
    const std::string_view body = b == std::string_view::npos ? std::string_view()
                                                              : in.substr(b + 1);

    const cordon::config::credential_spec cred{"s", "Authorization", "Bearer ", ""};
    const std::vector<session_placeholder> placeholders{{"s", mine}};
    const std::vector<secret_value> secrets{{"s", secret}};
    const head_verdict v = judge_head(target, crlf, &cred, placeholders, secrets);
    const bool has_secret = target.find(secret) != std::string_view::npos ||
                            crlf.find(secret) != std::string::npos;
    check(!(has_secret && v.reason == deny_reason::none), "a head holding the secret passed");
    if (v.reason == deny_reason::none) {
        check(v.placeholder == mine, "injected another placeholder");
        std::string out = "GET " + std::string(target) + " HTTP/1.1\r\n" + crlf + "\r\n";
        if (splice_credential(out, &cred, v, secrets) == deny_reason::none) {
            const std::size_t at = out.find(secret);
            check(at != std::string::npos, "spliced without the secret");
            check(out.find(secret, at + 1) == std::string::npos, "the secret twice");
            check(out.find("cordon-ph-") == std::string::npos, "a placeholder left");
            const std::size_t line = out.rfind("\r\n", at);
            check(line != std::string::npos, "the secret in the request line");
        }
    }

    const bool body_secret = body.find(secret) != std::string_view::npos;
    const bool body_ph = body.find("cordon-ph-") != std::string_view::npos;
    const std::size_t cut = body.empty() ? 0 : data[0] % (body.size() + 1);
    stream_scanner s(secrets);
    deny_reason r = s.feed(body.substr(0, cut));
    const deny_reason r2 = s.feed(body.substr(cut));
    r = r == deny_reason::secret_leak || r2 == deny_reason::secret_leak ? deny_reason::secret_leak
        : r != deny_reason::none                                        ? r
                                                                        : r2;
    check(!body_secret || r == deny_reason::secret_leak, "a secret in the body missed");
    check(!body_ph || r != deny_reason::none, "a placeholder in the body missed");
    check(body_secret || body_ph || r == deny_reason::none, "a clean body refused");

    stream_replacer rep(secret, mine);
    std::string out;
    rep.feed(body.substr(0, cut), out);
    rep.feed(body.substr(cut), out);
    rep.finish(out);
    std::string expect(body);
    replace_all(expect, secret, mine);
    check(out == expect, "the replacer differs from replace_all on the whole body");
    return 0;
}
