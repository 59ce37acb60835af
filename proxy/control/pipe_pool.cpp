#include "proxy/control/pipe_pool.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace cordon::proxy::control {

pipe_pool::~pipe_pool() {
    for (const auto& p : spare_) {
        ::close(p[0]);
        ::close(p[1]);
    }
}

bool pipe_pool::take(int (&fds)[2]) {
    if (!spare_.empty()) {
        fds[0] = spare_.back()[0];
        fds[1] = spare_.back()[1];
        spare_.pop_back();
        ++in_use_;
        return true;
    }
    // Pipes are two descriptors each: beyond the budget's share, copy through memory.
    if (in_use_ >= limit_ || ::pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
        fds[0] = fds[1] = -1;
        return false;
    }
    ++in_use_;
    ::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);  // best effort; the default is 64 KiB
    return true;
}

void pipe_pool::discard(int (&fds)[2]) {
    if (fds[0] < 0) {
        return;
    }
    --in_use_;
    ::close(fds[0]);
    ::close(fds[1]);
    fds[0] = fds[1] = -1;
}

void pipe_pool::give(int (&fds)[2]) {
    if (fds[0] < 0) {
        return;
    }
    --in_use_;
    if (spare_.size() < max_spare && in_use_ + spare_.size() < limit_) {
        spare_.push_back({fds[0], fds[1]});
    } else {
        ::close(fds[0]);
        ::close(fds[1]);
    }
    fds[0] = fds[1] = -1;
}

}  // namespace cordon::proxy::control
