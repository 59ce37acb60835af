#include "dns/hosts.hpp"

#include <algorithm>
#include <fstream>

#include "config/host.hpp"

namespace cordon::dns {
namespace {

bool is_space(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

// Splits one line (comment already removed) into whitespace-separated fields.
std::vector<std::string_view> fields(std::string_view line) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && is_space(line[i])) {
            ++i;
        }
        const std::size_t start = i;
        while (i < line.size() && !is_space(line[i])) {
            ++i;
        }
        if (i > start) {
            out.push_back(line.substr(start, i - start));
        }
    }
    return out;
}

}  // namespace

hosts_table hosts_table::parse(std::string_view text) {
    hosts_table table;
    while (!text.empty()) {
        const std::size_t eol = text.find('\n');
        std::string_view line = text.substr(0, eol);
        text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
        if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
            line = line.substr(0, hash);
        }
        const auto f = fields(line);
        if (f.size() < 2) {
            continue;  // blank, comment-only, or an address without names
        }
        const auto address = config::parse_ip(f[0]);
        if (!address) {
            continue;  // malformed address (or one with a zone): skip the line
        }
        for (std::size_t i = 1; i < f.size(); ++i) {
            // A numeric "name" is not a name: never let a hosts line define an IP literal.
            if (config::parse_literal(f[i]).kind != config::literal_kind::not_ip) {
                continue;
            }
            const config::host_result name = config::normalise_host(f[i]);
            if (!name.ok()) {
                continue;
            }
            auto it = table.names_.find(name.value);
            if (it == table.names_.end()) {
                if (table.names_.size() >= hosts_max_names) {
                    continue;
                }
                it = table.names_.emplace(name.value, std::vector<config::ip_address>{}).first;
            }
            auto& addrs = it->second;
            if (addrs.size() < hosts_max_addresses_per_name &&
                std::find(addrs.begin(), addrs.end(), *address) == addrs.end()) {
                addrs.push_back(*address);
            }
        }
    }
    // IPv4 first, file order kept within each family.
    for (auto& [name, addrs] : table.names_) {
        std::stable_partition(addrs.begin(), addrs.end(),
                              [](const config::ip_address& a) { return a.is_v4(); });
    }
    return table;
}

hosts_table hosts_table::load(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return {};
    }
    std::string text(hosts_max_bytes, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    if (text.size() == hosts_max_bytes) {
        // Cut at the last full line so a truncated name is not taken for a real one.
        const std::size_t eol = text.rfind('\n');
        text.resize(eol == std::string::npos ? 0 : eol + 1);
    }
    return parse(text);
}

std::vector<config::ip_address> hosts_table::find(std::string_view normalised_name) const {
    const auto it = names_.find(normalised_name);
    if (it == names_.end()) {
        return {};
    }
    return it->second;
}

}  // namespace cordon::dns
