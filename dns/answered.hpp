#pragma once
// What cordon's resolver answered, kept for the proxy: which names it gave which A and AAAA
// addresses to, for which job and session, until when (the TTL served). A SOCKS5 request for
// an address (ATYP 1 or 4) is decided as the name cordon answered with it, within that TTL,
// to that session (docs/proxy.md "SOCKS5"). Pure: no sockets, no Asio; a clock comes in.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/ip.hpp"

namespace cordon::dns {

/// One A or AAAA record of an answer: the address and its TTL in seconds.
struct answered_address {
    config::ip_address address;
    std::uint32_t ttl = 0;
};

/// The A and AAAA records (class IN) of an answer section of a message cordon wrote (its
/// own answers: answer_for, build_address_answer). Nothing for a message that does not parse,
/// is not NOERROR, or is truncated.
std::vector<answered_address> answer_addresses(std::span<const std::uint8_t> msg);

/// Names answered per (address, job, session). Bounded: at most `max_keys` keys (the oldest
/// key goes first), at most `names_per_key` names each (the one expiring first goes). Expired
/// names are never returned. Thread-safe (one mutex): the DNS threads remember, the proxy's
/// workers look up.
class answered_names {
public:
    using clock = std::chrono::steady_clock;
    static constexpr std::size_t names_per_key = 8;

    explicit answered_names(std::size_t max_keys = 32'768) : max_keys_(max_keys) {}

    /// `name` (normalised: lower case, no trailing dot) was answered with `a` to `job`
    /// (and `session`, "" for a client attributed by its address or dns.default_job), valid
    /// until `until`. A later answer of the same name moves its expiry.
    void remember(const config::ip_address& a, std::string_view name, std::string_view job,
                  std::string_view session, clock::time_point until);

    /// The names answered with `a` to exactly this job and session, not expired at `now`,
    /// the latest answered first.
    std::vector<std::string> lookup(const config::ip_address& a, std::string_view job,
                                    std::string_view session, clock::time_point now) const;

    std::size_t keys() const;

private:
    struct name_until {
        std::string name;
        clock::time_point until;
        std::uint64_t seq = 0;  // answer order: the latest first in lookups
    };
    static std::string key_of(const config::ip_address& a, std::string_view job,
                              std::string_view session);

    mutable std::mutex mu_;
    std::size_t max_keys_;
    std::uint64_t seq_ = 0;
    std::unordered_map<std::string, std::vector<name_until>> names_;
    std::deque<std::string> order_;  // keys, oldest first
};

}  // namespace cordon::dns
