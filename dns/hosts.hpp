#pragma once
// The hosts file (/etc/hosts format) as a lookup table: name -> addresses. Pure apart from
// load(), which only reads the file. Thread-safe for concurrent const use.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/ip.hpp"

namespace cordon::dns {

/// Bounds on what a hosts file may make us hold: a huge or hostile file is cut, not fatal.
inline constexpr std::size_t hosts_max_bytes = 4 * 1024 * 1024;  ///< load() reads no more
inline constexpr std::size_t hosts_max_names = 65536;            ///< further names ignored
inline constexpr std::size_t hosts_max_addresses_per_name = 32;  ///< further ones ignored

/// Names from a hosts file mapped to their addresses, in file order, without duplicates.
/// Lines are "ADDRESS NAME [ALIAS...]" with '#' comments; the address is a canonical IPv4
/// or IPv6 literal (no zone); names are normalised (lower case, no trailing dot). A line
/// with a bad address is skipped; a bad name on a good line is skipped alone.
class hosts_table {
public:
    /// Parses hosts-file text. Never fails: malformed input is skipped.
    static hosts_table parse(std::string_view text);
    /// Reads and parses `path` (at most hosts_max_bytes). A missing or unreadable file gives
    /// an empty table.
    static hosts_table load(const std::string& path);

    /// Addresses of a normalised name (config::normalise_host), IPv4 first then IPv6, each
    /// family in file order; empty when the name is not listed.
    std::vector<config::ip_address> find(std::string_view normalised_name) const;

    std::size_t size() const noexcept { return names_.size(); }
    bool empty() const noexcept { return names_.empty(); }

private:
    struct name_hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept {
            return std::hash<std::string_view>{}(s);
        }
    };
    std::unordered_map<std::string, std::vector<config::ip_address>, name_hash, std::equal_to<>>
        names_;
};

}  // namespace cordon::dns
