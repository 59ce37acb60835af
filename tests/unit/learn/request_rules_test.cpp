#include "config/learn/request_rules.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "config/http_rules.hpp"

using namespace cordon::config;
using namespace cordon::learn;

namespace {

path_request rq(std::string method, std::string path, std::uint64_t count = 1, bool cut = false) {
    return path_request{std::move(method), std::move(path), cut, count};
}

// The learned entries as the loader would build them: every pattern must parse, and as it
// was written (its normal form is itself).
std::vector<http_rule> as_rules(const learned_request_rules& l) {
    std::vector<http_rule> out;
    for (const learned_entry& e : l.entries) {
        http_rule r;
        r.methods = e.methods;
        REQUIRE_FALSE(e.methods.empty());
        REQUIRE_FALSE(e.paths.empty());
        for (const std::string& p : e.paths) {
            std::string why;
            auto g = path_glob::parse(p, why);
            INFO(p << ": " << why);
            REQUIRE(g);
            CHECK(g->text() == p);
            r.paths.push_back(std::move(*g));
        }
        out.push_back(std::move(r));
    }
    return out;
}

std::vector<std::string> all_paths(const learned_request_rules& l) {
    std::vector<std::string> out;
    for (const auto& e : l.entries) {
        out.insert(out.end(), e.paths.begin(), e.paths.end());
    }
    return out;
}

// What the brief of request_rules.hpp promises, checked with the matcher itself: every
// learned request matches, no refused one (that was not also allowed) does, the counts add
// up, and the bound holds.
void check_promises(const std::vector<path_request>& allowed,
                    const std::vector<path_request>& refused, const path_options& opts,
                    const learned_request_rules& l) {
    const std::vector<http_rule> rules = as_rules(l);
    std::set<std::pair<std::string, std::string>> allowed_exact;
    std::uint64_t total = 0;
    std::uint64_t matched = 0;
    for (const path_request& r : allowed) {
        total += r.count;
        if (!r.cut) {
            allowed_exact.emplace(r.method, r.path);
        }
        if (match_http_rules(rules, r.method, r.path) >= 0) {
            matched += r.count;
        }
    }
    for (const path_request& r : refused) {
        if (allowed_exact.contains({r.method, r.path})) {
            continue;
        }
        INFO("refused " << r.method << " " << r.path);
        CHECK(match_http_rules(rules, r.method, r.path) < 0);
    }
    std::uint64_t learned = 0;
    for (const auto& e : l.entries) {
        learned += e.requests;
    }
    CHECK(learned + l.not_learned == total);
    CHECK(matched >= learned);
    CHECK(all_paths(l).size() <= opts.max_paths);
    CHECK(l.not_learned_examples.size() <= 5);
}

}  // namespace

TEST_CASE("request rules: ids, hashes, dates and redacted values become *", "[request_rules]") {
    const std::vector<path_request> allowed{
        rq("GET", "/v1/users/12345"),
        rq("GET", "/v1/users/67890/repos"),
        rq("GET", "/git/commits/3f786850e387550fdab836ed7e6dc881de23001b"),
        rq("GET", "/items/123e4567-e89b-12d3-a456-426614174000"),
        rq("GET", "/files/file-AbC123xYz456QrS789"),
        rq("GET", "/reports/2026-11-29"),
        rq("GET", "/share/REDACTED/view"),
        rq("GET", "/v1/models/gpt-4o"),  // a name, not an id
    };
    const path_options opts;
    const auto l = learn_request_rules(allowed, {}, opts);
    REQUIRE(l.entries.size() == 1);
    CHECK(l.entries[0].methods == std::vector<std::string>{"GET"});
    CHECK(l.entries[0].paths == std::vector<std::string>{"/files/*", "/git/commits/*", "/items/*",
                                                         "/reports/*", "/share/*/view",
                                                         "/v1/models/gpt-4o", "/v1/users/*",
                                                         "/v1/users/*/repos"});
    CHECK(l.entries[0].requests == 8);
    CHECK(l.not_learned == 0);
    check_promises(allowed, {}, opts, l);
}

