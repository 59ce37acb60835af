#include "dns/resolver.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>

#include "dns/wire.hpp"

using namespace std::chrono_literals;
using cordon::config::ip_address;
using cordon::config::parse_ip;
using cordon::dns::resolve_result;
using cordon::dns::resolver;
using cordon::dns::resolver_options;
namespace net = boost::asio;

namespace {

constexpr std::uint16_t type_a = 1;
constexpr std::uint16_t type_aaaa = 28;

// A DNS server on 127.0.0.1:<ephemeral> (UDP), in process, on the test's io_context. It
// answers A/AAAA from a table, NXDOMAIN for unknown names, and can stay silent for a name
// (or one of its types) to exercise timeouts and cancellation.
class fake_dns_server {
public:
    explicit fake_dns_server(net::io_context& ioc)
        : socket_(ioc, net::ip::udp::endpoint(net::ip::make_address_v4("127.0.0.1"), 0)) {
        receive();
    }

    std::uint16_t port() const { return socket_.local_endpoint().port(); }

    /// `name` exists; with `address` it also has that A or AAAA record (repeats allowed).
    void add(const std::string& name, const std::string& address = "") {
        auto& records = table_[name];
        if (!address.empty()) {
            records.push_back(*parse_ip(address));
        }
    }
    void set_rcode(const std::string& name, std::uint8_t rcode) { rcodes_[name] = rcode; }
    /// Never answers `name` (qtype 0: any type).
    void silence(const std::string& name, std::uint16_t qtype = 0) {
        silent_.insert({name, qtype});
    }

    int queries_for(const std::string& name) const {
        const auto it = queries_.find(name);
        return it == queries_.end() ? 0 : it->second;
    }
    int total_queries() const { return total_; }

private:
    void receive() {
        socket_.async_receive_from(net::buffer(buf_), sender_,
                                   [this](const boost::system::error_code& ec, std::size_t n) {
                                       if (ec) {
                                           return;
                                       }
                                       on_query(n);
                                       receive();
                                   });
    }

    void on_query(std::size_t n) {
        const std::uint8_t* p = buf_.data();
        if (n < 12 || ((p[4] << 8) | p[5]) != 1) {
            return;
        }
        std::size_t i = 12;
        std::string name;
        while (i < n && p[i] != 0) {
            const std::size_t len = p[i];
            if (len > 63 || i + 1 + len > n) {
                return;
            }
            if (!name.empty()) {
                name += '.';
            }
            for (std::size_t k = 0; k < len; ++k) {
                const char c = static_cast<char>(p[i + 1 + k]);
                name += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
            }
            i += 1 + len;
        }
        if (i + 5 > n) {
            return;
        }
        ++i;  // the root label
        const auto qtype = static_cast<std::uint16_t>((p[i] << 8) | p[i + 1]);
        const std::size_t question_end = i + 4;
        ++queries_[name];
        ++total_;
        if (silent_.count({name, 0}) != 0 || silent_.count({name, qtype}) != 0) {
            return;
        }

        std::vector<std::uint8_t> out(p, p + question_end);        // header + question, echoed
        out[2] = static_cast<std::uint8_t>(0x80 | (p[2] & 0x79));  // QR, opcode, RD
        std::uint8_t rcode = 0;
        std::uint16_t answers = 0;
        const auto it = table_.find(name);
        if (const auto rc = rcodes_.find(name); rc != rcodes_.end()) {
            rcode = rc->second;
        } else if (it == table_.end()) {
            rcode = 3;  // NXDOMAIN
        } else {
            for (const auto& a : it->second) {
                const bool v4 = a.is_v4();
                if ((qtype == type_a && !v4) || (qtype == type_aaaa && v4) ||
                    (qtype != type_a && qtype != type_aaaa)) {
                    continue;
                }
                const std::uint8_t rdlen = v4 ? 4 : 16;
                const std::uint8_t rr[] = {0xc0,
                                           0x0c,  // name: pointer to the question
                                           static_cast<std::uint8_t>(qtype >> 8),
                                           static_cast<std::uint8_t>(qtype & 0xff),
                                           0,
                                           1,  // class IN
                                           0,
                                           0,
                                           0,
                                           60,  // TTL
                                           0,
                                           rdlen};
                out.insert(out.end(), std::begin(rr), std::end(rr));
                out.insert(out.end(), a.bytes().begin(), a.bytes().begin() + rdlen);
                ++answers;
            }
        }
        out[3] = static_cast<std::uint8_t>(0x80 | rcode);  // RA
        out[6] = static_cast<std::uint8_t>(answers >> 8);
        out[7] = static_cast<std::uint8_t>(answers & 0xff);
        out[8] = out[9] = out[10] = out[11] = 0;  // no authority, no additional (EDNS)
        boost::system::error_code ec;
        socket_.send_to(net::buffer(out), sender_, 0, ec);
    }

