#include "dns/wire.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace cordon::dns {

namespace {

using bytes = std::span<const std::uint8_t>;

std::uint16_t get16(bytes m, std::size_t at) {
    return static_cast<std::uint16_t>((m[at] << 8) | m[at + 1]);
}

std::uint32_t get32(bytes m, std::size_t at) {
    return (std::uint32_t{m[at]} << 24) | (std::uint32_t{m[at + 1]} << 16) |
           (std::uint32_t{m[at + 2]} << 8) | std::uint32_t{m[at + 3]};
}

void put16(std::vector<std::uint8_t>& out, std::uint16_t v) {
    out.push_back(static_cast<std::uint8_t>(v >> 8));
    out.push_back(static_cast<std::uint8_t>(v & 0xFF));
}

void put32(std::vector<std::uint8_t>& out, std::uint32_t v) {
    put16(out, static_cast<std::uint16_t>(v >> 16));
    put16(out, static_cast<std::uint16_t>(v & 0xFFFF));
}

void set16(std::vector<std::uint8_t>& out, std::size_t at, std::uint16_t v) {
    out[at] = static_cast<std::uint8_t>(v >> 8);
    out[at + 1] = static_cast<std::uint8_t>(v & 0xFF);
}

void set32(std::vector<std::uint8_t>& out, std::size_t at, std::uint32_t v) {
    set16(out, at, static_cast<std::uint16_t>(v >> 16));
    set16(out, at + 2, static_cast<std::uint16_t>(v & 0xFFFF));
}

/// How a name's bytes become text: `strict` refuses anything outside [a-z0-9-_] after
/// lower-casing (client queries); `escaped` writes such bytes as \DDD (upstream answers).
enum class name_mode { strict, escaped };

bool host_byte(std::uint8_t c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/// The layout of an upstream answer as far as it was walked: which bytes hold fixed fields
/// (question type and class, record type, class, TTL, length) and which are the label starts
/// of names read so far. A compression pointer must land on such a label start (RFC 1035
/// §4.1.4: a pointer replaces a name's tail by an earlier occurrence of it), so a name is only
/// ever made of the bytes of earlier names, never of bytes that rewrite_answer changes (the
/// TTLs) nor of any record's data that is not a name.
using field_map = std::vector<std::uint8_t>;
constexpr std::uint8_t fixed_byte = 1;
constexpr std::uint8_t label_start = 2;

bool in_fixed(const field_map* fixed, std::size_t from, std::size_t to) {
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

void mark_fixed(field_map* fixed, std::size_t from, std::size_t to) {
    if (fixed != nullptr) {
        for (std::size_t i = from; i < to; ++i) {
            (*fixed)[i] |= fixed_byte;
        }
    }
}

/// Reads the name at `pos` (following compression pointers) into `out`; on success `pos` is
/// just past the name where it started. On failure returns the reason, else nullptr.
const char* read_name(bytes m, std::size_t& pos, name_mode mode, std::string& out,
                      field_map* fixed = nullptr) {
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
            const std::string_view label =
                name.substr(start, dot == std::string_view::npos ? std::string_view::npos
                                                                 : dot - start);
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

/// A resource record's fixed part, read at `pos` (which moves past the record).
struct raw_record {
    std::string name;
    std::uint16_t type = 0, rclass = 0;
    std::uint32_t ttl = 0;
    std::size_t ttl_offset = 0, rdata_offset = 0;
    std::uint16_t rdlength = 0;
};

const char* read_record(bytes m, std::size_t& pos, raw_record& rr,
                        field_map* fixed = nullptr) {
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

parse_result refuse(parse_result r, std::string why, rcode rc = rcode::formerr) {
    r.status = parse_status::bad;
    r.error = rc;
    r.why = std::move(why);
    return r;
}

}  // namespace

parse_result parse_query(bytes packet) {
    parse_result r;
    r.value.has_question = false;
    if (packet.size() < header_size) {
        return refuse(std::move(r), "shorter than a DNS header");
    }
    r.value.id = get16(packet, 0);
    r.value.flags = get16(packet, 2);
    if (packet.size() > max_message_size) {
        return refuse(std::move(r), "longer than 65535 bytes");
    }
    const std::uint16_t qd = get16(packet, 4), an = get16(packet, 6), ns = get16(packet, 8),
                        ar = get16(packet, 10);
    if ((r.value.flags & flag_qr) != 0) {
        return refuse(std::move(r), "QR set: a response, not a query");
    }
    if (const auto op = opcode_of(r.value.flags); op != 0) {
        // The text is made before r is moved: argument evaluation order is unspecified.
        return refuse(std::move(r), "opcode " + std::to_string(op) + " not supported",
                      rcode::notimp);
    }
    if (qd != 1) {
        return refuse(std::move(r), "qdcount " + std::to_string(qd) + ", exactly 1 required");
    }
    if (an != 0 || ns != 0) {
        return refuse(std::move(r), "answer or authority records in a query");
    }
    std::size_t pos = header_size;
    question q;
    if (const char* why = read_name(packet, pos, name_mode::strict, q.name)) {
        return refuse(std::move(r), std::string("question: ") + why);
    }
    if (packet.size() - pos < 4) {
        return refuse(std::move(r), "truncated question");
    }
    q.qtype = get16(packet, pos);
    q.qclass = get16(packet, pos + 2);
    // The name as asked, case kept (0x20): a question name is never compressed (a pointer
    // would have to go into the header), so its labels are the bytes from 12 on.
    for (std::size_t p = header_size; packet[p] != 0; p += 1 + std::size_t{packet[p]}) {
        if (p != header_size) {
            r.value.asked.push_back('.');
        }
        r.value.asked.append(reinterpret_cast<const char*>(packet.data() + p + 1), packet[p]);
    }
    pos += 4;
    r.value.q = std::move(q);
    r.value.has_question = true;

    for (std::uint16_t i = 0; i < ar; ++i) {
        raw_record rr;
        if (const char* why = read_record(packet, pos, rr)) {
            return refuse(std::move(r), std::string("additional record: ") + why);
        }
        if (rr.type != type_opt) {
            return refuse(std::move(r), "additional record of type " + std::to_string(rr.type) +
                                            " in a query (only OPT)");
        }
        if (!rr.name.empty()) {
            return refuse(std::move(r), "OPT record not at the root name");
        }
        if (r.value.has_edns) {
            return refuse(std::move(r), "more than one OPT record");
        }
        if (const char* why = read_opt(packet, rr, r.value)) {
            return refuse(std::move(r), why);
        }
    }
    if (pos != packet.size()) {
        return refuse(std::move(r), "trailing bytes after the last record");
    }
    if (r.value.has_edns && r.value.edns_version != 0) {
        std::string why = "EDNS version " + std::to_string(r.value.edns_version);
        return refuse(std::move(r), std::move(why), rcode::badvers);
    }
    r.status = parse_status::good;
    r.error = rcode::noerror;
    return r;
}

std::vector<std::uint8_t> build_error(const query& q, rcode rc) {
    auto code = static_cast<unsigned>(rc);
    if (!q.has_edns && code > 15) {
        code = static_cast<unsigned>(rcode::formerr);  // no OPT to carry the upper bits
    }
    std::vector<std::uint8_t> question_bytes;
    bool has_q = false;
    if (q.has_question && encode_name(q.asked.size() == q.q.name.size() ? q.asked : q.q.name,
                                      question_bytes)) {
        put16(question_bytes, q.q.qtype);
        put16(question_bytes, q.q.qclass);
        has_q = true;
    }
    std::vector<std::uint8_t> out;
    out.reserve(header_size + question_bytes.size() + 11);
    put16(out, q.id);
    const auto flags = static_cast<std::uint16_t>(
        flag_qr | (q.flags & (0x7800u | flag_rd | flag_cd)) | flag_ra | (code & 0xFu));
    put16(out, flags);
    put16(out, has_q ? 1 : 0);
    put16(out, 0);
    put16(out, 0);
    put16(out, q.has_edns ? 1 : 0);
    out.insert(out.end(), question_bytes.begin(), question_bytes.end());
    if (q.has_edns) {
        out.push_back(0);
        put16(out, type_opt);
        put16(out, cordon_udp_size);
        put32(out, ((code >> 4) << 24) | (q.do_bit ? 0x8000u : 0u));
        put16(out, 0);
    }
    return out;
}

std::vector<std::uint8_t> build_address_answer(const query& q,
                                               std::span<const config::ip_address> addresses,
                                               std::uint32_t ttl) {
    query plain = q;
    plain.has_edns = false;
    std::vector<std::uint8_t> out = build_error(plain, rcode::noerror);
    if (out.size() <= header_size) {
        return build_error(q, rcode::formerr);  // no question to answer
    }
    std::uint16_t count = 0;
    for (const auto& a : addresses) {
        const bool v4 = a.is_v4();
        if ((v4 && q.q.qtype != type_a) || (!v4 && q.q.qtype != type_aaaa)) {
            continue;
        }
        put16(out, 0xC00C);  // the name: a pointer to the question
        put16(out, q.q.qtype);
        put16(out, class_in);
        put32(out, ttl);
        put16(out, v4 ? 4 : 16);
        const auto& b = a.bytes();
        out.insert(out.end(), b.begin(), b.begin() + (v4 ? 4 : 16));
        ++count;
    }
    out[6] = static_cast<std::uint8_t>(count >> 8);
    out[7] = static_cast<std::uint8_t>(count & 0xFF);
    if (q.has_edns) {
        out.push_back(0);
        put16(out, type_opt);
        put16(out, cordon_udp_size);
        put32(out, q.do_bit ? 0x8000u : 0u);
        put16(out, 0);
        out[11] = 1;  // arcount
    }
    return out;
}

std::vector<std::uint8_t> build_query(std::string_view name, std::uint16_t qtype,
                                      std::uint16_t id, bool edns,
                                      std::span<const edns_option> options) {
    std::vector<std::uint8_t> out;
    put16(out, id);
    put16(out, flag_rd);
    put16(out, 1);
    put16(out, 0);
    put16(out, 0);
    put16(out, edns ? 1 : 0);
    if (!encode_name(name, out)) {
        return {};
    }
    put16(out, qtype);
    put16(out, class_in);
    if (edns) {
        std::size_t rdlength = 0;
        for (const auto& o : options) {
            if (o.data.size() > 0xFFFF) {
                return {};
            }
            rdlength += 4 + o.data.size();
        }
        if (rdlength > 0xFFFF || out.size() + 11 + rdlength > max_message_size) {
            return {};
        }
        out.push_back(0);
        put16(out, type_opt);
        put16(out, cordon_udp_size);
        put32(out, 0);
        put16(out, static_cast<std::uint16_t>(rdlength));
        for (const auto& o : options) {
            put16(out, o.code);
            put16(out, static_cast<std::uint16_t>(o.data.size()));
            out.insert(out.end(), o.data.begin(), o.data.end());
        }
    }
    return out;
}

std::optional<answer_view> parse_answer(bytes msg) {
    if (msg.size() < header_size || msg.size() > max_message_size) {
        return std::nullopt;
    }
    answer_view a;
    a.id = get16(msg, 0);
    a.flags = get16(msg, 2);
    const std::uint16_t qd = get16(msg, 4);
    const std::size_t counts[3] = {get16(msg, 6), get16(msg, 8), get16(msg, 10)};
    if ((a.flags & flag_qr) == 0 || qd != 1) {
        return std::nullopt;
    }
    std::size_t pos = header_size;
    field_map fixed(msg.size());
    if (read_name(msg, pos, name_mode::escaped, a.q.name, &fixed) != nullptr ||
        msg.size() - pos < 4) {
        return std::nullopt;
    }
    a.q.qtype = get16(msg, pos);
    a.q.qclass = get16(msg, pos + 2);
    mark_fixed(&fixed, pos, pos + 4);
    pos += 4;
    // A record takes at least 11 bytes (root name, fixed part): counts that promise more
    // records than that are lies, refused before anything is allocated for them.
    if ((counts[0] + counts[1] + counts[2]) * 11 > msg.size() - pos) {
        return std::nullopt;
    }
    std::vector<record>* sections[3] = {&a.answers, &a.authority, &a.additional};
    bool seen_opt = false;
    for (int s = 0; s < 3; ++s) {
        sections[s]->reserve(counts[s]);
        for (std::size_t i = 0; i < counts[s]; ++i) {
            raw_record rr;
            if (read_record(msg, pos, rr, &fixed) != nullptr) {
                return std::nullopt;
            }
            record rec;
            rec.type = rr.type;
            rec.rclass = rr.rclass;
            rec.ttl = rr.ttl;
            rec.ttl_offset = rr.ttl_offset;
            rec.rdata = msg.subspan(rr.rdata_offset, rr.rdlength);
            switch (rr.type) {
                case type_a:
                    if (rr.rdlength != 4) {
                        return std::nullopt;
                    }
                    break;
                case type_aaaa:
                    if (rr.rdlength != 16) {
                        return std::nullopt;
                    }
                    break;
                case type_cname:
                case type_ns:
                case type_ptr: {
                    std::size_t p = rr.rdata_offset;
                    if (read_name(msg, p, name_mode::escaped, rec.target, &fixed) != nullptr ||
                        p != rr.rdata_offset + rr.rdlength) {
                        return std::nullopt;
                    }
                    break;
                }
                case type_mx: {
                    // Names in MX and SOA data may be compressed, and later names may point
                    // into them: read them, so their labels count as earlier names.
                    std::size_t p = rr.rdata_offset + 2;
                    if (rr.rdlength < 3 ||
                        read_name(msg, p, name_mode::escaped, rec.target, &fixed) != nullptr ||
                        p != rr.rdata_offset + rr.rdlength) {
                        return std::nullopt;
                    }
                    break;
                }
                case type_soa: {
                    std::size_t p = rr.rdata_offset;
                    if (read_name(msg, p, name_mode::escaped, rec.target, &fixed) != nullptr ||
                        read_name(msg, p, name_mode::escaped, rec.target2, &fixed) != nullptr ||
                        p + 20 != rr.rdata_offset + rr.rdlength) {
                        return std::nullopt;
                    }
                    break;
                }
                case type_opt:
                    if (s != 2 || seen_opt || !rr.name.empty()) {
                        return std::nullopt;
                    }
                    seen_opt = true;
                    break;
                default:
                    break;
            }
            rec.name = std::move(rr.name);
            sections[s]->push_back(std::move(rec));
        }
    }
    if (pos != msg.size()) {
        return std::nullopt;
    }
    return a;
}

bool answers_question(const answer_view& a, const question& q) {
    return a.q.name == q.name && a.q.qtype == q.qtype && a.q.qclass == q.qclass;
}

std::vector<ttl_field> ttl_fields(const answer_view& a) {
    std::vector<ttl_field> out;
    for (const auto* section : {&a.answers, &a.authority, &a.additional}) {
        for (const record& r : *section) {
            if (r.type != type_opt) {
                out.push_back({static_cast<std::uint32_t>(r.ttl_offset),
                               r.ttl > 0x7FFFFFFFu ? 0 : r.ttl});
            }
        }
    }
    return out;
}

void age_answer(bytes msg, std::span<const ttl_field> fields, std::uint16_t id,
                std::uint32_t age_seconds, std::vector<std::uint8_t>& out) {
    out.assign(msg.begin(), msg.end());
    set16(out, 0, id);
    for (const ttl_field& f : fields) {
        set32(out, f.offset, f.ttl > age_seconds ? f.ttl - age_seconds : 0);
    }
}

std::vector<std::uint8_t> rewrite_answer(bytes msg, std::uint16_t id, std::uint32_t age_seconds) {
    const auto a = parse_answer(msg);
    if (!a) {
        return {};
    }
    std::vector<std::uint8_t> out;
    age_answer(msg, ttl_fields(*a), id, age_seconds, out);
    return out;
}

namespace {

/// Appends a name decoded by read_name (escaped mode: labels joined by '.', other bytes as
/// \DDD) in wire form, uncompressed. False for a name that does not encode.
bool encode_escaped(std::string_view text, std::vector<std::uint8_t>& out) {
    std::vector<std::uint8_t> enc;
    std::vector<std::uint8_t> label;
    const auto end_label = [&enc, &label]() {
        if (label.empty() || label.size() > max_label_octets) {
            return false;
        }
        enc.push_back(static_cast<std::uint8_t>(label.size()));
        enc.insert(enc.end(), label.begin(), label.end());
        label.clear();
        return enc.size() + 1 <= max_name_octets;
    };
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '.') {
            if (!end_label()) {
                return false;
            }
        } else if (c == '\\') {
            if (text.size() - i < 4) {
                return false;
            }
            unsigned v = 0;
            for (std::size_t k = 1; k <= 3; ++k) {
                const char d = text[i + k];
                if (d < '0' || d > '9') {
                    return false;
                }
                v = v * 10 + static_cast<unsigned>(d - '0');
            }
            if (v > 255) {
                return false;
            }
            label.push_back(static_cast<std::uint8_t>(v));
            i += 3;
        } else {
            label.push_back(static_cast<std::uint8_t>(c));
        }
    }
    if (!text.empty() && !end_label()) {
        return false;
    }
    enc.push_back(0);
    out.insert(out.end(), enc.begin(), enc.end());
    return true;
}

/// Whether `name` is `zone` or below it (both decoded as by read_name; "" is the root).
bool at_or_below(std::string_view name, std::string_view zone) {
    if (zone.empty() || name == zone) {
        return true;
    }
    return name.size() > zone.size() && name.ends_with(zone) &&
           name[name.size() - zone.size() - 1] == '.';
}

// RFC 1035 types whose data holds compressed names cordon does not decode (obsolete mail
// types): dropped, since their pointers would point into the old message.
bool undecoded_names(std::uint16_t type) {
    return type == 3 || type == 4 || type == 7 || type == 8 || type == 9 || type == 14;
}

}  // namespace

std::optional<clean_answer> sanitize_answer(const answer_view& a, std::uint32_t max_ttl,
                                            std::uint32_t max_negative_ttl) {
    if (opcode_of(a.flags) != 0 || (a.flags & flag_tc) != 0) {
        return std::nullopt;
    }
    for (const record& r : a.additional) {
        if (r.type == type_opt && (r.ttl >> 24) != 0) {
            return std::nullopt;  // an extended rcode cordon does not relay
        }
    }
    // The answer section: the records of the question's name and of the CNAME chain that
    // starts there, of the asked type or CNAME, class as asked. Chains may come in any
    // order, so it is walked again while it grows (bounded: a chain longer than 16 ends).
    const std::vector<record>& an = a.answers;
    std::vector<bool> keep(an.size(), false);
    std::vector<std::size_t> taken;  // in chain order: the question's records first
    std::vector<std::string> chain{a.q.name};
    bool found = false;  // a record of the asked type
    for (int pass = 0; pass < 16; ++pass) {
        bool grew = false;
        for (std::size_t i = 0; i < an.size(); ++i) {
            const record& r = an[i];
            if (keep[i] || r.rclass != a.q.qclass ||
                (r.type != a.q.qtype && r.type != type_cname) ||
                std::find(chain.begin(), chain.end(), r.name) == chain.end()) {
                continue;
            }
            keep[i] = true;
            taken.push_back(i);
            if (r.type == a.q.qtype) {
                found = true;
            }
            if (r.type == type_cname && a.q.qtype != type_cname &&
                std::find(chain.begin(), chain.end(), r.target) == chain.end()) {
                chain.push_back(r.target);
                grew = true;
            }
        }
        if (!grew) {
            break;
        }
    }
    const bool negative = !found;
    const std::uint32_t cap = negative ? max_negative_ttl : max_ttl;

    clean_answer out;
    std::vector<std::uint8_t>& m = out.message;
    put16(m, a.id);
    put16(m, static_cast<std::uint16_t>(flag_qr | flag_rd | flag_ra | (a.flags & 0xFu)));
    put16(m, 1);
    put16(m, 0);
    put16(m, 0);
    put16(m, 0);
    if (!encode_escaped(a.q.name, m)) {
        return std::nullopt;
    }
    put16(m, a.q.qtype);
    put16(m, a.q.qclass);
    const auto put_name = [&m, &a](const std::string& name) {
        if (name == a.q.name) {
            put16(m, 0xC00C);  // the question's name
            return true;
        }
        return encode_escaped(name, m);
    };
    const auto put_record = [&](const record& r) {
        if (undecoded_names(r.type)) {
            return true;  // dropped
        }
        if (!put_name(r.name)) {
            return false;
        }
        put16(m, r.type);
        put16(m, r.rclass);
        const std::uint32_t ttl = std::min(r.ttl > 0x7FFFFFFFu ? 0u : r.ttl, cap);
        out.ttls.push_back(ttl_field{static_cast<std::uint32_t>(m.size()), ttl});
        out.min_ttl = std::min(out.min_ttl, ttl);
        put32(m, ttl);
        const std::size_t len_at = m.size();
        put16(m, 0);
        switch (r.type) {
            case type_cname:
            case type_ns:
            case type_ptr:
                if (!put_name(r.target)) {
                    return false;
                }
                break;
            case type_mx:
                m.insert(m.end(), r.rdata.begin(), r.rdata.begin() + 2);
                if (!put_name(r.target)) {
                    return false;
                }
                break;
            case type_soa:
                if (!put_name(r.target) || !put_name(r.target2)) {
                    return false;
                }
                m.insert(m.end(), r.rdata.end() - 20, r.rdata.end());
                break;
            default:
                m.insert(m.end(), r.rdata.begin(), r.rdata.end());
                break;
        }
        const std::size_t len = m.size() - len_at - 2;
        // Room left for the OPT answer_for adds (11 bytes): a served answer fits a message.
        if (len > 0xFFFF || m.size() > max_message_size - 11) {
            return false;
        }
        set16(m, len_at, static_cast<std::uint16_t>(len));
        return true;
    };
    std::uint16_t ancount = 0;
    for (const std::size_t i : taken) {
        if (!undecoded_names(an[i].type)) {
            if (!put_record(an[i])) {
                return std::nullopt;
            }
            ++ancount;
        }
    }
    // The authority section only for a negative answer (NXDOMAIN, or no record of the type):
    // the SOA of a zone holding the name (or the chain's end), which says how long the
    // answer may be cached. NS records and everything else are left out.
    std::uint16_t nscount = 0;
    if (negative) {
        for (const record& r : a.authority) {
            if (r.type != type_soa || r.rclass != a.q.qclass ||
                !at_or_below(chain.back(), r.name)) {
                continue;
            }
            if (!put_record(r)) {
                return std::nullopt;
            }
            ++nscount;
        }
    }
    // The additional section is left out whole: glue and "helpful" extra records are names
    // the client never asked for (the OPT is added per client).
    set16(m, 6, ancount);
    set16(m, 8, nscount);
    out.negative = negative;
    return out;
}

void answer_for(bytes clean, std::span<const ttl_field> ttls, const query& q,
                std::uint32_t age_seconds, std::vector<std::uint8_t>& out) {
    age_answer(clean, ttls, q.id, age_seconds, out);
    if (out.size() < header_size) {
        return;
    }
    const std::uint16_t flags = get16(out, 2);
    set16(out, 2,
          static_cast<std::uint16_t>((flags & ~(flag_rd | flag_cd)) |
                                     (q.flags & (flag_rd | flag_cd))));
    // The question name as asked (0x20): same labels, so the same length; only the case of
    // letters differs.
    std::vector<std::uint8_t> asked;
    if (q.asked.size() == q.q.name.size() && encode_name(q.asked, asked) &&
        out.size() >= header_size + asked.size()) {
        bool same = true;
        for (std::size_t i = 0; i < asked.size() && same; ++i) {
            const auto lower = [](std::uint8_t c) {
                return c >= 'A' && c <= 'Z' ? static_cast<std::uint8_t>(c - 'A' + 'a') : c;
            };
            same = lower(asked[i]) == lower(out[header_size + i]);
        }
        if (same) {
            std::copy(asked.begin(), asked.end(), out.begin() + header_size);
        }
    }
    if (q.has_edns) {
        out.push_back(0);
        put16(out, type_opt);
        put16(out, cordon_udp_size);
        put32(out, q.do_bit ? 0x8000u : 0u);
        put16(out, 0);
        set16(out, 10, static_cast<std::uint16_t>(get16(out, 10) + 1));
    }
}

std::vector<std::uint8_t> truncate_for_udp(bytes msg, std::size_t limit) {
    if (msg.size() <= limit) {
        return {msg.begin(), msg.end()};
    }
    if (msg.size() < header_size) {
        return {};
    }
    std::vector<std::uint8_t> out(msg.begin(), msg.begin() + header_size);
    set16(out, 2, get16(msg, 2) | flag_tc);
    for (std::size_t at = 4; at < header_size; at += 2) {
        set16(out, at, 0);
    }
    if (get16(msg, 4) != 1) {
        return out;
    }
    std::size_t pos = header_size;
    std::string name;
    if (read_name(msg, pos, name_mode::escaped, name) != nullptr || msg.size() - pos < 4) {
        return out;
    }
    // A question name cannot be compressed (pointers must go back, but not into the
    // header), so its bytes are copied as they are.
    out.insert(out.end(), msg.begin() + header_size,
               msg.begin() + static_cast<std::ptrdiff_t>(pos + 4));
    set16(out, 4, 1);
    if (const auto a = parse_answer(msg)) {
        for (const record& r : a->additional) {
            if (r.type != type_opt) {
                continue;
            }
            if (out.size() + 11 + r.rdata.size() <= limit) {
                out.push_back(0);
                put16(out, type_opt);
                put16(out, r.rclass);
                put32(out, r.ttl);
                put16(out, static_cast<std::uint16_t>(r.rdata.size()));
                out.insert(out.end(), r.rdata.begin(), r.rdata.end());
                set16(out, 10, 1);
            }
            break;
        }
    }
    return out;
}

frame_result next_tcp_message(bytes buffer) {
    frame_result r;
    if (buffer.size() < 2) {
        return r;
    }
    const std::size_t len = get16(buffer, 0);
    if (len < header_size) {
        r.status = frame_status::bad;
        return r;
    }
    if (buffer.size() - 2 < len) {
        return r;
    }
    r.status = frame_status::good;
    r.message = buffer.subspan(2, len);
    r.consumed = 2 + len;
    return r;
}

}  // namespace cordon::dns
