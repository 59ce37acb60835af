// Tests of the SSH identification check of `protocol: ssh` rules.
#include "proxy/data/ssh_ident.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>

namespace {

using namespace cordon::proxy::data;

ssh_verdict judge(std::string_view s) {
    return check_ssh_ident({reinterpret_cast<const std::uint8_t*>(s.data()), s.size()});
}

}  // namespace

TEST_CASE("ssh_ident: identification lines", "[ssh_ident]") {
    SECTION("OpenSSH's, and what follows it is not looked at") {
        CHECK(judge("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n") == ssh_verdict::match);
        CHECK(judge("SSH-2.0-OpenSSH_9.2p1\r\n\x00\x00\x05\xdc\x07\x14") == ssh_verdict::match);
        CHECK(judge("SSH-2.0-x\n") == ssh_verdict::match);  // bare LF, as OpenSSH takes it
    }
    SECTION("every prefix of one is need_more") {
        const std::string line = "SSH-2.0-OpenSSH_9.2p1\r\n";
        for (std::size_t n = 0; n + 1 < line.size(); ++n) {
            CAPTURE(n);
            CHECK(judge(std::string_view(line).substr(0, n)) == ssh_verdict::need_more);
        }
    }
    SECTION("other protocols, as soon as they differ") {
        const auto s = GENERATE(std::string("GET / HTTP/1.1\r\n"), std::string("G"),
                                std::string("CONNECT a:22 HTTP/1.1\r\n"),
                                std::string("\x16\x03\x01\x02\x00", 5),
                                std::string("SSH-1.5-x\r\n"), std::string("SSH-1.99-x\r\n"),
                                std::string("ssh-2.0-x\r\n"), std::string(" SSH-2.0-x\r\n"));
        CAPTURE(s);
        CHECK(judge(s) == ssh_verdict::mismatch);
    }
    SECTION("malformed lines") {
        CHECK(judge("SSH-2.0-\r\n") == ssh_verdict::mismatch);      // no version
        CHECK(judge("SSH-2.0-a\rb\r\n") == ssh_verdict::mismatch);  // bare CR
        CHECK(judge(std::string("SSH-2.0-a\0b\r\n", 13)) == ssh_verdict::mismatch);
        CHECK(judge("SSH-2.0-\xc3\xa9\r\n") == ssh_verdict::mismatch);  // not ASCII
        CHECK(judge("SSH-2.0-" + std::string(245, 'a') + "\r\n") == ssh_verdict::match);
        CHECK(judge("SSH-2.0-" + std::string(246, 'a') + "\r\n") == ssh_verdict::mismatch);
        CHECK(judge("SSH-2.0-" + std::string(300, 'a')) == ssh_verdict::mismatch);
    }
}
