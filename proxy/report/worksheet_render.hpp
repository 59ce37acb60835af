#pragma once
// Renders a worksheet model (worksheet.hpp) for people (Markdown: GitHub-flavoured, with
// task-list checkboxes and pipe tables) and for programs (JSON). Pure functions.

#include <string>

#include "proxy/report/worksheet.hpp"

namespace cordon::proxy::report {

/// Markdown. A job that is not enforced says so on the first line; then "# Containment
/// worksheet: JOB", a "## N. Title" heading per section, its facts as a list, its table,
/// its checks as "- [x]" / "- [ ]" items with the reason. Text from the policy is escaped
/// (it cannot add headings, links, HTML or table cells).
std::string to_markdown(const model& m);

/// JSON: {job, mode, enforced, notice, policy_source, generated_at, state_source,
/// sections: {KEY: {title, facts: {KEY: value}, table: [{COLUMN: value}], checks: {KEY:
/// {text, ticked, why}}}}}; sections in worksheet order.
std::string to_json(const model& m);

}  // namespace cordon::proxy::report
