// The SSH identification check (ssh_ident.hpp).

#include "proxy/data/ssh_ident.hpp"

#include <string_view>

namespace cordon::proxy::data {

ssh_verdict check_ssh_ident(std::span<const std::uint8_t> first) {
    static constexpr std::string_view prefix = "SSH-2.0-";
    for (std::size_t i = 0; i < first.size(); ++i) {
        if (i >= max_ssh_ident) {
            return ssh_verdict::mismatch;
        }
        const std::uint8_t c = first[i];
        if (i < prefix.size()) {
            if (c != static_cast<std::uint8_t>(prefix[i])) {
                return ssh_verdict::mismatch;
            }
            continue;
        }
        if (c == '\n') {
            // "SSH-2.0-" then a software version of at least one byte.
            const std::size_t end = i > 0 && first[i - 1] == '\r' ? i - 1 : i;
            return end > prefix.size() ? ssh_verdict::match : ssh_verdict::mismatch;
        }
        if (c == '\r') {
            if (i + 1 < first.size() && first[i + 1] != '\n') {
                return ssh_verdict::mismatch;
            }
            continue;
        }
        if (c < 0x20 || c > 0x7e) {
            return ssh_verdict::mismatch;
        }
    }
    return ssh_verdict::need_more;
}

}  // namespace cordon::proxy::data
