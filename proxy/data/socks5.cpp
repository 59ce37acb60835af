// SOCKS5 handshake messages (socks5.hpp).

#include "proxy/data/socks5.hpp"

#include "config/ip.hpp"

namespace cordon::proxy::data::socks5 {
namespace {

bool name_byte(std::uint8_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_';
}

}  // namespace

greeting parse_greeting(std::span<const std::uint8_t> in) {
    greeting g;
    if (in.empty()) {
        return g;
    }
    if (in[0] != version) {
        g.st = status::bad;
        g.error = "not SOCKS version 5";
        return g;
    }
    if (in.size() < 2) {
        return g;
    }
    const std::size_t n = in[1];
    if (n == 0) {
        g.st = status::bad;
        g.error = "no authentication methods offered";
        return g;
    }
    if (in.size() < 2 + n) {
        return g;
    }
    for (std::size_t i = 0; i < n; ++i) {
        g.no_auth = g.no_auth || in[2 + i] == method_no_auth;
        g.userpass = g.userpass || in[2 + i] == method_userpass;
    }
    g.st = status::good;
    g.consumed = 2 + n;
    return g;
}

credentials parse_credentials(std::span<const std::uint8_t> in) {
    credentials c;
    if (in.empty()) {
        return c;
    }
    if (in[0] != 1) {
        c.st = status::bad;
        c.error = "not username/password version 1";
        return c;
    }
    if (in.size() < 2) {
        return c;
    }
    const std::size_t ulen = in[1];
    if (ulen == 0) {
        c.st = status::bad;
        c.error = "empty username";
        return c;
    }
    if (in.size() < 2 + ulen + 1) {
        return c;
    }
    const std::size_t plen = in[2 + ulen];
    if (plen == 0) {
        c.st = status::bad;
        c.error = "empty password";
        return c;
    }
    if (in.size() < 3 + ulen + plen) {
        return c;
    }
    const auto* p = reinterpret_cast<const char*>(in.data());
    c.user.assign(p + 2, ulen);
    c.password.assign(p + 3 + ulen, plen);
    c.st = status::good;
    c.consumed = 3 + ulen + plen;
    return c;
}

request parse_request(std::span<const std::uint8_t> in) {
    request r;
    const auto bad = [&r](std::string_view why, reply code) {
        r.st = status::bad;
        r.error = why;
        r.refusal = code;
        r.host.clear();
        return r;
    };
    if (in.empty()) {
        return r;
    }
    if (in[0] != version) {
        return bad("not SOCKS version 5", reply::general_failure);
    }
    if (in.size() < 4) {
        return r;
    }
    r.cmd = in[1];
    if (in[2] != 0) {
        return bad("reserved byte not zero", reply::general_failure);
    }
    std::size_t at = 4;
    switch (in[3]) {
        case 1: {
            if (in.size() < at + 4 + 2) {
                return r;
            }
            std::array<std::uint8_t, 4> b{};
            for (std::size_t i = 0; i < 4; ++i) {
                b[i] = in[at + i];
            }
            r.host = config::ip_address::v4(b).to_string();
            at += 4;
            break;
        }
        case 3: {
            if (in.size() < at + 1) {
                return r;
            }
            const std::size_t n = in[at];
            if (n == 0) {
                return bad("empty host name", reply::general_failure);
            }
            if (in.size() < at + 1 + n + 2) {
                return r;
            }
            for (std::size_t i = 0; i < n; ++i) {
                if (!name_byte(in[at + 1 + i])) {
                    return bad("host name with a byte no name has", reply::general_failure);
                }
            }
            r.host.assign(reinterpret_cast<const char*>(in.data()) + at + 1, n);
            r.name = true;
            at += 1 + n;
            break;
        }
        case 4: {
            if (in.size() < at + 16 + 2) {
                return r;
            }
            std::array<std::uint8_t, 16> b{};
            for (std::size_t i = 0; i < 16; ++i) {
                b[i] = in[at + i];
            }
            r.host = config::ip_address::v6(b).to_string();
            at += 16;
            break;
        }
        default: return bad("unknown address type", reply::address_type_not_supported);
    }
    r.port = static_cast<std::uint16_t>((in[at] << 8) | in[at + 1]);
    if (r.port == 0) {
        return bad("port 0", reply::general_failure);
    }
    r.st = status::good;
    r.consumed = at + 2;
    return r;
}

std::string_view command_name(std::uint8_t cmd) {
    switch (cmd) {
        case static_cast<std::uint8_t>(command::connect): return "CONNECT";
        case static_cast<std::uint8_t>(command::bind): return "BIND";
        case static_cast<std::uint8_t>(command::udp_associate): return "UDP_ASSOCIATE";
        default: return "UNKNOWN";
    }
}

std::string target_text(const request& r) {
    const bool v6 = !r.name && r.host.find(':') != std::string::npos;
    return (v6 ? "[" + r.host + "]" : r.host) + ":" + std::to_string(r.port);
}

std::array<std::uint8_t, 2> method_answer(std::uint8_t method) { return {version, method}; }

std::array<std::uint8_t, 2> credentials_answer(bool ok) {
    return {1, static_cast<std::uint8_t>(ok ? 0 : 1)};
}

std::array<std::uint8_t, 10> request_answer(reply r) {
    return {version, static_cast<std::uint8_t>(r), 0, 1, 0, 0, 0, 0, 0, 0};
}

reply reply_for(config::deny_reason reason) {
    switch (reason) {
        case config::deny_reason::bad_request: return reply::general_failure;
        default: return reply::not_allowed;
    }
}

}  // namespace cordon::proxy::data::socks5
