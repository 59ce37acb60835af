// alert_payload: one JSON body for Slack-compatible and Alertmanager-style receivers; the
// summary line; client-chosen targets made inert.
#include "proxy/alerts/alert_payload.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>

#include <boost/json.hpp>

#include <string>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::alerts;
namespace json = boost::json;

denial_alert sample() {
    denial_alert a;
    a.job = "ticket-summarizer";
    a.session = "s-3f2a";
    a.denials = 12;
    a.reasons = {{"no_rule", 10}, {"port", 2}};
    a.top_targets = {{"evil.example:443", "connect", 9}, {"exfil.test", "dns", 2}};
    a.other_targets = 1;
    a.first_wall_ms = 1'795'000'000'000;  // 2026-11-18T...
    a.last_wall_ms = 1'795'000'059'000;
    a.window_ms = 60'000;
    a.burst = true;
    return a;
}

TEST_CASE("alert_summary: one paragraph for a person", "[alert_payload]") {
    CHECK(alert_summary(sample()) ==
          "cordon: 12 denied attempts by session s-3f2a (job ticket-summarizer) in 60 s "
          "(burst): no_rule ×10, port ×2 (evil.example:443 ×9, exfil.test ×2, 1 more)");
    denial_alert a = sample();
    a.session.clear();
    a.burst = false;
    a.denials = 1;
    a.reasons = {{"no_rule", 1}};
    a.top_targets = {{"x.test:80", "http", 1}};
    a.other_targets = 0;
    a.window_ms = 1500;
    a.dropped = 4;
    CHECK(alert_summary(a) ==
          "cordon: 1 denied attempt by job ticket-summarizer (no session) in 1.5 s: "
          "no_rule ×1 (x.test:80 ×1); 4 more denials were not counted (overload)");
    a.job.clear();
    CHECK_THAT(alert_summary(a), Catch::Matchers::Contains("by an unattributed client"));
}

TEST_CASE("alert_summary: hostile targets are inert in chat markup", "[alert_payload]") {
    denial_alert a = sample();
    a.top_targets = {
        {"<!channel>&<https://evil|click>`*_~\n" + std::string(200, 'x'), "connect", 1}};
    const std::string s = alert_summary(a);
    CHECK(s.find('<') == std::string::npos);
    CHECK(s.find('>') == std::string::npos);
    CHECK(s.find('`') == std::string::npos);
    CHECK(s.find('\n') == std::string::npos);
    CHECK(s.find('|') == std::string::npos);
    CHECK_THAT(s, Catch::Matchers::Contains("&lt;!channel&gt;&amp;&lt;https://evil?click&gt;"));
    CHECK_THAT(s, Catch::Matchers::Contains("…"));  // cut at 80 characters
    CHECK(s.size() < 400);
}

TEST_CASE("alert_payload: Slack and Alertmanager shapes in one object", "[alert_payload]") {
    const denial_alert a = sample();
    const std::string body = alert_payload(a, 60'000);
    const json::value v = json::parse(body);
    const json::object& o = v.as_object();
    // Slack-compatible incoming webhooks: `text`.
    CHECK(o.at("text").as_string() == alert_summary(a));
    // Alertmanager webhook format (version 4).
    CHECK(o.at("version").as_string() == "4");
    CHECK(o.at("status").as_string() == "firing");
    CHECK(o.at("receiver").as_string() == "cordon");
    CHECK(o.at("commonLabels").at("alertname").as_string() == "CordonDenialBurst");
    const json::array& alerts = o.at("alerts").as_array();
    REQUIRE(alerts.size() == 1);
    const json::object& al = alerts[0].as_object();
    CHECK(al.at("status").as_string() == "firing");
    CHECK(al.at("labels").at("alertname").as_string() == "CordonDenialBurst");
    CHECK(al.at("labels").at("job").as_string() == "ticket-summarizer");
    CHECK(al.at("labels").at("severity").as_string() == "critical");  // a burst
    CHECK(al.at("annotations").at("summary").as_string() == alert_summary(a));
    CHECK_THAT(std::string(al.at("annotations").at("description").as_string()),
               Catch::Matchers::Contains("session s-3f2a"));
    CHECK(al.at("startsAt").as_string() == "2026-11-18T11:06:40.000Z");
    CHECK(al.at("endsAt").as_string() == "2026-11-18T11:08:40.000Z");  // + window + interval
    // The structured details.
    const json::object& c = o.at("cordon").as_object();
    CHECK(c.at("job").as_string() == "ticket-summarizer");
    CHECK(c.at("session").as_string() == "s-3f2a");
    CHECK(c.at("denials").as_int64() == 12);
    CHECK(c.at("reasons").at("no_rule").as_int64() == 10);
    CHECK(c.at("reasons").at("port").as_int64() == 2);
    const json::array& top = c.at("top_targets").as_array();
    REQUIRE(top.size() == 2);
    CHECK(top[0].at("target").as_string() == "evil.example:443");
    CHECK(top[0].at("kind").as_string() == "connect");
    CHECK(top[0].at("count").as_int64() == 9);
    CHECK(c.at("other_targets").as_int64() == 1);
    CHECK(c.at("first").as_string() == "2026-11-18T11:06:40.000Z");
    CHECK(c.at("last").as_string() == "2026-11-18T11:07:39.000Z");
    CHECK(c.at("window_ms").as_int64() == 60'000);
    CHECK(c.at("burst").as_bool());
    CHECK(c.at("dropped").as_int64() == 0);
}

TEST_CASE("alert_payload: no burst is a warning; hostile strings stay valid JSON",
          "[alert_payload]") {
    denial_alert a = sample();
    a.burst = false;
    a.job.clear();
    a.session = "s-\"quoted\"";
    a.top_targets = {{"a\"b\\c\x01\xff", "connect", 1}};
    const json::value v = json::parse(alert_payload(a, 1000));
    CHECK(v.at("alerts").as_array()[0].at("labels").at("severity").as_string() == "warning");
    CHECK(v.at("alerts").as_array()[0].at("labels").at("job").as_string() == "(none)");
    CHECK(v.at("cordon").at("session").as_string() == "s-\"quoted\"");
    CHECK_FALSE(v.at("cordon").at("burst").as_bool());
}

}  // namespace
