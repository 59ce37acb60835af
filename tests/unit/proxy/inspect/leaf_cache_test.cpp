// Tests of the leaf cache (proxy/inspect/leaf_cache.hpp): hits, one mint per name however
// many ask at once, LRU eviction at capacity, re-minting near expiry, failures not cached.
#include "proxy/inspect/leaf_cache.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace cordon::proxy::inspect;
using namespace std::chrono_literals;

std::shared_ptr<const authority> test_ca(std::chrono::hours life = std::chrono::hours(24)) {
    std::string error;
    const auto pem = make_ca("cache test CA", life, error);
    REQUIRE(pem);
    std::shared_ptr<const authority> a = authority::load(pem->cert, pem->key, error);
    REQUIRE(a);
    return a;
}

}  // namespace

TEST_CASE("leaf cache: a name is minted once, then served from the cache", "[inspect]") {
    leaf_cache cache(test_ca(), 8, std::chrono::hours(1));
    std::string error;
    const auto a = cache.get("api.example.com", error);
    REQUIRE(a);
    const auto b = cache.get("api.example.com", error);
    CHECK(a == b);  // the same leaf, not a new one
    const auto c = cache.get("other.example.com", error);
    REQUIRE(c);
    CHECK(c != a);
    const auto s = cache.counters();
    CHECK(s.mints == 2);
    CHECK(s.hits == 1);
    CHECK(s.size == 2);
}

TEST_CASE("leaf cache: many threads asking for one name mint it once", "[inspect]") {
    leaf_cache cache(test_ca(), 64, std::chrono::hours(1));
    std::vector<std::thread> threads;
    std::vector<std::shared_ptr<const leaf>> got(16);
    std::atomic<int> go{0};
    for (std::size_t i = 0; i < got.size(); ++i) {
        threads.emplace_back([&, i] {
            while (go.load() == 0) {
                std::this_thread::yield();
            }
            std::string error;
            // Half ask for the shared name, half for names of their own.
            got[i] = cache.get(i % 2 == 0 ? std::string("shared.example")
                                          : "own" + std::to_string(i) + ".example",
                               error);
        });
    }
    go = 1;
    for (auto& t : threads) {
        t.join();
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
        REQUIRE(got[i]);
        if (i % 2 == 0) {
            CHECK(got[i] == got[0]);
        }
    }
    const auto s = cache.counters();
    CHECK(s.mints == 1 + got.size() / 2);  // the shared name once, each own name once
    CHECK(s.failures == 0);
}

TEST_CASE("leaf cache: the least recently used name goes at capacity", "[inspect]") {
    leaf_cache cache(test_ca(), 2, std::chrono::hours(1));
    std::string error;
    const auto a = cache.get("a.example", error);
    cache.get("b.example", error);
    cache.get("a.example", error);  // a is now the most recent
    cache.get("c.example", error);  // b goes
    CHECK(cache.counters().evictions == 1);
    CHECK(cache.counters().size == 2);
    CHECK(cache.get("a.example", error) == a);  // still cached
    const auto mints = cache.counters().mints;
    cache.get("b.example", error);  // minted again
    CHECK(cache.counters().mints == mints + 1);
}

TEST_CASE("leaf cache: a leaf near its end is minted again", "[inspect]") {
    // A CA that ends in 2 h caps every leaf at 2 h, below a tenth of a 24 h ttl: never fresh.
    leaf_cache cache(test_ca(std::chrono::hours(2)), 4, std::chrono::hours(24));
    std::string error;
    const auto a = cache.get("x.example", error);
    REQUIRE(a);
    const auto b = cache.get("x.example", error);
    REQUIRE(b);
    CHECK(a != b);
    CHECK(cache.counters().mints == 2);
    CHECK(cache.counters().size == 1);
}

TEST_CASE("leaf cache: a failed mint is reported and not cached", "[inspect]") {
    leaf_cache cache(test_ca(), 4, std::chrono::hours(1));
    std::string error;
    CHECK_FALSE(cache.get("", error));
    CHECK(!error.empty());
    CHECK(cache.counters().failures == 1);
    CHECK(cache.counters().size == 0);
}
