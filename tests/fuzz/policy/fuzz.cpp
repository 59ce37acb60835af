// Fuzzes the policy loader and validator: any bytes must give a policy or errors, never a
// crash, a hang or an unbounded allocation. A loaded policy is compiled and asked once.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/decide.hpp"
#include "config/load.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    cordon::config::load_result r = cordon::config::load_policy(text, "fuzz.yaml");
    if (r.ok() == !r.errors.empty()) {
        __builtin_trap();  // exactly one of a policy and errors
    }
    if (r.ok()) {
        const auto p = cordon::config::compile(std::move(*r.value));
        for (const auto& j : p->source().jobs) {
            cordon::config::decide_args a;
            a.job = j.name;
            a.host = "a.example.com";
            a.port = 443;
            (void)cordon::config::decide(a, *p);
        }
    }
    return 0;
}
