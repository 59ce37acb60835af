#include "shims/env.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

using cordon::shim::build_env;
using cordon::shim::env_inputs;
using cordon::shim::long_lived_key_kind;

TEST_CASE("long-lived key shapes are recognised", "[shim][env]") {
    struct row {
        std::string value;
        const char* kind;  // nullptr: not a key
    };
    const std::string gh36(36, 'a');
    const row rows[] = {
        {"AKIAIOSFODNN7EXAMPLE", "AWS access key ID"},
        {"aws_access_key_id=ASIAY34FZKBOKMUTVV7A", "AWS access key ID"},
        {"AKIAIOSFODNN7EXAMPL", nullptr},    // 15 after the prefix
        {"AKIAIOSFODNN7EXAMPLEX", nullptr},  // 17: not that format
        {"XAKIAIOSFODNN7EXAMPLE", nullptr},  // no word boundary
        {"ghp_" + gh36, "GitHub token"},
        {"gho_" + gh36, "GitHub token"},
        {"ghs_" + gh36, "GitHub token"},
        {"ghp_short", nullptr},
        {"github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "GitHub token"},
        {"glpat-abcdefghij0123456789", "GitLab personal access token"},
        {"glpat-short", nullptr},
        {"xoxb-123456789012-abcdefghijkl", "Slack token"},
        {"xoxp-1234567890", "Slack token"},
        {"xoxz-1234567890", nullptr},
        {"sk-proj-abcdefghijklmnopqrstuvwxyz0123", "OpenAI API key"},
        {"sk-" + std::string(48, 'A'), "OpenAI API key"},
        {"sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "Anthropic API key"},
        {"sk-learn", nullptr},
        {"task-abcdefghijklmnopqrstuvwxyzabcdefghijklmnop", nullptr},
        {"-----BEGIN RSA PRIVATE KEY-----\nMIIE...", "PEM private key"},
        {"-----BEGIN OPENSSH PRIVATE KEY-----", "PEM private key"},
        {"-----BEGIN PRIVATE KEY-----", "PEM private key"},
        {"-----BEGIN CERTIFICATE-----", nullptr},
        {"en_US.UTF-8", nullptr},
        {"", nullptr},
        {"/usr/local/bin:/usr/bin", nullptr},
    };
    for (const auto& r : rows) {
        INFO(r.value);
        const auto k = long_lived_key_kind(r.value);
        if (r.kind == nullptr) {
            CHECK_FALSE(k.has_value());
        } else {
            REQUIRE(k.has_value());
            CHECK(*k == r.kind);
        }
    }
}

TEST_CASE("an AWS secret access key is known by its name and shape", "[shim][env]") {
    using cordon::shim::long_lived_key_kind;
    const std::string key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";  // 40 characters
    struct row {
        const char* name;
        std::string value;
        bool refused;
    };
    const std::vector<row> rows{
        {"AWS_SECRET_ACCESS_KEY", key, true},
        {"aws_secret_access_key", key, true},
        {"DEPLOY_AWS_SECRET", key, true},
        {"MY_SECRET_ACCESS_KEY", "  " + key + "\n", true},
        {"CREDS", "[default]\naws_access_key_id = x\naws_secret_access_key = " + key, true},
        {"CREDS", "AWS_SECRET_ACCESS_KEY=" + key, true},
        // The shape alone is too common: a git commit id is 40 such characters.
        {"GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567", false},
        {"REPO_SECRET_COUNT", key, false},
        // Not 40: one character more or less is not the shape.
        {"AWS_SECRET_ACCESS_KEY", key + "A", false},
        {"AWS_SECRET_ACCESS_KEY", key.substr(1), false},
        {"AWS_SECRET_ACCESS_KEY", "", false},
    };
    for (const auto& r : rows) {
        CAPTURE(r.name, r.value);
        const auto k = long_lived_key_kind(r.name, r.value);
        CHECK(k.has_value() == r.refused);
        if (k) {
            CHECK(*k == "AWS secret access key");
        }
    }
    // The value-only form still finds the prefixed kinds.
    CHECK(long_lived_key_kind("X", "AKIAIOSFODNN7EXAMPLE").value() == "AWS access key ID");
}

namespace {
bool has(const std::vector<std::string>& env, const std::string& entry) {
    return std::find(env.begin(), env.end(), entry) != env.end();
}
bool has_name(const std::vector<std::string>& env, const std::string& name) {
    return std::any_of(env.begin(), env.end(),
                       [&](const std::string& e) { return e.starts_with(name + "="); });
}
}  // namespace

TEST_CASE("the environment is built from nothing", "[shim][env]") {
    env_inputs in;
    in.session = "s-1";
    in.token = "tok";
    in.home = "/scratch";
    in.tmpdir = "/scratch";
    in.host_env = {{"LANG", "de_DE.UTF-8"},
                   {"AWS_SECRET_ACCESS_KEY", "x"},
                   {"PATH", "/evil"},
                   {"REPO", "cordon"}};
    in.job_env = {{"LANG", false}, {"REPO", false}, {"UNSET_ONE", false}};
    const auto r = build_env(in);
    CHECK(r.refused.empty());
    CHECK(has(r.env, "HTTPS_PROXY=http://s-1:tok@127.0.0.1:3128"));
    CHECK(has(r.env, "https_proxy=http://s-1:tok@127.0.0.1:3128"));
    CHECK(has(r.env, "ALL_PROXY=socks5h://s-1:tok@127.0.0.1:3128"));
    CHECK(has(r.env, "all_proxy=socks5h://s-1:tok@127.0.0.1:3128"));
    CHECK_FALSE(has_name(r.env, "GIT_SSH_COMMAND"));  // no binary given
    in.cordon_binary = "/usr/bin/cordon";
    CHECK(has(build_env(in).env,
              "GIT_SSH_COMMAND=ssh -o 'ProxyCommand=/usr/bin/cordon connect %h %p'"));
    in.cordon_binary = "/opt/it's/cordon";  // would break out of the quotes: none at all
    CHECK_FALSE(has_name(build_env(in).env, "GIT_SSH_COMMAND"));
    in.cordon_binary = "/opt/a b/cordon";
    CHECK_FALSE(has_name(build_env(in).env, "GIT_SSH_COMMAND"));
    in.cordon_binary.clear();
    CHECK(has(r.env, "HTTP_PROXY=http://s-1:tok@127.0.0.1:3128"));
    CHECK(has(r.env, "NO_PROXY="));
    CHECK(has(r.env, "no_proxy="));
    CHECK(has(r.env, "LANG=de_DE.UTF-8"));
    CHECK(has(r.env, "REPO=cordon"));
    CHECK(has(r.env, "HOME=/scratch"));
    CHECK(has(r.env, "TMPDIR=/scratch"));
    CHECK(has(r.env, "CORDON_SESSION=s-1"));
    CHECK_FALSE(has_name(r.env, "AWS_SECRET_ACCESS_KEY"));
    CHECK_FALSE(has_name(r.env, "UNSET_ONE"));
    CHECK_FALSE(has(r.env, "PATH=/evil"));
    CHECK(std::is_sorted(r.env.begin(), r.env.end()));
}

TEST_CASE("a key-shaped job variable is refused unless marked", "[shim][env]") {
    env_inputs in;
    in.session = "s-1";
    in.token = "tok";
    in.host_env = {{"AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE"},
                   {"DEPLOY_KEY", "-----BEGIN EC PRIVATE KEY-----"},
                   {"HTTPS_PROXY", "http://elsewhere:1"}};
    SECTION("unmarked: refused, and the message never holds the value") {
        in.job_env = {{"AWS_ACCESS_KEY_ID", false}, {"DEPLOY_KEY", false}};
        const auto r = build_env(in);
        REQUIRE(r.refused.size() == 2);
        CHECK(r.refused[0].find("AWS access key ID") != std::string::npos);
        CHECK(r.refused[0].find("AKIAIOSFODNN7EXAMPLE") == std::string::npos);
        CHECK(r.refused[1].find("PEM private key") != std::string::npos);
        CHECK_FALSE(has_name(r.env, "AWS_ACCESS_KEY_ID"));
    }
    SECTION("marked allow_long_lived: passed") {
        in.job_env = {{"AWS_ACCESS_KEY_ID", true}};
        const auto r = build_env(in);
        CHECK(r.refused.empty());
        CHECK(has(r.env, "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE"));
    }
    SECTION("the proxy settings cannot be replaced") {
        in.job_env = {{"HTTPS_PROXY", true}};
        const auto r = build_env(in);
        REQUIRE(r.refused.size() == 1);
        CHECK(has(r.env, "HTTPS_PROXY=http://s-1:tok@127.0.0.1:3128"));
    }
    SECTION("extra entries (the minted identity) come last and are not checked") {
        in.extra = {{"CORDON_IDENTITY", "ASIAY34FZKBOKMUTVV7A"}};
        const auto r = build_env(in);
        CHECK(has(r.env, "CORDON_IDENTITY=ASIAY34FZKBOKMUTVV7A"));
    }
}
