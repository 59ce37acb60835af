// `cordon audit timeline SESSION`: one session's story from the audit files, for a
// post-mortem. Reads the files directly (no admin API): it works while cordon is down.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "cli/verbs.hpp"
#include "common/time.hpp"
#include "config/load.hpp"
#include "proxy/audit/audit_timeline.hpp"

namespace cordon::cli {
namespace {

constexpr std::string_view usage =
    R"(usage: cordon audit timeline SESSION [--since T] [--until T] [--json]
                               [--audit DIR ... | --config FILE]

Prints one session's audit events in time order: session created, tokens minted and
revoked, each tool call, each connection (target, bytes up and down, duration), each
denial with its reason, DNS queries and denials, file writes, and the kill with who and
why; network kills and revives during the session too. A connection that carried MCP tool
calls is labelled (conn 1, conn 2, ...) on its records and on its tool calls. One line per
event, or the audit JSON lines themselves with --json.

options:
  --since T       only events at or after T: RFC 3339 (2026-11-29T15:20:00Z), a date
                  (2026-11-29), or a duration back from now (2h, 30m, 1h30m, 2d)
  --until T       only events at or before T (same forms)
  --json          print the events as JSON lines, as stored
  --audit DIR     the audit directory (default: audit.path of --config, else
                  /var/log/cordon); repeat it for a fleet's instances: their events are
                  merged in time order (each record names its `instance`)
  --config FILE   read audit.path from this policy
  --stats         print files and bytes searched, and the time taken, to stderr

Exit status: 0 events printed, 1 none found or a file unreadable, 2 usage error.
)";

int fail_usage(const std::string& msg) {
    std::cerr << "cordon audit: " << msg << "\n\n" << usage;
    return 2;
}

}  // namespace

int audit(args in) {
    if (in.empty() || wants_help(in)) {
        std::cout << usage;
        return in.empty() ? 2 : 0;
    }
    if (in[0] != "timeline") {
        return fail_usage("unknown subcommand '" + std::string(in[0]) + "'");
    }
    std::optional<std::string> session;
    std::vector<std::string> dirs;
    std::optional<std::string> config_file;
    std::optional<std::string_view> since_text;
    std::optional<std::string_view> until_text;
    bool as_json = false;
    bool show_stats = false;
    for (std::size_t i = 1; i < in.size(); ++i) {
        const std::string_view a = in[i];
        const auto value = [&](std::string_view flag) -> std::optional<std::string_view> {
            if (i + 1 >= in.size()) {
                return std::nullopt;
            }
            (void)flag;
            return in[++i];
        };
        if (a == "--json") {
            as_json = true;
        } else if (a == "--stats") {
            show_stats = true;
        } else if (a == "--since" || a == "--until" || a == "--audit" || a == "--config") {
            const auto v = value(a);
            if (!v) {
                return fail_usage(std::string(a) + " needs a value");
            }
            if (a == "--since") {
                since_text = *v;
            } else if (a == "--until") {
                until_text = *v;
            } else if (a == "--audit") {
                if (dirs.size() >= 256) {
                    return fail_usage("at most 256 --audit directories");
                }
                dirs.emplace_back(*v);
            } else {
                config_file = std::string(*v);
            }
        } else if (a.starts_with("-")) {
            return fail_usage("unknown option '" + std::string(a) + "'");
        } else if (!session) {
            session = std::string(a);
        } else {
            return fail_usage("one SESSION only");
        }
    }
    if (!session || session->empty()) {
        return fail_usage("which SESSION?");
    }
    if (!dirs.empty() && config_file) {
        return fail_usage("--audit and --config are alternatives");
    }
    std::string window_error;
    const auto window = proxy::audit::parse_time_window(since_text, until_text,
                                                        common::wall_clock::now(), window_error);
    if (!window) {
        return fail_usage(window_error);
    }
    proxy::audit::timeline_query q;
    q.session = *session;
    q.since = window->since;
    q.until = window->until;
    if (config_file) {
        const config::load_result r = config::load_policy_file(*config_file);
        if (!r.ok()) {
            for (const auto& d : r.errors) {
                std::cerr << d.to_string() << '\n';
            }
            return 1;
        }
        dirs.push_back(r.value->audit.path);
    }
    if (dirs.empty()) {
        dirs.push_back(config::audit_spec{}.path);
    }

    const auto t0 = std::chrono::steady_clock::now();
    proxy::audit::timeline_stats stats;
    std::string error;
    std::vector<proxy::audit::timeline_event> events;
    for (const auto& d : dirs) {
        auto some = proxy::audit::read_timeline(d, q, stats, error);
        if (!error.empty()) {
            break;
        }
        events.insert(events.end(), std::make_move_iterator(some.begin()),
                      std::make_move_iterator(some.end()));
    }
    if (dirs.size() > 1) {
        // RFC 3339 UTC with milliseconds: text order is time order; ties keep the order read.
        std::stable_sort(events.begin(), events.end(),
                         [](const auto& x, const auto& y) { return x.ts < y.ts; });
    }
    // The text form labels the connections that carried MCP tool calls: it reads them all.
    const std::vector<std::string> text = as_json ? std::vector<std::string>()
                                                  : proxy::audit::format_timeline(events);
    std::string out;
    for (std::size_t i = 0; i < events.size(); ++i) {
        out += as_json ? events[i].line : text[i];
        out += '\n';
        if (out.size() >= 1 << 16) {
            std::fwrite(out.data(), 1, out.size(), stdout);
            out.clear();
        }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    if (show_stats) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "cordon audit: %llu files, %s searched, %llu lines parsed, %.3f s\n",
                     static_cast<unsigned long long>(stats.files),
                     proxy::audit::human_bytes(stats.bytes).c_str(),
                     static_cast<unsigned long long>(stats.parsed), s);
    }
    if (stats.malformed > 0) {
        std::cerr << "cordon audit: " << stats.malformed
                  << " candidate lines were not audit JSON and were skipped\n";
    }
    if (!error.empty()) {
        std::cerr << "cordon audit: " << error << '\n';
        return 1;
    }
    if (events.empty()) {
        std::cerr << "cordon audit: no events of session " << *session << " in " << dirs[0]
                  << (dirs.size() > 1 ? " (and the other --audit directories)" : "") << '\n';
        return 1;
    }
    return 0;
}

}  // namespace cordon::cli
