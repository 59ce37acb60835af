#pragma once
// The containment worksheet of a job card: what the policy enforces and what the running
// cordon reports, as a plain model (six sections of facts, checks and tables). Built by a
// pure function; rendered to Markdown and JSON by worksheet_render.hpp. Served by
// GET /v1/jobs/JOB/worksheet and printed by `cordon worksheet JOB`.

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/time.hpp"
#include "config/policy.hpp"
#include "proxy/control/state_store.hpp"
#include "proxy/control/tokens.hpp"

namespace cordon::proxy::report {

/// A value of a fact or a table cell: nothing, text, a whole number, a number, a flag, a list.
using value =
    std::variant<std::monostate, std::string, std::int64_t, double, bool, std::vector<std::string>>;

/// One named fact ("TTL: 30m"). `key` is the JSON name, `label` the human one.
struct fact {
    std::string key;
    std::string label;
    value v;
};

/// A checkbox: ticked only when the policy (and, for state-dependent ones, the running
/// cordon) make `text` true; `why` says what makes it so, or why it is not ticked.
struct check {
    std::string key;
    std::string text;
    bool ticked = false;
    std::string why;
};

/// A table: `keys` name the columns for JSON, `headers` for people.
struct table {
    std::vector<std::string> keys;
    std::vector<std::string> headers;
    std::vector<std::vector<value>> rows;
};

struct section {
    std::string key;    ///< job_card, egress, filesystem, identity, kill_switch, audit
    std::string title;  ///< "1. Job card"
    std::vector<fact> facts;
    std::optional<table> rows;
    std::vector<check> checks;
};

/// What a running cordon reports about itself, for the state-dependent checks.
struct running_state {
    std::string source;  ///< who reported it, e.g. "cordon at 127.0.0.1:9090"
    bool network_killed = false;
    std::string kill_reason;
    std::string kill_by;
    bool audit_healthy = false;
    bool state_store_ok = false;
    std::vector<control::kill_timing> kills;  ///< the last measured kill of each scope
    std::size_t active_sessions = 0;          ///< of this job
};

/// Where the policy came from and when the worksheet was made.
struct origin {
    std::string policy_source;  ///< the policy file
    common::wall_clock::time_point generated{};
};

struct model {
    std::string job;
    std::string mode;  ///< enforce or report
    bool enforced = true;
    /// Set for a job that is not enforced (report mode): the worksheet's first line.
    std::string notice;
    std::string policy_source;
    std::string generated_at;  ///< RFC 3339
    std::string state_source;  ///< empty: no running cordon was read
    std::vector<section> sections;
};

/// The Prometheus alert rules of dashboards/alerts.yaml that fire on denied attempts:
/// {name, severity, what}. (A unit test checks them against the file.)
struct alert_rule {
    std::string name;
    std::string severity;
    std::string metric;
    std::string what;
    bool mcp = false;  ///< fires only on MCP rules' denials: listed for jobs that have one
};
const std::vector<alert_rule>& denial_alert_rules();

/// Builds the worksheet of `j` (a job of `p`). Pure: `state` is what a running cordon
/// reported, nullopt when none was asked (then every state-dependent box is unticked and
/// says so). Never includes a secret: the webhook appears as its origin only.
model build(const config::policy& p, const config::job& j,
            const std::optional<running_state>& state, const origin& o);

}  // namespace cordon::proxy::report
