#pragma once
// The parent HTTP proxy (`upstream_proxy`, docs/proxy.md "Parent proxy"): a connector that
// reaches an address cordon already decided and checked through the parent, with CONNECT to
// that address (never the name: the parent's resolver may see other addresses than the ones
// cordon checked). Addresses and names in `no_proxy` are dialled directly. The parent's
// answer is read up to its blank line and never past it: bytes behind it are the target's.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/asio.hpp"
#include "config/policy.hpp"
#include "proxy/data/dialer.hpp"

namespace cordon::proxy::data {

/// Why a parent did not give a tunnel.
enum class parent_error {
    refused = 1,    ///< it answered something other than 2xx (or 407)
    auth_required,  ///< 407: no or wrong credentials (upstream_proxy.credentials_file)
    bad_answer,     ///< not an HTTP answer, or one over 8 KiB
    closed,         ///< it closed before answering
};
const boost::system::error_category& parent_category() noexcept;
inline error_code make_error(parent_error e) noexcept {
    return {static_cast<int>(e), parent_category()};
}

/// Pure: the CONNECT cordon sends for `to` ("203.0.113.5:443", "[2001:db8::1]:22"), with
/// `Proxy-Authorization: Basic` when `credentials` ("user:password") is not empty.
std::string parent_connect_request(const std::string& to, std::string_view credentials);

/// Pure: how many bytes of the parent's answer may be read next without reading past the
/// blank line that ends its head (0: the head is whole).
std::size_t parent_head_need(std::string_view head) noexcept;

/// Pure: the status code of a whole answer head, or 0 when it is not "HTTP/1.x NNN ...".
int parent_status(std::string_view head) noexcept;

/// Connects through the parent (or directly, for no_proxy). One dial: built per request.
class parent_connector final : public connector {
public:
    parent_connector(beast::tcp_stream& s, resolver& r, const config::upstream_proxy_spec& spec,
                     std::string_view target_name)
        : s_(s), direct_(s), resolver_(r), spec_(spec), name_(target_name) {}

    awaitable<error_code> connect(const tcp::endpoint& to,
                                  std::chrono::milliseconds timeout) override;
    std::string detail() const override;

private:
    awaitable<error_code> handshake(const tcp::endpoint& to,
                                    std::chrono::steady_clock::time_point deadline);

    beast::tcp_stream& s_;
    stream_connector direct_;
    resolver& resolver_;
    const config::upstream_proxy_spec& spec_;
    std::string_view name_;
    std::optional<std::vector<tcp::endpoint>> parents_;  ///< the parent's addresses, once
    int status_ = 0;                                     ///< the parent's last answer
    bool unresolved_ = false;                            ///< the parent's name did not resolve
    bool used_ = false;  ///< the last attempt went through the parent
};

}  // namespace cordon::proxy::data
