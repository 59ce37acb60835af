// Smuggling and framing checks on a parsed request head (request_head.hpp).

#include "proxy/data/request_head.hpp"

namespace cordon::proxy::data {

std::string_view request_refusal(const http::request_header<>& h, std::string_view raw_head) {
    // Obsolete line folding: a header line starting with space or tab.
    if (raw_head.find("\r\n ") != std::string_view::npos ||
        raw_head.find("\r\n\t") != std::string_view::npos) {
        return "obsolete header line folding";
    }
    const auto count = [&h](http::field name) {
        return static_cast<std::size_t>(
            std::count_if(h.begin(), h.end(), [name](const auto& f) { return f.name() == name; }));
    };
    const auto te = h[http::field::transfer_encoding];
    return framing_refusal(count(http::field::host), count(http::field::content_length),
                           count(http::field::transfer_encoding),
                           std::string_view(te.data(), te.size()));
}

bool wants_upgrade(const http::fields& f) {
    if (f.find(http::field::upgrade) == f.end()) {
        return false;
    }
    for (const auto& token : http::token_list(f[http::field::connection])) {
        if (beast::iequals(token, "upgrade")) {
            return true;
        }
    }
    return false;
}

std::string_view restricted_refusal(const config::egress_rule* rule, http::verb method,
                                    bool has_body, const http::fields& f) {
    if (rule == nullptr || (rule->http.empty() && rule->methods.empty())) {
        return {};
    }
    if (has_body && (method == http::verb::get || method == http::verb::head ||
                     method == http::verb::options || method == http::verb::trace)) {
        return "a body on this method is not forwarded where request rules or methods apply "
               "(a server that ignores it would read it as another request)";
    }
    if (wants_upgrade(f)) {
        const auto up = f[http::field::upgrade];
        if (!beast::iequals(std::string_view(up.data(), up.size()), "websocket")) {
            return "only a WebSocket upgrade is forwarded where request rules or methods apply";
        }
    }
    return {};
}

std::string inspected_path_for_audit(std::string_view path, std::string_view origin_form) {
    std::string out(path);
    const std::size_t q = origin_form.find('?');
    if (q == std::string_view::npos) {
        return out;
    }
    // Every query value is hidden: a name says what was asked, a value may be a secret.
    std::string_view query = origin_form.substr(q + 1);
    out += '?';
    bool first = true;
    while (!query.empty() && out.size() < 2048) {
        const std::size_t amp = query.find('&');
        const std::string_view param = query.substr(0, amp);
        query.remove_prefix(amp == std::string_view::npos ? query.size() : amp + 1);
        if (!first) {
            out += '&';
        }
        first = false;
        const std::size_t eq = param.find('=');
        out.append(param.substr(0, std::min<std::size_t>(eq, 128)));
        if (eq != std::string_view::npos && eq + 1 < param.size()) {
            out += "=REDACTED";
        } else if (eq != std::string_view::npos) {
            out += '=';
        }
    }
    return out;
}

}  // namespace cordon::proxy::data
