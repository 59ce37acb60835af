// Tests of redaction: secret names, URLs, header values and token shapes in free text.
#include "proxy/audit/redact.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::audit;

// Token-shaped fakes are built at run time so the test source does not itself look like it
// leaks credentials to secret scanners.
std::string rep(char c, std::size_t n) { return std::string(n, c); }

const std::string hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string aws_id = std::string("AKIA") + "IOSFODNN7EXAMPLE";
const std::string aws_sts = std::string("ASIA") + "Y34FZKBOKMUTVV7A";
const std::string jwt = std::string("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9") + "." +
                        "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ" + "." +
                        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

using table = std::vector<std::pair<std::string, std::string>>;

}  // namespace

TEST_CASE("redact: secret_query_name knows every documented name", "[redact]") {
    for (const char* name :
         {"token", "secret", "password", "passwd", "pwd", "key", "apikey", "api_key", "api-key",
          "auth", "credential", "signature", "sig", "session", "code", "access_token",
          "refresh_token", "id_token", "client_secret", "x-amz-signature", "x-amz-credential",
          "x-amz-security-token", "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
          "AWSAccessKeyId", "JSESSIONID", "PHPSESSID", "oauth_token", "oauth_signature",
          "SAMLResponse", "ticket", "client_assertion", "jwt", "TOKEN", "Api_Key", "pass",
          "passphrase", "otp", "bearer", "cookie",
          // percent-encoded names are decoded before matching
          "%74oken", "api%5Fkey", "pass%77ord", "x%2Damz%2Dsignature"}) {
        INFO(name);
        CHECK(secret_query_name(name));
    }
    for (const char* name : {"q", "page", "limit", "id", "name", "format", "lang", "utm_source",
                             "v", "sort", "host", "port", "redirect", "state", "scope", "%zz"}) {
        INFO(name);
        CHECK_FALSE(secret_query_name(name));
    }
}

TEST_CASE("redact: secret_field_name is strict enough for audit fields", "[redact]") {
    for (const char* name : {"token",
                             "secret",
                             "authorization",
                             "Authorization",
                             "proxy-authorization",
                             "Proxy-Authorization",
                             "password",
                             "credential",
                             "credentials",
                             "cookie",
                             "set-cookie",
                             "Set-Cookie",
                             "api_key",
                             "apikey",
                             "x-api-key",
                             "X-Api-Key",
                             "access_token",
                             "accessToken",
                             "refresh_token",
                             "client_secret",
                             "clientSecret",
                             "private_key",
                             "x-amz-security-token",
                             "X-Auth-Token",
                             "pwd",
                             "pass",
                             "sig",
                             "passwd",
                             "tokens",
                             "x-amz-signature",
                             "ssh_keys",
                             "oauth"}) {
        INFO(name);
        CHECK(secret_field_name(name));
    }
    for (const char* name :
         {"session",       "token_id",  "tokenId",       "job",        "client", "host", "reason",
          "author",        "exit_code", "code",          "bytes_up",   "event",  "ts",   "url",
          "rule",          "decision",  "tokens_minted", "expires_at", "by",     "ip",   "port",
          "authenticated", ""}) {
        INFO(name);
        CHECK_FALSE(secret_field_name(name));
    }
}

