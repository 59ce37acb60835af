// Fuzzes the DNS wire module: parse_query, parse_answer, rewrite_answer, truncate_for_udp and
// next_tcp_message on the raw bytes, then checks that what they accept is consistent: a
// parsed query rebuilt with build_query parses to the same question and options, the error
// answer built for any query walks as an answer to its question, a rewrite keeps the layout
// and only lowers TTLs, a sanitised answer (what the server relays) parses, keeps only the
// question's chain and never changes a name when served, and truncation never grows an
// oversize message past the limit. Any violation aborts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "dns/wire.hpp"

namespace {

using namespace cordon::dns;
using bytes = std::span<const std::uint8_t>;

void check(bool ok, const char* what, bytes input) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s (input %zu bytes)\n", what, input.size());
        std::abort();
    }
}

std::uint16_t get16(bytes m, std::size_t at) {
    return static_cast<std::uint16_t>((m[at] << 8) | m[at + 1]);
}

void check_error_answer(const query& q, rcode rc, bytes in) {
    const auto err = build_error(q, rc);
    check(err.size() >= header_size && get16(err, 0) == q.id, "build_error keeps the id", in);
    check((get16(err, 2) & flag_qr) != 0, "build_error sets QR", in);
    if (q.has_question) {
        const auto a = parse_answer(err);
        check(a.has_value(), "an error answer to a question parses as an answer", in);
        check(answers_question(*a, q.q), "an error answer echoes the question", in);
        check(a->answers.empty() && a->authority.empty(), "an error answer has no records", in);
        check(a->additional.size() == (q.has_edns ? 1u : 0u), "OPT echoed iff EDNS", in);
    }
}

