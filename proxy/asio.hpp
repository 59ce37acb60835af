#pragma once
// The Asio/Beast names the daemon's .cpp files use. Heavy: include only from proxy/*.cpp.

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace cordon::proxy {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;
template <class T>
using awaitable = net::awaitable<T>;

/// Completion token for coroutines that check every error code themselves.
inline constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

}  // namespace cordon::proxy
