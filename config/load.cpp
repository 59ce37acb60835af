// Loading a policy: the entry points, the top-level sections, the shadowed-rule warnings.
#include "config/load.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "config/load_internal.hpp"

namespace cordon::config {

std::string diagnostic::to_string() const {
    if (line <= 0) {
        return file + ": " + message;
    }
    return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

namespace {

constexpr int max_job_name = 64;

}  // namespace

namespace detail {

void loader::load(const YAML::Node& root, policy& p) {
    if (!root.IsMap()) {
        error(root, "", "a policy is a mapping with keys listen, jobs, ...; got " + kind_of(root));
        return;
    }
    const auto keys = check_keys(root, "",
                                 {"listen", "admin", "dns", "state", "audit", "alerts", "kill",
                                  "proxy", "inspect", "secrets", "jobs", "upstream_proxy",
                                  "cluster"});
    // Jobs first: later sections refer to job names.
    if (const auto* n = find(keys, "jobs")) {
        load_jobs(*n, p);
    } else if (!root["jobs"].IsDefined()) {
        error(root, "",
              "missing key 'jobs' (write `jobs: {}` for a policy that allows "
              "nothing)");
    }
    if (const auto* n = find(keys, "listen")) {
        load_listen(*n, p.listen);
    } else {
        error(root, "", "missing key 'listen' (at least `listen: { proxy: ADDR:PORT }`)");
    }
    if (const auto* n = find(keys, "admin")) {
        load_admin(*n, p.admin);
    }
    if (p.listen.admin && !p.admin.token_file &&
        (find(keys, "admin") == nullptr || !(*find(keys, "admin"))["token_file"])) {
        const YAML::Node* at = find(keys, "admin");
        error(at != nullptr ? at->Mark() : root.Mark(), "admin",
              "missing 'token_file': the admin API is never open without a token");
    }
    if (const auto* n = find(keys, "dns")) {
        load_dns(*n, p);
    }
    if (const auto* n = find(keys, "state")) {
        load_state(*n, p.state);
    }
    if (const auto* n = find(keys, "audit")) {
        load_audit(*n, p.audit);
    }
    if (const auto* n = find(keys, "alerts")) {
        load_alerts(*n, p.alerts);
    }
    if (const auto* n = find(keys, "kill")) {
        load_kill(*n, p.kill);
    }
    if (const auto* n = find(keys, "proxy")) {
        load_proxy(*n, p.proxy);
    }
    if (const auto* n = find(keys, "inspect")) {
        load_inspect(*n, p);
    }
    if (const auto* n = find(keys, "secrets")) {
        load_secrets(*n, p);
    }
    if (const auto* n = find(keys, "upstream_proxy")) {
        load_upstream_proxy(*n, p);
    }
    if (const auto* n = find(keys, "cluster")) {
        load_cluster(*n, p);
    }
    check_sources(p);
    check_inspect(p);
    check_credentials(p);
}

}  // namespace detail

namespace {

// Receives parser events and keeps none: used to count documents without building them.
class discard_events : public YAML::EventHandler {
public:
    YAML::Mark document_start = YAML::Mark::null_mark();  ///< of the last document read
    void OnDocumentStart(const YAML::Mark& m) override { document_start = m; }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

// True when every line is blank, a comment or a document marker.
bool only_comments(std::string_view text) {
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string_view::npos) {
            end = text.size();
        }
        std::string_view line = text.substr(start, end - start);
        const std::size_t first = line.find_first_not_of(" \t\r");
        if (first != std::string_view::npos) {
            line.remove_prefix(first);
            if (line[0] != '#' && !line.starts_with("---") && !line.starts_with("...")) {
                return false;
            }
        }
        start = end + 1;
    }
    return true;
}

diagnostic whole_file(std::string_view file, std::string message) {
    return diagnostic{std::string(file), 0, 0, std::move(message)};
}

}  // namespace

bool valid_credential_header(std::string_view s) noexcept {
    if (s.empty() || s.size() > 64) {
        return false;
    }
    std::string lower;
    for (const char c : s) {
        const bool tchar = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') ||
                           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
        if (!tchar) {
            return false;
        }
        lower.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
    }
    for (const std::string_view no : {"host", "content-length", "transfer-encoding", "connection",
                                      "keep-alive", "te", "trailer", "upgrade", "expect"}) {
        if (lower == no) {
            return false;
        }
    }
    return !lower.starts_with("proxy-");
}

bool valid_http_method(std::string_view s) noexcept {
    return !s.empty() && s.size() <= 32 && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || c == '-' || c == '_';
    });
}

