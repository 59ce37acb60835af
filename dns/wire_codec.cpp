// The DNS wire format's shared pieces: reading names (pointers checked) and records, writing names.
#include "dns/wire_codec.hpp"

namespace cordon::dns::detail {

/// Reads the name at `pos` (following compression pointers) into `out`; on success `pos` is
/// just past the name where it started. On failure returns the reason, else nullptr.
const char* read_name(bytes m, std::size_t& pos, name_mode mode, std::string& out,
                      field_map* fixed) {
    out.clear();
    std::size_t p = pos;
    std::size_t limit = pos;  // every pointer must go strictly below this, then lowers it
    std::size_t end = 0;      // where the name ends in the original run, once known
    bool jumped = false;
    int jumps = 0;
    std::size_t wire = 0;  // octets of the uncompressed name so far, without the root byte
    bool first = true;
    for (;;) {
        if (p >= m.size()) {
            return "name runs past the end";
        }
        const std::uint8_t len = m[p];
        if ((len & 0xC0) == 0xC0) {
            if (p + 1 >= m.size()) {
                return "truncated compression pointer";
            }
            if (in_fixed(fixed, p, p + 2)) {
                return "compression pointer into a record's fixed fields";
            }
            const std::size_t target = (std::size_t{len & 0x3Fu} << 8) | m[p + 1];
            if (!jumped) {
                end = p + 2;
                jumped = true;
            }
            if (++jumps > max_pointer_jumps) {
                return "too many compression pointers";
            }
            if (target >= m.size()) {
                return "compression pointer past the end";
            }
            if (target < header_size) {
                return "compression pointer into the header";
            }
            if (target >= limit) {
                return "compression pointer forward or looping";
            }
            if (fixed != nullptr) {
                if (((*fixed)[target] & label_start) == 0) {
                    return "compression pointer not to a label of an earlier name";
                }
                (*fixed)[p] |= label_start;  // a name may also point at a pointer
            }
            limit = target;
            p = target;
            continue;
        }
        if ((len & 0xC0) != 0) {
            return "label longer than 63 octets (or a reserved label type)";
        }
        if (in_fixed(fixed, p, p + 1)) {
            return "compression pointer into a record's fixed fields";
        }
        if (fixed != nullptr) {
            (*fixed)[p] |= label_start;
        }
        if (len == 0) {
            if (!jumped) {
                end = p + 1;
            }
            break;
        }
        wire += 1 + std::size_t{len};
        if (wire + 1 > max_name_octets) {
            return "name longer than 255 octets";
        }
        if (p + 1 + len > m.size()) {
            return "label runs past the end";
        }
        if (in_fixed(fixed, p + 1, p + 1 + len)) {
            return "compression pointer into a record's fixed fields";
        }
        if (!first) {
            out.push_back('.');
        }
        first = false;
        for (std::size_t i = p + 1; i < p + 1 + len; ++i) {
            std::uint8_t c = m[i];
            if (c >= 'A' && c <= 'Z') {
                c = static_cast<std::uint8_t>(c - 'A' + 'a');
            }
            if (host_byte(c)) {
                out.push_back(static_cast<char>(c));
            } else if (mode == name_mode::strict) {
                return "name has a byte outside [A-Za-z0-9-_]";
            } else {
                out.push_back('\\');
                out.push_back(static_cast<char>('0' + c / 100));
                out.push_back(static_cast<char>('0' + (c / 10) % 10));
                out.push_back(static_cast<char>('0' + c % 10));
            }
        }
        p += 1 + std::size_t{len};
    }
    pos = end;
    return nullptr;
}

/// Appends `name` uncompressed: one trailing dot allowed, "" and "." are the root. False
/// (and `out` unchanged) for an empty label, a label > 63 or a name > 255 octets.
bool encode_name(std::string_view name, std::vector<std::uint8_t>& out) {
    if (!name.empty() && name.back() == '.') {
        name.remove_suffix(1);
    }
    std::vector<std::uint8_t> enc;
    if (!name.empty()) {
        std::size_t start = 0;
        for (;;) {
            const std::size_t dot = name.find('.', start);
            const std::string_view label = name.substr(
                start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
            if (label.empty() || label.size() > max_label_octets) {
                return false;
            }
            enc.push_back(static_cast<std::uint8_t>(label.size()));
            enc.insert(enc.end(), label.begin(), label.end());
            if (enc.size() + 1 > max_name_octets) {
                return false;
            }
            if (dot == std::string_view::npos) {
                break;
            }
            start = dot + 1;
        }
    }
    enc.push_back(0);
    out.insert(out.end(), enc.begin(), enc.end());
    return true;
}

const char* read_record(bytes m, std::size_t& pos, raw_record& rr, field_map* fixed) {
    if (const char* why = read_name(m, pos, name_mode::escaped, rr.name, fixed)) {
        return why;
    }
    if (m.size() - pos < 10) {
        return "truncated record";
    }
    rr.type = get16(m, pos);
    rr.rclass = get16(m, pos + 2);
    rr.ttl_offset = pos + 4;
    rr.ttl = get32(m, pos + 4);
    rr.rdlength = get16(m, pos + 8);
    rr.rdata_offset = pos + 10;
    mark_fixed(fixed, pos, pos + 10);
    if (m.size() - rr.rdata_offset < rr.rdlength) {
        return "record data runs past the end";
    }
    pos = rr.rdata_offset + rr.rdlength;
    return nullptr;
}

/// Fills the EDNS fields of `q` from an OPT record.
const char* read_opt(bytes m, const raw_record& rr, query& q) {
    q.has_edns = true;
    q.udp_size = rr.rclass < 512 ? std::uint16_t{512} : rr.rclass;
    q.edns_version = static_cast<std::uint8_t>((rr.ttl >> 16) & 0xFF);
    q.do_bit = (rr.ttl & 0x8000u) != 0;
    std::size_t p = rr.rdata_offset;
    const std::size_t end = rr.rdata_offset + rr.rdlength;
    while (p < end) {
        if (end - p < 4) {
            return "truncated EDNS option";
        }
        const std::uint16_t code = get16(m, p);
        const std::uint16_t len = get16(m, p + 2);
        p += 4;
        if (end - p < len) {
            return "EDNS option overruns the OPT record";
        }
        q.options.push_back(
            edns_option{code, std::string(reinterpret_cast<const char*>(m.data() + p), len)});
        p += len;
    }
    return nullptr;
}

}  // namespace cordon::dns::detail