TEST_CASE("request rules: methods grouped by the paths they share", "[request_rules]") {
    const std::vector<path_request> allowed{
        rq("POST", "/v1/chat/completions", 40),
        rq("POST", "/v1/responses", 2),
        rq("GET", "/v1/models", 3),
        rq("HEAD", "/v1/models", 1),
        rq("GET", "/v1/models/gpt-4o", 5),
        rq("GET", "/", 1),
    };
    const path_options opts;
    const auto l = learn_request_rules(allowed, {}, opts);
    REQUIRE(l.entries.size() == 3);
    CHECK(l.entries[0].methods == std::vector<std::string>{"GET"});
    CHECK(l.entries[0].paths == std::vector<std::string>{"/", "/v1/models/gpt-4o"});
    CHECK(l.entries[0].requests == 6);
    CHECK(l.entries[1].methods == std::vector<std::string>{"GET", "HEAD"});
    CHECK(l.entries[1].paths == std::vector<std::string>{"/v1/models"});
    CHECK(l.entries[2].methods == std::vector<std::string>{"POST"});
    CHECK(l.entries[2].paths == std::vector<std::string>{"/v1/chat/completions", "/v1/responses"});
    check_promises(allowed, {}, opts, l);
}

TEST_CASE("request rules: many siblings under one prefix generalise", "[request_rules]") {
    path_options opts;
    opts.siblings = 3;
    SECTION("one shape below: prefix/*") {
        std::vector<path_request> allowed;
        for (const char* n : {"alpha", "beta", "gamma", "delta", "epsilon"}) {
            allowed.push_back(rq("GET", std::string("/docs/") + n));
        }
        const auto l = learn_request_rules(allowed, {}, opts);
        CHECK(all_paths(l) == std::vector<std::string>{"/docs/*"});
        check_promises(allowed, {}, opts, l);
    }
    SECTION("three siblings are not more than three: exact") {
        std::vector<path_request> allowed;
        for (const char* n : {"alpha", "beta", "gamma"}) {
            allowed.push_back(rq("GET", std::string("/docs/") + n));
        }
        const auto l = learn_request_rules(allowed, {}, opts);
        CHECK(all_paths(l).size() == 3);
    }
    SECTION("many shapes below: prefix/**") {
        const std::vector<path_request> allowed{
            rq("GET", "/static/js/app.js"),
            rq("GET", "/static/css/site/main.css"),
            rq("GET", "/static/img/a/b/c.png"),
            rq("GET", "/static/fonts/f.woff2"),
            rq("GET", "/static"),
            rq("GET", "/api/health"),
        };
        const auto l = learn_request_rules(allowed, {}, opts);
        CHECK(all_paths(l) == std::vector<std::string>{"/api/health", "/static/**"});
        check_promises(allowed, {}, opts, l);
    }
}

