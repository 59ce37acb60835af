#pragma once
// The sandbox's environment, built from nothing, and the long-lived-key detector that keeps
// a job card's variables from smuggling a permanent credential in. Pure: no I/O.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cordon::shim {

/// What kind of long-lived key `value` contains, anywhere in it ("AWS access key ID",
/// "GitHub token", "GitLab personal access token", "Slack token", "OpenAI API key",
/// "Anthropic API key", "PEM private key"), or nullopt. Matches the documented token
/// formats at a word boundary with their minimum lengths, so ordinary words pass.
std::optional<std::string_view> long_lived_key_kind(std::string_view value);

/// The same for a variable `name=value`: also an AWS secret access key (40 base64
/// characters) in a variable whose name says so (`*SECRET_ACCESS_KEY*`, `*AWS*SECRET*`), or
/// after `aws_secret_access_key` in the value (a pasted credentials file).
std::optional<std::string_view> long_lived_key_kind(std::string_view name, std::string_view value);

/// One variable the job card passes in.
struct env_request {
    std::string name;
    bool allow_long_lived = false;  ///< the job card marks it: a key-shaped value is fine
};

/// Everything the sandbox's environment is made of.
struct env_inputs {
    std::string session;
    std::string token;
    std::string proxy_host_port = "127.0.0.1:3128";  ///< the relay inside the namespace
    std::string home = "/";                          ///< the scratch dir when there is one
    std::string tmpdir;                              ///< "" leaves TMPDIR unset
    /// The cordon binary as the sandbox sees it: GIT_SSH_COMMAND's ProxyCommand is
    /// `BINARY connect %h %p` ("" or a path with a quote: no GIT_SSH_COMMAND).
    std::string cordon_binary;
    std::vector<env_request> job_env;
    /// The shim's own environment: where the job card's variables take their values.
    std::map<std::string, std::string, std::less<>> host_env;
    /// Added last (the minted identity credential); never checked for key shapes.
    std::vector<std::pair<std::string, std::string>> extra;
};

struct env_result {
    std::vector<std::string> env;      ///< NAME=VALUE, sorted by name
    std::vector<std::string> refused;  ///< one message per refused variable (never the value)
};

/// Builds the environment: PATH, HOME, LANG (C.UTF-8 unless the job passes LANG), TMPDIR,
/// CORDON_SESSION, HTTPS_PROXY/HTTP_PROXY and their lower-case forms as
/// http://SESSION:TOKEN@PROXY, ALL_PROXY/all_proxy as socks5h://SESSION:TOKEN@PROXY (the proxy
/// port answers SOCKS5 too), GIT_SSH_COMMAND (ssh through `cordon connect`), NO_PROXY/no_proxy
/// empty, then the job card's variables that
/// are set in `host_env` (unset ones are skipped) and `extra`. A job variable whose value
/// looks like a long-lived key and is not marked allow_long_lived is left out and named in
/// `refused`; so is one that would replace a variable the shim sets (the proxy settings,
/// CORDON_SESSION).
env_result build_env(const env_inputs& in);

}  // namespace cordon::shim
