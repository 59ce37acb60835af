#include "config/learn/request_rules.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "config/http_rules.hpp"
#include "config/load.hpp"  // valid_http_method

namespace cordon::learn {
namespace {

using method_counts = std::map<std::string, std::uint64_t>;
using method_set = std::set<std::string>;
using glob = std::vector<std::string>;  // segments: literal, or "*"

constexpr std::string_view star = "*";

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// A segment that names one thing among many: an id, a hash, a date, a redacted secret.
bool id_like(std::string_view s) {
    if (s.find("REDACTED") != std::string_view::npos) {
        return true;  // the audit writer hid a secret-looking value here
    }
    const bool digit = std::any_of(s.begin(), s.end(), is_digit);
    if (!digit) {
        return false;
    }
    // Numbers, dates, versions: digits and separators only.
    if (std::all_of(s.begin(), s.end(), [](char c) {
            return is_digit(c) || c == '-' || c == '_' || c == '.' || c == ':';
        })) {
        return true;
    }
    // Hashes and UUIDs.
    if (s.size() >= 8 &&
        std::all_of(s.begin(), s.end(), [](char c) { return is_hex(c) || c == '-'; })) {
        return true;
    }
    // Long tokens mixing letters and digits (base64-ish ids).
    return s.size() >= 16 && std::any_of(s.begin(), s.end(), is_alpha) &&
           std::all_of(s.begin(), s.end(),
                       [](char c) { return is_digit(c) || is_alpha(c) || c == '-' || c == '_'; });
}

// A segment written as it is in a glob: no '*' (a glob's wildcard), no escape, nothing a
// YAML double-quoted scalar would need escaped.
bool literal_safe(std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
        return is_digit(c) || is_alpha(c) ||
               std::string_view("-._~:@+,=").find(c) != std::string_view::npos;
    });
}

std::string glob_text(const glob& g, bool below) {
    std::string out;
    for (const auto& s : g) {
        out += '/';
        out += s;
    }
    if (below) {
        out += "/**";
    }
    return out.empty() ? "/" : out;
}

// The refused requests, as a tree of their literal segments.
class refused_index {
public:
    void add(const std::string& method, std::string_view path) {
        node* n = &root_;
        n->any.insert(method);
        for (const std::string_view s : config::path_segments(path)) {
            n = &n->kids[std::string(s)];
            n->any.insert(method);
        }
        n->end.insert(method);
    }

    /// True when the glob (ending in "/**" when `below`) with one of `methods` matches a
    /// refused request.
    bool covers(const glob& g, bool below, const method_set& methods) const {
        return walk(root_, g, 0, below, methods);
    }

    bool empty() const noexcept { return root_.any.empty(); }

private:
    struct node {
        std::map<std::string, node, std::less<>> kids;
        method_set end;  // refused on exactly this path
        method_set any;  // refused on this path or below
    };

    static bool meets(const method_set& a, const method_set& b) {
        return std::any_of(b.begin(), b.end(),
                           [&a](const std::string& m) { return a.contains(m); });
    }

    static bool walk(const node& n, const glob& g, std::size_t i, bool below,
                     const method_set& methods) {
        if (!meets(n.any, methods)) {
            return false;
        }
        if (i == g.size()) {
            return meets(below ? n.any : n.end, methods);
        }
        if (g[i] == star) {
            return std::any_of(n.kids.begin(), n.kids.end(), [&](const auto& kv) {
                return walk(kv.second, g, i + 1, below, methods);
            });
        }
        const auto it = n.kids.find(g[i]);
        return it != n.kids.end() && walk(it->second, g, i + 1, below, methods);
    }

    node root_;
};

// The learned paths, as a tree of glob segments.
struct pnode {
    std::map<std::string, pnode> kids;
    method_counts end;    // a path ending here
    method_counts below;  // this prefix and everything below it ("prefix/**")
};

void add_counts(method_counts& into, const method_counts& from) {
    for (const auto& [m, n] : from) {
        into[m] += n;
    }
}

