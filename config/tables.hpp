#pragma once
// Internal to config/: the lookup tables a compiled policy decides with.

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/decide.hpp"

namespace cordon::config {

struct string_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
        return std::hash<std::string_view>{}(s);
    }
};

struct bytes_hash {
    std::size_t operator()(const std::array<std::uint8_t, 16>& b) const noexcept {
        std::uint64_t hi = 0;
        std::uint64_t lo = 0;
        std::memcpy(&hi, b.data(), 8);
        std::memcpy(&lo, b.data() + 8, 8);
        return std::hash<std::uint64_t>{}(hi * 0x9e3779b97f4a7c15ULL ^ lo);
    }
};

/// Rule indexes (into the job's egress list), in file order.
using rule_list = std::vector<std::uint32_t>;
using name_map = std::unordered_map<std::string, rule_list, string_hash, std::equal_to<>>;

/// All cidr rules of one family and prefix length, keyed by network address bytes.
struct prefix_level {
    int len = 0;
    std::unordered_map<std::array<std::uint8_t, 16>, rule_list, bytes_hash> nets;
};

struct job_tables {
    name_map exact;                // host -> rules naming it exactly
    name_map wildcard;             // suffix -> rules "*.suffix"
    std::vector<prefix_level> v4;  // longest prefix first
    std::vector<prefix_level> v6;
};

struct compiled_policy::tables {
    std::unordered_map<std::string, int, string_hash, std::equal_to<>> jobs;
    std::vector<job_tables> per_job;  // parallel to policy.jobs
};

}  // namespace cordon::config