TEST_CASE("redact: redact_url hides secret parameters and userinfo", "[redact]") {
    const table cases{
        // no query, nothing secret
        {"", ""},
        {"https://example.com", "https://example.com"},
        {"https://example.com/path/to?x", "https://example.com/path/to?x"},
        {"/index.html", "/index.html"},
        {"example.com:443", "example.com:443"},
        // query values
        {"https://api.example.com/v1/items?token=abc123&page=2",
         "https://api.example.com/v1/items?token=REDACTED&page=2"},
        {"/search?q=cats&api_key=k1&api_key=k2&page=1",
         "/search?q=cats&api_key=REDACTED&api_key=REDACTED&page=1"},
        {"/p?Access_Token=x&CLIENT_SECRET=y", "/p?Access_Token=REDACTED&CLIENT_SECRET=REDACTED"},
        {"/p?a=1;password=x;b=2", "/p?a=1;password=REDACTED;b=2"},
        {"/p?sig=abc==&x=1", "/p?sig=REDACTED&x=1"},
        {"/p?token=a=b=c", "/p?token=REDACTED"},
        // empty values stay empty; a bare name is kept
        {"/p?token=&a=1", "/p?token=&a=1"},
        {"/p?token&a=1", "/p?token&a=1"},
        {"/p?&&token=x&&", "/p?&&token=REDACTED&&"},
        // encoded names are recognised, their spelling kept
        {"/p?api%5Fkey=v&%74oken=w&q=%74oken", "/p?api%5Fkey=REDACTED&%74oken=REDACTED&q=%74oken"},
        // fragments: their own parameters are redacted too; the query ends at '#'
        {"https://ex.com/cb#access_token=xyz&state=ok",
         "https://ex.com/cb#access_token=REDACTED&state=ok"},
        {"https://ex.com/p?token=a#frag", "https://ex.com/p?token=REDACTED#frag"},
        {"https://ex.com/p?x=1#section-2", "https://ex.com/p?x=1#section-2"},
        {"https://ex.com/p#a?token=b", "https://ex.com/p#a?token=REDACTED"},
        // path parameters
        {"/app;jsessionid=ABC123/next?x=1", "/app;jsessionid=REDACTED/next?x=1"},
        {"/a;v=1/b", "/a;v=1/b"},
        // AWS pre-signed URL
        {"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F"
         "20261129&X-Amz-Expires=3600&X-Amz-Security-Token=zz&X-Amz-Signature=abcdef",
         "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED"
         "&X-Amz-Expires=3600&X-Amz-Security-Token=REDACTED&X-Amz-Signature=REDACTED"},
        // userinfo
        {"http://user:pass@host:8080/p", "http://REDACTED@host:8080/p"},
        {"https://user@h/", "https://REDACTED@h/"},
        {"https://a:b@c@h/?token=x", "https://REDACTED@h/?token=REDACTED"},
        {"//u:p@h/x", "//REDACTED@h/x"},
        {"s-1:tok@proxy:3128", "REDACTED@proxy:3128"},
        {"http://u:p@h", "http://REDACTED@h"},
        {"http://u:p@h?x=1", "http://REDACTED@h?x=1"},
        {"https://h/a@b", "https://h/a@b"},
        {"https://h/?email=a@b.c", "https://h/?email=a@b.c"},
        {"/a@b", "/a@b"},
        // over-redaction by design: names merely containing a root are hidden too
        {"/p?author=bob&zipcode=1", "/p?author=REDACTED&zipcode=REDACTED"},
    };
    for (const auto& [in, want] : cases) {
        INFO(in);
        CHECK(redact_url(in) == want);
        CHECK(redact_url(redact_url(in)) == want);
    }
}

TEST_CASE("redact: redact_header_value keeps schemes and hides credentials", "[redact]") {
    struct row {
        std::string name;
        std::string value;
        std::string want;
    };
    const std::vector<row> cases{
        {"Authorization", "Bearer abc", "Bearer REDACTED"},
        {"authorization", "Basic dXNlcjpwYXNz", "Basic REDACTED"},
        {"Proxy-Authorization", "Basic czpn", "Basic REDACTED"},
        {"PROXY-AUTHORIZATION", "  Bearer  x  y", "Bearer REDACTED"},
        {"Authorization", "Digest username=\"u\", response=\"r\"", "Digest REDACTED"},
        {"Authorization", "AWS4-HMAC-SHA256 Credential=AKID/x, Signature=s",
         "AWS4-HMAC-SHA256 REDACTED"},
        {"Authorization", "rawtoken", "REDACTED"},
        {"Authorization", "Bearer", "REDACTED"},
        {"Authorization", "", ""},
        {"Cookie", "a=b; sid=c", "REDACTED"},
        {"Set-Cookie", "sid=c; HttpOnly", "REDACTED"},
        {"X-Api-Key", "k", "REDACTED"},
        {"X-Auth-Token", "t", "REDACTED"},
        {"X-Amz-Security-Token", "t", "REDACTED"},
        {"Host", "example.com", "example.com"},
        {"User-Agent", "curl/8.5.0", "curl/8.5.0"},
        {"Accept", "*/*", "*/*"},
        {"Referer", "https://u:p@ex.com/?code=c&x=1", "https://REDACTED@ex.com/?code=REDACTED&x=1"},
        {"Location", "/cb#access_token=t", "/cb#access_token=REDACTED"},
        {"X-Debug", "key " + aws_id, "key REDACTED"},
    };
    for (const auto& c : cases) {
        INFO(c.name << ": " << c.value);
        CHECK(redact_header_value(c.name, c.value) == c.want);
    }
}

