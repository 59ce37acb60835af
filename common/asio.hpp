#pragma once
// The Asio/Beast vocabulary of the I/O rooms (net::, beast::, http::, tcp, awaitable<T>).
// Heavy: include it only from .cpp files and the few headers that declare coroutines; the
// pure rooms (common's other files, config, learn) never include it (tests/layering).
// The names live in namespace cordon itself, so every room's namespace sees them.

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace cordon {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;
template <class T>
using awaitable = net::awaitable<T>;

/// Completion token for coroutines that check every error code themselves.
inline constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

}  // namespace cordon
