// Fuzzes the head rewriting of the HTTP forward path (proxy/data/http_head.hpp) on heads Beast's
// parser accepted, as the proxy uses it: the input is parsed as a request head and as a
// response head; for each accepted one the fields are filtered both from Beast's parsed
// fields and from "name: value" lines (what the response path keeps), and checked: both
// give the same bytes; no hop-by-hop field and no field a Connection token names crosses
// (Content-Length and Transfer-Encoding always do); every kept field is an input field, in
// order; and the rewritten head parses again with the same framing. Any violation traps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/http.hpp>

#include "proxy/data/http_head.hpp"

namespace {

namespace http = boost::beast::http;
using namespace cordon::proxy;
using namespace cordon::proxy::data;
using field_list = std::vector<std::pair<std::string, std::string>>;

void check(bool ok, const char* what, std::size_t size) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s (input %zu bytes)\n", what, size);
        __builtin_trap();
    }
}

template <class Fields>
field_list list_of(const Fields& f) {
    field_list v;
    for (const auto& e : f) {
        v.emplace_back(std::string(e.name_string()), std::string(e.value()));
    }
    return v;
}

bool named_by_connection(const field_list& in, std::string_view name) {
    bool found = false;
    for (const auto& [n, v] : in) {
        if (ascii_iequals(n, "connection") || ascii_iequals(n, "proxy-connection")) {
            for_each_token(v, [&](std::string_view t) { found = found || ascii_iequals(t, name); });
        }
    }
    return found;
}

template <bool isRequest>
void fuzz_head(std::string_view text, const field_filter& f) {
    http::parser<isRequest, http::empty_body> p;
    p.header_limit(16 * 1024);
    p.eager(false);
    boost::system::error_code ec;
    p.put(boost::asio::buffer(text.data(), text.size()), ec);
    if (ec || !p.is_header_done()) {
        return;
    }
    const field_list in = list_of(p.get().base());

    std::string lines;  // as the response path keeps them
    for (const auto& [n, v] : in) {
        lines += n + ": " + v + "\r\n";
    }
    field_list back;
    for_each_field(lines, [&](std::string_view n, std::string_view v) { back.emplace_back(n, v); });
    check(back == in, "for_each_field gives back the parsed fields", text.size());

    std::string from_fields;
    append_end_to_end_fields(
        from_fields,
        [&](auto&& fn) {
            for (const auto& [n, v] : in) {
                fn(std::string_view(n), std::string_view(v));
            }
        },
        f);
    std::string from_lines;
    append_end_to_end_lines(from_lines, lines, f);
    check(from_fields == from_lines, "fields and lines filter alike", text.size());

    field_list out;
    for_each_field(from_lines,
                   [&](std::string_view n, std::string_view v) { out.emplace_back(n, v); });
    std::size_t at = 0;
    for (const auto& [n, v] : out) {
        const bool upgrade = f.keep_upgrade && ascii_iequals(n, "upgrade");
        check(upgrade || !hop_by_hop_name(n), "no hop-by-hop field crosses", text.size());
        check(!(f.drop_host && ascii_iequals(n, "host")), "Host dropped", text.size());
        check(!(f.drop_expect && ascii_iequals(n, "expect")), "Expect dropped", text.size());
        check(upgrade || ascii_iequals(n, "content-length") ||
                  ascii_iequals(n, "transfer-encoding") || !named_by_connection(in, n),
              "no field a Connection token names crosses", text.size());
        while (at < in.size() && in[at] != std::pair<std::string, std::string>(n, v)) {
            ++at;
        }
        check(at < in.size(), "kept fields are input fields, in order", text.size());
        ++at;
    }
    std::size_t framing_in = 0;
    for (const auto& [n, v] : in) {
        framing_in += ascii_iequals(n, "content-length") || ascii_iequals(n, "transfer-encoding");
    }
    std::size_t framing_out = 0;
    for (const auto& [n, v] : out) {
        framing_out += ascii_iequals(n, "content-length") || ascii_iequals(n, "transfer-encoding");
    }
    check(framing_in == framing_out, "Content-Length and Transfer-Encoding all cross", text.size());

    // The rewritten head is a head again, framed as the original.
    const std::string head = std::string(isRequest ? "GET / HTTP/1.1\r\n" : "HTTP/1.1 200 OK\r\n") +
                             from_lines + "\r\n";
    http::parser<isRequest, http::empty_body> again;
    again.header_limit(64 * 1024);
    again.eager(false);
    boost::system::error_code ec2;
    again.put(boost::asio::buffer(head.data(), head.size()), ec2);
    if (!ec2 && again.is_header_done()) {
        check(again.chunked() == p.chunked(), "same chunked framing", text.size());
        check(again.content_length() == p.content_length(), "same Content-Length", text.size());
    }
}

// head_prefix_refusal (the early "not HTTP" check of read_head) on any bytes: fed in two
// pieces it says what it says fed whole, and it never refuses a request head Beast's parser
// accepts (methods over 64 characters aside): cordon must not turn away valid HTTP.
void fuzz_prefix(std::string_view text) {
    const std::string_view whole = head_prefix_refusal(text, 0);
    const std::size_t cut = text.empty() ? 0 : text.size() / 2;
    std::string_view split = head_prefix_refusal(text.substr(0, cut), 0);
    if (split.empty()) {
        split = head_prefix_refusal(text, cut);
    }
    check(split.empty() == whole.empty(), "split and whole agree", text.size());
    const std::size_t end = text.find("\r\n\r\n");
    if (end == std::string_view::npos) {
        return;
    }
    const std::string_view head = text.substr(0, end + 4);
    http::request_parser<http::empty_body> p;
    p.header_limit(64 * 1024);
    p.eager(false);
    boost::system::error_code ec;
    const std::size_t used = p.put(boost::asio::buffer(head.data(), head.size()), ec);
    if (!ec && p.is_header_done() && used == head.size() && p.get().method_string().size() <= 64) {
        check(head_prefix_refusal(head, 0).empty(), "a head Beast accepts is never refused",
              text.size());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    field_filter request;
    request.drop_host = true;
    request.drop_expect = size % 2 == 0;
    fuzz_head<true>(text, request);
    request.keep_upgrade = true;
    fuzz_head<true>(text, request);
    fuzz_head<false>(text, field_filter{});
    field_filter upgrade;
    upgrade.keep_upgrade = true;
    fuzz_head<false>(text, upgrade);
    fuzz_prefix(text);
    return 0;
}