    net::ip::udp::socket socket_;
    net::ip::udp::endpoint sender_;
    std::array<std::uint8_t, 1500> buf_{};
    std::map<std::string, std::vector<ip_address>> table_;
    std::map<std::string, std::uint8_t> rcodes_;
    std::set<std::pair<std::string, std::uint16_t>> silent_;
    std::map<std::string, int> queries_;
    int total_ = 0;
};

// Runs the io_context until `pred` holds or `limit` passes; returns pred().
template <class Pred>
bool run_until(net::io_context& ioc, Pred pred, std::chrono::milliseconds limit = 5000ms) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!pred() && std::chrono::steady_clock::now() < deadline) {
        if (ioc.stopped()) {
            ioc.restart();
        }
        ioc.run_one_for(10ms);
    }
    return pred();
}

void run_for(net::io_context& ioc, std::chrono::milliseconds d) {
    run_until(
        ioc, [] { return false; }, d);
}

std::vector<std::string> text_of(const std::vector<ip_address>& addrs) {
    std::vector<std::string> out;
    for (const auto& a : addrs) {
        out.push_back(a.to_string());
    }
    return out;
}
using strings = std::vector<std::string>;

// A temporary file removed at scope exit.
struct temp_file {
    explicit temp_file(const std::string& text) {
        const int fd = mkstemp(path);
        REQUIRE(fd >= 0);
        close(fd);
        std::ofstream(path) << text;
    }
    ~temp_file() { std::remove(path); }
    temp_file(const temp_file&) = delete;
    temp_file& operator=(const temp_file&) = delete;
    char path[32] = "/tmp/cordon-hosts-XXXXXX";
};

struct fixture {
    fixture() {
        std::string error;
        REQUIRE(cordon::dns::init_library(error));
        server.add("dual.test", "192.0.2.1");
        server.add("dual.test", "2001:db8::1");
        server.add("dual.test", "192.0.2.2");
        server.add("dual.test", "192.0.2.1");  // duplicate answer record
        server.add("v6only.test", "2001:db8::6");
        server.add("empty.test");
        server.add("hosted.test", "192.0.2.9");
        server.add("half.test", "192.0.2.50");
        server.silence("half.test", type_aaaa);
        server.silence("silent.test");
        server.set_rcode("servfail.test", 2);
    }

    // Only ever the fake server on loopback: tests never reach a real resolver.
    resolver_options options() const {
        resolver_options o;
        o.upstream = {cordon::config::dns_upstream{
            false, cordon::config::endpoint{*parse_ip("127.0.0.1"), server.port()}}};
        o.hosts_file = "";
        o.timeout = 2000ms;
        o.tries = 1;
        return o;
    }

    resolve_result resolve(resolver& r, const std::string& name) {
        std::optional<resolve_result> got;
        r.async_resolve(name, [&got](resolve_result x) { got = std::move(x); });
        REQUIRE_FALSE(got.has_value());  // never inline
        REQUIRE(run_until(ioc, [&got] { return got.has_value(); }));
        return std::move(*got);
    }

    net::io_context ioc;
    fake_dns_server server{ioc};
};

}  // namespace

