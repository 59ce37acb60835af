// Tests of the dialer (resolve -> classify -> connect) over a fake resolver and a fake
// connector: no DNS, no sockets. Each refusal, failure and outside close is named.
#include "proxy/data/dialer.hpp"

#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace cordon;
using namespace cordon::proxy;
using namespace cordon::proxy::data;
using cordon::config::deny_reason;

config::ip_address ip(std::string_view text) {
    const auto a = config::parse_ip(text);
    REQUIRE(a);
    return *a;
}

class fake_resolver final : public resolver {
public:
    std::map<std::string, dns::resolve_result> answers;
    std::vector<std::string> asked;
    std::function<void()> on_resolve;  // runs during the lookup (a kill meanwhile)

    awaitable<dns::resolve_result> resolve(const std::string& name) override {
        asked.push_back(name);
        if (on_resolve) {
            on_resolve();
        }
        const auto it = answers.find(name);
        if (it == answers.end()) {
            dns::resolve_result r;
            r.error = "NXDOMAIN";
            co_return r;
        }
        co_return it->second;
    }
};

class fake_connector final : public connector {
public:
    std::map<std::string, error_code> results;  // by address; absent: connects
    std::vector<std::string> tried;
    std::function<void()> on_connect;  // runs during the attempt (a kill meanwhile)

    awaitable<error_code> connect(const tcp::endpoint& to, std::chrono::milliseconds) override {
        tried.push_back(to.address().to_string() + ":" + std::to_string(to.port()));
        if (on_connect) {
            on_connect();
        }
        const auto it = results.find(to.address().to_string());
        co_return it == results.end() ? error_code{} : it->second;
    }
};

dns::resolve_result answer(std::vector<std::string_view> addresses) {
    dns::resolve_result r;
    for (const auto a : addresses) {
        r.addresses.push_back(ip(a));
    }
    return r;
}

config::decision allowed() {
    config::decision d;
    d.reason = deny_reason::none;
    return d;
}

struct harness {
    fake_resolver res;
    fake_connector con;
    control::self_addresses self;
    bool killed = false;

    dial_result dial(const upstream_target& t) {
        upstream_dialer d(res, con, self, std::chrono::milliseconds(1000));
        const std::function<bool()> aborted = [this] { return killed; };
        const config::decision ok = allowed();
        net::io_context ioc;
        dial_result out;
        bool done = false;
        net::co_spawn(ioc, d.dial(t, ok, aborted), [&](std::exception_ptr e, dial_result r) {
            REQUIRE_FALSE(e);
            out = std::move(r);
            done = true;
        });
        ioc.run();
        REQUIRE(done);
        return out;
    }
};

}  // namespace

TEST_CASE("dialer: make_target normalises the host once", "[dialer]") {
    const upstream_target t = make_target("Example.COM.", 443, "Example.COM.:443");
    CHECK(t.host == "Example.COM.");
    CHECK(t.name == "example.com");
    CHECK(t.key() == "example.com:443");
    CHECK(t.text == "Example.COM.:443");
    CHECK_FALSE(t.literal);

    const upstream_target v4 = make_target("192.0.2.7", 80, "192.0.2.7:80");
    REQUIRE(v4.literal);
    CHECK(v4.literal->to_string() == "192.0.2.7");

    const upstream_target v6 = make_target("2001:db8::1", 443, "[2001:db8::1]:443");
    REQUIRE(v6.literal);
    CHECK(v6.literal->is_v6());
}

TEST_CASE("dialer: classify, as a table", "[dialer]") {
    control::self_addresses self;
    self.listeners.push_back(config::endpoint{ip("192.0.2.50"), 3128});
    struct row {
        const char* name;
        bool literal;
        std::vector<std::string_view> addresses;
        std::uint16_t port;
        deny_reason want;
    };
    const std::vector<row> rows = {
        {"public name", false, {"93.184.216.34"}, 443, deny_reason::none},
        {"a name resolving to a private address",
         false,
         {"10.0.0.1"},
         443,
         deny_reason::private_address},
        {"one private address among public ones",
         false,
         {"93.184.216.34", "192.168.1.1"},
         443,
         deny_reason::private_address},
        {"loopback by name", false, {"127.0.0.1"}, 80, deny_reason::private_address},
        {"a literal was decided with the request", true, {"10.0.0.1"}, 443, deny_reason::none},
        {"ourselves: a listener's address and port",
         true,
         {"192.0.2.50"},
         3128,
         deny_reason::private_address},
        {"ourselves: loopback on a listener's port",
         true,
         {"127.0.0.1"},
         3128,
         deny_reason::private_address},
        {"a listener's address on another port", true, {"192.0.2.50"}, 443, deny_reason::none},
    };
    for (const auto& r : rows) {
        SECTION(r.name) {
            std::vector<config::ip_address> a;
            for (const auto t : r.addresses) {
                a.push_back(ip(t));
            }
            CHECK(classify(allowed(), r.literal, a, self, r.port) == r.want);
        }
    }
}

TEST_CASE("dialer: a name resolves, is classified and connected", "[dialer]") {
    harness h;
    h.res.answers["example.com"] = answer({"93.184.216.34", "2606:2800:220:1::1"});
    const dial_result r = h.dial(make_target("EXAMPLE.com", 443, "EXAMPLE.com:443"));
    REQUIRE(r.status == dial_status::connected);
    CHECK(r.address->to_string() == "93.184.216.34");
    CHECK(r.resolved == "93.184.216.34 2606:2800:220:1::1");
    CHECK(h.res.asked == std::vector<std::string>{"example.com"});
    CHECK(h.con.tried == std::vector<std::string>{"93.184.216.34:443"});
}

