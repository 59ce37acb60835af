#pragma once
// Posts the shim's audit events (file.write, identity.*) to POST /v1/sessions/ID/events from
// a thread of its own, so the io thread never waits for the admin API. Bounded queue
// (4096; beyond it events are dropped and counted); drained within a deadline before the
// session ends. The thread starts with start(), after the sandbox is cloned (clone needs a
// single-threaded process); events posted before wait in the queue.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "shims/run.hpp"

namespace cordon::shim {

class event_poster {
public:
    event_poster(admin_port& a, std::string session) : admin_(a), session_(std::move(session)) {}
    ~event_poster() { stop(std::chrono::seconds(5)); }
    event_poster(const event_poster&) = delete;
    event_poster& operator=(const event_poster&) = delete;

    /// Starts the thread (idempotent; not after stop()).
    void start();
    /// Queues one event (a JSON object's text). Any thread.
    void post(std::string json);
    /// Waits up to `drain` for the queue to empty, then stops the thread. Idempotent.
    void stop(std::chrono::milliseconds drain);
    /// Events lost so far: dropped on a full queue, refused by cordon, or not sent. Any thread.
    std::size_t lost();

private:
    void loop();

    admin_port& admin_;
    std::string session_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::string> queue_;
    bool busy_ = false;
    bool stopping_ = false;
    std::size_t dropped_ = 0;  ///< queue full
    std::size_t failed_ = 0;   ///< refused or not sent
    std::thread thread_;
};

}  // namespace cordon::shim