TEST_CASE_METHOD(fixture, "resolver: A and AAAA, IPv4 first, deduplicated", "[resolver]") {
    auto r = cordon::dns::make_resolver(ioc, options());
    const auto res = resolve(*r, "dual.test");
    CHECK(res.error.empty());
    CHECK_FALSE(res.from_hosts);
    CHECK(text_of(res.addresses) == strings{"192.0.2.1", "192.0.2.2", "2001:db8::1"});
    CHECK(server.queries_for("dual.test") == 2);

    SECTION("any case, trailing dot") {
        const auto again = resolve(*r, "DUAL.Test.");
        CHECK(text_of(again.addresses) == strings{"192.0.2.1", "192.0.2.2", "2001:db8::1"});
    }
    SECTION("IPv6 only") {
        const auto v6 = resolve(*r, "v6only.test");
        CHECK(v6.error.empty());
        CHECK(text_of(v6.addresses) == strings{"2001:db8::6"});
    }
}

TEST_CASE_METHOD(fixture, "resolver: errors are named", "[resolver]") {
    auto r = cordon::dns::make_resolver(ioc, options());
    SECTION("NXDOMAIN") {
        const auto res = resolve(*r, "missing.test");
        CHECK(res.error == "NXDOMAIN");
        CHECK(res.addresses.empty());
        CHECK(server.queries_for("missing.test") == 2);  // no search-domain variants
    }
    SECTION("the name exists without addresses") {
        CHECK(resolve(*r, "empty.test").error == "no addresses");
    }
    SECTION("SERVFAIL") { CHECK(resolve(*r, "servfail.test").error == "upstream failed"); }
    SECTION("not a host name: nothing is sent") {
        for (const char* bad :
             {"bad_name.test", "a..b", "", "127.1", "0x7f.0.0.1", "fe80::1%eth0", "-x.test"}) {
            INFO(bad);
            CHECK(resolve(*r, bad).error == "bad name");
        }
        CHECK(server.total_queries() == 0);
    }
}

TEST_CASE_METHOD(fixture, "resolver: timeout", "[resolver]") {
    auto o = options();
    o.timeout = 200ms;
    o.tries = 1;
    auto r = cordon::dns::make_resolver(ioc, o);
    const auto res = resolve(*r, "silent.test");
    CHECK(res.error == "timeout");
    CHECK(res.addresses.empty());
    CHECK(res.elapsed >= 150ms);
    CHECK(res.elapsed < 2000ms);
}

TEST_CASE_METHOD(fixture, "resolver: the hosts file is asked first", "[resolver]") {
    temp_file hosts("10.1.2.3 hosted.test\n2001:db8::99 Hosted.Test\n");
    auto o = options();
    o.hosts_file = hosts.path;
    auto r = cordon::dns::make_resolver(ioc, o);
    const auto res = resolve(*r, "hosted.test");
    CHECK(res.error.empty());
    CHECK(res.from_hosts);
    CHECK(text_of(res.addresses) == strings{"10.1.2.3", "2001:db8::99"});
    CHECK(server.queries_for("hosted.test") == 0);

    const auto other = resolve(*r, "dual.test");  // not in the file: upstream
    CHECK_FALSE(other.from_hosts);
    CHECK(other.addresses.size() == 3);
}

TEST_CASE_METHOD(fixture, "resolver: answered without upstream", "[resolver]") {
    auto r = cordon::dns::make_resolver(ioc, options());
    SECTION("IP literals are themselves") {
        CHECK(text_of(resolve(*r, "192.0.2.55").addresses) == strings{"192.0.2.55"});
        CHECK(text_of(resolve(*r, "2001:db8::5").addresses) == strings{"2001:db8::5"});
    }
    SECTION("localhost names are loopback (RFC 6761)") {
        CHECK(text_of(resolve(*r, "localhost").addresses) == strings{"127.0.0.1", "::1"});
        CHECK(text_of(resolve(*r, "db.LOCALHOST.").addresses) == strings{"127.0.0.1", "::1"});
    }
    CHECK(server.total_queries() == 0);
}

TEST_CASE_METHOD(fixture, "resolver: no upstream means hosts file only", "[resolver]") {
    auto o = options();
    o.upstream.clear();
    auto r = cordon::dns::make_resolver(ioc, o);
    CHECK(resolve(*r, "dual.test").error == "no upstream");
    CHECK(server.total_queries() == 0);
}

