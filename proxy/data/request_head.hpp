#pragma once
// A request head off the client's stream: read raw up to its blank line (so its exact bytes
// can be judged: obsolete line folding is refused, which parsers otherwise repair), then the
// smuggling and framing checks on the parsed head. Templated on the stream so tests drive it
// over beast::test::stream.

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

#include "common/asio.hpp"
#include "config/policy.hpp"
#include "proxy/data/http_head.hpp"

namespace cordon::proxy::data {

struct read_head_result {
    std::size_t head_len = 0;
    bool too_large = false;
    std::string_view refusal;  ///< not HTTP (head_prefix_refusal): answered at once
    error_code error;
};

/// Reads from `s` until the blank line that ends a request head, within `limit` bytes.
/// Bytes after the head stay in `buffer`. The caller bounds the time (slowloris).
template <class AsyncReadStream>
awaitable<read_head_result> read_request_head(AsyncReadStream& s, beast::flat_buffer& buffer,
                                              std::size_t limit) {
    read_head_result r;
    std::size_t searched = 0;
    std::size_t checked = 0;
    for (;;) {
        const std::string_view have(static_cast<const char*>(buffer.data().data()), buffer.size());
        const auto end = have.find("\r\n\r\n", searched);
        // Only the head's own bytes: a body (or a ClientHello after CONNECT) may follow.
        const std::size_t head_end = end != std::string_view::npos ? end + 4 : have.size();
        r.refusal = head_prefix_refusal(have.substr(0, head_end), checked);
        checked = head_end;
        if (!r.refusal.empty()) {
            break;
        }
        if (end != std::string_view::npos) {
            r.head_len = end + 4;
            r.too_large = r.head_len > limit;
            break;
        }
        if (have.size() >= limit) {
            r.too_large = true;
            break;
        }
        searched = have.size() >= 3 ? have.size() - 3 : 0;
        auto [ec, n] = co_await s.async_read_some(
            buffer.prepare(std::min<std::size_t>(limit - have.size() + 4, 16 * 1024)), use_nothrow);
        if (ec) {
            r.error = ec;
            break;
        }
        buffer.commit(n);
    }
    co_return r;
}

/// Smuggling and framing checks on a parsed request head (`raw_head`: its bytes). Returns
/// why the request is refused (answered 400, then closed), or "" when it may proceed:
/// obsolete line folding, then framing_refusal (duplicate Content-Length, Transfer-Encoding
/// with Content-Length, a Transfer-Encoding other than chunked last, Host not once).
std::string_view request_refusal(const http::request_header<>& h, std::string_view raw_head);

/// True when the request asks to switch protocols (`Upgrade` and `Connection: upgrade`).
bool wants_upgrade(const http::fields& f);

/// Where `rule` restricts methods or paths (`methods`, `http`), what an origin could read
/// as a request the rule did not decide: a body on GET, HEAD, OPTIONS or TRACE (a server
/// that ignores it would read it as the next request on its connection: a smuggled
/// request), and an upgrade to anything but WebSocket (h2c and others carry requests of
/// their own). Returns why the request is refused (answered 400), or "".
std::string_view restricted_refusal(const config::egress_rule* rule, http::verb method,
                                    bool has_body, const http::fields& f);

/// The path an http.request record shows: `path` (the normal form) and, when
/// `origin_form` has a query, its parameter names with every non-empty value "REDACTED"
/// ("/v1/x?key=REDACTED&flag"); at most about 2 KiB.
std::string inspected_path_for_audit(std::string_view path, std::string_view origin_form);

}  // namespace cordon::proxy::data
