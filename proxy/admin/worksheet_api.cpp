#include "proxy/admin/worksheet_api.hpp"

#include <boost/json.hpp>

#include <iostream>

#include "common/time.hpp"
#include "proxy/control/runtime.hpp"
#include "proxy/report/worksheet.hpp"
#include "proxy/report/worksheet_render.hpp"

namespace cordon::proxy::admin {
namespace {

worksheet_response error_response(int status, const std::string& message) {
    return {status, "application/json",
            boost::json::serialize(boost::json::object{{"error", message}}) + "\n"};
}

report::running_state read_state(control::runtime& rt, const std::string& job) {
    report::running_state st;
    st.source = "the running cordon (started " + common::format_rfc3339(rt.started) + ")";
    st.network_killed = rt.kill.engaged();
    st.kill_reason = rt.kill.info().reason;
    st.kill_by = rt.kill.info().by;
    st.audit_healthy = rt.audit_healthy();
    st.state_store_ok = rt.store != nullptr;
    if (rt.store) {
        std::string error;
        if (!rt.store->kill_timings(st.kills, error)) {
            std::cerr << "cordon: " << error << '\n';
            st.kills.clear();
        }
    }
    for (const auto& s : rt.sessions.list()) {
        if (s.job == job && s.state == control::session_state::active && s.expires_at > rt.now()) {
            ++st.active_sessions;
        }
    }
    return st;
}

}  // namespace

worksheet_response serve_worksheet(control::runtime& rt, std::string_view job,
                                   std::string_view format, std::string_view accept) {
    bool markdown = false;
    if (format == "md" || format == "markdown") {
        markdown = true;
    } else if (format.empty()) {
        markdown = accept.find("text/markdown") != std::string_view::npos ||
                   accept.find("text/plain") != std::string_view::npos;
    } else if (format != "json") {
        return error_response(400, "format must be md or json");
    }
    const auto policy = rt.policy();
    const config::job* j = policy->source().find_job(job);
    if (j == nullptr) {
        return error_response(404, "no job " + std::string(job));
    }
    const std::optional<report::running_state> state = read_state(rt, j->name);
    const report::origin from{rt.config_path(), rt.now()};
    const report::model m = report::build(policy->source(), *j, state, from);
    if (markdown) {
        return {200, "text/markdown; charset=utf-8", report::to_markdown(m)};
    }
    return {200, "application/json", report::to_json(m)};
}

}  // namespace cordon::proxy::admin
