// `cordon policy suggest` (a job card's egress section learned from the audit log) and
// `cordon policy replay` (a proposed policy tried on the audit log). Both read the audit
// files directly (no admin API): they work while cordon is down.

#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string>

#include "cli/verbs.hpp"
#include "common/time.hpp"
#include "config/decide.hpp"
#include "config/learn/public_suffix.hpp"
#include "config/learn/replay.hpp"
#include "config/learn/suggest.hpp"
#include "config/load.hpp"
#include "proxy/audit/audit_timeline.hpp"  // parse_time_window, human_bytes
#include "proxy/audit/audit_traffic.hpp"

namespace cordon::cli {
namespace {

constexpr std::string_view usage = R"(usage: cordon policy suggest --job JOB [options]
       cordon policy replay --config NEW.yaml --job JOB [options]

suggest: prints the smallest job-card `egress` section that would have allowed the job's
traffic in the audit log (allowed, denied and report-mode would-deny requests, CONNECT and
plain HTTP): exact names and ports; names collapse into "*.parent" only when more than
--siblings names share a parent, never above the registrable domain (the Public Suffix
List); IP literals as /32 or /128 cidr rules. Requests inside inspected TLS tunnels
(http.request records) make `protocol: https` rules with request rules (`http:`): methods
grouped, paths generalised (ids to "*", many siblings to "*" or "prefix/**", at most
--max-paths patterns a rule), never letting through a request the policy's request rules
refused. Comments give the requests behind each rule.
Non-public addresses and cordon's own reserved name are left out, with the reason.
Paste the section under the job card and run `cordon check-config`.

replay: decides the job's recorded requests again under NEW.yaml (its loader and decision
code are the ones `cordon serve` enforces with) and prints what would change: targets newly
denied and newly allowed, with request counts, and the unchanged totals.

options:
  --job JOB       the job card (required)
  --since T       only records at or after T: RFC 3339 (2026-11-29T15:20:00Z), a date
                  (2026-11-29), or a duration back from now (2h, 30m, 1h30m, 2d)
  --until T       only records at or before T (same forms)
  --audit DIR     the audit directory (default: audit.path of --config, else
                  /var/log/cordon)
  --config FILE   suggest: read audit.path from this policy; replay: the policy to try
                  (required), and audit.path unless --audit is given
  --format F      suggest: yaml (default) or json; replay: table (default) or json
  --siblings N    suggest: collapse into a wildcard when more than N names share a
                  parent (default 3)
  --path-siblings N
                  suggest: generalise a path segment into "*" when more than N distinct
                  ones share a prefix (default 8)
  --max-paths N   suggest: path patterns per rule at most (default 16)
  --public-suffix-list FILE
                  suggest: the list to use (default
                  /usr/share/publicsuffix/public_suffix_list.dat, Debian's publicsuffix)
  --stats         print files and bytes read, records used and the time taken to stderr

Exit status:
  suggest: 0 printed; 1 no traffic of the job found, or a file unreadable; 2 usage error.
  replay:  0 no verdict changes; 3 some request newly denied; 4 none newly denied but some
           newly allowed (or undetermined); 1 a file unreadable, the job not in NEW.yaml
           or no request of the job recorded;
           2 usage error. In CI, fail on 3 to catch a policy that breaks observed traffic.
)";

int fail_usage(const std::string& msg) {
    std::cerr << "cordon policy: " << msg << "\n\n" << usage;
    return 2;
}

std::optional<std::string> read_small_file(const std::string& path, std::size_t max,
                                           std::string& error) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        error = "cannot read " + path;
        return std::nullopt;
    }
    std::string data;
    data.resize(max + 1);
    in.read(data.data(), static_cast<std::streamsize>(data.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    if (got > max) {
        error = path + " is larger than " + std::to_string(max) + " bytes";
        return std::nullopt;
    }
    data.resize(got);
    return data;
}

struct options {
    std::string sub;
    std::optional<std::string> job;
    std::optional<std::string> dir;
    std::optional<std::string> config_file;
    std::optional<std::string_view> since_text;
    std::optional<std::string_view> until_text;
    std::optional<std::string> format;
    std::optional<std::size_t> siblings;
    std::optional<std::size_t> path_siblings;
    std::optional<std::size_t> max_paths;
    std::string psl_path{learn::default_public_suffix_path};
    bool psl_given = false;
    bool stats = false;
};

// Parses the arguments; returns an exit code when done (usage error), nullopt to go on.
std::optional<int> parse(args in, options& o) {
    for (std::size_t i = 1; i < in.size(); ++i) {
        const std::string_view a = in[i];
        if (a == "--stats") {
            o.stats = true;
            continue;
        }
        if (a != "--job" && a != "--since" && a != "--until" && a != "--audit" && a != "--config" &&
            a != "--format" && a != "--siblings" && a != "--public-suffix-list" &&
            a != "--path-siblings" && a != "--max-paths") {
            return fail_usage(a.starts_with("-") ? "unknown option '" + std::string(a) + "'"
                                                 : "unexpected argument '" + std::string(a) + "'");
        }
        if (i + 1 >= in.size()) {
            return fail_usage(std::string(a) + " needs a value");
        }
        const std::string_view v = in[++i];
        if (a == "--job") {
            o.job = std::string(v);
        } else if (a == "--since") {
            o.since_text = v;
        } else if (a == "--until") {
            o.until_text = v;
        } else if (a == "--audit") {
            o.dir = std::string(v);
        } else if (a == "--config") {
            o.config_file = std::string(v);
        } else if (a == "--format") {
            o.format = std::string(v);
        } else if (a == "--public-suffix-list") {
            o.psl_path = std::string(v);
            o.psl_given = true;
        } else {
            std::size_t n = 0;
            const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
            const std::size_t lowest = a == "--max-paths" ? 1 : 0;
            if (ec != std::errc{} || p != v.data() + v.size() || n > 1'000'000 || n < lowest) {
                return fail_usage(std::string(a) + ": '" + std::string(v) + "' is not a count");
            }
            (a == "--siblings"        ? o.siblings
             : a == "--path-siblings" ? o.path_siblings
                                      : o.max_paths) = n;
        }
    }
    if (!o.job || o.job->empty()) {
        return fail_usage("which job? (--job JOB)");
    }
    return std::nullopt;
}

std::optional<int> time_window(const options& o, proxy::audit::traffic_query& q) {
    std::string error;
    const auto window = proxy::audit::parse_time_window(o.since_text, o.until_text,
                                                        common::wall_clock::now(), error);
    if (!window) {
        return fail_usage(error);
    }
    q.since = window->since;
    q.until = window->until;
    return std::nullopt;
}

std::optional<config::policy> load(const std::string& file) {
    config::load_result r = config::load_policy_file(file);
    if (!r.ok()) {
        for (const auto& d : r.errors) {
            std::cerr << d.to_string() << '\n';
        }
        return std::nullopt;
    }
    return std::move(*r.value);
}

// Reads the job's traffic; prints --stats and warnings. False (after saying why) on error.
bool read(const options& o, const proxy::audit::traffic_query& q, const std::string& dir,
          learn::seen_traffic& out) {
    const auto t0 = std::chrono::steady_clock::now();
    proxy::audit::traffic_stats stats;
    std::string error;
    out = proxy::audit::read_traffic(dir, q, stats, error);
    if (o.stats) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr,
                     "cordon policy: %llu files, %s searched, %llu lines of the job read, "
                     "%llu records used, %zu distinct requests, %.3f s\n",
                     static_cast<unsigned long long>(stats.files),
                     proxy::audit::human_bytes(stats.bytes).c_str(),
                     static_cast<unsigned long long>(stats.lines),
                     static_cast<unsigned long long>(stats.used), out.requests.size(), s);
    }
    if (stats.malformed > 0) {
        std::cerr << "cordon policy: " << stats.malformed
                  << " lines of the job were not audit JSON and were skipped\n";
    }
    if (stats.paths_folded > 0) {
        std::cerr << "cordon policy: " << stats.paths_folded
                  << " requests past the bound on distinct paths per target were read as "
                     "their first segment (or \"/\") and below\n";
    }
    if (stats.bad_target > 0) {
        std::cerr << "cordon policy: " << stats.bad_target
                  << " records with an unusable target or method were skipped\n";
    }
    if (!error.empty()) {
        std::cerr << "cordon policy: " << error << '\n';
        return false;
    }
    return true;
}