TEST_CASE("dialer: an IP literal is not resolved", "[dialer]") {
    harness h;
    const dial_result r = h.dial(make_target("198.51.100.9", 8080, "198.51.100.9:8080"));
    REQUIRE(r.status == dial_status::connected);
    CHECK(h.res.asked.empty());
    CHECK(r.resolved.empty());
    CHECK(h.con.tried == std::vector<std::string>{"198.51.100.9:8080"});
}

TEST_CASE("dialer: a pinned address (SOCKS5, answered for the name) is its name's answer",
          "[dialer]") {
    harness h;
    upstream_target t = make_target("api.test", 443, "api.test:443");
    t.literal = ip("93.184.216.34");
    t.pinned = true;
    dial_result r = h.dial(t);
    REQUIRE(r.status == dial_status::connected);
    CHECK(h.res.asked.empty());  // not resolved again: the address cordon answered is dialled
    CHECK(r.resolved == "93.184.216.34");
    CHECK(h.con.tried == std::vector<std::string>{"93.184.216.34:443"});
    // Classified as a name's answer, not as a literal the decision allowed: a private
    // address needs the rule's resolves_to.
    t.literal = ip("10.1.2.3");
    h.con.tried.clear();
    r = h.dial(t);
    CHECK(r.status == dial_status::denied);
    CHECK(r.reason == deny_reason::private_address);
    CHECK(h.con.tried.empty());
}

TEST_CASE("dialer: refusals and failures, named", "[dialer]") {
    harness h;
    SECTION("DNS failure: 502 with the resolver's reason") {
        const dial_result r = h.dial(make_target("nowhere.test", 443, "nowhere.test:443"));
        CHECK(r.status == dial_status::unresolved);
        CHECK(r.http_status == 502);
        CHECK(r.message == "cannot resolve nowhere.test: NXDOMAIN");
        CHECK(h.con.tried.empty());
    }
    SECTION("a private answer is denied before any connect, with what it resolved to") {
        h.res.answers["intranet.test"] = answer({"10.1.2.3"});
        const dial_result r = h.dial(make_target("intranet.test", 443, "intranet.test:443"));
        CHECK(r.status == dial_status::denied);
        CHECK(r.reason == deny_reason::private_address);
        CHECK(r.resolved == "10.1.2.3");
        CHECK(h.con.tried.empty());
    }
    SECTION("the first address refuses, the second connects") {
        h.res.answers["two.test"] = answer({"93.184.216.34", "93.184.216.35"});
        h.con.results["93.184.216.34"] = net::error::connection_refused;
        const dial_result r = h.dial(make_target("two.test", 80, "two.test:80"));
        REQUIRE(r.status == dial_status::connected);
        CHECK(r.address->to_string() == "93.184.216.35");
        CHECK(h.con.tried.size() == 2);
    }
    SECTION("every address refuses: 502 naming the target and the error") {
        h.res.answers["down.test"] = answer({"93.184.216.34"});
        h.con.results["93.184.216.34"] = net::error::connection_refused;
        const dial_result r = h.dial(make_target("down.test", 80, "down.test:80"));
        CHECK(r.status == dial_status::unreachable);
        CHECK(r.http_status == 502);
        CHECK(r.message == "cannot connect to down.test:80: " +
                               error_code(net::error::connection_refused).message());
    }
    SECTION("the last attempt timed out: 504") {
        h.res.answers["slow.test"] = answer({"93.184.216.34"});
        h.con.results["93.184.216.34"] = beast::error::timeout;
        const dial_result r = h.dial(make_target("slow.test", 443, "slow.test:443"));
        CHECK(r.status == dial_status::unreachable);
        CHECK(r.http_status == 504);
        CHECK(r.message == "timed out connecting to slow.test:443");
    }
}

TEST_CASE("dialer: a kill during resolve or connect is never connected", "[dialer]") {
    harness h;
    h.res.answers["example.com"] = answer({"93.184.216.34", "93.184.216.35"});
    SECTION("killed while resolving: no connect at all") {
        h.res.on_resolve = [&] { h.killed = true; };
        const dial_result r = h.dial(make_target("example.com", 443, "example.com:443"));
        CHECK(r.status == dial_status::aborted);
        CHECK_FALSE(r.address);
        CHECK(h.con.tried.empty());
    }
    SECTION("killed while resolving, the lookup cancelled: aborted, not a 502") {
        // A kill cancels the lookup (c-ares answers "cancelled"): the kill is the record.
        h.res.on_resolve = [&] { h.killed = true; };
        const dial_result r = h.dial(make_target("gone.test", 443, "gone.test:443"));
        CHECK(r.status == dial_status::aborted);
        CHECK(r.http_status == 0);
        CHECK(r.message.empty());
        CHECK(h.con.tried.empty());
    }
    SECTION("killed while a connect succeeds: the upstream is not used") {
        h.con.on_connect = [&] { h.killed = true; };
        const dial_result r = h.dial(make_target("example.com", 443, "example.com:443"));
        CHECK(r.status == dial_status::aborted);
        CHECK_FALSE(r.address);
        CHECK(h.con.tried.size() == 1);
    }
    SECTION("killed while a connect fails: no next address") {
        h.con.results["93.184.216.34"] = net::error::operation_aborted;
        h.con.on_connect = [&] { h.killed = true; };
        const dial_result r = h.dial(make_target("example.com", 443, "example.com:443"));
        CHECK(r.status == dial_status::aborted);
        CHECK(h.con.tried.size() == 1);
    }
}