TEST_CASE_METHOD(fixture, "resolver: cancel_all fails outstanding queries", "[resolver]") {
    auto o = options();
    o.timeout = 5000ms;
    auto r = cordon::dns::make_resolver(ioc, o);
    std::vector<resolve_result> got;
    r->async_resolve("silent.test", [&got](resolve_result x) { got.push_back(std::move(x)); });
    r->async_resolve("half.test", [&got](resolve_result x) { got.push_back(std::move(x)); });
    // Let the A answer of half.test arrive: c-ares then holds a partial success.
    REQUIRE(run_until(ioc, [this] { return server.queries_for("half.test") == 2; }));
    run_for(ioc, 100ms);
    REQUIRE(got.empty());

    r->cancel_all();
    CHECK(got.empty());  // never inline
    REQUIRE(run_until(
        ioc, [&got] { return got.size() == 2; }, 1000ms));
    for (const auto& res : got) {
        CHECK(res.error == "cancelled");
        CHECK(res.addresses.empty());
        CHECK(res.elapsed < 5000ms);
    }
    run_for(ioc, 50ms);
    CHECK(got.size() == 2);  // exactly once

    SECTION("the resolver still works afterwards") {
        CHECK(resolve(*r, "dual.test").addresses.size() == 3);
    }
}

TEST_CASE_METHOD(fixture, "resolver: 100 concurrent queries are all answered", "[resolver]") {
    for (int i = 0; i < 100; ++i) {
        server.add("n" + std::to_string(i) + ".test", "198.51.100." + std::to_string(i));
    }
    auto r = cordon::dns::make_resolver(ioc, options());
    std::map<int, resolve_result> got;
    for (int i = 0; i < 100; ++i) {
        r->async_resolve("n" + std::to_string(i) + ".test",
                         [&got, i](resolve_result x) { got.emplace(i, std::move(x)); });
    }
    REQUIRE(run_until(ioc, [&got] { return got.size() == 100; }));
    for (const auto& [i, res] : got) {
        INFO(i);
        CHECK(res.error.empty());
        CHECK(text_of(res.addresses) == strings{"198.51.100." + std::to_string(i)});
    }
    CHECK(server.total_queries() == 200);
}

TEST_CASE_METHOD(fixture, "resolver: concurrent queries are bounded", "[resolver]") {
    auto o = options();
    o.max_queries = 2;
    auto r = cordon::dns::make_resolver(ioc, o);
    std::vector<std::string> errors;
    for (int i = 0; i < 3; ++i) {
        r->async_resolve("silent.test", [&errors](resolve_result x) { errors.push_back(x.error); });
    }
    REQUIRE(run_until(ioc, [&errors] { return errors.size() == 1; }));
    CHECK(errors[0] == "too many queries");
    CHECK(resolve(*r, "192.0.2.1").error.empty());  // no upstream query: not counted
    r->cancel_all();
    REQUIRE(run_until(ioc, [&errors] { return errors.size() == 3; }));
    CHECK(errors[1] == "cancelled");
    CHECK(resolve(*r, "dual.test").error.empty());  // slots are free again
}

TEST_CASE_METHOD(fixture, "resolver: destroyed with queries in flight", "[resolver]") {
    auto token = std::make_shared<int>(0);  // counts who still holds a callback
    int called = 0;
    auto r = cordon::dns::make_resolver(ioc, options());
    for (int i = 0; i < 10; ++i) {
        r->async_resolve("silent.test", [&called, token](resolve_result) { ++called; });
        r->async_resolve("dual.test", [&called, token](resolve_result) { ++called; });
    }
    int before = 0;
    SECTION("just sent (c-ares writes at once); a result already queued") {
        r->async_resolve("192.0.2.1", [&called, token](resolve_result) { ++called; });
    }
    SECTION("answers being processed") {
        REQUIRE(run_until(ioc, [&called] { return called >= 1; }));
        before = called;
        r->async_resolve("192.0.2.1", [&called, token](resolve_result) { ++called; });
    }
    r.reset();
    CHECK(called == before);
    run_for(ioc, 200ms);  // stale handlers, late answers and queued results must drop out
    CHECK(called == before);
    CHECK(before < 10);
    CHECK(token.use_count() == 1);  // every callback was destroyed
    CHECK(server.total_queries() == 40);
}

