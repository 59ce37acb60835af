#include "config/learn/public_suffix.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

using namespace cordon::learn;

namespace {

// A small list with every kind of rule (the shapes of the real one).
constexpr std::string_view small_list = R"(// comment line
// ===BEGIN ICANN DOMAINS===
com
uk
co.uk
jp
kyoto.jp
ide.kyoto.jp
*.kobe.jp
!city.kobe.jp
*.ck
!www.ck
cn
com.cn
公司.cn
  // indented comment is not a rule? (it is: first word "//" skipped)
io
github.io   trailing words are ignored
s3.example.com
*.bad*
a..b
!net
)";

std::optional<std::string> rd(const public_suffix_list& l, std::string_view host) {
    const auto r = l.registrable_domain(host);
    return r ? std::optional<std::string>(std::string(*r)) : std::nullopt;
}

}  // namespace

TEST_CASE("punycode A-labels (RFC 3492)", "[psl]") {
    CHECK(to_a_label("example") == "example");
    CHECK(to_a_label("公司") == "xn--55qx5d");
    CHECK(to_a_label("中国") == "xn--fiqs8s");
    CHECK(to_a_label("食狮") == "xn--85x722f");
    CHECK(to_a_label("bücher") == "xn--bcher-kva");
    CHECK(to_a_label("münchen") == "xn--mnchen-3ya");
    CHECK(to_a_label("ελ") == "xn--qxam");
    CHECK_FALSE(to_a_label("\xff\xfe").has_value());          // not UTF-8
    CHECK_FALSE(to_a_label("\xc0\xaf").has_value());          // overlong
    CHECK_FALSE(to_a_label("\xed\xa0\x80").has_value());      // a surrogate
    CHECK_FALSE(to_a_label("\xf4\x90\x80\x80").has_value());  // above U+10FFFF
    CHECK_FALSE(to_a_label("b\xc3").has_value());             // truncated
}

TEST_CASE("PSL parsing: rules, wildcards, exceptions, junk skipped", "[psl]") {
    const auto l = public_suffix_list::parse(small_list);
    // com uk co.uk jp kyoto.jp ide.kyoto.jp *.kobe.jp !city.kobe.jp *.ck !www.ck cn com.cn
    // 公司.cn io github.io s3.example.com
    CHECK(l.size() == 16);
    CHECK(l.skipped() == 3);  // *.bad*, a..b, !net
    CHECK(l.is_public_suffix("xn--55qx5d.cn"));
}

TEST_CASE("PSL algorithm on a small list", "[psl]") {
    const auto l = public_suffix_list::parse(small_list);
    CHECK(l.public_suffix("www.bbc.co.uk") == "co.uk");
    CHECK(rd(l, "www.bbc.co.uk") == "bbc.co.uk");
    CHECK(rd(l, "co.uk") == std::nullopt);
    CHECK(rd(l, "uk") == std::nullopt);
    CHECK(rd(l, "example.com") == "example.com");
    CHECK(rd(l, "a.b.example.com") == "example.com");
    // the implicit rule "*": an unlisted TLD is a public suffix
    CHECK(rd(l, "example") == std::nullopt);
    CHECK(rd(l, "a.b.example") == "b.example");
    // wildcards and exceptions
    CHECK(rd(l, "ck") == std::nullopt);
    CHECK(rd(l, "test.ck") == std::nullopt);
    CHECK(rd(l, "b.test.ck") == "b.test.ck");
    CHECK(rd(l, "a.b.test.ck") == "b.test.ck");
    CHECK(rd(l, "www.ck") == "www.ck");
    CHECK(rd(l, "www.www.ck") == "www.ck");
    CHECK(rd(l, "c.kobe.jp") == std::nullopt);
    CHECK(rd(l, "b.c.kobe.jp") == "b.c.kobe.jp");
    CHECK(rd(l, "city.kobe.jp") == "city.kobe.jp");
    CHECK(rd(l, "www.city.kobe.jp") == "city.kobe.jp");
    CHECK(rd(l, "ide.kyoto.jp") == std::nullopt);
    CHECK(rd(l, "a.b.ide.kyoto.jp") == "b.ide.kyoto.jp");
    // private section rules count too
    CHECK(rd(l, "github.io") == std::nullopt);
    CHECK(rd(l, "me.github.io") == "me.github.io");
    CHECK(rd(l, "bucket.s3.example.com") == "bucket.s3.example.com");
    // Unicode rules match A-labels
    CHECK(rd(l, "www.xn--85x722f.xn--55qx5d.cn") == "xn--85x722f.xn--55qx5d.cn");
    CHECK(l.public_suffix("") == "");
}

