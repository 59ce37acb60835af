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

}  // namespace cordon::proxy::data
