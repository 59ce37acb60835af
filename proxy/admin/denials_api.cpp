#include "proxy/admin/denials_api.hpp"

#include <boost/json.hpp>

#include <charconv>
#include <optional>
#include <string>

#include "common/time.hpp"
#include "config/policy.hpp"
#include "proxy/control/tokens.hpp"

namespace cordon::proxy::admin {
namespace {

namespace json = boost::json;

// %XX escapes of a query value ('(' and ')' of "(none)"); a bad escape stays as it is.
std::string percent_decode(std::string_view v) {
    const auto hex = [](char c, int& x) {
        const auto r = std::from_chars(&c, &c + 1, x, 16);
        return r.ec == std::errc() && r.ptr == &c + 1;
    };
    std::string out;
    for (std::size_t i = 0; i < v.size(); ++i) {
        int hi = 0;
        int lo = 0;
        if (v[i] == '%' && i + 2 < v.size() && hex(v[i + 1], hi) && hex(v[i + 2], lo)) {
            out += static_cast<char>(hi * 16 + lo);
            i += 2;
        } else {
            out += v[i];
        }
    }
    return out;
}

json::array names_of(std::uint32_t bits, std::span<const std::string_view> names) {
    json::array out;
    for (std::size_t i = 0; i < names.size() && i < 32; ++i) {
        if ((bits & (1U << i)) != 0) {
            out.emplace_back(names[i]);
        }
    }
    return out;
}

json::object denials_json(const alerts::denial_table& table, std::optional<std::string_view> job,
                          std::size_t limit) {
    const auto labels = alerts::deny_reason_labels();
    json::array jobs;
    for (const auto& j : table.snapshot(job, limit)) {
        json::array top;
        for (const auto& e : j.top) {
            top.push_back(
                json::object{{"target", e.target},
                             {"count", e.count},
                             {"error", e.error},
                             {"reasons", names_of(e.reasons, labels)},
                             {"last_reason", labels[e.last_reason]},
                             {"kinds", names_of(e.kinds, alerts::denial_table::kind_names())},
                             {"first_seen", common::format_rfc3339(e.first_seen)},
                             {"last_seen", common::format_rfc3339(e.last_seen)}});
        }
        jobs.push_back(json::object{{"job", j.job}, {"denied", j.total}, {"top", std::move(top)}});
    }
    return json::object{{"jobs", std::move(jobs)},
                        {"limit", limit},
                        {"per_job", table.bounds().per_job},
                        {"dropped", table.dropped()}};
}

}  // namespace

unsigned denials_request(const alerts::denial_table& table, const config::compiled_policy& policy,
                         std::string_view job_param, std::string_view limit_param,
                         json::object& out) {
    const std::string job = percent_decode(job_param);
    std::size_t limit = table.bounds().per_job;
    if (!limit_param.empty()) {
        std::size_t n = 0;
        const auto [end, ec] = std::from_chars(limit_param.data(),
                                               limit_param.data() + limit_param.size(), n);
        if (ec != std::errc() || end != limit_param.data() + limit_param.size() || n == 0 ||
            n > limit) {
            out = json::object{{"error", "limit must be 1-" + std::to_string(limit)}};
            return 400;
        }
        limit = n;
    }
    if (!job.empty() && job != alerts::unattributed_job &&
        policy.source().find_job(job) == nullptr &&
        table.snapshot(std::string_view(job), 0).empty()) {
        out = json::object{{"error", "no job named " + job}};
        return 404;
    }
    std::optional<std::string_view> only;
    if (!job.empty()) {
        only = job;
    }
    out = denials_json(table, only, limit);
    return 200;
}

}  // namespace cordon::proxy::admin