TEST_CASE("redact: redact_text masks every token shape", "[redact]") {
    const std::vector<std::pair<std::string, std::string>> shapes{
        {"aws access key id", aws_id},
        {"aws sts key id", aws_sts},
        {"github classic", "ghp_" + rep('A', 36)},
        {"github oauth", "gho_" + rep('b', 36)},
        {"github user", "ghu_" + rep('1', 36)},
        {"github server", "ghs_" + rep('C', 36)},
        {"github refresh", "ghr_" + rep('d', 36)},
        {"github fine-grained", "github_pat_" + rep('A', 22) + "_" + rep('b', 59)},
        {"slack bot", "xoxb-" + rep('1', 12) + "-" + rep('2', 12) + "-" + rep('a', 24)},
        {"slack user", "xoxp-" + rep('1', 12) + "-" + rep('a', 24)},
        {"slack a", "xoxa-" + rep('9', 20)},
        {"slack r", "xoxr-" + rep('9', 20)},
        {"slack s", "xoxs-" + rep('9', 20)},
        {"openai", "sk-" + rep('a', 48)},
        {"openai project", "sk-proj-" + rep('Z', 40) + "_" + rep('x', 10)},
        {"anthropic", "sk-ant-api03-" + rep('Q', 80) + "-" + rep('r', 10) + "AA"},
        {"jwt", jwt},
        {"jwt without signature", jwt.substr(0, jwt.rfind('.'))},
        {"cordon proxy token", hex64},
        {"pem rsa",
         "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nIBAAK\n-----END RSA PRIVATE KEY-----"},
        {"pem pkcs8", "-----BEGIN PRIVATE KEY-----\nMIIEvQ==\n-----END PRIVATE KEY-----"},
        {"pem openssh",
         "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n-----END OPENSSH PRIVATE KEY-----"},
        {"pem encrypted",
         "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMII\n-----END ENCRYPTED PRIVATE KEY-----"},
        {"pem ec", "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----"},
    };
    for (const auto& [what, secret] : shapes) {
        INFO(what << ": " << secret);
        CHECK(redact_text(secret) == "REDACTED");
        CHECK(redact_text("before " + secret + " after") == "before REDACTED after");
        CHECK(redact_text("(" + secret + ")") == "(REDACTED)");
        CHECK(redact_text("\"" + secret + "\",") == "\"REDACTED\",");
        CHECK(redact_text("x=" + secret + "&y=1") == "x=REDACTED&y=1");
    }
}

