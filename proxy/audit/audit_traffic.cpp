#include "proxy/audit/audit_traffic.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <tuple>

#include "common/time.hpp"
#include "config/classify.hpp"
#include "config/host.hpp"
#include "config/ip.hpp"
#include "config/load.hpp"
#include "config/target.hpp"
#include "proxy/audit/audit.hpp"
#include "proxy/audit/audit_files.hpp"
#include "proxy/audit/audit_timeline.hpp"  // find_needles

namespace cordon::proxy::audit {
namespace {

enum class kind_of_event : std::uint8_t {
    other,
    open,
    deny,
    dns_query,
    dns_deny,
    http_request,
    tool_call,
};

// Distinct paths kept per target, kind and outcome class before the reader folds new ones
// to their first segment, and that many more before it folds them to "/": an agent that
// asks for a million distinct paths costs a bounded amount of memory (and suggest reads
// "prefix/**" for what was folded).
constexpr std::size_t max_paths_per_target = 1024;
constexpr std::size_t max_folded_per_target = 256;

// The fields of one audit line this reader uses, as raw views into the line: string values
// without their quotes (escapes kept), numbers as written.
struct fields {
    kind_of_event event = kind_of_event::other;
    std::string_view ts;
    std::string_view session;
    std::string_view job;
    std::string_view target;
    std::string_view method;
    std::string_view reason;
    std::string_view would_deny;
    std::string_view ip;
    std::string_view resolved;
    std::string_view rule;
    std::string_view name;
    std::string_view path;
    std::string_view repeats;
    std::string_view credential;
    std::string_view via;   // tool.call: "mcp" when cordon decided it on the wire
    std::string_view tool;  // tool.call
    bool job_seen = false;
};

enum class scan_result { ok, skip, malformed };

kind_of_event event_kind(std::string_view e) {
    if (e == "conn.open") {
        return kind_of_event::open;
    }
    if (e == "conn.deny") {
        return kind_of_event::deny;
    }
    if (e == "dns.query") {
        return kind_of_event::dns_query;
    }
    if (e == "dns.deny") {
        return kind_of_event::dns_deny;
    }
    if (e == "http.request") {
        return kind_of_event::http_request;
    }
    if (e == "tool.call") {
        return kind_of_event::tool_call;
    }
    return kind_of_event::other;
}

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// RFC 3339 as the audit writer puts it ("2026-11-29T15:20:18.123Z"); the value is compared
// as text and printed in summaries, so nothing else (no control bytes) gets through.
bool plausible_ts(std::string_view ts) {
    return ts.size() >= 20 && ts.size() <= 40 && ts[4] == '-' &&
           std::all_of(ts.begin(), ts.end(), [](char c) {
               return (c >= '0' && c <= '9') || c == '-' || c == ':' || c == '.' || c == '+' ||
                      c == 'T' || c == 'Z' || c == 't' || c == 'z';
           });
}

// A flat walk over one JSON object: keys and values of the top level, nested values
// skipped with their brackets counted (strings inside them respected). Allocation-free.
// Stops early (skip) once the event is known not to be wanted.
scan_result scan_fields(std::string_view s, fields& f) {
    std::size_t i = 0;
    const std::size_t n = s.size();
    const auto ws = [&] {
        while (i < n && is_ws(s[i])) {
            ++i;
        }
    };
    // At an opening quote: returns the string's contents and moves past its closing quote.
    // memchr to each quote; a quote ends the string unless an odd run of backslashes
    // precedes it.
    const auto str = [&](std::string_view& out) {
        const std::size_t start = ++i;
        for (;;) {
            const void* q = i < n ? std::memchr(s.data() + i, '"', n - i) : nullptr;
            if (q == nullptr) {
                return false;
            }
            const auto at = static_cast<std::size_t>(static_cast<const char*>(q) - s.data());
            std::size_t k = at;
            while (k > start && s[k - 1] == '\\') {
                --k;
            }
            i = at + 1;
            if ((at - k) % 2 == 0) {
                out = s.substr(start, at - start);
                return true;
            }
        }
    };
    ws();
    if (i >= n || s[i] != '{') {
        return scan_result::malformed;
    }
    ++i;
    bool event_seen = false;
    for (;;) {
        ws();
        if (i < n && s[i] == '}') {
            break;
        }
        std::string_view key;
        if (i >= n || s[i] != '"' || !str(key)) {
            return scan_result::malformed;
        }
        ws();
        if (i >= n || s[i] != ':') {
            return scan_result::malformed;
        }
        ++i;
        ws();
        if (i >= n) {
            return scan_result::malformed;
        }
        std::string_view value;
        if (s[i] == '"') {
            if (!str(value)) {
                return scan_result::malformed;
            }
        } else if (s[i] == '{' || s[i] == '[') {
            int depth = 0;
            do {
                if (s[i] == '"') {
                    std::string_view ignored;
                    if (!str(ignored)) {
                        return scan_result::malformed;
                    }
                    continue;
                }
                if (s[i] == '{' || s[i] == '[') {
                    ++depth;
                } else if (s[i] == '}' || s[i] == ']') {
                    --depth;
                }
                ++i;
            } while (i < n && depth > 0);
            if (depth != 0) {
                return scan_result::malformed;
            }
        } else {
            const std::size_t start = i;
            while (i < n && s[i] != ',' && s[i] != '}' && !is_ws(s[i])) {
                ++i;
            }
            value = s.substr(start, i - start);
            if (value.empty()) {
                return scan_result::malformed;
            }
        }
        switch (key.size()) {
            case 2:
                if (key == "ts") {
                    f.ts = value;
                } else if (key == "ip") {
                    f.ip = value;
                }
                break;
            case 3:
                if (key == "job") {
                    f.job = value;
                    f.job_seen = true;
                } else if (key == "via") {
                    f.via = value;
                }
                break;
            case 4:
                if (key == "rule") {
                    f.rule = value;
                } else if (key == "name") {
                    f.name = value;
                } else if (key == "path") {
                    f.path = value;
                } else if (key == "tool") {
                    f.tool = value;
                }
                break;
            case 5:
                if (key == "event") {
                    f.event = event_kind(value);
                    event_seen = true;
                    if (f.event == kind_of_event::other) {
                        return scan_result::skip;
                    }
                }
                break;
            case 6:
                if (key == "target") {
                    f.target = value;
                } else if (key == "method") {
                    f.method = value;
                } else if (key == "reason") {
                    f.reason = value;
                }
                break;
            case 7:
                if (key == "session") {
                    f.session = value;
                } else if (key == "repeats") {
                    f.repeats = value;
                }
                break;
            case 8:
                if (key == "resolved") {
                    f.resolved = value;
                }
                break;
            case 10:
                if (key == "would_deny") {
                    f.would_deny = value;
                } else if (key == "credential") {
                    f.credential = value;
                }
                break;
            default: break;
        }
        ws();
        if (i < n && s[i] == ',') {
            ++i;
            continue;
        }
        if (i < n && s[i] == '}') {
            break;
        }
        return scan_result::malformed;
    }
    return event_seen && plausible_ts(f.ts) ? scan_result::ok : scan_result::malformed;
}

// Queries a dns.* line stands for: one, or its `repeats` (docs/dns.md: a line with
// "repeats": N says that N more identical queries came).
std::uint64_t count_of(std::string_view repeats) {
    std::uint64_t n = 0;
    if (repeats.empty()) {
        return 1;
    }
    const auto [p, ec] = std::from_chars(repeats.data(), repeats.data() + repeats.size(), n);
    if (ec != std::errc{} || p != repeats.data() + repeats.size() ||
        n > std::numeric_limits<std::uint32_t>::max()) {
        return 1;
    }
    return n;
}

// A JSON string value as the scanner gives it (escapes kept), decoded when its only escapes
// are \" and \\ (all a path in normal form can need); nullopt otherwise.
std::optional<std::string> simple_unescaped(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] != '\\') {
            out.push_back(v[i]);
            continue;
        }
        if (i + 1 >= v.size() || (v[i + 1] != '"' && v[i + 1] != '\\')) {
            return std::nullopt;
        }
        out.push_back(v[++i]);
    }
    return out;
}

