#pragma once
// Spare splice pipes for a worker's tunnels (Linux pipe2/splice). No Asio; one thread.

#include <array>
#include <cstddef>
#include <vector>

namespace cordon::proxy::control {

/// Empty splice pipes the worker's tunnels gave back when they went idle, for the next
/// burst of bulk data: creating and sizing a pipe costs four syscalls and a kernel
/// allocation, and an idle tunnel should hold none. Bounded; closes what it holds.
class pipe_pool {
public:
    pipe_pool() = default;
    pipe_pool(const pipe_pool&) = delete;
    pipe_pool& operator=(const pipe_pool&) = delete;
    ~pipe_pool();
    /// A pipe {read end, write end}, non-blocking, from the pool or new; false if none (the
    /// pool's limit is reached, or the system has no descriptor: the caller copies instead).
    bool take(int (&fds)[2]);
    /// Gives an empty pipe back (closed when the pool is full); fds become -1.
    void give(int (&fds)[2]);
    /// Closes a pipe taken from the pool that still holds data; fds become -1.
    void discard(int (&fds)[2]);
    /// At most `n` pipes, in use and spare together (the descriptor budget's share).
    void set_limit(std::size_t n) { limit_ = n; }

private:
    // Few: each spare 1 MiB pipe stays charged to the user's pipe-user-pages-soft (64 MiB by
    // default), past which the kernel hands out 2-page pipes and splice slows for everyone.
    static constexpr std::size_t max_spare = 8;
    std::vector<std::array<int, 2>> spare_;
    std::size_t in_use_ = 0;
    std::size_t limit_ = static_cast<std::size_t>(-1);
};

}  // namespace cordon::proxy::control
