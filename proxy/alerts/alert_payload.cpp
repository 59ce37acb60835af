#include "proxy/alerts/alert_payload.hpp"

#include <chrono>

#include "common/json_string.hpp"
#include "common/time.hpp"

namespace cordon::proxy::alerts {

namespace {

constexpr std::size_t max_target_text = 80;

// A client-chosen string made safe to show in a chat message.
std::string inert(std::string_view s) {
    std::string out;
    std::size_t shown = 0;
    for (const char c : s) {
        if (shown == max_target_text) {
            out += "…";
            break;
        }
        const auto b = static_cast<unsigned char>(c);
        if (c == '&') {
            out += "&amp;";
        } else if (c == '<') {
            out += "&lt;";
        } else if (c == '>') {
            out += "&gt;";
        } else if (b < 0x20 || b == 0x7f || b >= 0x80 || c == '`' || c == '*' || c == '~' ||
                   c == '|') {
            out += '?';
        } else {
            out += c;
        }
        ++shown;
    }
    return out;
}

std::string seconds_text(std::int64_t ms) {
    if (ms % 1000 == 0 || ms >= 10'000) {
        return std::to_string((ms + 500) / 1000) + " s";
    }
    return std::to_string(ms / 1000) + "." + std::to_string((ms % 1000) / 100) + " s";
}

std::string rfc3339(std::int64_t wall_ms) {
    return common::format_rfc3339(
        common::wall_clock::time_point(std::chrono::milliseconds(wall_ms)));
}

std::string who(const denial_alert& a) {
    std::string out;
    if (!a.session.empty()) {
        out = "session " + inert(a.session);
        if (!a.job.empty()) {
            out += " (job " + inert(a.job) + ")";
        }
    } else if (!a.job.empty()) {
        out = "job " + inert(a.job) + " (no session)";
    } else {
        out = "an unattributed client";
    }
    return out;
}

void add_field(std::string& out, std::string_view key, std::string_view value, bool comma = true) {
    if (comma) {
        out += ',';
    }
    common::append_json_string(out, key);
    out += ':';
    common::append_json_string(out, value);
}

void add_number(std::string& out, std::string_view key, std::uint64_t value) {
    out += ',';
    common::append_json_string(out, key);
    out += ':';
    out += std::to_string(value);
}

}  // namespace

std::string alert_summary(const denial_alert& a) {
    std::string out = "cordon: " + std::to_string(a.denials) +
                      (a.denials == 1 ? " denied attempt by " : " denied attempts by ") + who(a) +
                      " in " + seconds_text(a.window_ms);
    if (a.burst) {
        out += " (burst)";
    }
    out += ':';
    for (std::size_t i = 0; i < a.reasons.size(); ++i) {
        out += i == 0 ? " " : ", ";
        out += inert(a.reasons[i].first) + " ×" + std::to_string(a.reasons[i].second);
    }
    if (!a.top_targets.empty()) {
        out += " (";
        for (std::size_t i = 0; i < a.top_targets.size(); ++i) {
            out += i == 0 ? "" : ", ";
            out += inert(a.top_targets[i].target) + " ×" + std::to_string(a.top_targets[i].count);
        }
        if (a.other_targets > 0) {
            out += ", " + std::to_string(a.other_targets) + " more";
        }
        out += ")";
    }
    if (a.dropped > 0) {
        out += "; " + std::to_string(a.dropped) + " more denials were not counted (overload)";
    }
    return out;
}

std::string alert_payload(const denial_alert& a, std::int64_t interval_ms) {
    const std::string summary = alert_summary(a);
    const std::string severity = a.burst ? "critical" : "warning";
    const std::string job = a.job.empty() ? "(none)" : a.job;  // as in the metrics
    const std::string starts = rfc3339(a.first_wall_ms);
    const std::string ends = rfc3339(a.first_wall_ms + a.window_ms + interval_ms);
    std::string description = std::to_string(a.denials) + " denied attempts";
    description += a.session.empty() ? "" : " by session " + a.session;
    description += " of job " + job + " between " + rfc3339(a.first_wall_ms) + " and " +
                   rfc3339(a.last_wall_ms) +
                   ". Look up the session in the audit log "
                   "(cordon audit timeline SESSION) and kill it if it misbehaves.";

    std::string labels = "{";
    add_field(labels, "alertname", "CordonDenialBurst", false);
    add_field(labels, "job", job);
    add_field(labels, "severity", severity);
    labels += '}';
    std::string annotations = "{";
    add_field(annotations, "summary", summary, false);
    add_field(annotations, "description", description);
    annotations += '}';

    std::string out = "{";
    add_field(out, "text", summary, false);
    add_field(out, "version", "4");
    add_field(out, "status", "firing");
    add_field(out, "receiver", "cordon");
    add_field(out, "groupKey", "cordon/" + job + "/" + a.session);
    out += ",\"groupLabels\":{";
    add_field(out, "alertname", "CordonDenialBurst", false);
    out += "},\"commonLabels\":" + labels;
    out += ",\"commonAnnotations\":" + annotations;
    out += ",\"truncatedAlerts\":0,\"alerts\":[{";
    add_field(out, "status", "firing", false);
    out += ",\"labels\":" + labels;
    out += ",\"annotations\":" + annotations;
    add_field(out, "startsAt", starts);
    add_field(out, "endsAt", ends);
    out += "}],\"cordon\":{";
    add_field(out, "job", a.job, false);
    add_field(out, "session", a.session);
    add_number(out, "denials", a.denials);
    out += ",\"reasons\":{";
    for (std::size_t i = 0; i < a.reasons.size(); ++i) {
        if (i > 0) {
            out += ',';
        }
        common::append_json_string(out, a.reasons[i].first);
        out += ':' + std::to_string(a.reasons[i].second);
    }
    out += "},\"top_targets\":[";
    for (std::size_t i = 0; i < a.top_targets.size(); ++i) {
        out += i == 0 ? "{" : ",{";
        add_field(out, "target", a.top_targets[i].target, false);
        add_field(out, "kind", a.top_targets[i].kind);
        add_number(out, "count", a.top_targets[i].count);
        out += '}';
    }
    out += ']';
    add_number(out, "other_targets", a.other_targets);
    add_field(out, "first", starts);
    add_field(out, "last", rfc3339(a.last_wall_ms));
    add_number(out, "window_ms", static_cast<std::uint64_t>(a.window_ms));
    out += std::string(",\"burst\":") + (a.burst ? "true" : "false");
    add_number(out, "dropped", a.dropped);
    out += "}}";
    return out;
}

}  // namespace cordon::proxy::alerts
