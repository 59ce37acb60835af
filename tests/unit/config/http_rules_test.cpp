// Tests of the request path normal form, path globs and request rules (config/http_rules.hpp),
// including the path tricks an agent tries to get past a rule.
#include "config/http_rules.hpp"

#include <catch2/catch.hpp>

#include <string>

namespace {

using namespace cordon::config;

std::string norm(std::string_view target) {
    const normal_path n = normalise_path(target);
    return n.ok() ? n.origin_form() : "refused: " + n.error;
}

path_glob glob(std::string_view text) {
    std::string why;
    auto g = path_glob::parse(text, why);
    INFO(why);
    REQUIRE(g);
    return *g;
}

std::string glob_error(std::string_view text) {
    std::string why;
    const auto g = path_glob::parse(text, why);
    return g ? std::string("parsed") : why;
}

}  // namespace

TEST_CASE("http_rules: the normal form of a path", "[http_rules]") {
    CHECK(norm("/") == "/");
    CHECK(norm("/v1/chat/completions") == "/v1/chat/completions");
    CHECK(norm("/v1/models/") == "/v1/models/");      // a trailing slash is kept
    CHECK(norm("//v1///models") == "/v1/models");     // repeated slashes collapse
    CHECK(norm("/%7Euser/%61%62c") == "/~user/abc");  // unreserved escapes decode
    CHECK(norm("/a%2a%3f%20b") == "/a%2A%3F%20b");    // others stay, hex in upper case
    CHECK(norm("/search?q=a/../b&x=%2F") == "/search?q=a/../b&x=%2F");  // query as sent
    CHECK(norm("/?") == "/?");
    CHECK(norm("/a.b/..c/.d/...") == "/a.b/..c/.d/...");  // dots inside names are names
}

TEST_CASE("http_rules: path tricks are refused, never guessed at", "[http_rules]") {
    CHECK(norm("/v1/../admin").starts_with("refused: a '.' or '..' segment"));
    CHECK(norm("/v1/./models").starts_with("refused: a '.' or '..'"));
    CHECK(norm("/v1/..").starts_with("refused"));
    CHECK(norm("/v1/%2e%2e/admin").starts_with("refused: a '.' or '..'"));
    CHECK(norm("/v1/.%2E/admin").starts_with("refused"));
    // Dot segments servlet containers see through path parameters or trimmed white space.
    CHECK(norm("/v1/models/..;/..;/admin").starts_with("refused: a '.' or '..'"));
    CHECK(norm("/v1/..;x=1/admin").starts_with("refused: a '.' or '..'"));
    CHECK(norm("/v1/.;/admin").starts_with("refused: a '.' or '..'"));
    CHECK(norm("/v1/x/..%3B/admin") == "/v1/x/..%3B/admin");  // an encoded ';' is no parameter
    CHECK(norm("/v1/..%20/admin").starts_with("refused: a '.' or '..'"));
    CHECK(norm("/v1/..%09%0d/admin").starts_with("refused: a '.' or '..'"));
    CHECK(norm("/v1/...;/admin") == "/v1/...;/admin");  // three dots are a name
    CHECK(norm("/v1/a;..") == "/v1/a;..");
    CHECK(norm("/v1%2fadmin").starts_with("refused: an encoded '/'"));
    CHECK(norm("/v1%2Fadmin").starts_with("refused: an encoded '/'"));
    CHECK(norm("/v1%5cadmin").starts_with("refused: an encoded '\\'"));
    CHECK(norm("/v1\\admin").starts_with("refused: a '\\'"));
    CHECK(norm("/v1%00").starts_with("refused: an encoded NUL"));
    CHECK(norm("/v1%2").starts_with("refused: a bad percent escape"));
    CHECK(norm("/v1%zz").starts_with("refused: a bad percent escape"));
    CHECK(norm("/a b").starts_with("refused"));
    CHECK(norm("/a\x7f").starts_with("refused"));
    CHECK(norm("/caf\xc3\xa9").starts_with("refused"));
    CHECK(norm("/a#frag").starts_with("refused"));
    CHECK(norm("/a?b#c").starts_with("refused"));
    CHECK(norm("*").starts_with("refused: the request target is not a path"));
    CHECK(norm("").starts_with("refused"));
    CHECK(norm("http://x/").starts_with("refused"));
    CHECK(normalise_path("/" + std::string(100, 'a'), 50).error ==
          "the request path is longer than 50 bytes");
}

