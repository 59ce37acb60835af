// The DNS wire format, upstream side: answers walked, aged, sanitized and made a client's answer.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "dns/wire.hpp"
#include "dns/wire_codec.hpp"

namespace cordon::dns {

using detail::bytes;
using detail::encode_name;
using detail::field_map;
using detail::get16;
using detail::mark_fixed;
using detail::name_mode;
using detail::put16;
using detail::put32;
using detail::raw_record;
using detail::read_name;
using detail::read_record;
using detail::set16;
using detail::set32;

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
                default: break;
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
                out.push_back(
                    {static_cast<std::uint32_t>(r.ttl_offset), r.ttl > 0x7FFFFFFFu ? 0 : r.ttl});
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
            default: m.insert(m.end(), r.rdata.begin(), r.rdata.end()); break;
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

}  // namespace cordon::dns
