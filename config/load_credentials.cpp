// Loading what TLS inspection and the credential broker need of a policy's jobs: a job's
// `credentials`, a rule's `credential`, and the checks that tie them to `secrets` and
// `inspect` (the `inspect` and `secrets` sections themselves: load_daemon.cpp).
#include <algorithm>
#include <set>
#include <string>

#include "config/load.hpp"
#include "config/load_internal.hpp"

namespace cordon::config::detail {

// `credentials: { OPENAI_API_KEY: openai }`: sandbox variable -> secret name. That the secret
// exists is checked once every section is read (check_credentials).
void loader::load_job_credentials(const YAML::Node& n, const std::string& path, job& j) {
    if (!expect_map(n, path)) {
        return;
    }
    std::set<std::string> names;
    for (const auto& entry : n) {
        if (!entry.first.IsScalar()) {
            error(entry.first, path, "variable names are plain words");
            continue;
        }
        const std::string var = entry.first.Scalar();
        const std::string vp = path + "." + var;
        auto secret = get_string(entry.second, vp);
        if (!secret) {
            continue;
        }
        if (!valid_env_name(var)) {
            error(entry.first, vp, "'" + var + "' is not a variable name");
        } else if (!names.insert(var).second) {
            error(entry.first, vp, "listed twice");
        } else if (std::find(j.env.begin(), j.env.end(), var) != j.env.end()) {
            error(entry.first, vp,
                  "also in 'env': the sandbox gets either the host's value or a placeholder, "
                  "not both");
        } else {
            j.credentials.emplace_back(var, std::move(*secret));
        }
    }
}

// An https rule terminates TLS with cordon's CA: without the `inspect` section there is none,
// and such a rule is refused rather than carried as a plain tunnel.
void loader::check_inspect(const policy& p) {
    if (p.inspect) {
        return;
    }
    for (const job& j : p.jobs) {
        for (std::size_t i = 0; i < j.egress.size(); ++i) {
            const egress_rule& r = j.egress[i];
            if (r.proto != protocol::https) {
                continue;
            }
            diagnostic d;
            d.file = file_;
            d.line = r.pos.line;
            d.column = r.pos.column;
            d.message = "jobs." + j.name + ".egress[" + std::to_string(i) +
                        "]: protocol https needs the 'inspect' section (cordon's CA: run "
                        "`cordon ca init DIR`, then `inspect: { ca: { cert: DIR/ca.pem, key: "
                        "DIR/ca.key } }`)";
            errors_.push_back(std::move(d));
        }
    }
}

// `credential: { secret: openai, header: Authorization, format: "Bearer {}" }`.
void loader::load_credential(const YAML::Node& n, const std::string& path, egress_rule& r) {
    if (!expect_map(n, path)) {
        return;
    }
    const auto keys = check_keys(n, path, {"secret", "header", "format"});
    credential_spec c;
    bool ok = true;
    if (const auto* v = find(keys, "secret")) {
        auto s = get_string(*v, path + ".secret");
        ok = ok && s.has_value();
        c.secret = s.value_or("");
    } else {
        error(n, path, "missing key 'secret' (a name of the policy's `secrets`)");
        ok = false;
    }
    if (const auto* v = find(keys, "header")) {
        auto s = get_string(*v, path + ".header");
        if (s && !valid_credential_header(*s)) {
            error(*v, path + ".header",
                  "'" + *s +
                      "' cannot carry a credential: a header name (token characters), "
                      "not Host, Content-Length, Transfer-Encoding, Connection or a Proxy- field");
            ok = false;
        }
        ok = ok && s.has_value();
        c.header = s.value_or("");
    } else {
        error(n, path, "missing key 'header' (e.g. Authorization)");
        ok = false;
    }
    std::string format = "{}";
    if (const auto* v = find(keys, "format")) {
        auto s = get_string(*v, path + ".format");
        ok = ok && s.has_value();
        format = s.value_or("{}");
    }
    const std::size_t at = format.find("{}");
    const bool printable = std::all_of(format.begin(), format.end(),
                                       [](char ch) { return ch >= 0x20 && ch < 0x7f; });
    if (at == std::string::npos || format.find("{}", at + 2) != std::string::npos || !printable) {
        if (const auto* v = find(keys, "format")) {
            error(*v, path + ".format",
                  "the header value with exactly one {} where the secret goes, printable "
                  "ASCII (e.g. \"Bearer {}\")");
        }
        ok = false;
    } else {
        c.prefix = format.substr(0, at);
        c.suffix = format.substr(at + 2);
    }
    if (ok) {
        r.credential = std::move(c);
    }
}

// Secrets, credentials and the rules that inject them must agree: every name refers to a
// secret of the policy, every injected secret is one the job's sandboxes get a placeholder
// for, and all of it needs the `inspect` section.
void loader::check_credentials(const policy& p) {
    const auto has_secret = [&p](const std::string& name) {
        return std::any_of(p.secrets.begin(), p.secrets.end(),
                           [&name](const secret_spec& s) { return s.name == name; });
    };
    const auto at = [this](const source_pos& pos, std::string message) {
        diagnostic d;
        d.file = file_;
        d.line = pos.line;
        d.column = pos.column;
        d.message = std::move(message);
        errors_.push_back(std::move(d));
    };
    if (!p.secrets.empty() && !p.inspect) {
        at(p.secrets.front().pos,
           "secrets: the credential broker needs the 'inspect' section (cordon injects "
           "secrets inside TLS it terminates)");
    }
    for (const job& j : p.jobs) {
        for (const auto& [var, secret] : j.credentials) {
            if (!has_secret(secret)) {
                at(j.pos, "jobs." + j.name + ".credentials." + var + ": no secret named '" +
                              secret + "' in `secrets`");
            }
        }
        for (std::size_t i = 0; i < j.egress.size(); ++i) {
            const egress_rule& r = j.egress[i];
            if (!r.credential) {
                continue;
            }
            const std::string where = "jobs." + j.name + ".egress[" + std::to_string(i) +
                                      "].credential";
            if (r.host && r.host->wildcard) {
                at(r.pos, where + ": a credential goes to one host, never to every name below "
                                  "a wildcard (a tenant of a shared domain would receive it): "
                                  "name the host");
            } else if (!has_secret(r.credential->secret)) {
                at(r.pos, where + ": no secret named '" + r.credential->secret + "' in `secrets`");
            } else if (std::none_of(
                           j.credentials.begin(), j.credentials.end(),
                           [&r](const auto& c) { return c.second == r.credential->secret; })) {
                at(r.pos, where +
                              ": the job's `credentials` give its sandboxes no placeholder "
                              "for '" +
                              r.credential->secret +
                              "' (e.g. `credentials: { API_KEY: " + r.credential->secret + " }`)");
            }
        }
    }
}

}  // namespace cordon::config::detail