// A record's target ("host:port") as suggest and replay use it: a normalised name, or an IP
// literal's canonical text (no zone). False when it is not one.
bool read_target(std::string_view target, std::string& host, bool& ip_literal,
                 std::uint16_t& port) {
    const config::target_result t = target.find('\\') == std::string_view::npos
                                        ? config::parse_connect_target(target)
                                        : config::target_result{};
    if (!t.value) {
        return false;
    }
    port = t.value->port;
    const config::literal lit = config::parse_literal(t.value->host);
    if (lit.kind == config::literal_kind::ipv4 || lit.kind == config::literal_kind::ipv6) {
        ip_literal = true;
        host = lit.zone.empty() ? lit.address.to_string() : std::string();
        return lit.zone.empty();
    }
    if (lit.kind != config::literal_kind::not_ip) {
        return false;
    }
    config::host_result h = config::normalise_host(t.value->host);
    host = std::move(h.value);
    return h.ok();
}

}  // namespace

traffic_collector::traffic_collector(traffic_query q) : q_(std::move(q)) {
    std::string quoted;
    common::append_json_string(quoted, q_.job);
    job_json_ = quoted.substr(1, quoted.size() - 2);
    needle_ = "\"job\":" + quoted;
    since_ = q_.since ? common::format_rfc3339(*q_.since) : std::string();
    until_ = q_.until ? common::format_rfc3339(*q_.until) : std::string();
}

