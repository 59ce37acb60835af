// `protocol: https` in the policy: the `inspect` section (and its errors), https rules (host
// only, need `inspect`, take `http:` and `methods`), and decide(): a CONNECT is decided as
// for tls, each request inside the tunnel (request_kind::inspected) only by https rules, with
// their request rules; report mode relaxes http_rule there too.
#include <catch2/catch.hpp>

#include <string>

#include "config/decide.hpp"
#include "config/http_rules.hpp"
#include "config/load.hpp"
#include "config/mode.hpp"

using namespace cordon::config;

namespace {

constexpr std::string_view policy_text = R"(listen: { proxy: 127.0.0.1:3128 }
inspect:
  ca: { cert: /etc/cordon/ca/ca.pem, key: /etc/cordon/ca/ca.key }
  upstream_ca: /etc/cordon/upstream.pem
  leaf_ttl: 12h
  leaf_cache: 500
jobs:
  coder:
    task: call one API over HTTPS
    egress:
      - host: api.example.com
        ports: [443]
        protocol: https
        http:
          - { methods: [POST], paths: [/v1/chat/completions] }
          - { methods: [GET], paths: ["/v1/models/**"] }
      - { host: files.example.com, ports: [443], protocol: https, methods: [GET] }
      - { host: plain.example.com, ports: [443], protocol: tls }
      - { host: web.example.com, ports: [80], protocol: http }
  watcher:
    task: the same, reported
    mode: report
    egress:
      - { host: api.example.com, ports: [443], protocol: https,
          http: [{ methods: [GET], paths: ["/v1/**"] }] }
)";

std::shared_ptr<const compiled_policy> load() {
    load_result r = load_policy(policy_text, "inspect.yaml");
    for (const auto& e : r.errors) {
        FAIL(e.to_string());
    }
    return compile(std::move(*r.value));
}

decision ask(const compiled_policy& p, std::string_view job, std::string_view host,
             request_kind kind, std::string_view method = {}, std::string_view target = "/",
             std::uint16_t port = 443) {
    const normal_path n = normalise_path(target);
    decide_args a;
    a.job = job;
    a.host = host;
    a.port = port;
    a.kind = kind;
    a.method = method;
    a.path = n.path;
    a.path_refused = !n.ok();
    return decide(a, p);
}

std::vector<std::string> errors_of(std::string_view text) {
    std::vector<std::string> out;
    for (const auto& e : load_policy(text, "p.yaml").errors) {
        out.push_back(e.to_string());
    }
    return out;
}

bool any_contains(const std::vector<std::string>& v, std::string_view s) {
    for (const auto& x : v) {
        if (x.find(s) != std::string::npos) {
            return true;
        }
    }
    return false;
}

}  // namespace

TEST_CASE("inspect: the section loads with its defaults and limits") {
    const auto p = load();
    const auto& spec = p->source().inspect;
    REQUIRE(spec);
    CHECK(spec->ca_cert == "/etc/cordon/ca/ca.pem");
    CHECK(spec->ca_key == "/etc/cordon/ca/ca.key");
    CHECK(spec->upstream_ca == std::optional<std::string>("/etc/cordon/upstream.pem"));
    CHECK(spec->leaf_ttl == std::chrono::hours(12));
    CHECK(spec->leaf_cache == 500);
    CHECK(to_string(p->source().jobs[0].egress[0].proto) == "https");

    const auto d = load_policy(
        "listen: { proxy: 127.0.0.1:3128 }\n"
        "inspect: { ca: { cert: /a.pem, key: /a.key }, upstream_ca: system }\n"
        "jobs: {}\n",
        "p.yaml");
    REQUIRE(d.ok());
    CHECK_FALSE(d.value->inspect->upstream_ca);  // system: the system's roots
    CHECK(d.value->inspect->leaf_ttl == std::chrono::hours(24));
}

TEST_CASE("inspect: errors say what to write") {
    const std::string head = "listen: { proxy: 127.0.0.1:3128 }\njobs: {}\n";
    CHECK(any_contains(errors_of(head + "inspect: {}\n"), "missing key 'ca'"));
    CHECK(
        any_contains(errors_of(head + "inspect: { ca: { cert: /a.pem } }\n"), "missing key 'key'"));
    CHECK(any_contains(errors_of(head + "inspect: { ca: { cert: /a.pem, key: /a.key }, "
                                        "leaf_ttl: 10m }\n"),
                       "inspect.leaf_ttl"));
    CHECK(any_contains(errors_of(head + "inspect: { ca: { cert: /a.pem, key: /a.key }, "
                                        "leaf_cache: 0 }\n"),
                       "inspect.leaf_cache"));
    CHECK(any_contains(errors_of(head + "inspect: { ca: { cert: /a.pem, key: /a.key }, "
                                        "colour: red }\n"),
                       "colour"));
    CHECK(any_contains(errors_of(head + "inspect: { ca: { cert: /a.pem, key: /a.key }, "
                                        "upstream_ca: relative.pem }\n"),
                       "inspect.upstream_ca"));
}

