#include "shims/env.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace cordon::shim {
namespace {

bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool is_upper_b32(char c) { return (c >= 'A' && c <= 'Z') || (c >= '2' && c <= '7'); }
bool is_token_char(char c) { return is_alnum(c) || c == '_' || c == '-'; }
bool is_alnum_or_underscore(char c) { return is_alnum(c) || c == '_'; }

enum class charset : unsigned char { b32_upper, alnum, alnum_underscore, token };

bool in_set(char c, charset s) {
    switch (s) {
        case charset::b32_upper: return is_upper_b32(c);
        case charset::alnum: return is_alnum(c);
        case charset::alnum_underscore: return is_alnum_or_underscore(c);
        case charset::token: return is_token_char(c);
    }
    return false;
}

// A key format: a prefix at a word boundary, then at least `min_len` characters of `set`.
struct key_format {
    std::string_view prefix;
    charset set;
    std::size_t min_len;
    std::size_t max_len;  ///< 0: unbounded; else the run must end within it (exact formats)
    std::string_view kind;
};

// Order matters where prefixes overlap: sk-ant- before sk-.
constexpr std::array<key_format, 14> formats{{
    {"AKIA", charset::b32_upper, 16, 16, "AWS access key ID"},
    {"ASIA", charset::b32_upper, 16, 16, "AWS access key ID"},
    {"ghp_", charset::alnum, 36, 0, "GitHub token"},
    {"gho_", charset::alnum, 36, 0, "GitHub token"},
    {"ghs_", charset::alnum, 36, 0, "GitHub token"},
    {"ghu_", charset::alnum, 36, 0, "GitHub token"},
    {"ghr_", charset::alnum, 36, 0, "GitHub token"},
    {"github_pat_", charset::alnum_underscore, 22, 0, "GitHub token"},
    {"glpat-", charset::token, 20, 0, "GitLab personal access token"},
    {"sk-ant-", charset::token, 20, 0, "Anthropic API key"},
    {"sk-proj-", charset::token, 20, 0, "OpenAI API key"},
    {"sk-", charset::token, 32, 0, "OpenAI API key"},          // legacy: sk- and 48
    {"xox", charset::token, 0, 0, "Slack token"},              // checked by slack_at below
    {"-----BEGIN ", charset::token, 0, 0, "PEM private key"},  // checked by pem_at below
}};

std::size_t run_length(std::string_view v, std::size_t from, charset s) {
    std::size_t n = 0;
    while (from + n < v.size() && in_set(v[from + n], s)) {
        ++n;
    }
    return n;
}

// xox[abprs]- then at least 10 token characters.
bool slack_at(std::string_view v, std::size_t i) {
    if (i + 5 > v.size()) {
        return false;
    }
    const char t = v[i + 3];
    if ((t != 'a' && t != 'b' && t != 'p' && t != 'r' && t != 's') || v[i + 4] != '-') {
        return false;
    }
    return run_length(v, i + 5, charset::token) >= 10;
}

// -----BEGIN [A-Z ]*PRIVATE KEY-----
bool pem_at(std::string_view v, std::size_t i) {
    const std::size_t end = v.find("-----", i + 11);
    if (end == std::string_view::npos || end - (i + 11) > 64) {
        return false;
    }
    return v.substr(i + 11, end - (i + 11)).ends_with("PRIVATE KEY");
}

bool matches_at(std::string_view v, std::size_t i, const key_format& f) {
    if (f.kind == "Slack token") {
        return slack_at(v, i);
    }
    if (f.kind == "PEM private key") {
        return pem_at(v, i);
    }
    const std::size_t n = run_length(v, i + f.prefix.size(), f.set);
    if (n < f.min_len) {
        return false;
    }
    if (f.max_len != 0 && n > f.max_len) {
        return false;
    }
    return true;
}

bool is_b64(char c) { return is_alnum(c) || c == '/' || c == '+'; }

// A run of exactly 40 base64 characters at word boundaries: the shape of an AWS secret
// access key (too common a shape to refuse on its own: a git commit id has it too).
bool has_aws_secret_shape(std::string_view v) {
    for (std::size_t i = 0; i < v.size();) {
        if (!is_b64(v[i])) {
            ++i;
            continue;
        }
        std::size_t n = 0;
        while (i + n < v.size() && is_b64(v[i + n])) {
            ++n;
        }
        if (n == 40) {
            return true;
        }
        i += n;
    }
    return false;
}

std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    return out;
}

}  // namespace