TEST_CASE("PSL: suffixes below a name", "[psl]") {
    const auto l = public_suffix_list::parse(small_list);
    CHECK(l.has_suffix_below("example.com"));  // s3.example.com
    CHECK(l.has_suffix_below("com"));
    CHECK(l.has_suffix_below("ck"));  // *.ck
    CHECK(l.has_suffix_below("kobe.jp"));
    CHECK_FALSE(l.has_suffix_below("bbc.co.uk"));
    CHECK_FALSE(l.has_suffix_below("s3.example.com"));
    CHECK_FALSE(l.has_suffix_below("example.org"));
}

// The official test vectors (publicsuffix.org tests/test_psl.txt) against Debian's list.
TEST_CASE("PSL: official test vectors on Debian's publicsuffix list", "[psl]") {
    std::ifstream in{std::string(default_public_suffix_path)};
    REQUIRE(in);  // scripts/setup installs the publicsuffix package
    std::stringstream ss;
    ss << in.rdbuf();
    const auto l = public_suffix_list::parse(ss.str());
    CHECK(l.size() > 5000);
    struct row {
        const char* host;
        std::optional<std::string> want;
    };
    const row rows[] = {
        {"com", std::nullopt},
        {"example.com", "example.com"},
        {"b.example.com", "example.com"},
        {"a.b.example.com", "example.com"},
        {"uk.com", std::nullopt},
        {"example.uk.com", "example.uk.com"},
        {"b.example.uk.com", "example.uk.com"},
        {"test.ac", "test.ac"},
        {"mm", std::nullopt},
        {"c.mm", std::nullopt},
        {"b.c.mm", "b.c.mm"},
        {"a.b.c.mm", "b.c.mm"},
        {"jp", std::nullopt},
        {"test.jp", "test.jp"},
        {"www.test.jp", "test.jp"},
        {"ac.jp", std::nullopt},
        {"test.ac.jp", "test.ac.jp"},
        {"kyoto.jp", std::nullopt},
        {"test.kyoto.jp", "test.kyoto.jp"},
        {"ide.kyoto.jp", std::nullopt},
        {"b.ide.kyoto.jp", "b.ide.kyoto.jp"},
        {"a.b.ide.kyoto.jp", "b.ide.kyoto.jp"},
        {"c.kobe.jp", std::nullopt},
        {"b.c.kobe.jp", "b.c.kobe.jp"},
        {"a.b.c.kobe.jp", "b.c.kobe.jp"},
        {"city.kobe.jp", "city.kobe.jp"},
        {"www.city.kobe.jp", "city.kobe.jp"},
        {"ck", std::nullopt},
        {"test.ck", std::nullopt},
        {"b.test.ck", "b.test.ck"},
        {"a.b.test.ck", "b.test.ck"},
        {"www.ck", "www.ck"},
        {"www.www.ck", "www.ck"},
        {"us", std::nullopt},
        {"test.us", "test.us"},
        {"www.test.us", "test.us"},
        {"ak.us", std::nullopt},
        {"test.ak.us", "test.ak.us"},
        {"www.test.ak.us", "test.ak.us"},
        {"k12.ak.us", std::nullopt},
        {"test.k12.ak.us", "test.k12.ak.us"},
        {"www.test.k12.ak.us", "test.k12.ak.us"},
        {"xn--85x722f.com.cn", "xn--85x722f.com.cn"},
        {"xn--85x722f.xn--55qx5d.cn", "xn--85x722f.xn--55qx5d.cn"},
        {"www.xn--85x722f.xn--55qx5d.cn", "xn--85x722f.xn--55qx5d.cn"},
        {"shishi.xn--55qx5d.cn", "shishi.xn--55qx5d.cn"},
        {"xn--55qx5d.cn", std::nullopt},
        {"xn--85x722f.xn--fiqs8s", "xn--85x722f.xn--fiqs8s"},
        {"www.xn--85x722f.xn--fiqs8s", "xn--85x722f.xn--fiqs8s"},
        {"shishi.xn--fiqs8s", "shishi.xn--fiqs8s"},
        {"xn--fiqs8s", std::nullopt},
        {"example", std::nullopt},
        {"example.example", "example.example"},
        {"b.example.example", "example.example"},
        {"github.io", std::nullopt},
        {"octocat.github.io", "octocat.github.io"},
        {"bucket.s3.amazonaws.com", "bucket.s3.amazonaws.com"},
    };
    for (const row& r : rows) {
        INFO(r.host);
        CHECK(rd(l, r.host) == r.want);
    }
    CHECK(l.has_suffix_below("amazonaws.com"));
}
