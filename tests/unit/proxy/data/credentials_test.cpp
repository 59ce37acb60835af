// The credential broker's checks on what crosses an inspected tunnel (proxy/data/
// credentials.hpp) and its secret store (proxy/inspect/secrets.hpp): the head judged for
// every hostile shape an agent would try, streaming scans and replacement with matches split
// across reads, placeholders bound to session and variable.
#include "proxy/data/credentials.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "proxy/inspect/secrets.hpp"

namespace {

using cordon::config::credential_spec;
using cordon::config::deny_reason;
using namespace cordon::proxy::data;
using cordon::proxy::inspect::credential_broker;

const std::string key(32, 'k');
const std::string real = "sk-live-0123456789abcdefREAL";

std::unique_ptr<credential_broker> broker() {
    std::string error;
    auto b = credential_broker::from_values({{"openai", real}, {"github", "ghp_other_secret_1"}},
                                            key, error);
    INFO(error);
    REQUIRE(b);
    return b;
}

struct fixture {
    std::unique_ptr<credential_broker> b = broker();
    credential_spec cred{"openai", "Authorization", "Bearer ", ""};
    std::vector<session_placeholder> mine{{"openai", b->placeholder("s-1", "OPENAI_API_KEY")}};
    std::vector<secret_value> secrets;
    fixture() {
        b->for_each([this](std::string_view n, std::string_view v) {
            secrets.push_back(secret_value{n, v});
        });
    }
    head_verdict judge(std::string_view target, const std::string& fields,
                       bool credentialed = true) const {
        return judge_head(target, fields, credentialed ? &cred : nullptr, mine, secrets);
    }
    std::string ph() const { return mine[0].placeholder; }
};

}  // namespace

TEST_CASE("placeholders: bound to session and variable, shaped, not the secret") {
    const auto b = broker();
    const std::string p1 = b->placeholder("s-1", "OPENAI_API_KEY");
    CHECK(p1.size() == cordon::proxy::inspect::placeholder_size);
    CHECK(p1.starts_with(cordon::proxy::inspect::placeholder_prefix));
    CHECK(p1.find_first_not_of("0123456789abcdef",
                               cordon::proxy::inspect::placeholder_prefix.size()) ==
          std::string::npos);
    CHECK(p1 == b->placeholder("s-1", "OPENAI_API_KEY"));  // stable
    CHECK(p1 != b->placeholder("s-2", "OPENAI_API_KEY"));
    CHECK(p1 != b->placeholder("s-1", "OTHER"));
    CHECK(p1.find(real) == std::string::npos);
    // Another key (another CA) gives other placeholders.
    std::string error;
    auto other = credential_broker::from_values({{"openai", real}}, std::string(32, 'x'), error);
    REQUIRE(other);
    CHECK(other->placeholder("s-1", "OPENAI_API_KEY") != p1);
    CHECK(b->value("openai") == real);
    CHECK(b->value("nope").empty());
}

TEST_CASE("secret values: refused when they could not be found or would split a header") {
    std::string error;
    CHECK_FALSE(credential_broker::from_values({{"a", "short"}}, key, error));
    CHECK_THAT(error, Catch::Contains("secrets.a") && Catch::Contains("shorter than 8"));
    CHECK_FALSE(credential_broker::from_values({{"a", "abcdefgh\r\nX-Evil: 1"}}, key, error));
    CHECK_THAT(error, Catch::Contains("printable"));
    CHECK(error.find("X-Evil") == std::string::npos);  // never quotes the value
    CHECK_FALSE(credential_broker::from_values({{"a", "12345678"}}, "short key", error));
}

