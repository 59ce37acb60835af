// `cordon worksheet JOB`: the containment worksheet of a job card, filled from what is
// enforced: the running cordon's policy and state (admin API), or a policy file.

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/admin_client.hpp"
#include "cli/verbs.hpp"
#include "common/time.hpp"
#include "config/load.hpp"
#include "proxy/report/worksheet.hpp"
#include "proxy/report/worksheet_render.hpp"

namespace cordon::cli {
namespace {

constexpr std::string_view usage = R"(usage: cordon worksheet JOB [--format md|json]
                        [--admin URL] [--admin-token-file FILE] | [--config FILE]

Prints the containment worksheet of job card JOB: 1. the job card, 2. the egress allowlist
(and where denied attempts alert), 3. the filesystem, 4. the identity, 5. the kill switch
(layers, stop authority, promised and last measured stop time), 6. the audit log. A box is
ticked only when the policy and the running cordon make it true. A job in report mode says
on the first line that it is not enforced.

By default it asks the running cordon (GET /v1/jobs/JOB/worksheet): the policy it enforces
now and its state (kill switch, last measured kills, audit health). With --config it reads
a policy file instead, without running state: the state-dependent boxes stay unticked and
say why.

options:
  --format md|json        Markdown for people (default) or JSON for programs
  --admin URL             the admin API (default $CORDON_ADMIN, else http://127.0.0.1:9090)
  --admin-token-file F    its bearer token (default $CORDON_ADMIN_TOKEN_FILE)
  --config FILE           render from this policy file, no running cordon asked
  -h, --help              show this help

Exit status: 0 printed, 1 no such job, unreadable policy or admin API error, 2 usage error.
)";

int fail_usage(const std::string& msg) {
    std::cerr << "cordon worksheet: " << msg << "\n\n" << usage;
    return 2;
}

int from_file(const std::string& file, const std::string& job, bool markdown) {
    const config::load_result r = config::load_policy_file(file);
    if (!r.ok()) {
        for (const auto& e : r.errors) {
            std::cerr << e.to_string() << '\n';
        }
        return 1;
    }
    const config::job* j = r.value->find_job(job);
    if (j == nullptr) {
        std::cerr << "cordon worksheet: no job " << job << " in " << file << '\n';
        return 1;
    }
    const proxy::report::model m = proxy::report::build(
        *r.value, *j, std::nullopt, proxy::report::origin{file, common::wall_clock::now()});
    std::cout << (markdown ? proxy::report::to_markdown(m) : proxy::report::to_json(m));
    return 0;
}

}  // namespace

int worksheet(args in) {
    if (wants_help(in)) {
        std::cout << usage;
        return 0;
    }
    std::vector<std::string_view> a(in.begin(), in.end());
    std::optional<std::string> file;
    std::optional<std::string> job;
    bool markdown = true;
    bool admin_given = false;
    std::vector<std::string_view> admin_opts;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const std::string_view arg = a[i];
        const bool takes_value = arg == "--config" || arg == "--format" || arg == "--admin" ||
                                 arg == "--admin-token-file";
        if (takes_value && i + 1 >= a.size()) {
            return fail_usage(std::string(arg) + " needs a value");
        }
        if (arg == "--config") {
            file = std::string(a[++i]);
        } else if (arg == "--format") {
            const std::string_view f = a[++i];
            if (f != "md" && f != "json") {
                return fail_usage("--format must be md or json");
            }
            markdown = f == "md";
        } else if (arg == "--admin" || arg == "--admin-token-file") {
            admin_given = true;
            admin_opts.push_back(arg);
            admin_opts.push_back(a[++i]);
        } else if (arg.starts_with("-")) {
            return fail_usage("unknown option '" + std::string(arg) + "'");
        } else if (!job) {
            job = std::string(arg);
        } else {
            return fail_usage("one JOB only");
        }
    }
    if (!job) {
        return fail_usage("missing JOB");
    }
    if (!config::valid_job_name(*job)) {  // as the policy allows: safe in the URL path
        return fail_usage("'" + *job +
                          "' is not a job name (1-64 of [A-Za-z0-9._-], starting "
                          "with a letter or digit)");
    }
    if (file) {
        if (admin_given) {
            return fail_usage("use --config (a policy file, no running state) or --admin (the "
                              "running cordon's policy and state), not both");
        }
        return from_file(*file, *job, markdown);
    }
    admin_target t;
    if (!parse_admin_options(admin_opts, t)) {
        return 1;
    }
    try {
        const std::string path = "/v1/jobs/" + *job +
                                 "/worksheet?format=" + (markdown ? "md" : "json");
        const admin_response r = admin_call(t, "GET", path);
        if (r.status != 200) {
            return report_failure("worksheet", r);
        }
        std::cout << r.body;
        return 0;
    } catch (const std::exception& e) {
        std::cerr << "cordon worksheet: " << e.what() << '\n';
        return 1;
    }
}

}  // namespace cordon::cli
