#pragma once
// GET /v1/denials: the top denied targets per job (proxy/denial_table) as JSON.

#include <boost/json/object.hpp>

#include <string_view>

#include "config/decide.hpp"
#include "proxy/alerts/denial_table.hpp"

namespace cordon::proxy::admin {

/// Answers GET /v1/denials?job=J&limit=N from the raw (still %-encoded) query values, ""
/// when absent. Returns the HTTP status: 200 with {jobs: [{job, denied, top: [{target,
/// count, error, reasons, last_reason, kinds, first_seen, last_seen}]}], limit, per_job,
/// dropped}; 400 for a bad limit; 404 for a job neither in the policy nor in the table.
/// Errors fill `out` with {"error": message}.
unsigned denials_request(const alerts::denial_table& table, const config::compiled_policy& policy,
                         std::string_view job_param, std::string_view limit_param,
                         boost::json::object& out);

}  // namespace cordon::proxy::admin