TEST_CASE("secret files: a regular file, private, newline dropped; env variables") {
    std::string error;
    cordon::config::secret_spec missing{"m", std::string("/nonexistent/secret"), std::nullopt, {}};
    CHECK_FALSE(credential_broker::load({missing}, key, error));
    CHECK_THAT(error, Catch::Contains("secrets.m.file"));
    cordon::config::secret_spec unset{"e", std::nullopt, std::string("CORDON_TEST_UNSET_VAR"), {}};
    CHECK_FALSE(credential_broker::load({unset}, key, error));
    CHECK_THAT(error, Catch::Contains("not set"));
    ::setenv("CORDON_TEST_SECRET_VAR", "env-secret-value\n", 1);
    cordon::config::secret_spec env{"e", std::nullopt, std::string("CORDON_TEST_SECRET_VAR"), {}};
    const auto b = credential_broker::load({env}, key, error);
    REQUIRE(b);
    CHECK(b->value("e") == "env-secret-value");
    ::unsetenv("CORDON_TEST_SECRET_VAR");
    cordon::config::secret_spec dir{"d", std::string("/etc"), std::nullopt, {}};
    CHECK_FALSE(credential_broker::load({dir}, key, error));
}

TEST_CASE("judge_head: the session's placeholder in the credentialed header is injected") {
    const fixture f;
    const auto v = f.judge("/v1/chat", "Authorization: Bearer " + f.ph() + "\r\nAccept: */*\r\n");
    CHECK(v.reason == deny_reason::none);
    CHECK(v.placeholder == f.ph());
    CHECK(v.secret_name == "openai");
    CHECK(v.secret_value == real);
    // Header names are case-insensitive.
    CHECK(f.judge("/", "authorization: Bearer " + f.ph() + "\r\n").reason == deny_reason::none);
}

TEST_CASE("judge_head: every hostile shape is refused with its reason") {
    const fixture f;
    const std::string ok = "Authorization: Bearer " + f.ph() + "\r\n";
    SECTION("the placeholder anywhere else: another header, the target, a second copy") {
        CHECK(f.judge("/", ok + "X-Key: " + f.ph() + "\r\n").reason ==
              deny_reason::credential_misuse);
        CHECK(f.judge("/v1?key=" + f.ph(), ok).reason == deny_reason::credential_misuse);
        CHECK(f.judge("/" + f.ph(), ok).reason == deny_reason::credential_misuse);
        CHECK(f.judge("/", "Cookie: a=" + f.ph() + "\r\n" + ok).reason ==
              deny_reason::credential_misuse);
    }
    SECTION("the placeholder to a host or rule without a credential") {
        CHECK(f.judge("/", ok, false).reason == deny_reason::credential_misuse);
        CHECK(f.judge("/", "X-Anything: cordon-ph-\r\n", false).reason ==
              deny_reason::credential_misuse);
    }
    SECTION("another session's placeholder, or another variable's") {
        const std::string theirs = f.b->placeholder("s-2", "OPENAI_API_KEY");
        CHECK(f.judge("/", "Authorization: Bearer " + theirs + "\r\n").reason ==
              deny_reason::credential_misuse);
        const std::string other_var = f.b->placeholder("s-1", "GITHUB_TOKEN");
        CHECK(f.judge("/", "Authorization: Bearer " + other_var + "\r\n").reason ==
              deny_reason::credential_misuse);
    }
    SECTION("no placeholder on the credentialed rule: the client's own key, none, two") {
        CHECK(f.judge("/", "Authorization: Bearer sk-my-own-key-123456\r\n").reason ==
              deny_reason::credential_required);
        CHECK(f.judge("/", "Accept: */*\r\n").reason == deny_reason::credential_required);
        CHECK(f.judge("/", ok + "Authorization: Basic eDp5\r\n").reason ==
              deny_reason::credential_required);
        CHECK(f.judge("/", "Authorization: Token " + f.ph() + "\r\n").reason ==
              deny_reason::credential_misuse);  // a placeholder, in the wrong format
        CHECK(f.judge("/", "Authorization: Bearer " + f.ph() + "x\r\n").reason ==
              deny_reason::credential_misuse);
    }
    SECTION("the real secret's bytes anywhere") {
        CHECK(f.judge("/?k=" + real, ok).reason == deny_reason::secret_leak);
        CHECK(f.judge("/", ok + "X-Echo: " + real + "\r\n").reason == deny_reason::secret_leak);
        CHECK(f.judge("/", "Authorization: Bearer " + real + "\r\n").reason ==
              deny_reason::secret_leak);
        CHECK(f.judge("/", "X-A: ghp_other_secret_1\r\n", false).reason ==
              deny_reason::secret_leak);
    }
    SECTION("percent-encoded in the target: the upstream decodes it (review F4)") {
        const std::string enc_ph = "%63" + f.ph().substr(1);
        CHECK(f.judge("/v1/models?k=" + enc_ph, "Accept: */*\r\n", false).reason ==
              deny_reason::credential_misuse);
        CHECK(f.judge("/v1/models?k=" + enc_ph, ok).reason == deny_reason::credential_misuse);
        const std::string enc_real = "%73%6B" + real.substr(2);  // "sk" encoded
        CHECK(f.judge("/v1/models?k=" + enc_real, "Accept: */*\r\n", false).reason ==
              deny_reason::secret_leak);
    }
    SECTION("a clean request without a credential passes untouched") {
        const auto v = f.judge("/v1/models", "Accept: */*\r\n", false);
        CHECK(v.reason == deny_reason::none);
        CHECK(v.placeholder.empty());
    }
}

