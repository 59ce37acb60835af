#pragma once
// The upstream's response head and body as forwarding reads them (forward.cpp, and the
// requests inside an inspected tunnel, inspected.cpp).

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string>
#include <string_view>

#include "common/asio.hpp"

namespace cordon::proxy::data {

// A response parser that keeps only what forwarding needs: the status line and the fields
// as "name: value\r\n" lines in a buffer the connection reuses (so no allocation per field
// or per response once it has grown), and the body through a caller's window, like
// http::buffer_body. Framing (Content-Length, chunked, to EOF), limits and the syntax checks
// are Beast's basic_parser's, as with http::response_parser.
class response_reader final : public http::basic_parser<false> {
public:
    explicit response_reader(std::string& head) : head_(head) { head_.clear(); }

    http::buffer_body::value_type body;  ///< where the body goes; data and size advance
    unsigned status() const noexcept { return status_; }
    unsigned version() const noexcept { return version_; }
    /// The status line, CRLF included.
    std::string_view status_line() const noexcept {
        return std::string_view(head_).substr(0, status_len_);
    }
    /// The fields, each "name: value\r\n".
    std::string_view field_lines() const noexcept {
        return std::string_view(head_).substr(status_len_);
    }

private:
    void on_request_impl(http::verb, beast::string_view, beast::string_view, int,
                         error_code& ec) override {
        ec = http::error::bad_method;  // never called for a response parser
    }
    void on_response_impl(int code, beast::string_view reason, int version, error_code&) override {
        status_ = static_cast<unsigned>(code);
        version_ = static_cast<unsigned>(version);
        char digits[16];
        const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, code);
        (void)ec;
        head_.append(version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ");
        head_.append(digits, end);
        head_.push_back(' ');
        head_.append(reason.data(), reason.size());
        head_.append("\r\n");
        status_len_ = head_.size();
    }
    void on_field_impl(http::field, beast::string_view name, beast::string_view value,
                       error_code&) override {
        head_.append(name.data(), name.size());
        head_.append(": ");
        head_.append(value.data(), value.size());
        head_.append("\r\n");
    }
    void on_header_impl(error_code&) override {}
    void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
    std::size_t on_body_impl(beast::string_view s, error_code& ec) override { return take(s, ec); }
    void on_chunk_header_impl(std::uint64_t, beast::string_view, error_code&) override {}
    std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view s, error_code& ec) override {
        return take(s, ec);
    }
    void on_finish_impl(error_code&) override {}

    std::size_t take(beast::string_view s, error_code& ec) {
        if (body.data == nullptr) {
            ec = http::error::need_buffer;
            return 0;
        }
        const std::size_t n = std::min(s.size(), body.size);
        std::memcpy(body.data, s.data(), n);
        body.data = static_cast<char*>(body.data) + n;
        body.size -= n;
        if (n < s.size()) {
            ec = http::error::need_buffer;
        }
        return n;
    }

    std::string& head_;
    std::size_t status_len_ = 0;
    unsigned status_ = 0;
    unsigned version_ = 11;
};

/// Reads a response head from `s` into `rp` (its header limit applies); the bytes after the
/// head stay in `buffer`. The caller bounds the time. What Beast's async_read_header did,
/// without its composed operation.
template <class AsyncReadStream>
awaitable<error_code> read_response_head(AsyncReadStream& s, beast::flat_buffer& buffer,
                                         response_reader& rp) {
    error_code ec;
    for (;;) {
        if (buffer.size() > 0) {
            const std::size_t n = rp.put(buffer.data(), ec);
            buffer.consume(n);
            if (!ec && rp.is_header_done()) {
                break;
            }
            if (ec && ec != http::error::need_more) {
                break;
            }
            ec = {};
        }
        // 16 KiB: a TLS record's most; a connection idle after it holds no more.
        const std::size_t room = std::min<std::size_t>(16 * 1024,
                                                       buffer.max_size() - buffer.size());
        if (room == 0) {
            ec = http::error::buffer_overflow;
            break;
        }
        auto [rec, rn] = co_await s.async_read_some(buffer.prepare(room), use_nothrow);
        if (rec) {
            ec = rec == net::error::eof && rp.got_some() ? http::error::partial_message
                 : rec == net::error::eof                ? http::error::end_of_stream
                                                         : rec;
            break;
        }
        buffer.commit(rn);
    }
    co_return ec;
}

}  // namespace cordon::proxy::data
