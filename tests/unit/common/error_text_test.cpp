#include "common/error_text.hpp"

#include <catch2/catch.hpp>

#include <boost/system/system_error.hpp>

#include <stdexcept>
#include <system_error>

using namespace cordon::common;

TEST_CASE("error text: no Boost source location reaches a person", "[error_text]") {
    // As Asio throws it: an error_code with the location of the throw.
    static constexpr boost::source_location here = BOOST_CURRENT_LOCATION;
    const boost::system::error_code ec(EADDRINUSE, boost::system::system_category(), &here);
    const boost::system::system_error boost_error(ec, "bind");
    REQUIRE(std::string(boost_error.what()).find(" at ") != std::string::npos);  // the leak
    CHECK(reason_of(boost_error) == "Address already in use");
    CHECK(without_location(boost_error) == "bind: Address already in use");

    // Ours, with what it was doing and no location: kept as they are.
    const std::system_error std_error(EPERM, std::generic_category(), "SO_REUSEPORT");
    CHECK(reason_of(std_error) == std_error.what());
    CHECK(without_location(std_error) == std_error.what());
    const std::runtime_error plain("no port free");
    CHECK(reason_of(plain) == "no port free");
    CHECK(without_location(plain) == "no port free");
}
