// bounded_queue: bounded, FIFO, never blocks, loses nothing under concurrent producers.
#include "common/bounded_queue.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

namespace {

using cordon::common::bounded_queue;

TEST_CASE("bounded_queue: FIFO, full and empty", "[bounded_queue]") {
    bounded_queue<std::string> q(3);
    CHECK(q.capacity() == 4);
    std::string out;
    CHECK_FALSE(q.try_pop(out));
    for (int i = 0; i < 4; ++i) {
        std::string v = "v" + std::to_string(i);
        CHECK(q.try_push(v));
    }
    std::string extra = "extra";
    CHECK_FALSE(q.try_push(extra));
    CHECK(extra == "extra");  // untouched when refused
    for (int i = 0; i < 4; ++i) {
        REQUIRE(q.try_pop(out));
        CHECK(out == "v" + std::to_string(i));
    }
    CHECK_FALSE(q.try_pop(out));
    CHECK(q.try_push(extra));  // wraps around
    CHECK(q.try_pop(out));
    CHECK(out == "extra");
}

TEST_CASE("bounded_queue: concurrent producers, one consumer", "[bounded_queue]") {
    constexpr int producers = 4;
    constexpr int per_producer = 20'000;
    bounded_queue<int> q(1024);
    std::atomic<int> refused{0};
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p) {
        threads.emplace_back([&, p] {
            for (int i = 0; i < per_producer; ++i) {
                int v = p * per_producer + i;
                if (!q.try_push(v)) {
                    ++refused;
                }
            }
        });
    }
    std::vector<int> last(producers, -1);
    long popped = 0;
    bool ordered = true;
    auto drain = [&] {
        int v = 0;
        while (q.try_pop(v)) {
            const int p = v / per_producer;
            ordered = ordered && v > last[p];  // each producer's values in its order
            last[p] = v;
            ++popped;
        }
    };
    for (int spins = 0; spins < 10'000'000 && popped + refused.load() < producers * per_producer;
         ++spins) {
        drain();
    }
    for (auto& t : threads) {
        t.join();
    }
    drain();
    CHECK(ordered);
    CHECK(popped + refused.load() == producers * per_producer);
}

}  // namespace
