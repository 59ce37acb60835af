// The per-connection bookkeeping that makes kills possible, in isolation: registering a
// connection in its worker's live table and removing it (no lock: one table per thread),
// plus the kill-switch flag read every request makes. Compare with the proxy's CPU time per
// tunnel setup printed by bench/proxy_bench (tunnel_bench idle).

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace {

struct conn {};

void bm_register_and_remove(benchmark::State& state) {
    std::unordered_map<std::uint64_t, conn*> live;
    live.reserve(16384);
    std::vector<conn> conns(10'000);
    std::uint64_t id = 0;
    for (auto& c : conns) {
        live.emplace(++id, &c);  // 10,000 live connections already registered
    }
    std::atomic<bool> killed{false};
    conn extra;
    for (auto _ : state) {
        if (killed.load(std::memory_order_acquire)) {
            state.SkipWithError("killed");
        }
        live.emplace(++id, &extra);
        benchmark::DoNotOptimize(live);
        live.erase(id);
    }
}
BENCHMARK(bm_register_and_remove);

}  // namespace

BENCHMARK_MAIN();