TEST_CASE("stream_scanner: finds placeholders and secrets split across chunks") {
    const fixture f;
    const std::string body = "{\"prompt\": \"x\", \"key\": \"" + real + "\"}";
    for (std::size_t cut = 0; cut <= body.size(); ++cut) {
        stream_scanner s(f.secrets);
        const deny_reason a = s.feed(std::string_view(body).substr(0, cut));
        const deny_reason b = a == deny_reason::none ? s.feed(std::string_view(body).substr(cut))
                                                     : a;
        INFO("cut at " << cut);
        CHECK(b == deny_reason::secret_leak);
    }
    const std::string ph_body = "aaaa" + f.ph() + "bbbb";
    for (std::size_t cut = 0; cut <= ph_body.size(); ++cut) {
        stream_scanner s(f.secrets);
        deny_reason r = s.feed(std::string_view(ph_body).substr(0, cut));
        if (r == deny_reason::none) {
            r = s.feed(std::string_view(ph_body).substr(cut));
        }
        CHECK(r == deny_reason::credential_misuse);
    }
    // One byte at a time.
    stream_scanner s(f.secrets);
    deny_reason r = deny_reason::none;
    for (const char c : body) {
        if (r == deny_reason::none) {
            r = s.feed(std::string_view(&c, 1));
        }
    }
    CHECK(r == deny_reason::secret_leak);
    stream_scanner clean(f.secrets);
    CHECK(clean.feed(std::string(100000, 'a')) == deny_reason::none);
    CHECK(clean.feed("sk-live-0123") == deny_reason::none);  // a prefix of it is no leak
}

TEST_CASE("stream_replacer: the secret becomes the placeholder however the stream is cut") {
    const fixture f;
    const std::string body = "echo " + real + " and again " + real + ".";
    std::string want = "echo " + f.ph() + " and again " + f.ph() + ".";
    for (std::size_t a = 0; a <= body.size(); ++a) {
        for (std::size_t b = a; b <= body.size(); b += 7) {
            stream_replacer r(real, f.ph());
            std::string out;
            r.feed(std::string_view(body).substr(0, a), out);
            r.feed(std::string_view(body).substr(a, b - a), out);
            r.feed(std::string_view(body).substr(b), out);
            r.finish(out);
            INFO("cuts " << a << " " << b);
            REQUIRE(out == want);
            CHECK(r.replaced() == 2);
        }
    }
    // Nothing to replace: the bytes pass as they are, a partial match at the end flushed.
    stream_replacer r(real, f.ph());
    std::string out;
    r.feed("abc sk-live-01", out);
    r.finish(out);
    CHECK(out == "abc sk-live-01");
}

