#pragma once
// The DNS wire format (RFC 1035, EDNS(0) RFC 6891) for hostile input: parse a client's query,
// walk an upstream answer, and build the few messages cordon writes. Pure: no sockets, no
// Asio, no c-ares. Every function is thread-safe (no shared state).
//
// Bounds: every length is checked before it is read; a name is at most 255 octets on the wire
// and follows at most 128 compression pointers, each pointing strictly before the previous
// one (so loops and forward pointers are refused) and never into the 12-byte header; record
// counts only drive loops that consume bytes, so memory is bounded by the message size.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/ip.hpp"

namespace cordon::dns {

/// Response codes cordon sends. `badvers` (16) is an extended rcode: its upper bits travel
/// in the OPT record, so it is only sent to a query that had EDNS.
enum class rcode : std::uint8_t {
    noerror = 0,
    formerr = 1,
    servfail = 2,
    nxdomain = 3,
    notimp = 4,
    refused = 5,
    badvers = 16,
};

inline constexpr std::uint16_t type_a = 1, type_ns = 2, type_cname = 5, type_soa = 6, type_ptr = 12,
                               type_mx = 15, type_txt = 16, type_aaaa = 28, type_opt = 41,
                               type_svcb = 64, type_https = 65, type_axfr = 252, type_any = 255;
inline constexpr std::uint16_t class_in = 1;

/// EDNS(0) option code cordon reads (only from loopback) to tie a relayed query to its
/// session; in the local/experimental range (RFC 6891 §9: 65001-65534). Its data is the
/// session token. The server strips it: build_error never echoes options, and a relayed
/// query is rebuilt with build_query, never forwarded as received.
inline constexpr std::uint16_t edns_session_option = 65001;

/// Header flag bits (the raw flags word).
inline constexpr std::uint16_t flag_qr = 0x8000, flag_aa = 0x0400, flag_tc = 0x0200,
                               flag_rd = 0x0100, flag_ra = 0x0080, flag_ad = 0x0020,
                               flag_cd = 0x0010;
inline constexpr unsigned opcode_of(std::uint16_t flags) { return (flags >> 11) & 0xFu; }
inline constexpr unsigned rcode_of(std::uint16_t flags) { return flags & 0xFu; }

inline constexpr std::size_t header_size = 12;
inline constexpr std::size_t max_message_size = 65535;
inline constexpr std::size_t max_name_octets = 255;  ///< wire form, length bytes and root
inline constexpr std::size_t max_label_octets = 63;
inline constexpr int max_pointer_jumps = 128;
/// UDP payload size cordon advertises in the OPT of its own messages (DNS flag day 2020).
inline constexpr std::uint16_t cordon_udp_size = 1232;

struct question {
    std::string name;  ///< lower-case, no trailing dot, "" for the root
    std::uint16_t qtype = 0;
    std::uint16_t qclass = class_in;
};

struct edns_option {
    std::uint16_t code = 0;
    std::string data;
};

/// A client's query as parse_query accepts it.
struct query {
    std::uint16_t id = 0;
    std::uint16_t flags = 0;  ///< raw header flags word
    question q;               ///< exactly one question is required (qdcount == 1)
    /// The question name as the client wrote it (case kept, no trailing dot): answers echo
    /// it byte for byte (clients that randomise case, "0x20", check it). q.name is its
    /// lower-case form, for every decision.
    std::string asked;
    /// False only in a refused parse that stopped before a valid question: build_error then
    /// answers with qdcount 0.
    bool has_question = true;
    bool has_edns = false;
    std::uint16_t udp_size = 512;  ///< from the OPT class, raised to 512 if lower
    std::uint8_t edns_version = 0;
    bool do_bit = false;
    std::vector<edns_option> options;
};

enum class parse_status { good, bad };  // DNS messages arrive whole (one datagram or TCP message)

/// On `bad`, `value` holds what was read before the refusal (id and flags whenever the
/// header was there, the question once it parsed, the EDNS fields once OPT parsed), so
/// build_error(value, error) is the answer to send; `why` is a short text for logs.
struct parse_result {
    parse_status status = parse_status::bad;
    query value;
    rcode error = rcode::formerr;
    std::string why;
};

/// Parses a client's query. Refuses with FORMERR: size < 12 or > 65535, QR set, qdcount != 1,
/// answer or authority records, additional records other than one OPT (TSIG/SIG(0) are not
/// supported), more than one OPT, an OPT whose name is not the root or whose options overrun
/// it, names with a compression loop, a pointer past the end, forward or into the header, a
/// label > 63 or of the reserved 0x40/0x80 kinds, a name > 255 octets, a truncated question
/// or record, trailing bytes. Refuses with NOTIMP an opcode other than QUERY, and with
/// BADVERS an EDNS version other than 0.
///
/// Names: any byte is legal on the wire, but cordon only serves host names, so the name is
/// lower-cased (ASCII) and must then be made of [a-z0-9-_] labels (hyphens and underscores
/// anywhere: `_dmarc`, `xn--bcher-kva`, `-x` pass; the allowlist decides); any other byte
/// (space, '.', '*', '\\', non-ASCII, NUL) refuses the query with FORMERR. The qclass is not
/// checked (the server decides).
parse_result parse_query(std::span<const std::uint8_t> packet);

/// Builds an answer without records: the query's id and opcode, QR and RA set, RD and CD
/// copied, the rcode; the question echoed (if the query has one); and if the query had EDNS,
/// an OPT with udp_size 1232, version 0, DO copied, the rcode's upper bits, and no options
/// (the session option is never echoed). A question name that cannot be encoded (label > 63,
/// name > 255, empty label) is left out (qdcount 0).
std::vector<std::uint8_t> build_error(const query& q, rcode rc);

/// Builds a NOERROR answer to `q` with one A or AAAA record per address of the matching
/// family (none when no address fits the question's type), each with `ttl`; EDNS as in
/// build_error. For names cordon answers itself (the hosts file).
std::vector<std::uint8_t> build_address_answer(const query& q,
                                               std::span<const config::ip_address> addresses,
                                               std::uint32_t ttl);

/// Builds a query with RD set: `name` (a trailing dot is allowed, case kept, "" or "." is the
/// root; labels are taken as bytes, no escapes), `qtype`, class IN, `id`, and with `edns` an
/// OPT (udp_size 1232, DO clear) carrying `options`. Returns an empty vector when the name
/// has an empty label, a label > 63 or is > 255 octets, or the options do not fit.
std::vector<std::uint8_t> build_query(std::string_view name, std::uint16_t qtype, std::uint16_t id,
                                      bool edns = true, std::span<const edns_option> options = {});

/// One resource record of a parsed answer. `rdata` points into the message passed to
/// parse_answer and is valid only as long as it is.
struct record {
    std::string name;  ///< lower-cased; bytes outside [a-z0-9-_] written as \DDD
    std::uint16_t type = 0;
    std::uint16_t rclass = 0;
    std::uint32_t ttl = 0;
    std::span<const std::uint8_t> rdata;
    std::size_t ttl_offset = 0;  ///< byte offset of the TTL field in the message
    std::string target;          ///< CNAME, NS, PTR, MX (exchange), SOA (mname): the name in rdata,
                                 ///< decoded as `name`
    std::string target2;         ///< SOA: rname
};

/// An upstream answer walked by parse_answer. Record spans point into the message.
struct answer_view {
    std::uint16_t id = 0;
    std::uint16_t flags = 0;
    question q;  ///< name decoded as record::name
    std::vector<record> answers, authority, additional;
};

/// Walks an upstream response. nullopt when it is malformed: shorter than 12 or longer than
/// 65535 bytes, QR clear, qdcount != 1, any name or record refused as in parse_query (names
/// may hold any byte, see record::name), counts that promise more records than there are
/// bytes, trailing bytes, A rdata not 4 bytes, AAAA not 16, CNAME/NS/PTR rdata that is not
/// exactly one name (MX: a preference and one name; SOA: two names and 20 bytes), OPT outside
/// the additional section, not at the root, or more than once, and a compression pointer
/// that does not land on the start of a label of a name read before it (the question's,
/// an owner's, or one in the data of the types above): so a name is never made of a
/// record's fixed fields (a TTL rewrite_answer ages) or of other data.
std::optional<answer_view> parse_answer(std::span<const std::uint8_t> msg);

/// Whether `a` answers `q`: same name (both are lower-case), type and class.
bool answers_question(const answer_view& a, const question& q);

/// Returns a copy of an answer with the id set and every TTL (OPT excepted) lowered by
/// `age_seconds`, not below 0; a TTL with the top bit set counts as 0 (RFC 2181 §8). Returns
/// an empty vector when parse_answer refuses `msg`.
std::vector<std::uint8_t> rewrite_answer(std::span<const std::uint8_t> msg, std::uint16_t id,
                                         std::uint32_t age_seconds);

/// A TTL field of an answer: its byte offset and the TTL it holds (top bit set counts as 0).
struct ttl_field {
    std::uint32_t offset = 0;
    std::uint32_t ttl = 0;
};
/// The TTL fields rewrite_answer lowers (every record but OPT), found once so that a cached
/// answer is not parsed again for each client it is served to.
std::vector<ttl_field> ttl_fields(const answer_view& a);
/// rewrite_answer for an answer whose `fields` were found by ttl_fields(parse_answer(msg)):
/// `out` becomes `msg` with the id set and each field lowered by `age_seconds` (not below
/// 0). `out`'s capacity is reused.
void age_answer(std::span<const std::uint8_t> msg, std::span<const ttl_field> fields,
                std::uint16_t id, std::uint32_t age_seconds, std::vector<std::uint8_t>& out);

/// An upstream answer rebuilt for relaying (sanitize_answer): a message cordon wrote itself.
struct clean_answer {
    std::vector<std::uint8_t> message;
    std::vector<ttl_field> ttls;         ///< every TTL field of `message`
    std::uint32_t min_ttl = UINT32_MAX;  ///< the lowest of them; UINT32_MAX when none
    bool negative = false;               ///< no record of the asked type (NXDOMAIN or NODATA)
};

/// Rebuilds a walked upstream answer into the message cordon relays, instead of the
/// upstream's bytes:
/// - answer section: only the records of the question's name and of the CNAME chain that
///   starts there (any order, at most 16 links), of the asked type or CNAME and the asked
///   class; authority section: only for a negative answer, the SOA of a zone at or above the
///   chain's last name; additional section: nothing (the OPT is added per client by
///   answer_for). Out-of-bailiwick records (other names, glue, NS) never reach a client;
/// - names written whole (the question's name as a pointer to it), so no compression
///   pointer of the upstream's survives and aging TTLs can never change a name; records of
///   the obsolete types with compressed names cordon does not decode (MD, MF, MB, MG, MR,
///   MINFO) are dropped;
/// - each TTL with the top bit set becomes 0 (RFC 2181 §8), then at most `max_ttl`
///   (`max_negative_ttl` for a negative answer): the TTL served is the one cached;
/// - header: the upstream's id and rcode, QR RD RA set, nothing else (no AA, AD).
/// nullopt when the answer cannot be relayed: an opcode other than QUERY, TC set, an
/// extended rcode, or a rebuilt message over 65524 bytes (65535 less an OPT record).
std::optional<clean_answer> sanitize_answer(const answer_view& a, std::uint32_t max_ttl,
                                            std::uint32_t max_negative_ttl);

/// A clean answer (sanitize_answer) made the answer to `q`: q's id, RD and CD; the question
/// name written as q asked it (case kept); TTLs lowered by `age_seconds`; and, if q had
/// EDNS, an OPT (udp_size 1232, DO copied, no options). `out`'s capacity is reused.
void answer_for(std::span<const std::uint8_t> clean, std::span<const ttl_field> ttls,
                const query& q, std::uint32_t age_seconds, std::vector<std::uint8_t>& out);

/// Truncation for UDP: if `msg` fits in `limit` it is returned unchanged; else the header and
/// question only, TC set and counts fixed, plus the message's OPT record when it parses and
/// the result still fits in `limit`. When the question cannot be read, the header alone
/// (counts 0, TC set); an input shorter than a header gives an empty vector. The result is
/// never larger than `msg`, and fits in `limit` unless header and question alone do not.
std::vector<std::uint8_t> truncate_for_udp(std::span<const std::uint8_t> msg, std::size_t limit);

/// DNS over TCP frames each message with a 2-byte length (RFC 1035 §4.2.2).
enum class frame_status { good, bad, need_more };
struct frame_result {
    frame_status status = frame_status::need_more;
    std::span<const std::uint8_t> message;  ///< on good: the message, inside `buffer`
    std::size_t consumed = 0;               ///< on good: length prefix + message
};
/// Takes the first framed message from `buffer`: need_more until the prefix and the whole
/// message are there; bad when the prefix announces fewer than 12 bytes.
frame_result next_tcp_message(std::span<const std::uint8_t> buffer);

}  // namespace cordon::dns
