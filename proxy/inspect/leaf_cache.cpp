#include "proxy/inspect/leaf_cache.hpp"

#include <algorithm>

namespace cordon::proxy::inspect {

leaf_cache::leaf_cache(std::shared_ptr<const authority> ca, std::size_t capacity,
                       std::chrono::seconds ttl)
    : ca_(std::move(ca)),
      capacity_(std::max<std::size_t>(capacity, 1)),
      ttl_(std::max(ttl, std::chrono::seconds(60))) {}

// Fresh while more than a tenth of the lifetime is left: a client never gets a leaf about
// to expire mid-connection.
bool leaf_cache::fresh(const leaf& l, std::chrono::system_clock::time_point now) const {
    return l.not_after - now > ttl_ / 10;
}

std::shared_ptr<const leaf> leaf_cache::get(std::string_view name, std::string& error) {
    const std::string key(name);
    std::unique_lock lock(mu_);
    for (;;) {
        if (const auto it = map_.find(key); it != map_.end()) {
            if (fresh(*it->second.value, std::chrono::system_clock::now())) {
                lru_.splice(lru_.begin(), lru_, it->second.lru);
                ++stats_.hits;
                return it->second.value;
            }
        }
        if (minting_.count(key) == 0) {
            break;
        }
        minted_.wait(lock);  // another thread mints this name; other names are not held up
    }
    minting_.insert(key);
    lock.unlock();

    std::string why;
    std::optional<leaf> made = ca_->mint(key, ttl_, why);  // outside the lock

    lock.lock();
    minting_.erase(key);
    std::shared_ptr<const leaf> out;
    if (!made) {
        ++stats_.failures;
        error = why;
    } else {
        ++stats_.mints;
        out = std::make_shared<const leaf>(std::move(*made));
        if (const auto it = map_.find(key); it != map_.end()) {
            it->second.value = out;
            lru_.splice(lru_.begin(), lru_, it->second.lru);
        } else {
            lru_.push_front(key);
            map_.emplace(key, entry{out, lru_.begin()});
            while (map_.size() > capacity_) {
                map_.erase(lru_.back());
                lru_.pop_back();
                ++stats_.evictions;
            }
        }
    }
    lock.unlock();
    minted_.notify_all();
    return out;
}

leaf_cache::stats leaf_cache::counters() const {
    std::lock_guard lock(mu_);
    stats s = stats_;
    s.size = map_.size();
    return s;
}

}  // namespace cordon::proxy::inspect