bool valid_job_name(std::string_view s) noexcept {
    if (s.empty() || s.size() > static_cast<std::size_t>(max_job_name)) {
        return false;
    }
    auto alnum = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    };
    if (!alnum(s.front())) {
        return false;
    }
    return std::all_of(s.begin(), s.end(),
                       [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

load_result load_policy(std::string_view text, std::string_view file) {
    load_result result;
    if (text.size() > max_policy_bytes) {
        result.errors.push_back(whole_file(file, "policy is larger than 16 MiB; refusing to "
                                                 "read it"));
        return result;
    }
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
        result.errors.push_back(whole_file(file, "policy is empty"));
        return result;
    }
    if (text.find('\0') != std::string_view::npos) {
        result.errors.push_back(whole_file(file, "policy contains NUL bytes; is it a text "
                                                 "file?"));
        return result;
    }
    // Not YAML::LoadAll: on some malformed inputs yaml-cpp 0.7's parser keeps reporting
    // empty documents without consuming input, and LoadAll then loops and allocates forever
    // (found by tests/fuzz/policy). Read one document, then ask for at most one more.
    YAML::Node root;
    bool second_document = false;
    YAML::Mark second_at = YAML::Mark::null_mark();
    try {
        const std::string owned(text);
        root = YAML::Load(owned);
        if (!root.IsNull()) {
            std::istringstream in(owned);
            YAML::Parser parser(in);
            discard_events sink;
            second_document = parser.HandleNextDocument(sink) && parser.HandleNextDocument(sink);
            second_at = sink.document_start;
        }
    } catch (const YAML::DeepRecursion& e) {
        diagnostic d = whole_file(file, "not valid YAML: nested too deeply");
        if (!e.mark.is_null()) {
            d.line = e.mark.line + 1;
            d.column = e.mark.column + 1;
        }
        result.errors.push_back(std::move(d));
        return result;
    } catch (const YAML::Exception& e) {
        diagnostic d = whole_file(file, "not valid YAML: " + e.msg);
        if (!e.mark.is_null()) {
            d.line = e.mark.line + 1;
            d.column = e.mark.column + 1;
        }
        result.errors.push_back(std::move(d));
        return result;
    }
    if (root.IsNull()) {
        result.errors.push_back(whole_file(
            file, only_comments(text) ? "policy is empty"
                                      : "not valid YAML: no document could be read from it"));
        return result;
    }
    detail::loader l{std::string(file)};
    if (second_document) {
        l.error(second_at, "", "a policy file holds one YAML document; found more");
    }
    policy p;
    p.source = std::string(file);
    try {
        l.load(root, p);
    } catch (const YAML::Exception& e) {
        // Aliases and odd node shapes can still surprise yaml-cpp; never crash on them.
        l.error(e.mark, "", "could not read the policy: " + e.msg);
    }
    result.errors = std::move(l.errors());
    std::stable_sort(result.errors.begin(), result.errors.end(),
                     [](const diagnostic& a, const diagnostic& b) {
                         return std::tie(a.line, a.column) < std::tie(b.line, b.column);
                     });
    if (result.errors.empty()) {
        result.warnings = shadowed_rules(p, file);
        result.value = std::move(p);
    }
    return result;
}

std::vector<diagnostic> shadowed_rules(const policy& p, std::string_view file) {
    std::vector<diagnostic> out;
    // decide() walks a name's (or a prefix's) rules in file order and stops at the first
    // that allows the request, so a later rule for the same target is reached only for
    // the ports (and methods) no earlier one takes. tls, tcp and https all carry CONNECT.
    const auto same_target = [](const egress_rule& a, const egress_rule& b) {
        if (a.host && b.host) {
            return a.host->name == b.host->name && a.host->wildcard == b.host->wildcard;
        }
        return a.net && b.net && *a.net == *b.net;
    };
    const auto takes_requests_of = [](const egress_rule& a, const egress_rule& b) {
        if ((a.proto == protocol::http) != (b.proto == protocol::http)) {
            return false;
        }
        // A CONNECT goes to the first tls, tcp or https rule that takes its port; requests
        // (plain http, or inside an https tunnel) are decided across the rules of their kind.
        const bool per_request = b.proto == protocol::http ||
                                 (a.proto == protocol::https && b.proto == protocol::https);
        if (!per_request) {
            return true;
        }
        if (!a.http.empty()) {
            return false;  // request rules take some paths only: b may still be reached
        }
        if (a.methods.empty()) {
            return true;
        }
        if (b.methods.empty()) {
            return false;  // b allows any method, a only some
        }
        return std::all_of(b.methods.begin(), b.methods.end(), [&a](const std::string& m) {
            return std::find(a.methods.begin(), a.methods.end(), m) != a.methods.end();
        });
    };
    for (const job& j : p.jobs) {
        for (std::size_t k = 1; k < j.egress.size(); ++k) {
            const egress_rule& b = j.egress[k];
            std::vector<std::uint16_t> taken;
            std::size_t first_by = j.egress.size();
            for (std::size_t i = 0; i < k; ++i) {
                const egress_rule& a = j.egress[i];
                if (!same_target(a, b) || !takes_requests_of(a, b)) {
                    continue;
                }
                for (const std::uint16_t port : b.ports) {
                    if (a.allows_port(port) &&
                        std::find(taken.begin(), taken.end(), port) == taken.end()) {
                        taken.push_back(port);
                        first_by = std::min(first_by, i);
                    }
                }
            }
            if (taken.empty()) {
                continue;
            }
            std::sort(taken.begin(), taken.end());
            const egress_rule& a = j.egress[first_by];
            std::string msg = "jobs." + j.name + ".egress[" + std::to_string(k) + "]: ";
            if (taken.size() == b.ports.size()) {
                msg += "never matches: ";
            } else {
                msg += taken.size() == 1 ? "port " : "ports ";
                for (std::size_t i = 0; i < taken.size(); ++i) {
                    msg += (i > 0 ? "," : "") + std::to_string(taken[i]);
                }
                msg += taken.size() == 1 ? " never matches: " : " never match: ";
            }
            msg += "an earlier rule, jobs." + j.name + ".egress[" + std::to_string(first_by) +
                   "] (" + a.describe() + ", line " + std::to_string(a.pos.line) +
                   "), takes those requests first (the first matching rule wins)";
            out.push_back(diagnostic{std::string(file), b.pos.line, b.pos.column, msg});
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const diagnostic& x, const diagnostic& y) {
        return std::tie(x.line, x.column) < std::tie(y.line, y.column);
    });
    return out;
}

load_result load_policy_file(const std::string& path) {
    const auto refused = [&path](std::string message) {
        load_result r;
        r.errors.push_back(whole_file(path, std::move(message)));
        return r;
    };
    // Non-blocking open, then a regular file only: a FIFO (or a device) at the policy path
    // would block the caller in open() or read(), and a reload runs on the control thread
    // that serves the kill switch.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        return refused("cannot open: " + std::string(std::strerror(errno)));
    }
    struct fd_closer {
        int fd;
        ~fd_closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        return refused("cannot open: " + std::string(std::strerror(errno)));
    }
    if (S_ISDIR(st.st_mode)) {
        return refused("is a directory, not a policy file");
    }
    if (!S_ISREG(st.st_mode)) {
        return refused(std::string("is not a regular file (") +
                       (S_ISFIFO(st.st_mode)   ? "a FIFO"
                        : S_ISSOCK(st.st_mode) ? "a socket"
                        : S_ISCHR(st.st_mode)  ? "a character device"
                        : S_ISBLK(st.st_mode)  ? "a block device"
                                               : "not a file") +
                       "); refusing to read it");
    }
    if (static_cast<std::uint64_t>(st.st_size) > max_policy_bytes) {
        return refused("policy is larger than 16 MiB; refusing to read it");
    }
    std::string text;
    std::vector<char> buf(64 * 1024);
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return refused("read error: " + std::string(std::strerror(errno)));
        }
        if (n == 0) {
            break;
        }
        text.append(buf.data(), static_cast<std::size_t>(n));
        if (text.size() > max_policy_bytes) {
            return refused("policy is larger than 16 MiB; refusing to read it");
        }
    }
    return load_policy(text, path);
}

}  // namespace cordon::config
