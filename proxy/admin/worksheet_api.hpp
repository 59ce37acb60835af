#pragma once
// GET /v1/jobs/JOB/worksheet: the containment worksheet of a job from the policy this cordon
// enforces and its running state (kill switch, last measured kills, audit health, sessions).

#include <string>
#include <string_view>

namespace cordon::proxy::control {
class runtime;
}

namespace cordon::proxy::admin {

struct worksheet_response {
    int status = 200;          ///< 200, 400 (bad format) or 404 (no such job)
    std::string content_type;  ///< text/markdown or application/json
    std::string body;          ///< the worksheet, or {"error": ...} JSON
};

/// The format comes from `format` (?format=md|json), else from `accept` (text/markdown or
/// text/plain ask for Markdown), else JSON. Control thread (reads the kill state).
worksheet_response serve_worksheet(control::runtime& rt, std::string_view job,
                                   std::string_view format, std::string_view accept);

}  // namespace cordon::proxy::admin