void traffic_collector::add_line(std::string_view line, traffic_stats& stats) {
    fields f;
    ++stats.lines;
    const scan_result sr = scan_fields(line, f);
    if (sr == scan_result::malformed) {
        ++stats.malformed;
        return;
    }
    if (sr == scan_result::skip || !f.job_seen || f.job != job_json_) {
        return;
    }
    if ((!since_.empty() && f.ts < since_) || (!until_.empty() && f.ts > until_)) {
        return;
    }
    // A record counted: its time and session join the summary.
    const auto used = [&] {
        ++stats.used;
        if (first_ts_.empty() || f.ts < first_ts_) {
            first_ts_ = f.ts;
        }
        if (f.ts > last_ts_) {
            last_ts_ = f.ts;
        }
        if (!f.session.empty()) {
            key_.assign(f.session);
            sessions_.insert(key_);
        }
    };
    if (f.event == kind_of_event::dns_query || f.event == kind_of_event::dns_deny) {
        const config::host_result h = config::normalise_host(f.name);
        if (!h.ok()) {
            return;
        }
        learn::seen_name& sn = dns_[h.value];
        sn.name = h.value;
        (f.event == kind_of_event::dns_query ? sn.answered : sn.denied) += count_of(f.repeats);
        used();
        return;
    }
    if (f.event == kind_of_event::tool_call) {
        if (add_tool_call(f.target, f.via, f.tool, f.reason, f.would_deny, stats)) {
            used();
        }
        return;
    }
    const bool inspected = f.event == kind_of_event::http_request;
    learn::seen_outcome outcome = learn::seen_outcome::allowed;
    std::string_view reason;
    // A request an MCP rule refused for its tool calls was allowed by the egress rules: it
    // counts as allowed here, and its calls as theirs (add_tool_call).
    const bool tool_refusal = (f.event == kind_of_event::deny || inspected) &&
                              learn::is_tool_reason(f.reason);
    if (!tool_refusal && (f.event == kind_of_event::deny || (inspected && !f.reason.empty()))) {
        if (!learn::is_policy_reason(f.reason)) {
            ++not_policy_[std::string(learn::known_reason(f.reason))];
            used();
            return;
        }
        outcome = learn::seen_outcome::denied;
        reason = f.reason;
    } else if (!f.would_deny.empty()) {
        outcome = learn::seen_outcome::would_deny;
        reason = f.would_deny;
    }
    // Only the non-public addresses serve checked matter (to learn and replay resolves_to):
    // every one the name resolved to (`resolved`; older records: the one connected to, `ip`).
    // Public ones are folded so that a CDN's many addresses make one entry.
    address_.clear();
    const bool private_deny = f.event == kind_of_event::deny && reason == "private_address";
    if (f.event == kind_of_event::open || private_deny) {
        std::string_view list = !f.resolved.empty() ? f.resolved
                                                    : (private_deny ? std::string_view() : f.ip);
        while (!list.empty()) {
            const std::size_t end = std::min(list.find(' '), list.size());
            const std::string_view one = list.substr(0, end);
            list.remove_prefix(std::min(end + 1, list.size()));
            const auto a = config::parse_ip(one);  // cheaper than a cache of a day's addresses
            if (!a) {
                address_ = "?";  // not an address: recorded_addresses() refuses it
            } else if (!config::classify(*a).is_public() && address_ != "?") {
                address_.append(address_.empty() ? "" : " ").append(a->to_string());
            }
        }
    }
    const std::string_view address = address_;
    const bool tcp_rule = f.event == kind_of_event::open && f.rule.ends_with("/tcp");
    const bool https_rule = f.event == kind_of_event::open && f.rule.ends_with("/https");
    // The path as suggest and replay use it: normal form, no query, bounded (learn.hpp);
    // unusable (an escape other than \", not in normal form): none. Looked up first as
    // written (cordon writes paths in normal form), and read properly only for a new entry.
    const bool has_path = !f.path.empty() &&
                          (inspected || (!f.method.empty() && f.method != "CONNECT"));
    std::optional<learn::recorded_path> path;
    std::string_view path_key = has_path ? f.path.substr(0, f.path.find('?')) : "";
    const std::string_view credential = inspected && f.credential.size() <= 64 &&
                                                f.credential.find('\\') == std::string_view::npos
                                            ? f.credential
                                            : std::string_view();
    const auto make_key = [&] {
        key_.clear();
        key_.push_back(static_cast<char>('0' + static_cast<int>(outcome)));
        key_.push_back(tcp_rule ? 't' : https_rule ? 's' : '-');
        key_.push_back(inspected ? 'i' : '-');
        key_.push_back(path && path->cut ? 'c' : '-');
        key_.append(f.target).push_back('\x1f');
        key_.append(f.method).push_back('\x1f');
        key_.append(path_key).push_back('\x1f');
        key_.append(reason).push_back('\x1f');
        key_.append(credential).push_back('\x1f');
        key_.append(address);
    };
    make_key();
    auto it = requests_.find(key_);
    if (it == requests_.end() && has_path) {
        if (const auto text = simple_unescaped(f.path)) {
            path = learn::parse_recorded_path(*text);
        }
        path_key = path ? std::string_view(path->path) : std::string_view();
        make_key();
        it = requests_.find(key_);
    }
    if (it == requests_.end() && path) {
        // A new path: within the target's bound, or folded.
        std::string bucket(f.target);
        bucket.push_back(inspected ? 'i' : '-');
        bucket.push_back(reason == "http_rule" ? 'r' : '-');
        std::size_t& n = paths_[bucket];
        if (n >= max_paths_per_target) {
            path = learn::fold_path(*path,
                                    n >= max_paths_per_target + max_folded_per_target ? 0 : 1);
            ++stats.paths_folded;
            path_key = path->path;
            make_key();
            it = requests_.find(key_);
        }
        if (it == requests_.end()) {
            ++n;
        }
    }
    if (it == requests_.end()) {
        entry e;
        learn::seen_request& r = e.request;
        r.outcome = outcome;
        r.reason = reason.empty() ? std::string() : std::string(learn::known_reason(reason));
        r.address = std::string(address);
        r.tcp_rule = tcp_rule;
        r.https_rule = https_rule;
        // Records before conn.deny carried a method are CONNECTs as far as can be told.
        r.kind = inspected                                   ? config::request_kind::inspected
                 : f.method.empty() || f.method == "CONNECT" ? config::request_kind::connect
                                                             : config::request_kind::http;
        const bool method_ok = r.kind == config::request_kind::connect ||
                               (config::valid_http_method(f.method) && f.method != "CONNECT");
        if (r.kind != config::request_kind::connect) {
            r.method = std::string(f.method);
            // http: written only where request rules judged the path; unusable ones are
            // left out: replay then cannot tell, and says so.
            if (path) {
                r.path = path->path;
                r.path_cut = path->cut;
            }
            r.credential = std::string(credential);
        }
        e.skip = !method_ok || !read_target(f.target, r.host, r.ip_literal, r.port);
        it = requests_.emplace(key_, std::move(e)).first;
    }
    if (it->second.skip) {
        ++stats.bad_target;
        return;
    }
    ++it->second.request.count;
    used();
}