TEST_CASE("http_rules: globs: '*' is one segment, '**' any depth", "[http_rules]") {
    const path_glob exact = glob("/v1/chat/completions");
    CHECK(exact.matches("/v1/chat/completions"));
    CHECK(exact.matches("/v1/chat/completions/"));  // a trailing slash makes no difference
    CHECK_FALSE(exact.matches("/v1/chat/completions/x"));
    CHECK_FALSE(exact.matches("/v1/chat"));
    CHECK_FALSE(exact.matches("/V1/chat/completions"));  // paths are case-sensitive

    const path_glob one = glob("/v1/models/*");
    CHECK(one.matches("/v1/models/gpt-4"));
    CHECK_FALSE(one.matches("/v1/models"));
    CHECK_FALSE(one.matches("/v1/models/a/b"));

    const path_glob deep = glob("/v1/models/**");
    CHECK(deep.matches("/v1/models"));
    CHECK(deep.matches("/v1/models/a"));
    CHECK(deep.matches("/v1/models/a/b/c"));
    CHECK_FALSE(deep.matches("/v1/modelsx"));
    CHECK_FALSE(deep.matches("/v1"));

    const path_glob inner = glob("/repos/*/pulls/**");
    CHECK(inner.matches("/repos/cordon/pulls"));
    CHECK(inner.matches("/repos/cordon/pulls/1/files"));
    CHECK_FALSE(inner.matches("/repos/a/b/pulls"));

    const path_glob mid = glob("/**/info/refs");
    CHECK(mid.matches("/info/refs"));
    CHECK(mid.matches("/org/repo.git/info/refs"));
    CHECK_FALSE(mid.matches("/org/repo.git/info/refs/x"));

    const path_glob part = glob("/v1/models/gpt-*");
    CHECK(part.matches("/v1/models/gpt-4o"));
    CHECK(part.matches("/v1/models/gpt-"));
    CHECK_FALSE(part.matches("/v1/models/claude"));
    CHECK_FALSE(part.matches("/v1/models/gpt-4/x"));  // '*' never crosses a '/'

    CHECK(glob("/").matches("/"));
    CHECK_FALSE(glob("/").matches("/a"));
    CHECK(glob("/**").matches("/"));
    CHECK(glob("/**").matches("/a/b"));
    CHECK(glob("/**/**").text() == "/**/**");  // the text is kept, the match is "/**"
    CHECK(glob("/**/**").matches("/a"));
}

TEST_CASE("http_rules: patterns are normalised like paths", "[http_rules]") {
    CHECK(glob("/%7Euser//files").text() == "/~user/files");
    CHECK(glob("/%7Euser//files").matches("/~user/files"));
    CHECK(glob_error("v1/models").find("starting with '/'") != std::string::npos);
    CHECK(glob_error("/v1/../admin").find("'.' or '..'") != std::string::npos);
    CHECK(glob_error("/v1/a**b").find("'**'") != std::string::npos);
    CHECK(glob_error("/v1?x=1").find("query") != std::string::npos);
    CHECK(glob_error("/v1%2Fx").find("encoded '/'") != std::string::npos);
}

TEST_CASE("http_rules: a wildcard-heavy pattern stays linear", "[http_rules]") {
    // The classic blow-up for backtracking matchers: many stars against a long mismatch.
    const path_glob g = glob("/**/a/**/a/**/a/**/a/**/a/**/b");
    std::string p;
    for (int i = 0; i < 2000; ++i) {
        p += "/a";
    }
    CHECK_FALSE(g.matches(p));
    const path_glob s = glob("/*a*a*a*a*a*a*a*b");
    CHECK_FALSE(s.matches("/" + std::string(4000, 'a')));
}

TEST_CASE("http_rules: the first matching request rule wins", "[http_rules]") {
    std::vector<http_rule> rules(3);
    rules[0].methods = {"POST"};
    rules[0].paths = {glob("/v1/chat/completions"), glob("/v1/responses")};
    rules[1].methods = {"GET"};
    rules[1].paths = {glob("/v1/models/**")};
    rules[2].paths = {glob("/health")};  // any method
    CHECK(match_http_rules(rules, "POST", "/v1/chat/completions") == 0);
    CHECK(match_http_rules(rules, "POST", "/v1/responses") == 0);
    CHECK(match_http_rules(rules, "GET", "/v1/chat/completions") == -1);
    CHECK(match_http_rules(rules, "GET", "/v1/models/gpt-4") == 1);
    CHECK(match_http_rules(rules, "DELETE", "/v1/models/gpt-4") == -1);
    CHECK(match_http_rules(rules, "DELETE", "/health") == 2);
    CHECK(match_http_rules(rules, "post", "/v1/responses") == -1);  // methods are exact
    CHECK(match_http_rules({}, "GET", "/") == -1);

    http_rule any_path;
    any_path.methods = {"GET", "HEAD"};
    CHECK(any_path.matches("HEAD", "/anything/at/all"));
    CHECK_FALSE(any_path.matches("PUT", "/"));
}
