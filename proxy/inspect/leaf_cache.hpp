#pragma once
// The leaves cordon presents, cached per name: a bounded LRU, one mint at a time per name
// (concurrent askers for a name wait for that one mint; other names go on), and a leaf is
// minted again when less than a tenth of its lifetime is left. Thread-safe.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "proxy/inspect/ca.hpp"

namespace cordon::proxy::inspect {

class leaf_cache {
public:
    /// `capacity` names at most (at least 1); leaves live `ttl` (at least a minute).
    leaf_cache(std::shared_ptr<const authority> ca, std::size_t capacity, std::chrono::seconds ttl);
    leaf_cache(const leaf_cache&) = delete;
    leaf_cache& operator=(const leaf_cache&) = delete;

    /// The leaf for `name`: cached, or minted now (by this caller, or by the one already
    /// minting it, whom this caller waits for). nullptr with `error` set when minting failed
    /// (the next ask tries again).
    std::shared_ptr<const leaf> get(std::string_view name, std::string& error);

    struct stats {
        std::uint64_t hits = 0;
        std::uint64_t mints = 0;
        std::uint64_t evictions = 0;
        std::uint64_t failures = 0;
        std::size_t size = 0;
    };
    stats counters() const;

private:
    struct entry {
        std::shared_ptr<const leaf> value;
        std::list<std::string>::iterator lru;  ///< position in lru_ (front: most recent)
    };
    bool fresh(const leaf& l, std::chrono::system_clock::time_point now) const;

    const std::shared_ptr<const authority> ca_;
    const std::size_t capacity_;
    const std::chrono::seconds ttl_;
    mutable std::mutex mu_;
    std::condition_variable minted_;
    std::unordered_map<std::string, entry> map_;
    std::list<std::string> lru_;
    std::unordered_set<std::string> minting_;
    stats stats_;
};

}  // namespace cordon::proxy::inspect