TEST_CASE("inspect: an https rule needs the inspect section, a host, and takes request rules") {
    const std::string head = "listen: { proxy: 127.0.0.1:3128 }\njobs:\n  a:\n    task: t\n"
                             "    egress:\n";
    CHECK(any_contains(errors_of(head + "      - { host: api.example.com, ports: [443], "
                                        "protocol: https }\n"),
                       "protocol https needs the 'inspect' section"));
    const std::string with_ca = "listen: { proxy: 127.0.0.1:3128 }\n"
                                "inspect: { ca: { cert: /a.pem, key: /a.key } }\n"
                                "jobs:\n  a:\n    task: t\n    egress:\n";
    CHECK(any_contains(errors_of(with_ca + "      - { cidr: 203.0.113.0/24, ports: [443], "
                                           "protocol: https }\n"),
                       "https needs a host name"));
    CHECK(errors_of(with_ca + "      - { host: api.example.com, ports: [443], protocol: https, "
                              "http: [{ paths: [/v1/**] }] }\n")
              .empty());
    CHECK(any_contains(errors_of(with_ca + "      - { host: api.example.com, ports: [443], "
                                           "protocol: tls, http: [{ paths: [/v1/**] }] }\n"),
                       "apply only to protocol: http and https"));
    CHECK(any_contains(errors_of(with_ca + "      - { host: api.example.com, ports: [443], "
                                           "protocol: tcp, methods: [GET] }\n"),
                       "'methods' applies only to protocol: http and https"));
    CHECK(any_contains(errors_of(with_ca + "      - { host: api.example.com, ports: [443], "
                                           "protocol: quic }\n"),
                       "expected tls, tcp, ssh, http or https"));
}

TEST_CASE("inspect: a CONNECT to an https rule is allowed as for tls; requests inside are "
          "decided by https rules only") {
    const auto p = load();
    const decision c = ask(*p, "coder", "api.example.com", request_kind::connect);
    REQUIRE(c.allowed());
    CHECK(c.rule->proto == protocol::https);

    CHECK(
        ask(*p, "coder", "api.example.com", request_kind::inspected, "POST", "/v1/chat/completions")
            .allowed());
    CHECK(ask(*p, "coder", "api.example.com", request_kind::inspected, "GET", "/v1/models/x/y")
              .allowed());
    const decision d = ask(*p, "coder", "api.example.com", request_kind::inspected, "GET",
                           "/admin");
    CHECK(d.reason == deny_reason::http_rule);
    CHECK(ask(*p, "coder", "api.example.com", request_kind::inspected, "GET", "/v1/%2e%2e/admin")
              .reason == deny_reason::bad_request);
    // methods on an https rule
    CHECK(ask(*p, "coder", "files.example.com", request_kind::inspected, "GET", "/any").allowed());
    CHECK(ask(*p, "coder", "files.example.com", request_kind::inspected, "PUT", "/any").reason ==
          deny_reason::method);
    // A tls rule never decides a request inside an inspected tunnel, nor an http rule.
    CHECK(ask(*p, "coder", "plain.example.com", request_kind::inspected, "GET", "/").reason ==
          deny_reason::protocol);
    CHECK(ask(*p, "coder", "web.example.com", request_kind::inspected, "GET", "/", 80).reason ==
          deny_reason::protocol);
    // And an https rule never carries plain forwarding.
    CHECK(ask(*p, "coder", "api.example.com", request_kind::http, "GET", "/v1/models/x").reason ==
          deny_reason::protocol);
}

TEST_CASE("inspect: report mode relaxes http_rule inside the tunnel, never a refused path") {
    const auto p = load();
    decide_args a;
    a.job = "watcher";
    a.host = "api.example.com";
    a.port = 443;
    a.kind = request_kind::inspected;
    a.method = "DELETE";
    a.path = "/v2/x";
    const moded_decision m = decide_with_mode(a, *p);
    CHECK(m.effective.allowed());
    CHECK(m.would_deny == deny_reason::http_rule);
    a.path = "";
    a.path_refused = true;
    CHECK(decide_with_mode(a, *p).effective.reason == deny_reason::bad_request);
}