bool traffic_collector::add_tool_call(std::string_view target, std::string_view via,
                                      std::string_view tool, std::string_view reason,
                                      std::string_view would_deny, traffic_stats& stats) {
    if (via != "mcp") {
        return false;  // posted by the agent's framework: nothing cordon decided
    }
    learn::seen_outcome outcome = learn::seen_outcome::allowed;
    std::string_view why;
    if (learn::is_tool_reason(reason)) {
        outcome = learn::seen_outcome::denied;
        why = reason;
    } else if (learn::is_tool_reason(would_deny)) {
        outcome = learn::seen_outcome::would_deny;
        why = would_deny;
    }
    // (mcp_batch: allowed, not forwarded because another call of its batch was refused)
    key_.clear();
    key_.push_back(static_cast<char>('0' + static_cast<int>(outcome)));
    key_.append(target).push_back('\x1f');
    key_.append(tool).push_back('\x1f');
    key_.append(why);
    auto it = tool_calls_.find(key_);
    if (it == tool_calls_.end()) {
        tool_entry e;
        learn::seen_tool_call& c = e.call;
        c.outcome = outcome;
        c.reason = std::string(why);
        c.tool = std::string(tool);
        e.skip = tool.empty() || !read_target(target, c.host, c.ip_literal, c.port);
        it = tool_calls_.emplace(key_, std::move(e)).first;
    }
    if (it->second.skip) {
        ++stats.bad_target;
        return false;
    }
    ++it->second.call.count;
    return true;
}

