#pragma once
// Request rules (`http:` entries, config/http_rules.hpp) learned from the requests seen on
// one egress rule: methods grouped, paths generalised into globs, and never a glob that
// would let through a request the policy's own request rules refused. Pure; used by
// suggest.hpp.
//
// How paths generalise, in order:
// - the query never takes part (it is not matched);
// - a segment that looks like an identifier (all digits; 8 or more hex digits with a digit;
//   a UUID; 16 or more letters and digits mixing both; anything the audit writer redacted)
//   or that holds a character other than letters, digits and "-._~:@+,=" becomes "*";
// - more than `siblings` distinct segments under one prefix merge into "*" (every child
//   shape kept below it), or into "prefix/**" when those shapes end at different depths or
//   more than `siblings` of them remain (never "/**" itself);
// - paths deeper than `max_depth` segments, and cut paths, end in "/**";
// - more than `max_paths` globs: the deepest prefixes collapse into "prefix/**" until they
//   fit, or, when no collapse is safe, the most requested globs are kept;
// - each generalisation is made only when no refused request (same method, a path the glob
//   matches) would be let through by it; a request that cannot be written without that is
//   not learned. A refused request that was also seen allowed (same method and path) does
//   not count as refused.
// The result is checked with the matcher itself (match_http_rules): every learned request
// matches, no refused one does.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cordon::learn {

/// Requests of one method and path (normal form, no query) on one rule.
struct path_request {
    std::string method;
    std::string path;
    bool cut = false;  ///< stands for `path` and every path below it
    std::uint64_t count = 0;
};

struct path_options {
    std::size_t siblings = 8;      ///< more than this many children of a prefix: generalise
    std::size_t max_paths = 16;    ///< globs per egress rule, over all its entries
    std::size_t max_depth = 8;     ///< segments kept; deeper paths end in "/**"
    std::size_t max_methods = 16;  ///< the most requested methods; requests of others not learned
};

/// One learned entry of `http:`.
struct learned_entry {
    std::vector<std::string> methods;  ///< sorted
    std::vector<std::string> paths;    ///< globs, sorted
    std::uint64_t requests = 0;        ///< learned requests it covers
};

struct learned_request_rules {
    std::vector<learned_entry> entries;  ///< sorted by methods, then paths
    /// Allowed requests left out: no glob could take them without letting a refused request
    /// through, or past the bounds (max_paths, max_methods, a method no rule may name).
    std::uint64_t not_learned = 0;
    std::vector<path_request> not_learned_examples;  ///< the most requested, at most 5
};

/// `allowed`: requests to learn (allowed, would-deny and policy-denied but by request
/// rules); `refused`: requests the request rules refused (http_rule), never to be let
/// through. Methods must be upper-case tokens; paths in normal form without query.
learned_request_rules learn_request_rules(const std::vector<path_request>& allowed,
                                          const std::vector<path_request>& refused,
                                          const path_options& opts);

}  // namespace cordon::learn