TEST_CASE("request rules: never a glob that lets a refused request through", "[request_rules]") {
    path_options opts;
    opts.siblings = 3;
    SECTION("an id segment stays literal where * would take a refusal") {
        const std::vector<path_request> allowed{rq("GET", "/v1/files/1001"),
                                                rq("GET", "/v1/files/1002"),
                                                rq("DELETE", "/v1/files/1003")};
        const std::vector<path_request> refused{rq("GET", "/v1/files/999"),
                                                rq("DELETE", "/v1/files/1004")};
        const auto l = learn_request_rules(allowed, refused, opts);
        CHECK(all_paths(l) ==  // DELETE's entry first
              std::vector<std::string>{"/v1/files/1003", "/v1/files/1001", "/v1/files/1002"});
        check_promises(allowed, refused, opts, l);
    }
    SECTION("another method's refusal does not hold back the generalisation") {
        const std::vector<path_request> allowed{rq("GET", "/v1/files/1001"),
                                                rq("GET", "/v1/files/1002")};
        const std::vector<path_request> refused{rq("DELETE", "/v1/files/1001")};
        const auto l = learn_request_rules(allowed, refused, opts);
        CHECK(all_paths(l) == std::vector<std::string>{"/v1/files/*"});
        check_promises(allowed, refused, opts, l);
    }
    SECTION("siblings collapse only as far as is safe") {
        std::vector<path_request> allowed;
        for (const char* n : {"a", "b", "c", "d", "e"}) {
            allowed.push_back(rq("GET", std::string("/repos/") + n + "/issues"));
            allowed.push_back(rq("GET", std::string("/repos/") + n + "/pulls"));
        }
        const std::vector<path_request> refused{rq("GET", "/repos/x/settings"),
                                                rq("GET", "/repos/y/issues")};
        const auto l = learn_request_rules(allowed, refused, opts);
        check_promises(allowed, refused, opts, l);
        CHECK(l.not_learned == 0);
        CHECK(all_paths(l).size() == 10);  // /repos/*/issues would take /repos/y/issues
    }
    SECTION("a refusal also seen allowed does not count") {
        const std::vector<path_request> allowed{rq("GET", "/v1/a/1"), rq("GET", "/v1/a/2")};
        const std::vector<path_request> refused{rq("GET", "/v1/a/2")};
        const auto l = learn_request_rules(allowed, refused, opts);
        CHECK(all_paths(l) == std::vector<std::string>{"/v1/a/*"});
    }
    SECTION("a request that cannot be written without a refusal is not learned") {
        // The segment holds '*', which a glob cannot say literally: "/a/x*y" would also
        // take "/a/xzy".
        const std::vector<path_request> allowed{rq("GET", "/a/x*y", 3), rq("GET", "/b", 1)};
        const std::vector<path_request> refused{rq("GET", "/a/xzy")};
        const auto l = learn_request_rules(allowed, refused, opts);
        CHECK(all_paths(l) == std::vector<std::string>{"/b"});
        CHECK(l.not_learned == 3);
        REQUIRE(l.not_learned_examples.size() == 1);
        CHECK(l.not_learned_examples[0].path == "/a/x*y");
        check_promises(allowed, refused, opts, l);
    }
}

TEST_CASE("request rules: hostile paths", "[request_rules]") {
    const path_options opts;
    SECTION("characters a glob or YAML would misread become *") {
        const std::vector<path_request> allowed{
            rq("GET", "/a/x*y/z"),     rq("GET", "/b/%22quoted%22"), rq("GET", "/c/it's"),
            rq("GET", "/d/a\"b"),      rq("GET", "/e/[1]{2}"),       rq("GET", "/f/&amp;"),
            rq("GET", "/g/x:y@z+1,2"),  // kept: nothing to misread
        };
        const auto l = learn_request_rules(allowed, {}, opts);
        CHECK(all_paths(l) == std::vector<std::string>{"/a/*/z", "/b/*", "/c/*", "/d/*", "/e/*",
                                                       "/f/*", "/g/x:y@z+1,2"});
        check_promises(allowed, {}, opts, l);
    }
    SECTION("deep paths end in /**; cut paths stand for what is below them") {
        const std::vector<path_request> allowed{
            rq("GET", "/1a/2a/3a/4a/5a/6a/7a/8a/9a/10a"),
            rq("GET", "/long/prefix", 2, true),
        };
        const auto l = learn_request_rules(allowed, {}, opts);
        CHECK(all_paths(l) ==
              std::vector<std::string>{"/1a/2a/3a/4a/5a/6a/7a/8a/**", "/long/prefix/**"});
        check_promises(allowed, {}, opts, l);
    }
    SECTION("methods: the most requested 16; CONNECT and invalid ones never") {
        std::vector<path_request> allowed;
        for (int i = 0; i < 20; ++i) {
            allowed.push_back(rq("M" + std::string(1, static_cast<char>('A' + i)), "/x",
                                 static_cast<std::uint64_t>(100 - i)));
        }
        allowed.push_back(rq("CONNECT", "/x", 50));
        allowed.push_back(rq("get", "/x", 50));
        const auto l = learn_request_rules(allowed, {}, opts);
        REQUIRE(l.entries.size() == 1);
        CHECK(l.entries[0].methods.size() == 16);
        CHECK(l.entries[0].methods.front() == "MA");
        CHECK(l.not_learned == 84 + 83 + 82 + 81 + 50 + 50);
    }
    SECTION("a million distinct paths: bounded output, every one allowed") {
        std::vector<path_request> allowed;
        std::mt19937 rng(7);
        const std::string letters = "abcdefghijklmnopqrstuvwxyz";
        for (int i = 0; i < 3000; ++i) {
            std::string p;
            const int depth = 1 + static_cast<int>(rng() % 5);
            for (int d = 0; d < depth; ++d) {
                p += '/';
                for (int k = 0; k < 4; ++k) {
                    p += letters[rng() % 26];
                }
            }
            allowed.push_back(rq(rng() % 3 == 0 ? "POST" : "GET", p));
        }
        path_options o = opts;
        const auto l = learn_request_rules(allowed, {}, o);
        CHECK(l.not_learned == 0);
        check_promises(allowed, {}, o, l);
    }
}