TEST_CASE("redact: redact_text masks credentials in context", "[redact]") {
    const table cases{
        // userinfo in URLs
        {"proxy is http://s-1:tok@127.0.0.1:3128 ok", "proxy is http://REDACTED@127.0.0.1:3128 ok"},
        {"HTTPS_PROXY=https://u@h", "HTTPS_PROXY=https://REDACTED@h"},
        {"see https://h/a@b", "see https://h/a@b"},
        // bearer tokens
        {"sent Bearer abcdefgh1234", "sent Bearer REDACTED"},
        {"bearer\tabcdefgh1234.xyz", "bearer\tREDACTED"},
        {"the bearer of news", "the bearer of news"},
        // secret name=value pairs
        {"password=hunter2 next", "password=REDACTED next"},
        {"login failed: token: abc, retrying", "login failed: token: REDACTED, retrying"},
        {"curl -H 'X-Api-Key: k1' url", "curl -H 'X-Api-Key: REDACTED' url"},
        {"{\"api_key\":\"abc def\",\"x\":1}", "{\"api_key\":\"REDACTED\",\"x\":1}"},
        {"{\"client_secret\": \"a\\\"b\", \"n\": 2}",
         "{\"client_secret\": \"REDACTED\", \"n\": 2}"},
        {"{\\\"token\\\":\\\"abc\\\"}", "{\\\"token\\\":\\\"REDACTED\\\"}"},
        {"{'secret': 'x y'}", "{'secret': 'REDACTED'}"},
        {"{\"token\": 12345}", "{\"token\": REDACTED}"},
        {"Authorization: Bearer abc\r\nHost: x", "Authorization: Bearer REDACTED\r\nHost: x"},
        {"proxy-authorization: Basic czpn\nnext", "proxy-authorization: Basic REDACTED\nnext"},
        {"{\"authorization\":\"Bearer abc\"}", "{\"authorization\":\"Bearer REDACTED\"}"},
        {"Cookie: a=b; c=d\nX: y", "Cookie: REDACTED\nX: y"},
        {"GET /x?access_token=abc&y=1 HTTP/1.1", "GET /x?access_token=REDACTED&y=1 HTTP/1.1"},
        {"token=\"unterminated", "token=\"REDACTED"},
        // not secrets
        {"{\"token\": null, \"password\": true}", "{\"token\": null, \"password\": true}"},
        {"token_id=t-0a1b2c session=s-1 job=ci", "token_id=t-0a1b2c session=s-1 job=ci"},
        {"token=", "token="},
        {"token = {\"a\": 1}", "token = {\"a\": 1}"},
        {"hello world", "hello world"},
        {"", ""},
        {"task-force-is-a-long-hyphenated-word-list", "task-force-is-a-long-hyphenated-word-list"},
        {"sk-short", "sk-short"},
        {"ask-" + rep('a', 30), "ask-" + rep('a', 30)},
        {"AKIA1234", "AKIA1234"},
        {"MAKIA" + rep('A', 16), "MAKIA" + rep('A', 16)},
        {"ghp_short", "ghp_short"},
        {"xghp_" + rep('a', 36), "xghp_" + rep('a', 36)},
        {"xoxb-short", "xoxb-short"},
        {"eyJ alone", "eyJ alone"},
        {"eyJhbGciOiJIUzI1NiJ9.notpayload", "eyJhbGciOiJIUzI1NiJ9.notpayload"},
        {hex64.substr(1), hex64.substr(1)},
        {hex64 + "0", hex64 + "0"},
        {hex64 + "g", hex64 + "g"},
        {"x" + hex64, "x" + hex64},
        {"0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF",
         "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF"},
        {"-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----",
         "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----"},
        {"550e8400-e29b-41d4-a716-446655440000", "550e8400-e29b-41d4-a716-446655440000"},
        // a PEM key without its END line hides everything after BEGIN
        {"x\n-----BEGIN RSA PRIVATE KEY-----\nMIIE", "x\nREDACTED"},
        // sha256 digests look like cordon tokens: hidden too (documented)
        {"sha256:" + hex64, "sha256:REDACTED"},
        // token ids and session ids are not secrets
        {"s-0123456789abcdef t-0123456789ab", "s-0123456789abcdef t-0123456789ab"},
    };
    for (const auto& [in, want] : cases) {
        INFO(in);
        CHECK(redact_text(in) == want);
        CHECK(redact_text(redact_text(in)) == want);
    }
}

TEST_CASE("redact: redact_text is linear on hostile input", "[redact]") {
    constexpr std::size_t size = 1 << 20;
    const auto repeat = [](const std::string& unit) {
        std::string s;
        while (s.size() < size) {
            s += unit;
        }
        return s;
    };
    const std::vector<std::string> inputs{
        std::string(size, 'a'),
        std::string(size, '-'),
        repeat("eyJabcdefgh."),
        repeat("eyJabcdefghijk.eyJ"),
        repeat("-----BEGIN "),
        repeat("-----BEGIN PRIVATE KEY"),
        repeat("://"),
        repeat("://a"),
        repeat("token="),
        repeat("token:\""),
        repeat("\"token\" "),
        repeat("authorization: "),
        repeat("sk-"),
        repeat("bearer "),
        repeat("bearer" + std::string(100, ' ')),
        repeat("AKIA"),
        repeat("ghp_"),
        repeat("xoxb-"),
        std::string(size, '0'),
        repeat("a.b-c_d"),
    };
    for (const auto& in : inputs) {
        const auto start = std::chrono::steady_clock::now();
        const std::string out = redact_text(in);
        const auto took = std::chrono::steady_clock::now() - start;
        INFO(in.substr(0, 40));
        // Linear scanning takes milliseconds; a quadratic one would take hours.
        CHECK(took < std::chrono::seconds(2));
        CHECK_FALSE(out.empty());
    }
}