TEST_CASE_METHOD(fixture, "resolver: a callback may destroy the resolver", "[resolver]") {
    auto r = cordon::dns::make_resolver(ioc, options());
    int called = 0;
    r->async_resolve("192.0.2.1", [&](resolve_result) {
        ++called;
        r.reset();
    });
    r->async_resolve("192.0.2.2", [&](resolve_result) { ++called; });
    r->async_resolve("dual.test", [&](resolve_result) { ++called; });
    run_for(ioc, 200ms);
    CHECK(called == 1);
    CHECK(r == nullptr);
}

TEST_CASE_METHOD(fixture, "resolver: a callback may start another query", "[resolver]") {
    auto r = cordon::dns::make_resolver(ioc, options());
    std::optional<resolve_result> second;
    r->async_resolve("dual.test", [&](resolve_result first) {
        CHECK(first.error.empty());
        r->async_resolve("v6only.test", [&](resolve_result x) { second = std::move(x); });
        r->cancel_all();  // re-entrant use is fine: nothing of c-ares is on the stack
    });
    REQUIRE(run_until(ioc, [&] { return second.has_value(); }));
    CHECK(second->error == "cancelled");
}

namespace {

// A raw A query for async_query (what the DNS listener relays).
std::vector<std::uint8_t> raw_query(const std::string& name) {
    return cordon::dns::build_query(name, type_a, 0x4242, true);
}

}  // namespace

TEST_CASE_METHOD(fixture, "resolver: relayed lookups leave the proxy its share", "[resolver]") {
    auto o = options();
    o.max_queries = 4;
    o.max_relayed = 2;
    auto r = cordon::dns::make_resolver(ioc, o);
    std::vector<std::string> errors;
    for (int i = 0; i < 3; ++i) {
        r->async_query(raw_query("silent.test"),
                       [&errors](cordon::dns::raw_result x) { errors.push_back(x.error); });
    }
    REQUIRE(run_until(ioc, [&errors] { return errors.size() == 1; }));
    CHECK(errors[0] == "too many queries");  // the third relayed lookup
    // The DNS listener's clients hold every relayed slot; the proxy still resolves.
    CHECK(resolve(*r, "dual.test").error.empty());
    r->cancel_all();
    REQUIRE(run_until(ioc, [&errors] { return errors.size() == 3; }));
    std::optional<cordon::dns::raw_result> again;
    r->async_query(raw_query("dual.test"), [&again](cordon::dns::raw_result x) { again = x; });
    REQUIRE(run_until(ioc, [&again] { return again.has_value(); }));
    CHECK(again->error.empty());  // relayed slots are free again
}

TEST_CASE_METHOD(fixture, "resolver: a closed gate cancels lookups before any retry",
                 "[resolver]") {
    auto o = options();
    o.timeout = 1000ms;
    o.tries = 3;
    bool open = true;
    o.upstream_allowed = [&open] { return open; };
    auto r = cordon::dns::make_resolver(ioc, o);
    std::optional<cordon::dns::raw_result> relayed;
    std::optional<resolve_result> own;
    r->async_query(raw_query("silent.test"),
                   [&relayed](cordon::dns::raw_result x) { relayed = std::move(x); });
    r->async_resolve("silent.test", [&own](resolve_result x) { own = std::move(x); });
    REQUIRE(run_until(ioc, [this] { return server.queries_for("silent.test") == 3; }));
    open = false;  // the network kill: before c-ares' first retry (1 s)
    const auto closed_at = std::chrono::steady_clock::now();
    REQUIRE(run_until(ioc, [&] { return relayed.has_value() && own.has_value(); }));
    CHECK(std::chrono::steady_clock::now() - closed_at < 250ms);  // polled every 100 ms
    CHECK(relayed->error == "cancelled");
    CHECK(own->error == "cancelled");
    run_for(ioc, 3500ms);                           // every retry would have gone out by now
    CHECK(server.queries_for("silent.test") == 3);  // the first tries (A, and A+AAAA) only
    SECTION("new lookups fail at once while it is closed, and work once it opens") {
        const auto closed = resolve(*r, "dual.test");
        CHECK(closed.error == "cancelled");
        CHECK(server.queries_for("dual.test") == 0);
        open = true;
        CHECK(resolve(*r, "dual.test").error.empty());
    }
}