void merge_into(pnode& into, const pnode& from) {
    add_counts(into.end, from.end);
    add_counts(into.below, from.below);
    for (const auto& [s, k] : from.kids) {
        merge_into(into.kids[s], k);
    }
}

void all_methods(const pnode& n, method_counts& out) {
    add_counts(out, n.end);
    add_counts(out, n.below);
    for (const auto& [s, k] : n.kids) {
        all_methods(k, out);
    }
}

method_set keys(const method_counts& m) {
    method_set out;
    for (const auto& [k, v] : m) {
        out.insert(k);
    }
    return out;
}

std::size_t globs(const pnode& n) {
    std::size_t out = (n.end.empty() ? 0 : 1) + (n.below.empty() ? 0 : 1);
    for (const auto& [s, k] : n.kids) {
        out += globs(k);
    }
    return out;
}

// Every path of the subtree ends at the same depth, none with "/**".
bool one_depth(const pnode& n, std::size_t depth, std::set<std::size_t>& seen) {
    if (!n.below.empty()) {
        return false;
    }
    if (!n.end.empty()) {
        seen.insert(depth);
    }
    for (const auto& [s, k] : n.kids) {
        if (!one_depth(k, depth + 1, seen)) {
            return false;
        }
    }
    return seen.size() <= 1;
}

bool one_depth(const pnode& n) {
    std::set<std::size_t> seen;
    return one_depth(n, 0, seen);
}

// `n` as "prefix/**" with every method of its subtree.
pnode collapsed(const pnode& n) {
    pnode out;
    all_methods(n, out.below);
    return out;
}

// No glob of the subtree at `prefix` lets a refused request through.
bool safe(const pnode& n, glob& prefix, const refused_index& refused) {
    if (!n.end.empty() && refused.covers(prefix, false, keys(n.end))) {
        return false;
    }
    if (!n.below.empty() && refused.covers(prefix, true, keys(n.below))) {
        return false;
    }
    for (const auto& [s, k] : n.kids) {
        prefix.push_back(s);
        const bool ok = safe(k, prefix, refused);
        prefix.pop_back();
        if (!ok) {
            return false;
        }
    }
    return true;
}

class generaliser {
public:
    generaliser(const path_options& opts, const refused_index& refused)
        : opts_(opts), refused_(refused) {}

    // More than `siblings` children: one "*" child holding every child's shape, or, when
    // those shapes end at different depths or more than `siblings` of them remain,
    // "prefix/**"; each only when safe. Generalising only widens: a merge that is not safe
    // as it is never becomes safe, so it is dropped before any work on it.
    void siblings(pnode& n, glob& prefix) {
        if (n.kids.size() > opts_.siblings) {
            pnode merged;
            for (const auto& [s, k] : n.kids) {
                merge_into(merged, k);
            }
            prefix.emplace_back(star);
            const bool merged_ok = safe(merged, prefix, refused_);
            if (merged_ok) {
                siblings(merged, prefix);
            }
            prefix.pop_back();
            if (merged_ok) {
                // Never "/**" from here: that is no request rule at all (the bound may still
                // come to it).
                if (!prefix.empty() && (globs(merged) > opts_.siblings || !one_depth(merged))) {
                    pnode whole = collapsed(n);
                    if (safe(whole, prefix, refused_)) {
                        n = std::move(whole);
                        return;
                    }
                }
                pnode keep;
                keep.end = std::move(n.end);
                keep.below = std::move(n.below);
                keep.kids.emplace(std::string(star), std::move(merged));
                n = std::move(keep);
                return;
            }
        }
        for (auto& [s, k] : n.kids) {
            prefix.push_back(s);
            siblings(k, prefix);
            prefix.pop_back();
        }
    }

