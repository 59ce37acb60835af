// Policy decisions per second and load time with 100,000 rules (Google Benchmark).
// Run: build/bench/bench_decide   (Release build; see bench/README.md)

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "config/decide.hpp"
#include "config/load.hpp"

namespace {

using namespace cordon::config;

constexpr int rule_count = 100'000;

// A policy with one job of `rule_count` rules: 60% exact names, 30% wildcards, 10% CIDRs,
// spread over many domains, written as YAML so load time is measured through the real loader.
std::string make_policy_yaml() {
    std::string y = "listen: { proxy: 127.0.0.1:3128 }\njobs:\n  big:\n    task: bench\n"
                    "    egress:\n";
    y.reserve(static_cast<std::size_t>(rule_count) * 64);
    for (int i = 0; i < rule_count; ++i) {
        const int kind = i % 10;
        if (kind < 6) {
            y += "      - { host: api" + std::to_string(i) + ".svc" + std::to_string(i % 997) +
                 ".example.com, ports: [443] }\n";
        } else if (kind < 9) {
            y += "      - { host: \"*.t" + std::to_string(i) +
                 ".example.net\", ports: [443, "
                 "8443] }\n";
        } else {
            const int a = (i / 10) % 250 + 1;
            const int b = (i / 2500) % 256;
            y += "      - { cidr: 203." + std::to_string(a % 256) + "." + std::to_string(b) +
                 ".0/24, ports: [22], protocol: tcp }\n";
        }
    }
    // A second small job so lookups go through the job table like in production.
    y += "  small:\n    task: other\n    egress:\n      - { host: a.example.org, ports: [443] }\n";
    return y;
}

std::shared_ptr<const compiled_policy> make_compiled() {
    static const std::shared_ptr<const compiled_policy> p = [] {
        load_result r = load_policy(make_policy_yaml(), "bench.yaml");
        if (!r.ok()) {
            throw std::runtime_error(r.errors.front().to_string());
        }
        return compile(std::move(*r.value));
    }();
    return p;
}

struct request {
    std::string host;
    std::uint16_t port;
};

// A mix of requests, built once and cycled through: about half allowed (exact, wildcard,
// upper case with trailing dot, CIDR), half denied (unknown name, wrong port, wildcard apex).
std::vector<request> make_requests() {
    std::vector<request> out;
    for (int i = 0; i < 4096; ++i) {
        const int r = (i * 7919) % rule_count;
        const int base = r - r % 10;  // rule index with kind 0 (exact)
        const std::string exact = "api" + std::to_string(base) + ".svc" +
                                  std::to_string(base % 997) + ".example.com";
        const std::string wild = "t" + std::to_string(base + 6) + ".example.net";
        switch (i % 8) {
            case 0: out.push_back({exact, 443}); break;
            case 1: out.push_back({"deep.x." + wild, 8443}); break;
            case 2:
                out.push_back({"unknown" + std::to_string(r) + ".attacker.example", 443});
                break;
            case 3:
                out.push_back({"API" + std::to_string(base) + ".SVC" + std::to_string(base % 997) +
                                   ".Example.com.",
                               443});
                break;
            case 4:
                out.push_back({"203." + std::to_string((i / 10) % 250 + 1) + ".0.9", 22});
                break;
            case 5: out.push_back({exact, 80}); break;
            case 6: out.push_back({wild, 443}); break;  // the apex of a wildcard: denied
            default: out.push_back({"www." + wild, 443}); break;
        }
    }
    return out;
}

void bm_decide_100k_rules(benchmark::State& state) {
    const auto policy = make_compiled();
    const auto requests = make_requests();
    std::size_t i = 0;
    std::size_t allowed = 0;
    for (auto _ : state) {
        const request& r = requests[i++ & 4095];
        decide_args a;
        a.job = "big";
        a.host = r.host;
        a.port = r.port;
        const decision d = decide(a, *policy);
        allowed += d.allowed() ? 1 : 0;
        benchmark::DoNotOptimize(d);
    }
    state.counters["decisions_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                                           benchmark::Counter::kIsRate);
    state.counters["allowed_fraction"] = static_cast<double>(allowed) /
                                         static_cast<double>(state.iterations());
}
BENCHMARK(bm_decide_100k_rules);

void bm_load_and_compile_100k_rules(benchmark::State& state) {
    const std::string yaml = make_policy_yaml();
    for (auto _ : state) {
        load_result r = load_policy(yaml, "bench.yaml");
        auto p = compile(std::move(*r.value));
        benchmark::DoNotOptimize(p);
    }
}
BENCHMARK(bm_load_and_compile_100k_rules)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
