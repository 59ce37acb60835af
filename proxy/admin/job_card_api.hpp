#pragma once
// GET /v1/jobs/NAME: the parts of a job card that `cordon run` enforces on the sandbox host
// (filesystem, env, identity hooks), so the shim needs no policy file of its own.

#include <boost/json/object.hpp>

#include "config/policy.hpp"

namespace cordon::proxy::admin {

/// {job, task, mode, filesystem: {scratch (or null), never_write, landlock: required |
/// optional}, env: [{name, allow_long_lived}], identity: {ttl_ms, mint: null | {command,
/// env | file}, revoke: command or null}}.
boost::json::object job_card_json(const config::job& j);

}  // namespace cordon::proxy::admin
