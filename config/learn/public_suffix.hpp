#pragma once
// The Public Suffix List (https://publicsuffix.org/list/): which names are registries
// (com, co.uk, github.io, *.ck) and so the registrable domain of a host name. Pure: the
// caller reads the file (Debian's publicsuffix package installs it at
// default_public_suffix_path); parsing and lookup happen here. Thread-safe once built.
//
// The algorithm is the list's own (publicsuffix.org/list/, "Formal algorithm"): among the
// rules matching a name, an exception rule ("!www.ck") wins and its public suffix is the
// rule minus its leftmost label; otherwise the rule with the most labels wins, a wildcard
// label ("*.ck") matching any one label; with no match the implicit rule "*" applies (the
// last label is the public suffix). ICANN and private sections are both used: a name under
// github.io is as much someone else's as one under co.uk. Rules in Unicode are stored as
// punycode A-labels, the form in which cordon sees names (normalise_host refuses non-ASCII).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

namespace cordon::learn {

inline constexpr std::string_view default_public_suffix_path =
    "/usr/share/publicsuffix/public_suffix_list.dat";

/// The RFC 3492 punycode encoding of one UTF-8 label with "xn--" in front, or the label
/// itself when it is ASCII. Returns nullopt for invalid UTF-8.
std::optional<std::string> to_a_label(std::string_view utf8_label);

/// A parsed Public Suffix List.
class public_suffix_list {
public:
    /// Parses the list's text: one rule per line (its first whitespace-delimited word),
    /// "//" comments, blank lines. Rules are lower-cased and punycoded; unusable rules
    /// (bad UTF-8, empty labels, a '*' that is not a whole label) are skipped and counted.
    static public_suffix_list parse(std::string_view text);

    /// Number of rules kept (normal + wildcard + exception).
    std::size_t size() const noexcept {
        return rules_.size() + wildcards_.size() + exceptions_.size();
    }
    /// Lines that looked like rules but could not be used.
    std::size_t skipped() const noexcept { return skipped_; }

    /// The public suffix of `host` (normalised: lower case, no trailing dot, non-empty
    /// labels), a suffix of it: "co.uk" for "www.bbc.co.uk", "com" for "example.com",
    /// "invalid" for "x.invalid" (implicit rule "*"). Empty for an empty host.
    std::string_view public_suffix(std::string_view host) const;

    /// The registrable domain of `host` (its public suffix and one more label), or nullopt
    /// when `host` is itself a public suffix ("co.uk", "github.io", "com").
    std::optional<std::string_view> registrable_domain(std::string_view host) const;

    /// True when `name` is a public suffix.
    bool is_public_suffix(std::string_view name) const { return !registrable_domain(name); }

    /// True when some rule names a suffix strictly below `name` ("amazonaws.com" has
    /// "s3.amazonaws.com"): then "*.name" would reach into other registrants' names.
    bool has_suffix_below(std::string_view name) const {
        return ancestors_.contains(std::string(name));
    }

private:
    std::unordered_set<std::string> rules_;       // "co.uk"
    std::unordered_set<std::string> wildcards_;   // "*.ck" stored as "ck"
    std::unordered_set<std::string> exceptions_;  // "!www.ck" stored as "www.ck"
    std::unordered_set<std::string> ancestors_;   // every proper suffix of every rule
    std::size_t skipped_ = 0;
};

}  // namespace cordon::learn
