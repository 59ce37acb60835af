#pragma once
// The webhook's JSON body for one denial_alert: one object that Slack-compatible incoming
// webhooks (`text`) and Alertmanager-style webhook receivers (`version`, `status`,
// `alerts[]`) both accept, plus a `cordon` object with the structured details. Pure.

#include <cstdint>
#include <string>

#include "proxy/alerts/denial_bursts.hpp"

namespace cordon::proxy::alerts {

/// One paragraph for a person: "cordon: 12 denied attempts by session s-1 (job j) in 60 s:
/// no_rule ×10, port ×2 (evil.example:443 ×9, …)". Targets come from clients, so they are
/// made inert for chat markup: '&', '<', '>' escaped as Slack wants, backticks and control
/// characters replaced, each cut to 80 characters.
std::string alert_summary(const denial_alert& a);

/// The whole body. `interval_ms` is the configured coalescing window; endsAt is the
/// window's close plus one interval (the alert lapses unless renewed).
std::string alert_payload(const denial_alert& a, std::int64_t interval_ms);

}  // namespace cordon::proxy::alerts
