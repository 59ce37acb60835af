#include "shims/scratch_watch.hpp"

#include <catch2/catch.hpp>

#include <boost/asio/io_context.hpp>

TEST_CASE("scratch watch: a missing directory is refused", "[shim][scratch_watch]") {
    boost::asio::io_context ioc;
    CHECK_FALSE(cordon::shim::start_scratch_watch(ioc, "/nonexistent/cordon-scratch", "/s",
                                                  [](std::string, std::uint64_t) {}));
}