TEST_CASE("request rules: bounded even when refusals forbid every collapse", "[request_rules]") {
    path_options opts;
    opts.max_paths = 4;
    std::vector<path_request> allowed;
    std::vector<path_request> refused;
    for (int i = 0; i < 10; ++i) {
        allowed.push_back(
            rq("GET", "/p" + std::to_string(i) + "x/ok", static_cast<std::uint64_t>(i + 1)));
        refused.push_back(rq("GET", "/r" + std::to_string(i) + "x/ok"));
    }
    const auto l = learn_request_rules(allowed, refused, opts);
    CHECK(all_paths(l).size() == 4);
    // The most requested stay.
    CHECK(all_paths(l) == std::vector<std::string>{"/p6x/ok", "/p7x/ok", "/p8x/ok", "/p9x/ok"});
    CHECK(l.not_learned == 1 + 2 + 3 + 4 + 5 + 6);
    check_promises(allowed, refused, opts, l);
}

TEST_CASE("request rules: random traffic keeps every promise", "[request_rules]") {
    // Paths over a small alphabet so that allowed and refused requests share prefixes,
    // siblings and ids; checked against the matcher for many seeds and bounds.
    const std::vector<std::string> segs{"a",   "b",   "c",   "v1",         "users",
                                        "12",  "345", "x*y", "deadbeef99", "REDACTED",
                                        "%20", "e",   "f",   "g"};
    const std::vector<std::string> methods{"GET", "POST", "PUT", "DELETE"};
    for (unsigned seed = 1; seed <= 300; ++seed) {
        std::mt19937 rng(seed);
        const auto path = [&] {
            std::string p;
            const int depth = static_cast<int>(rng() % 5);
            for (int d = 0; d < depth; ++d) {
                p += "/" + segs[rng() % segs.size()];
            }
            return p.empty() ? std::string("/") : p;
        };
        std::vector<path_request> allowed;
        std::vector<path_request> refused;
        const int n = 5 + static_cast<int>(rng() % 60);
        for (int i = 0; i < n; ++i) {
            auto& into = rng() % 3 == 0 ? refused : allowed;
            into.push_back(rq(methods[rng() % methods.size()], path(), 1 + rng() % 5,
                              rng() % 11 == 0 && &into == &allowed));
        }
        path_options opts;
        opts.siblings = 1 + rng() % 4;
        opts.max_paths = 1 + rng() % 12;
        opts.max_depth = 2 + rng() % 4;
        INFO("seed " << seed);
        const auto l = learn_request_rules(allowed, refused, opts);
        check_promises(allowed, refused, opts, l);
    }
}
