#include "dns/hosts.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using cordon::config::ip_address;
using cordon::config::parse_ip;
using cordon::dns::hosts_table;

namespace {

std::vector<std::string> text_of(const std::vector<ip_address>& addrs) {
    std::vector<std::string> out;
    for (const auto& a : addrs) {
        out.push_back(a.to_string());
    }
    return out;
}

using strings = std::vector<std::string>;

}  // namespace

TEST_CASE("hosts: a typical file", "[hosts]") {
    const auto t = hosts_table::parse("# /etc/hosts\n"
                                      "127.0.0.1\tlocalhost\n"
                                      "127.0.1.1  box.corp.example box\n"
                                      "\n"
                                      "# The following lines are desirable for IPv6 capable hosts\n"
                                      "::1     localhost ip6-localhost ip6-loopback\n"
                                      "ff02::1 ip6-allnodes\n"
                                      "10.20.0.5 wiki.corp.example   # the wiki\n");
    CHECK(text_of(t.find("localhost")) == strings{"127.0.0.1", "::1"});
    CHECK(text_of(t.find("box")) == strings{"127.0.1.1"});
    CHECK(text_of(t.find("box.corp.example")) == strings{"127.0.1.1"});
    CHECK(text_of(t.find("ip6-loopback")) == strings{"::1"});
    CHECK(text_of(t.find("ip6-allnodes")) == strings{"ff02::1"});
    CHECK(text_of(t.find("wiki.corp.example")) == strings{"10.20.0.5"});
    CHECK(t.find("the").empty());
    CHECK(t.find("wiki").empty());
    CHECK(t.size() == 7);
}

TEST_CASE("hosts: names are case-insensitive and lose one trailing dot", "[hosts]") {
    const auto t = hosts_table::parse("192.0.2.1 API.Example.COM. Other\n");
    CHECK(text_of(t.find("api.example.com")) == strings{"192.0.2.1"});
    CHECK(text_of(t.find("other")) == strings{"192.0.2.1"});
    CHECK(t.find("API.Example.COM").empty());  // find() takes a normalised name
}

TEST_CASE("hosts: a name on several lines collects every address, IPv4 first", "[hosts]") {
    const auto t = hosts_table::parse("2001:db8::1 multi.test\n"
                                      "192.0.2.1 multi.test\n"
                                      "192.0.2.2 multi.test\n"
                                      "192.0.2.1 multi.test   # duplicate\n"
                                      "2001:DB8:0:0::1 multi.test   # duplicate, other spelling\n"
                                      "::ffff:192.0.2.3 multi.test   # mapped: stored as IPv4\n");
    CHECK(text_of(t.find("multi.test")) ==
          strings{"192.0.2.1", "192.0.2.2", "192.0.2.3", "2001:db8::1"});
}

TEST_CASE("hosts: malformed lines and names are skipped", "[hosts]") {
    const auto t = hosts_table::parse(
        "not-an-ip bad1.test\n"
        "192.0.2.300 bad2.test\n"
        "127.1 bad3.test\n"  // non-canonical IPv4
        "0x7f.0.0.1 bad4.test\n"
        "fe80::1%eth0 bad5.test\n"  // zones are not kept
        "[::1] bad6.test\n"
        "192.0.2.7\n"  // address without names
        "   # only a comment\n"
        "192.0.2.8 good.test bad_name.test -bad.test 10.0.0.1 ok.test\n"
        "192.0.2.9 \xff\xfe.test also-good.test\n"
        "192.0.2.10 a..b.test\n"
        "\t \r\n"
        "192.0.2.11 crlf.test\r\n"
        "192.0.2.12\tlast.test");  // no final newline
    for (const char* bad : {"bad1.test", "bad2.test", "bad3.test", "bad4.test", "bad5.test",
                            "bad6.test", "bad_name.test", "-bad.test", "10.0.0.1", "a..b.test"}) {
        INFO(bad);
        CHECK(t.find(bad).empty());
    }
    CHECK(text_of(t.find("good.test")) == strings{"192.0.2.8"});
    CHECK(text_of(t.find("ok.test")) == strings{"192.0.2.8"});
    CHECK(text_of(t.find("also-good.test")) == strings{"192.0.2.9"});
    CHECK(text_of(t.find("crlf.test")) == strings{"192.0.2.11"});
    CHECK(text_of(t.find("last.test")) == strings{"192.0.2.12"});
    CHECK(t.size() == 5);
}

TEST_CASE("hosts: empty and comment-only input", "[hosts]") {
    CHECK(hosts_table::parse("").empty());
    CHECK(hosts_table::parse("\n\n# nothing\n   \n").empty());
    constexpr char with_nul[] = "192.0.2.1 nul\0.test ok.test\n";
    const auto t = hosts_table::parse(std::string_view(with_nul, sizeof with_nul - 1));
    CHECK(t.find("nul").empty());
    CHECK_FALSE(t.find("ok.test").empty());
}

TEST_CASE("hosts: size is bounded", "[hosts]") {
    SECTION("addresses per name") {
        std::string text;
        for (int i = 0; i < 100; ++i) {
            text += "10.0.0." + std::to_string(i) + " many.test\n";
        }
        const auto t = hosts_table::parse(text);
        const auto addrs = t.find("many.test");
        REQUIRE(addrs.size() == cordon::dns::hosts_max_addresses_per_name);
        CHECK(addrs.front() == *parse_ip("10.0.0.0"));
    }
    SECTION("names") {
        std::string text;
        for (std::size_t i = 0; i < cordon::dns::hosts_max_names + 10; ++i) {
            text += "10.0.0.1 n" + std::to_string(i) + ".test\n";
        }
        const auto t = hosts_table::parse(text);
        CHECK(t.size() == cordon::dns::hosts_max_names);
        CHECK_FALSE(t.find("n0.test").empty());
        CHECK(t.find("n" + std::to_string(cordon::dns::hosts_max_names + 5) + ".test").empty());
    }
}

TEST_CASE("hosts: load reads a file; a missing one is empty", "[hosts]") {
    char path[] = "/tmp/cordon-hosts-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    {
        std::ofstream out(path);
        out << "192.0.2.44 from-file.test\n";
    }
    const auto t = hosts_table::load(path);
    CHECK(text_of(t.find("from-file.test")) == strings{"192.0.2.44"});
    std::remove(path);
    CHECK(hosts_table::load(path).empty());
    CHECK(hosts_table::load("/nonexistent/dir/hosts").empty());
}