TEST_CASE("inspect: shadowed https rules are warned about as for CONNECT rules") {
    const auto r = load_policy(R"(listen: { proxy: 127.0.0.1:3128 }
inspect: { ca: { cert: /a.pem, key: /a.key } }
jobs:
  a:
    task: t
    egress:
      - { host: api.example.com, ports: [443], protocol: tls }
      - { host: api.example.com, ports: [443], protocol: https }
      - { host: b.example.com, ports: [443], protocol: https, http: [{ paths: [/v1/**] }] }
      - { host: b.example.com, ports: [443], protocol: https, http: [{ paths: [/v2/**] }] }
)",
                               "p.yaml");
    REQUIRE(r.ok());
    std::string all;
    for (const auto& w : r.warnings) {
        all += w.to_string() + "\n";
    }
    CHECK_THAT(all, Catch::Contains("egress[1]"));
    CHECK_THAT(all, !Catch::Contains("egress[3]"));
}

TEST_CASE("credentials: secrets, a rule's credential and the job's placeholders must agree") {
    const std::string head = "listen: { proxy: 127.0.0.1:3128 }\n"
                             "inspect: { ca: { cert: /a.pem, key: /a.key } }\n";
    const std::string good =
        head +
        "secrets:\n  openai: { file: /etc/cordon/secrets/openai }\n  gh: { env: GH_TOKEN }\n"
        "jobs:\n  a:\n    task: t\n    egress:\n"
        "      - host: api.openai.com\n        ports: [443]\n        protocol: https\n"
        "        credential: { secret: openai, header: Authorization, format: \"Bearer {}\" }\n"
        "    credentials: { OPENAI_API_KEY: openai }\n";
    const auto r = load_policy(good, "p.yaml");
    for (const auto& e : r.errors) {
        FAIL(e.to_string());
    }
    REQUIRE(r.value->secrets.size() == 2);
    CHECK(r.value->secrets[0].file == std::optional<std::string>("/etc/cordon/secrets/openai"));
    CHECK(r.value->secrets[1].env == std::optional<std::string>("GH_TOKEN"));
    const auto& c = *r.value->jobs[0].egress[0].credential;
    CHECK(c.secret == "openai");
    CHECK(c.header == "Authorization");
    CHECK(c.prefix == "Bearer ");
    CHECK(c.suffix.empty());
    CHECK(r.value->jobs[0].credentials ==
          std::vector<std::pair<std::string, std::string>>{{"OPENAI_API_KEY", "openai"}});

    const auto replace = [&good](std::string_view from, std::string_view to) {
        std::string s = good;
        s.replace(s.find(from), from.size(), to);
        return errors_of(s);
    };
    CHECK(any_contains(replace("secret: openai,", "secret: nope,"), "no secret named 'nope'"));
    CHECK(any_contains(replace("{ OPENAI_API_KEY: openai }", "{ OPENAI_API_KEY: gh }"),
                       "no placeholder for 'openai'"));
    CHECK(any_contains(replace("header: Authorization", "header: Host"), "cannot carry"));
    CHECK(any_contains(replace("header: Authorization", "header: Proxy-Authorization"),
                       "cannot carry"));
    CHECK(any_contains(replace("\"Bearer {}\"", "\"Bearer\""), "exactly one {}"));
    CHECK(any_contains(replace("\"Bearer {}\"", "\"{} {}\""), "exactly one {}"));
    CHECK(any_contains(replace("protocol: https", "protocol: tls"), "only on protocol: https"));
    CHECK(any_contains(replace("{ file: /etc/cordon/secrets/openai }", "{ file: /a, env: B }"),
                       "exactly one of 'file'"));
    CHECK(any_contains(replace("{ file: /etc/cordon/secrets/openai }", "{ file: rel }"),
                       "not an absolute path"));
    CHECK(any_contains(replace("{ OPENAI_API_KEY: openai }", "{ 1BAD: openai }"),
                       "not a variable name"));
    std::string no_inspect = good;
    no_inspect.erase(no_inspect.find("inspect:"),
                     no_inspect.find("secrets:") - no_inspect.find("inspect:"));
    CHECK(any_contains(errors_of(no_inspect), "needs the 'inspect' section"));
}

TEST_CASE("credentials: never on a wildcard host") {
    const auto errors = errors_of(R"(listen: { proxy: 127.0.0.1:3128 }
inspect: { ca: { cert: /a.pem, key: /a.key } }
secrets: { openai: { file: /etc/cordon/secrets/openai } }
jobs:
  a:
    task: t
    egress:
      - host: "*.openai.azure.com"
        ports: [443]
        protocol: https
        credential: { secret: openai, header: api-key }
    credentials: { OPENAI_API_KEY: openai }
)");
    CHECK(any_contains(errors, "never to every name below a wildcard"));
}