    // Collapses subtrees into "prefix/**", deepest prefixes first and, at one depth, those
    // holding the most globs first, until at most `max_paths` globs remain; false when some
    // remain over the bound (no safe collapse left).
    bool bound(pnode& root) {
        std::size_t total = globs(root);
        std::size_t deepest = depth_of(root);
        for (std::size_t d = deepest + 1; d-- > 0 && total > opts_.max_paths;) {
            std::vector<std::pair<pnode*, glob>> at;
            glob prefix;
            nodes_at(root, d, prefix, at);
            std::vector<std::pair<std::size_t, std::size_t>> order;  // globs, index
            for (std::size_t i = 0; i < at.size(); ++i) {
                order.emplace_back(globs(*at[i].first), i);
            }
            std::stable_sort(order.begin(), order.end(),
                             [](const auto& a, const auto& b) { return a.first > b.first; });
            for (const auto& [count, i] : order) {
                if (total <= opts_.max_paths) {
                    break;
                }
                if (count < 2) {
                    break;
                }
                pnode c = collapsed(*at[i].first);
                if (safe(c, at[i].second, refused_)) {
                    *at[i].first = std::move(c);
                    total -= count - 1;
                }
            }
        }
        return total <= opts_.max_paths;
    }

private:
    static std::size_t depth_of(const pnode& n) {
        std::size_t d = 0;
        for (const auto& [s, k] : n.kids) {
            d = std::max(d, 1 + depth_of(k));
        }
        return d;
    }

    static void nodes_at(pnode& n, std::size_t d, glob& prefix,
                         std::vector<std::pair<pnode*, glob>>& out) {
        if (prefix.size() == d) {
            if (!n.kids.empty()) {
                out.emplace_back(&n, prefix);
            }
            return;
        }
        for (auto& [s, k] : n.kids) {
            prefix.push_back(s);
            nodes_at(k, d, prefix, out);
            prefix.pop_back();
        }
    }

    const path_options& opts_;
    const refused_index& refused_;
};

struct out_glob {
    std::string text;
    method_counts methods;
    std::uint64_t total() const {
        std::uint64_t n = 0;
        for (const auto& [m, c] : methods) {
            n += c;
        }
        return n;
    }
};

void list_globs(const pnode& n, glob& prefix, std::vector<out_glob>& out) {
    if (!n.end.empty()) {
        out.push_back({glob_text(prefix, false), n.end});
    }
    if (!n.below.empty()) {
        out.push_back({glob_text(prefix, true), n.below});
    }
    for (const auto& [s, k] : n.kids) {
        prefix.push_back(s);
        list_globs(k, prefix, out);
        prefix.pop_back();
    }
}

std::vector<config::http_rule> compiled(const std::vector<learned_entry>& entries) {
    std::vector<config::http_rule> out;
    for (const learned_entry& e : entries) {
        config::http_rule r;
        r.methods = e.methods;
        for (const std::string& p : e.paths) {
            std::string why;
            if (auto g = config::path_glob::parse(p, why)) {
                r.paths.push_back(std::move(*g));
            }
        }
        out.push_back(std::move(r));
    }
    return out;
}

}  // namespace

