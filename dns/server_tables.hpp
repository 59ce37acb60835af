#pragma once
// The tables the DNS servers of one daemon share: answer cache, rate buckets, in-flight counts.

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/ip.hpp"
#include "dns/server.hpp"
#include "dns/wire.hpp"

namespace cordon::dns {

// Who a budget belongs to: a session (queries carrying a valid session option: the shim's
// relay sends every sandbox's queries from 127.0.0.1) or else a client address (16 bytes,
// v4 mapped). No allocation.
struct client_key {
    std::array<std::uint8_t, 16> bytes{};
    std::uint64_t session = 0;  // a hash of the session id; 0: keyed by address
    bool operator==(const client_key&) const = default;
};
struct client_hash {
    std::size_t operator()(const client_key& k) const noexcept {
        std::uint64_t lo = 0;
        std::uint64_t hi = 0;
        std::memcpy(&lo, k.bytes.data(), 8);
        std::memcpy(&hi, k.bytes.data() + 8, 8);
        return std::hash<std::uint64_t>{}(lo ^ (hi * 0x9e3779b97f4a7c15ULL) ^
                                          (k.session * 0xc2b2ae3d27d4eb4fULL));
    }
};

struct server::tables {
    struct cache_entry {
        std::vector<std::uint8_t> answer;  // a clean answer (sanitize_answer)
        std::vector<ttl_field> ttls;       // its TTL fields, so a hit parses nothing
        std::chrono::steady_clock::time_point stored;
        std::uint32_t ttl = 0;
    };
    struct bucket {
        double tokens = 0;
        std::chrono::steady_clock::time_point last;
    };
    std::mutex mu;  // held only for a map lookup or update, never across I/O
    std::unordered_map<std::string, cache_entry> cache;  // key: "name/qtype/qclass"
    std::deque<std::string> cache_order;                 // insertion order, for eviction
    std::unordered_map<client_key, bucket, client_hash> buckets;
    std::unordered_map<client_key, std::uint32_t, client_hash> inflight;  // upstream lookups
    std::uint32_t tcp_open = 0;
    std::unordered_map<client_key, std::uint32_t, client_hash> tcp_per_client;
};

namespace detail {

inline client_key key_of(const config::ip_address& client) { return client_key{client.bytes(), 0}; }

inline client_key key_of(const config::ip_address& client, const verdict& v) {
    if (v.session.empty()) {
        return key_of(client);
    }
    const std::uint64_t h = std::hash<std::string_view>{}(v.session);
    return client_key{{}, h == 0 ? 1 : h};
}

// Adds one to a count of `counts` (under the tables' mutex) unless it is at `limit`.
inline bool take(std::unordered_map<client_key, std::uint32_t, client_hash>& counts,
                 const client_key& k, std::uint32_t limit) {
    auto [it, fresh] = counts.try_emplace(k, 0);
    (void)fresh;
    if (it->second >= limit) {
        return false;
    }
    ++it->second;
    return true;
}

inline void give_back(std::unordered_map<client_key, std::uint32_t, client_hash>& counts,
                      const client_key& k) {
    if (auto it = counts.find(k); it != counts.end() && --it->second == 0) {
        counts.erase(it);
    }
}

}  // namespace detail

}  // namespace cordon::dns
