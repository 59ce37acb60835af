// cordon run's lifelines (proxy/control/lifelines.hpp): the grace after the last lifeline
// goes, a follower coming back in time, and shutdown leaving no timer behind its io_context.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/asio.hpp"
#include "proxy/control/lifelines.hpp"

using cordon::proxy::control::lifelines;
using namespace std::chrono_literals;

TEST_CASE("lifelines: the session is lost a grace after its last lifeline goes") {
    boost::asio::io_context ioc(1);
    std::vector<std::string> lost;
    lifelines ll(ioc.get_executor(), [&](const std::string& s) { lost.push_back(s); });
    {
        auto a = ll.open("s1", 20ms);
        auto b = ll.open("s1", 20ms);
        { auto gone = std::move(a); }  // one of two: no grace yet
        ioc.run_for(60ms);
        CHECK(lost.empty());
    }
    CHECK(ll.size() == 1);  // in its grace
    ioc.restart();
    ioc.run_for(200ms);
    CHECK(lost == std::vector<std::string>{"s1"});
    CHECK(ll.size() == 0);
}

TEST_CASE("lifelines: a follower back within the grace keeps the session") {
    boost::asio::io_context ioc(1);
    std::vector<std::string> lost;
    lifelines ll(ioc.get_executor(), [&](const std::string& s) { lost.push_back(s); });
    { auto a = ll.open("s1", 100ms); }
    ioc.run_for(20ms);
    auto back = ll.open("s1", 100ms);
    ioc.restart();
    ioc.run_for(250ms);
    CHECK(lost.empty());
    CHECK(ll.size() == 1);
}

TEST_CASE("lifelines: after stop no grace timer outlives the io_context") {
    // The daemon's order at exit: the control loop stops, stop(), then the io_context goes
    // (destroying the suspended coroutines that still hold lifelines), and only then the
    // runtime that owns the lifelines. A timer left behind would be destroyed against a
    // freed io_context (ASan: heap-use-after-free).
    auto ioc = std::make_unique<boost::asio::io_context>(1);
    std::vector<std::string> lost;
    auto ll = std::make_unique<lifelines>(ioc->get_executor(),
                                          [&](const std::string& s) { lost.push_back(s); });
    auto held = std::make_unique<lifelines::hold>(ll->open("s1", 10s));
    { auto released = ll->open("s2", 10s); }  // s2 in its grace: a timer is waiting
    ll->stop();
    held.reset();  // released after stop: starts no timer
    ioc.reset();
    ll.reset();
    CHECK(lost.empty());
}