learned_request_rules learn_request_rules(const std::vector<path_request>& allowed,
                                          const std::vector<path_request>& refused,
                                          const path_options& opts) {
    learned_request_rules out;
    std::vector<path_request> dropped;

    // The methods a rule may list, the most requested `max_methods` of them.
    method_counts by_method;
    for (const path_request& r : allowed) {
        if (r.method != "CONNECT" && config::valid_http_method(r.method)) {
            by_method[r.method] += r.count;
        }
    }
    std::vector<std::pair<std::string, std::uint64_t>> ranked(by_method.begin(), by_method.end());
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    method_set methods;
    for (std::size_t i = 0; i < ranked.size() && i < opts.max_methods; ++i) {
        methods.insert(ranked[i].first);
    }

    // Refused requests, but those also seen allowed.
    std::set<std::pair<std::string_view, std::string_view>> seen_allowed;
    for (const path_request& r : allowed) {
        if (!r.cut) {
            seen_allowed.emplace(r.method, r.path);
        }
    }
    refused_index no;
    std::vector<const path_request*> refusals;
    for (const path_request& r : refused) {
        if (!r.cut && !seen_allowed.contains({r.method, r.path})) {
            no.add(r.method, r.path);
            refusals.push_back(&r);
        }
    }

    // Each request as the most general glob of it that lets no refusal through.
    pnode root;
    std::vector<const path_request*> kept;
    for (const path_request& r : allowed) {
        if (!methods.contains(r.method)) {
            dropped.push_back(r);
            continue;
        }
        const std::vector<std::string_view> segs = config::path_segments(r.path);
        const bool deep = segs.size() > opts.max_depth;
        const bool below = r.cut || deep;
        const std::size_t depth = std::min(segs.size(), opts.max_depth);
        glob general;
        glob literal;  // only what cannot be written as it is becomes "*"
        for (std::size_t i = 0; i < depth; ++i) {
            const bool ok = literal_safe(segs[i]);
            general.emplace_back(ok && !id_like(segs[i]) ? segs[i] : star);
            literal.emplace_back(ok ? segs[i] : star);
        }
        const method_set m{r.method};
        const glob* g = !no.covers(general, below, m)   ? &general
                        : !no.covers(literal, below, m) ? &literal
                                                        : nullptr;
        if (g == nullptr) {
            dropped.push_back(r);
            continue;
        }
        pnode* n = &root;
        for (const std::string& s : *g) {
            n = &n->kids[s];
        }
        (below ? n->below : n->end)[r.method] += r.count;
        kept.push_back(&r);
    }

    generaliser gen(opts, no);
    glob prefix;
    gen.siblings(root, prefix);
    gen.bound(root);
    std::vector<out_glob> all;
    list_globs(root, prefix, all);
    if (all.size() > opts.max_paths) {
        // No safe collapse left: the most requested globs stay.
        std::stable_sort(all.begin(), all.end(), [](const out_glob& a, const out_glob& b) {
            return a.total() > b.total();
        });
        all.resize(opts.max_paths);
    }

    // Entries: the globs grouped by their method sets.
    std::map<std::vector<std::string>, learned_entry> entries;
    for (const out_glob& g : all) {
        std::vector<std::string> ms;
        for (const auto& [m, c] : g.methods) {
            ms.push_back(m);
        }
        learned_entry& e = entries[ms];
        e.methods = ms;
        e.paths.push_back(g.text);
    }
    for (auto& [ms, e] : entries) {
        std::sort(e.paths.begin(), e.paths.end());
        out.entries.push_back(std::move(e));
    }

    // Checked with the matcher: a glob that lets a refusal through goes (none should);
    // then every kept request either matches, or is not learned.
    auto rules = compiled(out.entries);
    for (const path_request* r : refusals) {
        for (std::size_t i = 0; i < out.entries.size(); ++i) {
            learned_entry& e = out.entries[i];
            if (!rules[i].matches(r->method, r->path)) {
                continue;
            }
            std::erase_if(e.paths, [&](const std::string& p) {
                std::string why;
                const auto g = config::path_glob::parse(p, why);
                return !g || g->matches(r->path);
            });
        }
        std::erase_if(out.entries, [](const learned_entry& e) { return e.paths.empty(); });
        rules = compiled(out.entries);
    }
    for (const path_request* r : kept) {
        const int i = config::match_http_rules(rules, r->method, r->path);
        if (i < 0) {
            dropped.push_back(*r);
        } else {
            out.entries[static_cast<std::size_t>(i)].requests += r->count;
        }
    }
    for (const path_request& r : dropped) {
        out.not_learned += r.count;
    }
    std::stable_sort(
        dropped.begin(), dropped.end(),
        [](const path_request& a, const path_request& b) { return a.count > b.count; });
    dropped.resize(std::min<std::size_t>(dropped.size(), 5));
    out.not_learned_examples = std::move(dropped);
    return out;
}

}  // namespace cordon::learn