// The words of the audit contract (issue 6): query values whose names contain token, key,
// secret, password, sig, auth or credential, in any case and position, never pass.
TEST_CASE("redact: every secret word, in any case and position, hides a query value",
          "[redact][contract]") {
    const std::string secret_value = "S3cr3tV4lue" + rep('q', 12);
    for (const std::string word :
         {"token", "key", "secret", "password", "sig", "auth", "credential"}) {
        std::string upper;
        for (const char c : word) {
            upper.push_back(static_cast<char>(c - 'a' + 'A'));
        }
        std::string mixed = upper.substr(0, 1) + word.substr(1);
        for (const std::string& name : {word, upper, mixed, "x_" + word, word + "_x",
                                        "my" + mixed + "Value", "X-" + upper + "-Id", word + "s"}) {
            INFO(name);
            CHECK(secret_query_name(name));
            const std::string url = "https://h.example/p?q=1&" + name + "=" + secret_value +
                                    "&page=2#" + name + "=" + secret_value;
            const std::string out = redact_url(url);
            CHECK(out.find(secret_value) == std::string::npos);
            CHECK(out.find("q=1") != std::string::npos);
            CHECK(out.find("page=2") != std::string::npos);
        }
    }
}

TEST_CASE("redact: credentials in headers and URLs never pass", "[redact][contract]") {
    const std::string secret = "Zx9" + rep('k', 20);
    // Authorization and Proxy-Authorization in any case keep only their scheme.
    for (const char* name : {"Authorization", "authorization", "AUTHORIZATION",
                             "Proxy-Authorization", "proxy-authorization"}) {
        for (const std::string& value :
             {"Bearer " + secret, "Basic " + secret, secret, "Token token=" + secret}) {
            INFO(name << ": " << value);
            const std::string out = redact_header_value(name, value);
            CHECK(out.find(secret) == std::string::npos);
        }
    }
    // Cookie and Set-Cookie lose their whole value.
    for (const char* name : {"Cookie", "cookie", "Set-Cookie", "set-cookie", "SET-COOKIE"}) {
        for (const std::string& value :
             {"sid=" + secret, "a=1; sid=" + secret + "; Path=/; HttpOnly", secret}) {
            INFO(name << ": " << value);
            CHECK(redact_header_value(name, value) == "REDACTED");
        }
    }
    // Userinfo in every URL form, with and without a password.
    for (const std::string& url :
         {"http://user:" + secret + "@h.example/", "https://" + secret + "@h.example:8443/x",
          "//u:" + secret + "@h/", "u:" + secret + "@proxy:3128",
          "HTTP://U:" + secret + "@H.EXAMPLE"}) {
        INFO(url);
        CHECK(redact_url(url).find(secret) == std::string::npos);
        if (url.find("://") != std::string::npos) {  // free text: URLs with a scheme
            CHECK(redact_text("see " + url + " now").find(secret) == std::string::npos);
        }
    }
    // Header lines in free text (as an upstream error message might quote them).
    for (const std::string& text :
         {"Authorization: Bearer " + secret, "proxy-authorization: Basic " + secret,
          "Cookie: sid=" + secret, "Set-Cookie: sid=" + secret + "; HttpOnly",
          "{\"Authorization\":\"Bearer " + secret + "\"}", "token=" + secret,
          "{\"password\": \"" + secret + "\"}"}) {
        INFO(text);
        CHECK(redact_text(text).find(secret) == std::string::npos);
    }
    // cordon's own proxy tokens (64 lower-case hex) anywhere in text.
    CHECK(redact_text("proxy token " + hex64 + ".").find(hex64) == std::string::npos);
}

TEST_CASE("redact_text: credential placeholders, glued to other text too") {
    using cordon::proxy::audit::redact_text;
    const std::string ph = "cordon-ph-0123456789abcdef0123456789abcdef01234567";
    CHECK(redact_text("Bearer? no: " + ph) == "Bearer? no: REDACTED");
    CHECK(redact_text("/v1/x" + ph + "/y") == "/v1/xREDACTED/y");
    CHECK(redact_text("GET " + ph) == "GET REDACTED");
    CHECK(redact_text("cordon-ph-short") == "cordon-ph-short");  // not the shape: kept
}