void traffic_collector::scan(std::string_view data, traffic_stats& stats) {
    stats.bytes += data.size();
    std::vector<std::size_t> hits;
    const std::vector<std::string> needles{needle_};
    find_needles(data, needles, hits);
    std::sort(hits.begin(), hits.end());
    std::size_t done = 0;  // lines before this offset are read
    for (const std::size_t at : hits) {
        if (at < done) {
            continue;
        }
        const auto [start, end] = line_at(data, at);
        if (end == std::string_view::npos) {
            break;  // the line being written: not yet a record
        }
        add_line(data.substr(start, end - start), stats);
        done = end + 1;
    }
}

learn::seen_traffic traffic_collector::finish() const {
    learn::seen_traffic out;
    out.job = q_.job;
    for (const auto& [k, e] : requests_) {
        if (!e.skip) {
            out.requests.push_back(e.request);
        }
    }
    std::sort(out.requests.begin(), out.requests.end(),
              [](const learn::seen_request& a, const learn::seen_request& b) {
                  return std::tie(a.host, a.port, a.kind, a.method, a.path, a.path_cut, a.outcome,
                                  a.reason, a.credential, a.address, a.tcp_rule, a.https_rule) <
                         std::tie(b.host, b.port, b.kind, b.method, b.path, b.path_cut, b.outcome,
                                  b.reason, b.credential, b.address, b.tcp_rule, b.https_rule);
              });
    // Entries that differ only in raw spelling (an upper-case host) are the same request.
    std::vector<learn::seen_request> merged;
    for (auto& r : out.requests) {
        if (!merged.empty()) {
            auto& m = merged.back();
            if (std::tie(m.host, m.port, m.kind, m.method, m.path, m.path_cut, m.outcome, m.reason,
                         m.credential, m.address, m.tcp_rule, m.https_rule) ==
                std::tie(r.host, r.port, r.kind, r.method, r.path, r.path_cut, r.outcome, r.reason,
                         r.credential, r.address, r.tcp_rule, r.https_rule)) {
                m.count += r.count;
                continue;
            }
        }
        merged.push_back(std::move(r));
    }
    out.requests = std::move(merged);
    for (const auto& [name, n] : dns_) {
        out.dns.push_back(n);
    }
    for (const auto& [k, e] : tool_calls_) {
        if (!e.skip) {
            out.tool_calls.push_back(e.call);
        }
    }
    const auto tool_key = [](const learn::seen_tool_call& c) {
        return std::tie(c.host, c.port, c.tool, c.outcome, c.reason, c.ip_literal);
    };
    std::sort(out.tool_calls.begin(), out.tool_calls.end(),
              [&](const auto& a, const auto& b) { return tool_key(a) < tool_key(b); });
    std::vector<learn::seen_tool_call> calls;  // the same call spelt two ways: one
    for (auto& c : out.tool_calls) {
        if (!calls.empty() && tool_key(calls.back()) == tool_key(c)) {
            calls.back().count += c.count;
        } else {
            calls.push_back(std::move(c));
        }
    }
    out.tool_calls = std::move(calls);
    std::sort(out.dns.begin(), out.dns.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    out.sessions = sessions_.size();
    out.not_policy = not_policy_;
    out.first_ts = first_ts_;
    out.last_ts = last_ts_;
    return out;
}

learn::seen_traffic read_traffic(const std::string& dir, const traffic_query& q,
                                 traffic_stats& stats, std::string& error) {
    traffic_collector c(q);
    stats.files += map_audit_files(
        dir, q.since, q.until,
        [&](const audit_file&, std::string_view data) { c.scan(data, stats); }, error);
    return c.finish();
}

}  // namespace cordon::proxy::audit
