#pragma once
// HTTP request rules (`http:` under an http or https egress rule): the request path in one
// normal form, path globs, and the first-match walk over (methods, paths) pairs. Pure.
//
// The normal form is what a rule is matched against and what the upstream is sent, so a
// server can never read a path other than the one decided:
//   - percent-encoded unreserved characters (ALPHA DIGIT - . _ ~) are decoded; every other
//     escape is kept, its hex digits in upper case;
//   - repeated slashes collapse into one ("//a///b" -> "/a/b");
//   - refused, never guessed at: "." and ".." segments (also as %2E, with path parameters
//     "..;x", or with trailing encoded white space "..%20"), an encoded '/' or '\' (%2F,
//     %5C), an encoded NUL, a bad escape, a raw '\', control characters, bytes above 0x7E,
//     and anything that is not an origin-form path ("*", "http://...").
// The query is kept as sent and takes no part in matching.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::config {

struct normal_path {
    std::string path;   ///< the normalised path, starting with '/'; empty when refused
    std::string query;  ///< after '?', as sent (without the '?'); empty when none
    bool has_query = false;
    /// Why the path was refused ("an encoded '/' (%2F) in the path"), for the client; empty
    /// when the path is usable.
    std::string error;
    bool ok() const noexcept { return error.empty(); }
    /// "path?query" as the upstream is sent it.
    std::string origin_form() const;
};

/// The segments of a path ("/a//b/" -> "a", "b"), empty ones skipped; views into `path`.
std::vector<std::string_view> path_segments(std::string_view path);

/// Normalises an origin-form request-target ("/a/b?q=1"). At most `max_len` bytes are read;
/// a longer target is refused.
normal_path normalise_path(std::string_view target, std::size_t max_len = 8192);

/// A path pattern of a request rule: segments matched one to one, where a segment "*"
/// matches any one segment, a '*' inside a segment any run of characters within that
/// segment ("gpt-*"), and a segment "**" any number of segments, none included. Matching
/// ignores empty segments, so a trailing slash makes no difference.
class path_glob {
public:
    /// Parses and normalises a pattern as written in a policy; nullopt with `error` set when
    /// it is not usable (not starting with '/', dot segments, "**" inside a segment, ...).
    static std::optional<path_glob> parse(std::string_view text, std::string& error);

    bool matches(std::string_view normal_path) const;
    const std::string& text() const noexcept { return text_; }

private:
    std::string text_;                   ///< the normalised pattern, for messages
    std::vector<std::string> segments_;  ///< "**" is a segment of its own
};

/// One entry of `http:`: which methods (empty: any) on which paths (empty: any).
struct http_rule {
    std::vector<std::string> methods;
    std::vector<path_glob> paths;
    bool matches(std::string_view method, std::string_view normal_path) const;
};

/// Index of the first rule that matches, or -1 (deny `http_rule`).
int match_http_rules(const std::vector<http_rule>& rules, std::string_view method,
                     std::string_view normal_path);

}  // namespace cordon::config