std::optional<std::string_view> long_lived_key_kind(std::string_view name, std::string_view value) {
    if (const auto kind = long_lived_key_kind(value)) {
        return kind;
    }
    // An AWS secret access key has no prefix of its own: it is known by its name (the
    // variable's, or "aws_secret_access_key =" in a pasted credentials file) and its shape.
    const std::string n = upper(name);
    const std::string v = upper(value);
    const bool named = n.find("SECRET_ACCESS_KEY") != std::string::npos ||
                       (n.find("AWS") != std::string::npos &&
                        n.find("SECRET") != std::string::npos);
    const auto in_value = v.find("AWS_SECRET_ACCESS_KEY");
    if ((named && has_aws_secret_shape(value)) ||
        (in_value != std::string::npos && has_aws_secret_shape(value.substr(in_value + 21)))) {
        return "AWS secret access key";
    }
    return std::nullopt;
}

std::optional<std::string_view> long_lived_key_kind(std::string_view value) {
    for (std::size_t i = 0; i < value.size(); ++i) {
        // A key starts at a word boundary: "xAKIA..." is not one.
        if (i > 0 && is_token_char(value[i - 1]) && value[i] != '-') {
            continue;
        }
        for (const auto& f : formats) {
            if (value.substr(i).starts_with(f.prefix) && matches_at(value, i, f)) {
                return f.kind;
            }
        }
    }
    return std::nullopt;
}

env_result build_env(const env_inputs& in) {
    std::map<std::string, std::string, std::less<>> env;
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    env["HOME"] = in.home;
    env["LANG"] = "C.UTF-8";
    if (!in.tmpdir.empty()) {
        env["TMPDIR"] = in.tmpdir;
    }
    env["CORDON_SESSION"] = in.session;
    const std::string url = "http://" + in.session + ":" + in.token + "@" + in.proxy_host_port;
    constexpr std::array<std::string_view, 4> proxy_vars{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy",
                                                         "http_proxy"};
    for (const auto v : proxy_vars) {
        env[std::string(v)] = url;
    }
    // SOCKS5 clients (ALL_PROXY is what they read) on the same port, names resolved by
    // cordon (the "h"); HTTP clients read the variables above first.
    const std::string socks = "socks5h://" + in.session + ":" + in.token + "@" + in.proxy_host_port;
    env["ALL_PROXY"] = socks;
    env["all_proxy"] = socks;
    // git over ssh (`git clone ssh://...`, `git@host:repo`) through cordon, unmodified.
    if (!in.cordon_binary.empty() &&
        in.cordon_binary.find_first_of("'\\\"$` \n") == std::string::npos) {
        env["GIT_SSH_COMMAND"] = "ssh -o 'ProxyCommand=" + in.cordon_binary + " connect %h %p'";
    }
    env["NO_PROXY"] = "";
    env["no_proxy"] = "";
    const std::map<std::string, std::string, std::less<>> reserved = env;

    env_result out;
    for (const auto& r : in.job_env) {
        const auto it = in.host_env.find(r.name);
        if (it == in.host_env.end()) {
            continue;
        }
        if (r.name != "LANG" && r.name != "PATH" && r.name != "HOME" && r.name != "TMPDIR" &&
            reserved.contains(r.name)) {
            out.refused.push_back(r.name + ": set by cordon run itself, not from the job card");
            continue;
        }
        if (!r.allow_long_lived) {
            if (const auto kind = long_lived_key_kind(r.name, it->second)) {
                out.refused.push_back(r.name + ": its value looks like a long-lived key (" +
                                      std::string(*kind) + "); mark it {name: " + r.name +
                                      ", allow_long_lived: true} in the job card if intended");
                continue;
            }
        }
        env[r.name] = it->second;
    }
    for (const auto& [k, v] : in.extra) {
        env[k] = v;
    }
    for (const auto& [k, v] : env) {
        out.env.push_back(k + "=" + v);
    }
    return out;
}

}  // namespace cordon::shim
