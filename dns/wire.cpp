// The DNS wire format, client side: queries parsed and built, errors, UDP truncation, TCP framing.
#include "dns/wire.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "dns/wire_codec.hpp"

namespace cordon::dns {

using detail::bytes;
using detail::encode_name;
using detail::get16;
using detail::name_mode;
using detail::put16;
using detail::put32;
using detail::raw_record;
using detail::read_name;
using detail::read_opt;
using detail::read_record;
using detail::set16;

namespace {

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
    if (q.has_question &&
        encode_name(q.asked.size() == q.q.name.size() ? q.asked : q.q.name, question_bytes)) {
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

std::vector<std::uint8_t> build_query(std::string_view name, std::uint16_t qtype, std::uint16_t id,
                                      bool edns, std::span<const edns_option> options) {
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
