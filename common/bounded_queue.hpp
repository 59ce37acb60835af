#pragma once
// A bounded multi-producer multi-consumer queue without locks (Dmitry Vyukov's array queue):
// producers on the data path never wait; when the queue is full, try_push fails at once.
// Pure: no I/O.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace cordon::common {

/// Holds up to `capacity` values (rounded up to a power of two, at least 2). T must be
/// default-constructible and move-assignable. Thread-safe for any number of producers and
/// consumers; neither ever blocks.
template <class T>
class bounded_queue {
public:
    explicit bounded_queue(std::size_t capacity) {
        std::size_t n = 2;
        while (n < capacity) {
            n *= 2;
        }
        cells_ = std::make_unique<cell[]>(n);
        mask_ = n - 1;
        for (std::size_t i = 0; i < n; ++i) {
            cells_[i].seq.store(i, std::memory_order_relaxed);
        }
    }
    bounded_queue(const bounded_queue&) = delete;
    bounded_queue& operator=(const bounded_queue&) = delete;

    std::size_t capacity() const noexcept { return mask_ + 1; }

    /// Moves `v` in; false (and `v` untouched) when the queue is full.
    bool try_push(T& v) noexcept(std::is_nothrow_move_assignable_v<T>) {
        cell* c = nullptr;
        std::size_t pos = enqueue_.load(std::memory_order_relaxed);
        for (;;) {
            c = &cells_[pos & mask_];
            const std::size_t seq = c->seq.load(std::memory_order_acquire);
            const auto dif = static_cast<std::ptrdiff_t>(seq) - static_cast<std::ptrdiff_t>(pos);
            if (dif == 0) {
                if (enqueue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                    break;
                }
            } else if (dif < 0) {
                return false;
            } else {
                pos = enqueue_.load(std::memory_order_relaxed);
            }
        }
        c->value = std::move(v);
        c->seq.store(pos + 1, std::memory_order_release);
        return true;
    }

    /// Moves the oldest value out into `out`; false when the queue is empty.
    bool try_pop(T& out) noexcept(std::is_nothrow_move_assignable_v<T>) {
        cell* c = nullptr;
        std::size_t pos = dequeue_.load(std::memory_order_relaxed);
        for (;;) {
            c = &cells_[pos & mask_];
            const std::size_t seq = c->seq.load(std::memory_order_acquire);
            const auto dif = static_cast<std::ptrdiff_t>(seq) -
                             static_cast<std::ptrdiff_t>(pos + 1);
            if (dif == 0) {
                if (dequeue_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
                    break;
                }
            } else if (dif < 0) {
                return false;
            } else {
                pos = dequeue_.load(std::memory_order_relaxed);
            }
        }
        out = std::move(c->value);
        c->value = T{};  // give back what the moved-from value may still hold
        c->seq.store(pos + mask_ + 1, std::memory_order_release);
        return true;
    }

private:
    struct cell {
        std::atomic<std::size_t> seq{0};
        T value{};
    };
    std::unique_ptr<cell[]> cells_;
    std::size_t mask_ = 0;
    alignas(64) std::atomic<std::size_t> enqueue_{0};
    alignas(64) std::atomic<std::size_t> dequeue_{0};
};

}  // namespace cordon::common