TEST_CASE("replace_all") {
    std::string s = "a-X-b-X";
    CHECK(replace_all(s, "X", "YY") == 2);
    CHECK(s == "a-YY-b-YY");
    CHECK(replace_all(s, "", "z") == 0);
}

TEST_CASE("splice_credential: judged again on the head as it is sent") {
    const fixture f;
    const std::string ph = f.ph();
    const auto verdict = [&](const std::string& fields) { return f.judge("/v1/x", fields); };
    SECTION("the one placeholder, in the credentialed line, becomes the secret") {
        const head_verdict v = verdict("Authorization: Bearer " + ph + "\r\n");
        REQUIRE(v.reason == deny_reason::none);
        std::string out = "POST /v1/x HTTP/1.1\r\nHost: a:443\r\nAuthorization: Bearer " + ph +
                          "\r\n\r\n";
        CHECK(splice_credential(out, &f.cred, v, f.secrets) == deny_reason::none);
        CHECK(out ==
              "POST /v1/x HTTP/1.1\r\nHost: a:443\r\nAuthorization: Bearer " + real + "\r\n\r\n");
    }
    SECTION("a placeholder the normal form decoded into the path (%63ordon-ph-...)") {
        const head_verdict v = verdict("Authorization: Bearer " + ph + "\r\n");
        std::string out = "GET /v1/" + ph + " HTTP/1.1\r\nAuthorization: Bearer " + ph + "\r\n\r\n";
        CHECK(splice_credential(out, &f.cred, v, f.secrets) == deny_reason::credential_misuse);
        CHECK(out.find(real) == std::string::npos);
    }
    SECTION("the placeholder as the method") {
        const head_verdict v = verdict("Authorization: Bearer " + ph + "\r\n");
        std::string out = ph + " /v1/x HTTP/1.1\r\nAuthorization: Bearer " + ph + "\r\n\r\n";
        CHECK(splice_credential(out, &f.cred, v, f.secrets) == deny_reason::credential_misuse);
    }
    SECTION("the credentialed field dropped (Connection: Authorization), the path keeps it") {
        const head_verdict v = verdict("Authorization: Bearer " + ph + "\r\n");
        std::string out = "GET /v1/" + ph + " HTTP/1.1\r\nHost: a:443\r\n\r\n";
        CHECK(splice_credential(out, &f.cred, v, f.secrets) == deny_reason::credential_misuse);
        CHECK(out.find(real) == std::string::npos);
    }
    SECTION("in another field as sent") {
        const head_verdict v = verdict("Authorization: Bearer " + ph + "\r\n");
        std::string out = "GET / HTTP/1.1\r\nX-A: " + ph + "\r\n\r\n";
        CHECK(splice_credential(out, &f.cred, v, f.secrets) == deny_reason::credential_misuse);
    }
    SECTION("no credential: no placeholder may go, nor a secret") {
        std::string out = "GET /" + ph + " HTTP/1.1\r\n\r\n";
        CHECK(splice_credential(out, nullptr, head_verdict{}, f.secrets) ==
              deny_reason::credential_misuse);
        std::string leak = "GET /?k=" + real + " HTTP/1.1\r\n\r\n";
        CHECK(splice_credential(leak, nullptr, head_verdict{}, f.secrets) ==
              deny_reason::secret_leak);
        std::string clean = "GET / HTTP/1.1\r\n\r\n";
        CHECK(splice_credential(clean, nullptr, head_verdict{}, f.secrets) == deny_reason::none);
    }
}

TEST_CASE("stream_scanner: a secret after a placeholder in the same read is still a leak") {
    const fixture f;
    stream_scanner s(f.secrets);
    CHECK(s.feed(f.ph() + " then " + real) == deny_reason::secret_leak);
    // Secrets only (the way back of a WebSocket): placeholders are no finding there.
    stream_scanner back(f.secrets, false);
    CHECK(back.feed(f.ph()) == deny_reason::none);
    CHECK(back.feed("xx" + real.substr(0, 5)) == deny_reason::none);
    CHECK(back.feed(real.substr(5)) == deny_reason::secret_leak);
}

