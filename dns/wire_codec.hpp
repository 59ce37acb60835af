#pragma once
// The DNS wire format's shared pieces: big-endian fields, names, record headers, OPT (internal).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dns/wire.hpp"

namespace cordon::dns::detail {

using bytes = std::span<const std::uint8_t>;

inline std::uint16_t get16(bytes m, std::size_t at) {
    return static_cast<std::uint16_t>((m[at] << 8) | m[at + 1]);
}

inline std::uint32_t get32(bytes m, std::size_t at) {
    return (std::uint32_t{m[at]} << 24) | (std::uint32_t{m[at + 1]} << 16) |
           (std::uint32_t{m[at + 2]} << 8) | std::uint32_t{m[at + 3]};
}

inline void put16(std::vector<std::uint8_t>& out, std::uint16_t v) {
    out.push_back(static_cast<std::uint8_t>(v >> 8));
    out.push_back(static_cast<std::uint8_t>(v & 0xFF));
}

inline void put32(std::vector<std::uint8_t>& out, std::uint32_t v) {
    put16(out, static_cast<std::uint16_t>(v >> 16));
    put16(out, static_cast<std::uint16_t>(v & 0xFFFF));
}

inline void set16(std::vector<std::uint8_t>& out, std::size_t at, std::uint16_t v) {
    out[at] = static_cast<std::uint8_t>(v >> 8);
    out[at + 1] = static_cast<std::uint8_t>(v & 0xFF);
}

inline void set32(std::vector<std::uint8_t>& out, std::size_t at, std::uint32_t v) {
    set16(out, at, static_cast<std::uint16_t>(v >> 16));
    set16(out, at + 2, static_cast<std::uint16_t>(v & 0xFFFF));
}

/// How a name's bytes become text: `strict` refuses anything outside [a-z0-9-_] after
/// lower-casing (client queries); `escaped` writes such bytes as \DDD (upstream answers).
enum class name_mode { strict, escaped };

inline bool host_byte(std::uint8_t c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/// The layout of an upstream answer as far as it was walked: which bytes hold fixed fields
/// (question type and class, record type, class, TTL, length) and which are the label starts
/// of names read so far. A compression pointer must land on such a label start (RFC 1035
/// §4.1.4: a pointer replaces a name's tail by an earlier occurrence of it), so a name is only
/// ever made of the bytes of earlier names, never of bytes that rewrite_answer changes (the
/// TTLs) nor of any record's data that is not a name.
using field_map = std::vector<std::uint8_t>;
inline constexpr std::uint8_t fixed_byte = 1;
inline constexpr std::uint8_t label_start = 2;

inline bool in_fixed(const field_map* fixed, std::size_t from, std::size_t to) {
    if (fixed == nullptr) {
        return false;
    }
    for (std::size_t i = from; i < to; ++i) {
        if (((*fixed)[i] & fixed_byte) != 0) {
            return true;
        }
    }
    return false;
}

inline void mark_fixed(field_map* fixed, std::size_t from, std::size_t to) {
    if (fixed != nullptr) {
        for (std::size_t i = from; i < to; ++i) {
            (*fixed)[i] |= fixed_byte;
        }
    }
}

/// Reads the name at `pos` (following compression pointers) into `out`; on success `pos` is
/// just past the name where it started. On failure returns the reason, else nullptr.
const char* read_name(bytes m, std::size_t& pos, name_mode mode, std::string& out,
                      field_map* fixed = nullptr);

/// Appends `name` uncompressed: one trailing dot allowed, "" and "." are the root. False
/// (and `out` unchanged) for an empty label, a label > 63 or a name > 255 octets.
bool encode_name(std::string_view name, std::vector<std::uint8_t>& out);

/// A resource record's fixed part, read at `pos` (which moves past the record).
struct raw_record {
    std::string name;
    std::uint16_t type = 0, rclass = 0;
    std::uint32_t ttl = 0;
    std::size_t ttl_offset = 0, rdata_offset = 0;
    std::uint16_t rdlength = 0;
};

const char* read_record(bytes m, std::size_t& pos, raw_record& rr, field_map* fixed = nullptr);

/// Fills the EDNS fields of `q` from an OPT record.
const char* read_opt(bytes m, const raw_record& rr, query& q);

}  // namespace cordon::dns::detail
