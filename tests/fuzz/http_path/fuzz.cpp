// Fuzzes the request path normaliser and the path globs (config/http_rules.hpp). The input
// is "pattern\npath": the pattern is parsed as a policy would; the path normalised as the
// forwarder does. Checked: a normalised path is a fixed point (normalising it again gives
// it back), starts with '/', holds no "//", no "." or ".." segment, no encoded '/', '\' or
// NUL, and only visible ASCII; a refused path says why; a glob matches its own normal text
// where that has no '*'; "/**" matches every normal path. Any violation traps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "config/http_rules.hpp"

namespace {

using namespace cordon::config;

void check(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s\n", what);
        __builtin_trap();
    }
}

bool has_dot_segment(std::string_view p) {
    std::size_t i = 0;
    while (i < p.size()) {
        const std::size_t j = std::min(p.find('/', i), p.size());
        const std::string_view s = p.substr(i, j - i);
        if (s == "." || s == "..") {
            return true;
        }
        i = j + 1;
    }
    return false;
}

void check_normal(const normal_path& n) {
    if (!n.ok()) {
        check(n.path.empty(), "a refused path has no normal form");
        return;
    }
    check(!n.path.empty() && n.path.front() == '/', "starts with '/'");
    check(n.path.find("//") == std::string::npos, "no empty segment");
    check(!has_dot_segment(n.path), "no dot segment");
    for (const std::string_view bad : {"%2F", "%2f", "%5C", "%5c", "%00"}) {
        check(n.path.find(bad) == std::string::npos, "no encoded separator or NUL");
    }
    for (const char c : n.path) {
        check(c > 0x20 && c < 0x7f && c != '\\' && c != '#', "visible ASCII only");
    }
    const normal_path again = normalise_path(n.origin_form());
    check(again.ok(), "a normal form normalises");
    check(again.path == n.path && again.query == n.query, "normalising is idempotent");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const std::size_t nl = in.find('\n');
    const std::string_view pattern = nl == std::string_view::npos ? std::string_view()
                                                                  : in.substr(0, nl);
    const std::string_view target = nl == std::string_view::npos ? in : in.substr(nl + 1);

    const normal_path n = normalise_path(target);
    check_normal(n);

    std::string why;
    const auto any = path_glob::parse("/**", why);
    check(any.has_value(), "/** parses");
    if (n.ok()) {
        check(any->matches(n.path), "/** matches every path");
    }
    if (!pattern.empty()) {
        const auto g = path_glob::parse(pattern, why);
        if (g) {
            if (g->text().find('*') == std::string::npos) {
                check(g->matches(g->text()), "a literal pattern matches itself");
            }
            if (n.ok()) {
                (void)g->matches(n.path);  // bounded time: the ASan build's timeout says
            }
        } else {
            check(!why.empty(), "a refused pattern says why");
        }
    }
    return 0;
}
