// Leaf certificates for TLS inspection (issue 21): the first-use mint of a name (target:
// p99 <= 5 ms) and a cached leaf, through proxy/inspect's leaf_cache (Google Benchmark).
// Run: build-release/bench/bench_inspect   (Release build; see bench/README.md)

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "proxy/inspect/leaf_cache.hpp"

namespace {

using namespace cordon::proxy::inspect;
using steady = std::chrono::steady_clock;

std::shared_ptr<const authority> bench_ca() {
    std::string error;
    const auto pem = make_ca("bench CA", std::chrono::hours(24 * 365), error);
    if (!pem) {
        return nullptr;
    }
    return authority::load(pem->cert, pem->key, error);
}

// Every iteration asks for a name never seen: a mint, as a new inspected host's first
// connection does. p50 and p99 of the mints are reported as counters (ms).
void BM_leaf_first_use(benchmark::State& state) {
    const auto ca = bench_ca();
    if (!ca) {
        state.SkipWithError("cannot make a CA");
        return;
    }
    leaf_cache cache(ca, 1u << 20, std::chrono::hours(24));
    std::vector<double> ms;
    std::size_t n = 0;
    for (auto _ : state) {
        const std::string name = "host" + std::to_string(n++) + ".example.com";
        std::string error;
        const auto t0 = steady::now();
        const auto leaf = cache.get(name, error);
        ms.push_back(std::chrono::duration<double, std::milli>(steady::now() - t0).count());
        benchmark::DoNotOptimize(leaf);
    }
    std::sort(ms.begin(), ms.end());
    if (!ms.empty()) {
        state.counters["p50_ms"] = ms[ms.size() / 2];
        state.counters["p99_ms"] = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
    }
}
BENCHMARK(BM_leaf_first_use)->Iterations(2000)->Unit(benchmark::kMicrosecond);

// A name already minted: the cache lookup a kept name's every connection pays.
void BM_leaf_cached(benchmark::State& state) {
    const auto ca = bench_ca();
    if (!ca) {
        state.SkipWithError("cannot make a CA");
        return;
    }
    leaf_cache cache(ca, 1024, std::chrono::hours(24));
    std::string error;
    cache.get("api.example.com", error);
    for (auto _ : state) {
        benchmark::DoNotOptimize(cache.get("api.example.com", error));
    }
}
BENCHMARK(BM_leaf_cached)->Unit(benchmark::kNanosecond);

}  // namespace

BENCHMARK_MAIN();
