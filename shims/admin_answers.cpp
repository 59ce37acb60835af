#include "shims/admin_answers.hpp"

#include <boost/json.hpp>

namespace cordon::shim {
namespace {

namespace json = boost::json;

std::string str(const json::object& o, const char* key) {
    if (const auto* v = o.if_contains(key); v != nullptr && v->is_string()) {
        return std::string(v->as_string());
    }
    return {};
}

}  // namespace

std::optional<job_card> parse_job_card(std::string_view text, std::string& err) {
    boost::system::error_code ec;
    const json::value v = json::parse(text, ec);
    if (ec || !v.is_object()) {
        err = "the admin API's job card is not a JSON object";
        return std::nullopt;
    }
    const json::object& o = v.as_object();
    job_card c;
    const auto* fs = o.if_contains("filesystem");
    const auto* env = o.if_contains("env");
    const auto* id = o.if_contains("identity");
    if (fs == nullptr || !fs->is_object() || env == nullptr || !env->is_array() || id == nullptr ||
        !id->is_object()) {
        err = "the admin API's job card lacks filesystem, env or identity";
        return std::nullopt;
    }
    c.scratch = str(fs->as_object(), "scratch");
    if (const auto* nw = fs->as_object().if_contains("never_write"); nw && nw->is_array()) {
        for (const auto& p : nw->as_array()) {
            if (p.is_string()) {
                c.never_write.emplace_back(p.as_string());
            }
        }
    }
    c.landlock_required = str(fs->as_object(), "landlock") != "optional";
    for (const auto& e : env->as_array()) {
        if (e.is_object()) {
            const auto* a = e.as_object().if_contains("allow_long_lived");
            c.env.push_back(
                {str(e.as_object(), "name"), a != nullptr && a->is_bool() && a->as_bool()});
        }
    }
    if (const auto* m = id->as_object().if_contains("mint"); m && m->is_object()) {
        c.mint = str(m->as_object(), "command");
        c.mint_env = str(m->as_object(), "env");
        c.mint_file = str(m->as_object(), "file");
    }
    c.revoke = str(id->as_object(), "revoke");
    return c;
}

// "127.0.0.1:3128", "[::1]:53" -> host, port. Wildcards become loopback.
std::optional<relay_target> parse_host_port(std::string_view s) {
    relay_target t;
    std::string_view port;
    if (s.starts_with('[')) {
        const auto close = s.find(']');
        if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
            return std::nullopt;
        }
        t.host.assign(s.substr(1, close - 1));
        port = s.substr(close + 2);
    } else {
        const auto colon = s.rfind(':');
        if (colon == std::string_view::npos) {
            return std::nullopt;
        }
        t.host.assign(s.substr(0, colon));
        port = s.substr(colon + 1);
    }
    int p = 0;
    for (const char c : port) {
        if (c < '0' || c > '9' || p > 65535) {
            return std::nullopt;
        }
        p = p * 10 + (c - '0');
    }
    if (p <= 0 || p > 65535 || t.host.empty()) {
        return std::nullopt;
    }
    t.port = static_cast<std::uint16_t>(p);
    if (t.host == "0.0.0.0") {
        t.host = "127.0.0.1";
    } else if (t.host == "::") {
        t.host = "::1";
    }
    return t;
}

}  // namespace cordon::shim