void check_query(bytes in) {
    const parse_result r = parse_query(in);
    check((r.status == parse_status::good) == r.why.empty(), "a refusal says why", in);
    check(r.why.size() < 256, "reasons stay short", in);
    if (in.size() >= header_size) {
        check_error_answer(r.value, r.error, in);
    }
    if (r.status != parse_status::good) {
        return;
    }
    const query& q = r.value;
    check(q.q.name.size() <= 253, "a name is at most 253 characters", in);
    check(q.q.name.empty() || (q.q.name.front() != '.' && q.q.name.back() != '.'),
          "no leading or trailing dot", in);
    for (const char c : q.q.name) {
        check((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.',
              "names are lower-case [a-z0-9-_.]", in);
    }
    check(q.q.name.find("..") == std::string::npos, "no empty label", in);
    check(!q.has_edns || (q.udp_size >= 512 && q.edns_version == 0), "EDNS fields sane", in);
    const auto again_bytes = build_query(q.q.name, q.q.qtype, q.id, q.has_edns, q.options);
    check(!again_bytes.empty(), "a parsed query can be rebuilt", in);
    const parse_result again = parse_query(again_bytes);
    check(again.status == parse_status::good, "a rebuilt query parses", in);
    check(again.value.q.name == q.q.name && again.value.q.qtype == q.q.qtype,
          "a rebuilt query has the same question", in);
    check(again.value.id == q.id && again.value.has_edns == q.has_edns, "same id and EDNS", in);
    check(again.value.options.size() == q.options.size(), "same EDNS options", in);
    for (std::size_t i = 0; i < q.options.size(); ++i) {
        check(again.value.options[i].code == q.options[i].code &&
                  again.value.options[i].data == q.options[i].data,
              "same EDNS option", in);
    }
}

void check_answer(bytes in) {
    const auto a = parse_answer(in);
    const std::uint16_t new_id = in.size() >= 2 ? static_cast<std::uint16_t>(~get16(in, 0)) : 7;
    const std::uint32_t age = in.size() >= 6 ? get16(in, 4) * 3u : 0u;
    const auto rw = rewrite_answer(in, new_id, age);
    check(a.has_value() != rw.empty(), "rewrite_answer succeeds iff parse_answer does", in);
    if (!a) {
        return;
    }
    check(a->q.name.size() <= 4 * 255, "escaped names are bounded", in);
    const std::size_t records = a->answers.size() + a->authority.size() + a->additional.size();
    check(records * 11 <= in.size(), "record count bounded by the bytes", in);
    check(rw.size() == in.size(), "a rewrite keeps the size", in);
    check(get16(rw, 0) == new_id, "a rewrite sets the id", in);
    const auto b = parse_answer(rw);
    check(b.has_value(), "a rewritten answer parses", in);
    const std::vector<record>* before[3] = {&a->answers, &a->authority, &a->additional};
    const std::vector<record>* after[3] = {&b->answers, &b->authority, &b->additional};
    for (int s = 0; s < 3; ++s) {
        check(before[s]->size() == after[s]->size(), "a rewrite keeps the records", in);
        for (std::size_t i = 0; i < before[s]->size(); ++i) {
            const record& x = (*before[s])[i];
            const record& y = (*after[s])[i];
            check(x.name == y.name && x.type == y.type && x.ttl_offset == y.ttl_offset,
                  "a rewrite keeps each record", in);
            if (x.type == type_opt) {
                check(x.ttl == y.ttl, "OPT is not aged", in);
            } else {
                check(y.ttl <= x.ttl || x.ttl > 0x7FFFFFFFu, "TTLs only go down", in);
                check(y.ttl <= 0x7FFFFFFFu, "TTLs end up at most 2^31-1", in);
            }
        }
    }
    for (std::size_t i = 0; i < rw.size(); ++i) {
        bool in_ttl = i < 2;
        for (int s = 0; s < 3 && !in_ttl; ++s) {
            for (const record& x : *before[s]) {
                if (i >= x.ttl_offset && i < x.ttl_offset + 4) {
                    in_ttl = true;
                    break;
                }
            }
        }
        check(in_ttl || rw[i] == in[i], "a rewrite changes only the id and TTLs", in);
    }
}

// What the server relays: the sanitised rebuild of an answer, then one client's copy of it.
void check_sanitize(bytes in) {
    const auto a = parse_answer(in);
    if (!a) {
        return;
    }
    const auto c = sanitize_answer(*a, 3600, 300);
    if (!c) {
        return;
    }
    const auto b = parse_answer(c->message);
    check(b.has_value(), "a sanitised answer parses", in);
    check(answers_question(*b, a->q), "a sanitised answer answers the same question", in);
    check(b->additional.empty(), "a sanitised answer has no additional records", in);
    check(b->answers.size() <= a->answers.size() && b->authority.size() <= a->authority.size(),
          "sanitising only drops records", in);
    check(c->ttls.size() == b->answers.size() + b->authority.size(), "every TTL is known", in);
    for (const auto* section : {&b->answers, &b->authority}) {
        for (const record& r : *section) {
            check(r.ttl <= 3600 && r.ttl >= c->min_ttl, "TTLs clamped, min_ttl the lowest", in);
            check(r.name == a->q.name ||
                      std::any_of(a->answers.begin(), a->answers.end(),
                                  [&r](const record& x) { return x.target == r.name; }) ||
                      r.type == type_soa,
                  "only the question's name and the chain's", in);
        }
    }
    // Served to a client that asked in another case, aged: names never change.
    query q;
    q.id = 0x5a5a;
    q.q = a->q;
    q.asked = a->q.name;
    for (char& ch : q.asked) {
        if (ch >= 'a' && ch <= 'z') {
            ch = static_cast<char>(ch - 'a' + 'A');
        }
    }
    q.has_edns = true;
    std::vector<std::uint8_t> out;
    answer_for(c->message, c->ttls, q, in.size() >= 2 ? in[1] : 0, out);
    const auto d = parse_answer(out);
    check(out.size() <= max_message_size, "a served answer fits a message", in);
    check(d.has_value(), "a served answer parses", in);
    check(d->q.name == a->q.name && d->additional.size() == 1, "served: question and OPT", in);
    check(d->answers.size() == b->answers.size(), "served: same records", in);
    for (std::size_t i = 0; i < d->answers.size(); ++i) {
        check(d->answers[i].name == b->answers[i].name &&
                  d->answers[i].target == b->answers[i].target,
              "serving never changes a name", in);
    }
}

void check_truncate(bytes in, std::size_t limit) {
    const auto t = truncate_for_udp(in, limit);
    if (in.size() <= limit) {
        check(t.size() == in.size() && std::equal(t.begin(), t.end(), in.begin()),
              "a message within the limit is unchanged", in);
        return;
    }
    check(t.size() <= in.size(), "truncation never grows a message", in);
    if (in.size() < header_size) {
        check(t.empty(), "no header, nothing", in);
        return;
    }
    check(t.size() >= header_size, "a truncated message has a header", in);
    check((get16(t, 2) & flag_tc) != 0, "a truncated message has TC", in);
    check(get16(t, 6) == 0 && get16(t, 8) == 0, "no answer or authority after truncation", in);
    check(t.size() <= limit || get16(t, 10) == 0,
          "over the limit only when header and question alone are", in);
    if (get16(t, 4) == 1 && get16(t, 10) == 0) {
        check(t.size() == header_size || parse_answer(t).has_value() ||
                  (get16(t, 2) & flag_qr) == 0,
              "a truncated response with a question parses", in);
    }
}

void check_frame(bytes in) {
    const frame_result f = next_tcp_message(in);
    if (f.status == frame_status::good) {
        check(f.consumed == f.message.size() + 2 && f.consumed <= in.size(), "frame bounds", in);
        check(f.message.size() >= header_size, "a frame holds a header", in);
        check(f.message.data() == in.data() + 2, "the message follows the prefix", in);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const bytes in(data, size);
    check_query(in);
    check_answer(in);
    check_sanitize(in);
    check_truncate(in, 512);
    check_truncate(in, size / 2);
    check_truncate(in, size > 0 ? size - 1 : 0);
    check_frame(in);
    return 0;
}
