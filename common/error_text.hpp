#pragma once
// Error text for people. boost::system::system_error::what() (Boost >= 1.79) ends with
// " [system:98 at /usr/include/boost/asio/...:161:5 in function '...']": Boost's own source
// location, which means nothing to an operator. These give the reason without it.

#include <boost/system/system_error.hpp>

#include <exception>
#include <string>
#include <system_error>

namespace cordon::common {

/// The system's reason alone ("Address already in use") for a Boost or std system_error;
/// what() for a std::system_error that says what it was doing ("SO_REUSEPORT: ...", which
/// has no source location) and for any other exception.
inline std::string reason_of(const std::exception& e) {
    if (const auto* b = dynamic_cast<const boost::system::system_error*>(&e)) {
        return b->code().message();
    }
    return e.what();
}

/// what() without Boost's " [category:N at file:line ...]" suffix: "bind: Address already
/// in use" (the operation and the reason). Any other exception: what() as it is.
inline std::string without_location(const std::exception& e) {
    std::string text = e.what();
    if (const auto* b = dynamic_cast<const boost::system::system_error*>(&e)) {
        const std::string tag = " [" + b->code().to_string();
        if (const auto at = text.rfind(tag); at != std::string::npos) {
            text.resize(at);
        }
    }
    return text;
}

}  // namespace cordon::common
