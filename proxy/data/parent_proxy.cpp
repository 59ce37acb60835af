// The parent HTTP proxy connector (parent_proxy.hpp).

#include "proxy/data/parent_proxy.hpp"

#include <algorithm>

#include "config/ip.hpp"
#include "dns/asio_address.hpp"
#include "proxy/data/basic_auth.hpp"

namespace cordon::proxy::data {
namespace {

constexpr std::size_t max_parent_head = 8 * 1024;
// "HTTP/1.1 200 \r\n\r\n": no answer head is shorter.
constexpr std::size_t min_parent_head = 17;

// Boost's error_category has a protected non-virtual destructor by design (categories are
// never deleted through it); -Wnon-virtual-dtor cannot tell.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"
class parent_category_impl final : public boost::system::error_category {
public:
    const char* name() const noexcept override { return "cordon.parent"; }
    std::string message(int ev) const override {
        switch (static_cast<parent_error>(ev)) {
            case parent_error::refused: return "the upstream proxy refused the CONNECT";
            case parent_error::auth_required:
                return "the upstream proxy wants credentials (407): check "
                       "upstream_proxy.credentials_file";
            case parent_error::bad_answer: return "the upstream proxy's answer is not HTTP";
            case parent_error::closed: return "the upstream proxy closed without an answer";
        }
        return "upstream proxy error";
    }
};
#pragma GCC diagnostic pop

std::string endpoint_text(const tcp::endpoint& ep) {
    const auto a = ep.address();
    return a.is_v6() ? "[" + a.to_string() + "]:" + std::to_string(ep.port())
                     : a.to_string() + ":" + std::to_string(ep.port());
}

}  // namespace

const boost::system::error_category& parent_category() noexcept {
    static const parent_category_impl c;
    return c;
}

std::string parent_connect_request(const std::string& to, std::string_view credentials) {
    std::string out = "CONNECT " + to + " HTTP/1.1\r\nHost: " + to + "\r\n";
    if (!credentials.empty()) {
        out += "Proxy-Authorization: Basic " + base64_encode(credentials) + "\r\n";
    }
    out += "\r\n";
    return out;
}

std::size_t parent_head_need(std::string_view head) noexcept {
    if (head.ends_with("\r\n\r\n")) {
        return 0;
    }
    // The blank line can end no sooner than this many more bytes.
    std::size_t need = 4;
    if (head.ends_with("\r\n\r")) {
        need = 1;
    } else if (head.ends_with("\r\n")) {
        need = 2;
    } else if (head.ends_with("\r")) {
        need = 3;
    }
    if (head.size() < min_parent_head) {
        need = std::max(need, min_parent_head - head.size());
    }
    return need;
}

int parent_status(std::string_view head) noexcept {
    if (head.size() < 12 || !head.starts_with("HTTP/1.") || (head[7] != '0' && head[7] != '1') ||
        head[8] != ' ') {
        return 0;
    }
    int code = 0;
    for (std::size_t i = 9; i < 12; ++i) {
        if (head[i] < '0' || head[i] > '9') {
            return 0;
        }
        code = code * 10 + (head[i] - '0');
    }
    if (head.size() > 12 && head[12] != ' ' && head[12] != '\r') {
        return 0;
    }
    return code >= 100 ? code : 0;
}

awaitable<error_code> parent_connector::connect(const tcp::endpoint& to,
                                                std::chrono::milliseconds timeout) {
    used_ = false;
    if (spec_.direct(name_, dns::to_ip(to.address()))) {
        co_return co_await direct_.connect(to, timeout);  // no_proxy
    }
    used_ = true;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (!parents_) {
        parents_.emplace();
        const config::literal lit = config::parse_literal(spec_.host);
        if (lit.kind == config::literal_kind::ipv4 || lit.kind == config::literal_kind::ipv6) {
            parents_->emplace_back(dns::to_asio(lit.address), spec_.port);
        } else {
            const std::string name = spec_.host;  // named: GCC PR 100611
            const dns::resolve_result found = co_await resolver_.resolve(name);
            for (const auto& a : found.addresses) {
                parents_->emplace_back(dns::to_asio(a), spec_.port);
            }
            unresolved_ = parents_->empty();
        }
    }
    error_code last = net::error::host_not_found;
    for (const auto& p : *parents_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            co_return beast::error::timeout;
        }
        const error_code ec = co_await direct_.connect(p, left);
        if (ec) {
            last = ec;
            continue;
        }
        // Reached the parent: its answer is final (another parent address would be asked
        // the same question).
        co_return co_await handshake(to, deadline);
    }
    co_return last;
}

awaitable<error_code> parent_connector::handshake(const tcp::endpoint& to,
                                                  std::chrono::steady_clock::time_point deadline) {
    status_ = 0;
    const std::string req = parent_connect_request(endpoint_text(to), spec_.credentials);
    s_.expires_at(deadline);
    auto [wec, wn] = co_await net::async_write(s_, net::buffer(req), use_nothrow);
    (void)wn;
    if (wec) {
        s_.expires_never();
        co_return wec;
    }
    // Read exactly the answer's head: never a byte of the target's behind it.
    std::string head;
    for (std::size_t need = parent_head_need(head); need > 0; need = parent_head_need(head)) {
        if (head.size() + need > max_parent_head) {
            s_.expires_never();
            co_return make_error(parent_error::bad_answer);
        }
        char chunk[min_parent_head];
        auto [ec, n] = co_await s_.async_read_some(net::buffer(chunk, need), use_nothrow);
        if (ec) {
            s_.expires_never();
            co_return ec == net::error::eof ? make_error(parent_error::closed) : ec;
        }
        head.append(chunk, n);
    }
    s_.expires_never();
    status_ = parent_status(head);
    if (status_ == 0) {
        co_return make_error(parent_error::bad_answer);
    }
    if (status_ == 407) {
        co_return make_error(parent_error::auth_required);
    }
    if (status_ < 200 || status_ > 299) {
        co_return make_error(parent_error::refused);
    }
    co_return error_code{};
}

std::string parent_connector::detail() const {
    if (!used_) {
        return {};
    }
    std::string out = " (through the upstream proxy " + spec_.display();
    if (unresolved_) {
        out += ", whose name did not resolve";
    } else if (status_ != 0) {
        out += ", which answered " + std::to_string(status_);
    }
    return out + ")";
}

}  // namespace cordon::proxy::data
