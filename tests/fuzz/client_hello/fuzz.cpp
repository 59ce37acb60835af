// Fuzzes parse_client_hello on the raw bytes, then checks that the result is well formed
// and that verdicts are final: every prefix gives need_more or the same result, and bytes
// appended after a decided input change nothing. Any violation traps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string_view>
#include <vector>

#include "proxy/data/client_hello.hpp"

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::data;

void check(bool ok, const char* what, std::size_t size) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s (input %zu bytes)\n", what, size);
        __builtin_trap();
    }
}

bool same(const hello_result& a, const hello_result& b) {
    return a.status == b.status && a.sni == b.sni && a.error == b.error && a.consumed == b.consumed;
}

void check_shape(const hello_result& r, std::span<const std::uint8_t> in) {
    const std::size_t n = in.size();
    switch (r.status) {
        case hello_status::need_more:
            check(r.sni.empty() && r.error.empty() && r.consumed == 0, "need_more carries nothing",
                  n);
            break;
        case hello_status::ok: {
            check(!r.sni.empty() && r.sni.size() <= 255, "ok has a 1..255 byte sni", n);
            for (const char c : r.sni) {
                check(c >= 0x21 && c <= 0x7e, "sni is visible ASCII", n);
            }
            check(r.error.empty(), "ok has no error", n);
            check(r.consumed >= 5 + 4 + 41 && r.consumed <= n, "ok consumed in range", n);
            check(r.consumed <= max_client_hello_bytes, "ok consumed within the limit", n);
            const std::string_view text(reinterpret_cast<const char*>(in.data()), r.consumed);
            check(text.find(r.sni) != std::string_view::npos, "sni is in the consumed bytes", n);
            break;
        }
        case hello_status::no_sni:
            check(r.sni.empty() && r.error.empty(), "no_sni has no sni and no error", n);
            check(r.consumed >= 5 + 4 + 41 && r.consumed <= n, "no_sni consumed in range", n);
            check(r.consumed <= max_client_hello_bytes, "no_sni consumed within the limit", n);
            break;
        case hello_status::not_tls:
        case hello_status::bad:
            check(!r.error.empty() && r.error.size() < 256, "an error says why, briefly", n);
            check(r.sni.empty() && r.consumed == 0, "an error carries no sni or consumed", n);
            break;
        default: check(false, "status is one of the five", n);
    }
    if (r.status == hello_status::not_tls) {
        check(n > 0 && in[0] != 22, "not_tls only for a first byte other than 22", n);
    }
}

/// A prefix gives need_more or exactly the whole input's result.
void check_prefix(std::span<const std::uint8_t> in, std::size_t len, const hello_result& whole) {
    const hello_result r = parse_client_hello(in.first(len));
    check_shape(r, in.first(len));
    check(r.status == hello_status::need_more || same(r, whole),
          "a decided prefix decides the whole input", in.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::uint8_t> in(data, size);
    const hello_result whole = parse_client_hello(in);
    check_shape(whole, in);
    if (size == 0) {
        return 0;
    }

    // Prefixes: all of them for small inputs, a spread plus the edges for large ones.
    if (size <= 512) {
        for (std::size_t len = 0; len < size; ++len) {
            check_prefix(in, len, whole);
        }
    } else {
        for (std::size_t i = 0; i < 64; ++i) {
            check_prefix(in, size * i / 64, whole);
        }
        check_prefix(in, size - 1, whole);
    }
    if (whole.status == hello_status::ok || whole.status == hello_status::no_sni) {
        check_prefix(in, whole.consumed, whole);
        check(parse_client_hello(in.first(whole.consumed)).status == whole.status,
              "the consumed bytes alone give the same result", size);
        check(parse_client_hello(in.first(whole.consumed - 1)).status == hello_status::need_more,
              "one byte short of consumed is need_more", size);
    }

    // Appending bytes never changes a verdict.
    if (whole.status != hello_status::need_more && size <= max_client_hello_bytes) {
        std::vector<std::uint8_t> longer(in.begin(), in.end());
        longer.insert(longer.end(), {0x16, 0x03, 0x01, 0x00, 0x01, 0x00});
        check(same(parse_client_hello(longer), whole), "appended bytes change nothing", size);
    }
    return 0;
}