TEST_CASE("drop_fields") {
    std::string head =
        "GET / HTTP/1.1\r\nAccept-Encoding: gzip\r\nX-A: 1\r\naccept-encoding: br\r\n";
    CHECK(drop_fields(head, {"accept-encoding", "sec-websocket-extensions"}) == 2);
    CHECK(head == "GET / HTTP/1.1\r\nX-A: 1\r\n");
}

TEST_CASE("field_is_only: every field and every item, as a client joins them") {
    const std::string_view ce = "content-encoding";
    CHECK(field_is_only("A: 1\r\n", ce, "identity"));  // none
    CHECK(field_is_only("Content-Encoding: identity\r\n", ce, "identity"));
    CHECK(field_is_only("content-encoding:  IDENTITY , identity\r\n", ce, "identity"));
    CHECK_FALSE(field_is_only("Content-Encoding: gzip\r\n", ce, "identity"));
    // review F2: the first field says identity, the second gzip
    CHECK_FALSE(
        field_is_only("Content-Encoding: identity\r\nContent-Encoding: gzip\r\n", ce, "identity"));
    CHECK_FALSE(field_is_only("Content-Encoding: identity, br\r\n", ce, "identity"));
    CHECK_FALSE(
        field_is_only("Transfer-Encoding: gzip, chunked\r\n", "transfer-encoding", "chunked"));
    CHECK(field_is_only("Transfer-Encoding: chunked\r\n", "transfer-encoding", "chunked"));
}

TEST_CASE("hide_values: a secret never reaches an audit line, in any form an agent sends it") {
    std::string error;
    const std::string odd = "Zq7+ab\"cd=9";  // a value with a quote to escape and a '+'
    const auto b = credential_broker::from_values(
        {{"plain", "rk7Hx0PLAINvalue"}, {"odd", odd}, {"n", "nQ8vLx2mW0z"}}, key, error);
    REQUIRE(b);
    const auto hidden = [&](std::string s, std::size_t from = 0) {
        b->hide_values(s, from);
        return s;
    };
    CHECK(hidden(R"({"path":"/v1/rk7Hx0PLAINvalue/x","method":"rk7Hx0PLAINvalue"})") ==
          R"({"path":"/v1/REDACTED/x","method":"REDACTED"})");
    CHECK(hidden(R"({"m":"Zq7+ab\"cd=9"})") == R"({"m":"REDACTED"})");  // JSON-escaped
    // percent-encoded, in any mix and case of escapes
    CHECK(hidden(R"({"path":"/v1/rk7Hx0%50LAINvalue"})") == R"({"path":"/v1/REDACTED"})");
    CHECK(hidden(R"({"path":"/a/Zq7%2bab%22cd%3D9/b"})") == R"({"path":"/a/REDACTED/b"})");
    // bytes inside an escape are not the value's: left alone, the line stays valid JSON
    const std::string inside = R"({"m":"\u0000rk7Hx0PLAINvalue"})";
    CHECK(hidden(inside) == R"({"m":"\u0000REDACTED"})");
    const std::string after_escape = R"({"m":"\nQ8vLx2mW0z"})";  // a newline, then text
    CHECK(hidden(after_escape) == after_escape);
    CHECK(hidden(R"({"m":"\\nQ8vLx2mW0z"})") == R"({"m":"\\REDACTED"})");  // "\\" then it
    // every occurrence; only from `from` on
    CHECK(hidden("rk7Hx0PLAINvalue rk7Hx0PLAINvalue") == "REDACTED REDACTED");
    CHECK(hidden("rk7Hx0PLAINvalue|rk7Hx0PLAINvalue", 1) == "rk7Hx0PLAINvalue|REDACTED");
    CHECK(hidden("nothing here") == "nothing here");
}
