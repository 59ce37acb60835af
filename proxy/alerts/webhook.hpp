#pragma once
// Denial bursts and the alert webhook (alerts.webhook): the data path hands every denial
// over without blocking; a thread of its own detects bursts per session (denial_bursts),
// always, and, when a webhook is set, coalesces denials per session and POSTs one JSON alert
// per session and interval (alert_payload), rate-limited and retried with backoff
// (webhook_retry). Light header: Asio, Beast and OpenSSL stay in webhook.cpp.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "config/policy.hpp"

namespace cordon::proxy::alerts {

/// An alert that could not be delivered after its last attempt. No URL secrets in it:
/// `webhook` is scheme://host[:port] only.
struct delivery_failure {
    std::string webhook;
    std::string job;
    std::string session;
    std::uint64_t denials = 0;
    unsigned attempts = 0;
    std::string error;  ///< "HTTP 500", "connect: Connection refused", "timeout", ...
};

/// Counts denial bursts and sends denial alerts to the webhook. Thread-safety: submit() from
/// any thread (lock-free, never blocks); configure() and stop() from one control thread. The
/// callbacks run on the notifier's own thread.
class denial_notifier {
public:
    struct callbacks {
        std::function<void(const std::string& job)> on_burst;  ///< a session's burst began
        std::function<void(const delivery_failure&)> on_failure;
    };

    /// Queue capacity: denials waiting for the notifier thread (drained every 50 ms);
    /// beyond it submit() drops and counts.
    static constexpr std::size_t queue_capacity = 8192;
    /// Alerts being delivered at once; further due windows stay open and keep counting.
    static constexpr std::size_t max_in_flight = 4;

    explicit denial_notifier(callbacks cb);
    ~denial_notifier();  ///< stop() with no flush deadline
    denial_notifier(const denial_notifier&) = delete;
    denial_notifier& operator=(const denial_notifier&) = delete;

    /// Applies alerts.webhook: new settings for what comes next (open windows are kept),
    /// or, with nullopt, no webhook: bursts are still detected, with the default
    /// burst_threshold and burst_window (those of config::webhook_spec{}), and nothing else
    /// is kept (open windows are discarded). Starts the thread on the first call, webhook or
    /// not. The spec must be valid (the loader checked it).
    void configure(const std::optional<config::webhook_spec>& spec);

    /// `count` identical denied attempts, at this time (the views are copied, cut to bounded
    /// lengths). Never blocks: a full queue drops the event and counts its denials. A no-op
    /// before the first configure(), after stop(), and for count 0.
    void submit(std::string_view job, std::string_view session, std::string_view reason,
                std::string_view target, std::string_view kind, std::uint64_t count = 1) noexcept;

    /// Stops the thread: counts what is queued, sends every open window once (no retries,
    /// still rate-limited) and waits for deliveries up to `flush_deadline`; then abandons
    /// what is left. Idempotent; submit() is a no-op afterwards.
    void stop(std::chrono::milliseconds flush_deadline);

    bool enabled() const noexcept;             ///< a webhook is set (alerts are sent)
    std::uint64_t dropped() const noexcept;    ///< denials a full queue refused
    std::uint64_t delivered() const noexcept;  ///< alerts the receiver accepted
    std::uint64_t failed() const noexcept;     ///< alerts given up after the last attempt

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace cordon::proxy::alerts
