#include "shims/event_poster.hpp"

#include <iostream>

namespace cordon::shim {

void event_poster::start() {
    if (!thread_.joinable() && !stopping_) {
        thread_ = std::thread([this] { loop(); });
    }
}

void event_poster::post(std::string json) {
    const std::lock_guard lock(mutex_);
    if (queue_.size() >= 4096) {
        ++dropped_;
        return;
    }
    queue_.push_back(std::move(json));
    cv_.notify_one();
}

void event_poster::stop(std::chrono::milliseconds drain) {
    start();  // drains what was queued before the sandbox started
    {
        std::unique_lock lock(mutex_);
        if (!thread_.joinable()) {
            return;
        }
        cv_.wait_for(lock, drain, [this] { return queue_.empty() && !busy_; });
        stopping_ = true;
        queue_.clear();
        cv_.notify_all();
    }
    thread_.join();
    if (dropped_ + failed_ > 0) {
        std::cerr << "cordon run: " << dropped_ + failed_ << " audit events not recorded ("
                  << dropped_ << " on a full queue, " << failed_ << " refused or not sent)\n";
    }
}

std::size_t event_poster::lost() {
    const std::lock_guard lock(mutex_);
    return dropped_ + failed_;
}

void event_poster::loop() {
    const std::string path = "/v1/sessions/" + session_ + "/events";
    for (;;) {
        std::string body;
        {
            std::unique_lock lock(mutex_);
            busy_ = false;
            cv_.notify_all();
            cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
            if (stopping_) {
                return;
            }
            body = std::move(queue_.front());
            queue_.pop_front();
            busy_ = true;
        }
        std::string why;
        try {
            const admin_reply r = admin_.call("POST", path, body);
            if (r.status != 202) {
                why = "refused: " + std::to_string(r.status) + ' ' + r.body;
            }
        } catch (const std::exception& e) {
            why = std::string("not sent: ") + e.what();
        }
        if (!why.empty()) {
            const std::lock_guard lock(mutex_);
            if (failed_++ == 0) {  // the first says why; the rest are counted (stop() says)
                std::cerr << "cordon run: audit event " << why << '\n';
            }
        }
    }
}

}  // namespace cordon::shim