int suggest(const options& o) {
    const std::string format = o.format.value_or("yaml");
    if (format != "yaml" && format != "json") {
        return fail_usage("--format: yaml or json");
    }
    if (o.dir && o.config_file) {
        return fail_usage("--audit and --config are alternatives");
    }
    proxy::audit::traffic_query q;
    q.job = *o.job;
    if (const auto rc = time_window(o, q)) {
        return *rc;
    }
    std::string dir = o.dir.value_or(config::audit_spec{}.path);
    if (o.config_file) {
        const auto p = load(*o.config_file);
        if (!p) {
            return 1;
        }
        dir = p->audit.path;
    }
    std::string error;
    const auto psl_text = read_small_file(o.psl_path, 16u << 20, error);
    if (!psl_text) {
        std::cerr << "cordon policy suggest: " << error << ": the public suffix list is needed to "
                  << "keep wildcards within registrable domains"
                  << (o.psl_given ? "" : " (install Debian's publicsuffix package)")
                  << "; give another with --public-suffix-list FILE\n";
        return 1;
    }
    const learn::public_suffix_list psl = learn::public_suffix_list::parse(*psl_text);
    if (psl.size() < 100) {
        std::cerr << "cordon policy suggest: " << o.psl_path
                  << " holds almost no rules; is it the public suffix list?\n";
        return 1;
    }
    learn::seen_traffic seen;
    if (!read(o, q, dir, seen)) {
        return 1;
    }
    learn::suggest_options so;
    so.siblings = o.siblings.value_or(so.siblings);
    so.path_siblings = o.path_siblings.value_or(so.path_siblings);
    so.max_paths = o.max_paths.value_or(so.max_paths);
    const learn::suggestion s = learn::suggest(seen, psl, so);
    const std::string out = format == "json" ? learn::render_json(s) : learn::render_yaml(s);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    if (seen.requests.empty() && seen.dns.empty()) {
        std::cerr << "cordon policy suggest: no traffic of job " << *o.job << " in " << dir << '\n';
        return 1;
    }
    return 0;
}

int replay(const options& o) {
    const std::string format = o.format.value_or("table");
    if (format != "table" && format != "json") {
        return fail_usage("--format: table or json");
    }
    if (!o.config_file) {
        return fail_usage("replay needs the policy to try: --config NEW.yaml");
    }
    if (o.siblings || o.psl_given || o.path_siblings || o.max_paths) {
        return fail_usage("--siblings, --path-siblings, --max-paths and --public-suffix-list "
                          "are suggest options");
    }
    proxy::audit::traffic_query q;
    q.job = *o.job;
    if (const auto rc = time_window(o, q)) {
        return *rc;
    }
    auto p = load(*o.config_file);
    if (!p) {
        return 1;
    }
    if (p->find_job(*o.job) == nullptr) {
        std::cerr << "cordon policy replay: job " << *o.job << " is not in " << *o.config_file
                  << '\n';
        return 1;
    }
    const std::string dir = o.dir.value_or(p->audit.path);
    const auto compiled = config::compile(std::move(*p));
    learn::seen_traffic seen;
    if (!read(o, q, dir, seen)) {
        return 1;
    }
    if (seen.requests.empty()) {
        // Nothing to judge is not "no change": a CI gate must not pass on a wrong directory.
        std::cerr << "cordon policy replay: no requests of job " << *o.job << " in " << dir << '\n';
        return 1;
    }
    const learn::replay_result r = learn::replay(seen, *compiled);
    const std::string out = format == "json" ? learn::render_json(r, *o.config_file)
                                             : learn::render_table(r, *o.config_file);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    if (!r.newly_denied.empty()) {
        return 3;
    }
    if (!r.newly_allowed.empty() || !r.undetermined.empty()) {
        return 4;
    }
    return 0;
}

}  // namespace

int policy(args in) {
    if (in.empty() || wants_help(in)) {
        std::cout << usage;
        return in.empty() ? 2 : 0;
    }
    options o;
    o.sub = std::string(in[0]);
    if (o.sub != "suggest" && o.sub != "replay") {
        return fail_usage("unknown subcommand '" + o.sub + "' (suggest or replay)");
    }
    if (const auto rc = parse(in, o)) {
        return *rc;
    }
    return o.sub == "suggest" ? suggest(o) : replay(o);
}

}  // namespace cordon::cli
