#include "proxy/data/client_hello.hpp"

#include <algorithm>
#include <bitset>
#include <string_view>
#include <utility>
#include <vector>

#include "config/host.hpp"

// Two passes over the bytes received so far. The record pass walks TLS records from the
// start and gathers the handshake bytes they carry until the first handshake message is
// complete; the message pass reads that message as a ClientHello, field by field.
//
// Every check looks only at bytes before the point it judges, and errors are reported in
// stream order (a fault inside the message beats a fault in a later record header), so a
// verdict on a prefix is the verdict on every longer stream. Each read in the message pass
// first checks the length that encloses it (past it: bad) and only then the bytes received
// (past them: need_more).

namespace cordon::proxy::data {

namespace {

constexpr std::uint8_t content_type_handshake = 22;
constexpr std::uint8_t handshake_client_hello = 1;
constexpr std::size_t record_header_size = 5;
constexpr std::size_t max_record_length = std::size_t{1} << 14;  // RFC 8446 5.1
constexpr std::size_t handshake_header_size = 4;
constexpr std::uint16_t min_version = 0x0300;
constexpr std::uint16_t max_version = 0x0304;
constexpr std::size_t random_size = 32;
constexpr std::size_t max_session_id = 32;
constexpr std::uint16_t extension_server_name = 0;
constexpr std::uint8_t name_type_host_name = 0;
constexpr std::size_t max_host_name = 255;

hello_result verdict(hello_status status, std::string error) {
    hello_result r;
    r.status = status;
    r.error = std::move(error);
    return r;
}

hello_result bad(std::string error) { return verdict(hello_status::bad, std::move(error)); }

std::string hex(std::size_t value, int digits) {
    constexpr std::string_view hex_digits = "0123456789abcdef";
    std::string out = "0x";
    for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) {
        out += hex_digits[(value >> shift) & 0xf];
    }
    return out;
}

std::size_t u16_at(std::span<const std::uint8_t> s, std::size_t at) {
    return (std::size_t{s[at]} << 8) | s[at + 1];
}

std::size_t u24_at(std::span<const std::uint8_t> s, std::size_t at) {
    return (std::size_t{s[at]} << 16) | (std::size_t{s[at + 1]} << 8) | s[at + 2];
}

/// Smallest record stream that can carry a handshake message of `message_size` bytes.
std::size_t min_stream_size(std::size_t message_size) {
    const std::size_t records = (message_size + max_record_length - 1) / max_record_length;
    return message_size + records * record_header_size;
}

/// What the record pass found.
struct gathered {
    std::vector<std::uint8_t> joined;       ///< only when the message spans several records
    std::span<const std::uint8_t> message;  ///< handshake bytes so far; all of it once complete
    hello_result record_error;              ///< bad / not_tls at a record header, else need_more
    bool trailing = false;                  ///< its last record holds bytes past the message
    std::size_t consumed = 0;               ///< end of the record that completed the message
};

/// Walks the records and gathers the first handshake message's bytes.
gathered gather_records(std::span<const std::uint8_t> data) {
    gathered g;
    std::size_t pos = 0;
    std::size_t collected = 0;
    std::span<const std::uint8_t> first_fragment;
    while (pos < data.size()) {
        const std::uint8_t type = data[pos];
        if (type != content_type_handshake) {
            if (pos == 0) {
                g.record_error = verdict(hello_status::not_tls,
                                         (type & 0x80) != 0
                                             ? "an SSLv2-style record header, not TLS"
                                             : "not a TLS handshake record (first byte " +
                                                   hex(type, 2) + ")");
            } else {
                g.record_error = bad("record at offset " + std::to_string(pos) +
                                     " has content type " + std::to_string(type) +
                                     ", not handshake (22), before the ClientHello ended");
            }
            return g;
        }
        if (data.size() - pos < record_header_size) {
            break;
        }
        const std::size_t version = u16_at(data, pos + 1);
        const std::size_t length = u16_at(data, pos + 3);
        if (version < min_version || version > max_version) {
            g.record_error = bad("record at offset " + std::to_string(pos) + " has version " +
                                 hex(version, 4) + ", not 0x0300..0x0304");
            return g;
        }
        if (length == 0) {
            g.record_error = bad("empty handshake record at offset " + std::to_string(pos));
            return g;
        }
        if (length > max_record_length) {
            g.record_error = bad("record at offset " + std::to_string(pos) + " is " +
                                 std::to_string(length) + " bytes, over 16384");
            return g;
        }
        const std::size_t record_end = pos + record_header_size + length;
        if (record_end > max_client_hello_bytes) {
            g.record_error = bad("the ClientHello's records exceed " +
                                 std::to_string(max_client_hello_bytes) + " bytes");
            return g;
        }
        const std::size_t start = pos + record_header_size;
        const auto fragment = data.subspan(start, std::min(length, data.size() - start));
        if (collected == 0) {
            first_fragment = fragment;
        } else {
            if (g.joined.empty()) {
                // Bounded: the record-stream limit caps what all fragments hold together.
                g.joined.reserve(max_client_hello_bytes);
                g.joined.assign(first_fragment.begin(), first_fragment.end());
            }
            g.joined.insert(g.joined.end(), fragment.begin(), fragment.end());
        }
        collected += fragment.size();
        const auto so_far = g.joined.empty() ? first_fragment
                                             : std::span<const std::uint8_t>(g.joined);
        if (collected >= handshake_header_size) {
            const std::size_t total = handshake_header_size + u24_at(so_far, 1);
            if (collected >= total) {
                const std::size_t used_here = fragment.size() - (collected - total);
                g.message = so_far.first(total);
                g.trailing = used_here < length;
                g.consumed = record_end;
                return g;
            }
        }
        g.message = so_far;
        if (fragment.size() < length) {
            break;
        }
        pos = record_end;
    }
    return g;
}

/// Where a field may be read: from `pos` up to `end`, the bound its enclosing length sets.
struct cursor {
    std::size_t pos = 0;
    std::size_t end = 0;
    bool at_end() const { return pos == end; }
};

/// Reads the handshake message front to back. Each read fails with a bad verdict past
/// the enclosing bound, or leaves need_more standing past the bytes received.
class message_reader {
public:
    explicit message_reader(std::span<const std::uint8_t> have) : have_(have) {}

    hello_result& result() { return result_; }

    bool fail(std::string why) {
        result_ = bad("ClientHello: " + std::move(why));
        return false;
    }

    /// Takes `n` bytes of the field `what` at `c.pos` into `out`.
    bool take(cursor& c, std::size_t n, std::string_view what, std::span<const std::uint8_t>& out) {
        if (n > c.end - c.pos) {
            return fail(std::string(what) + " runs past its enclosing length");
        }
        if (c.pos > have_.size() || n > have_.size() - c.pos) {
            return false;  // need_more
        }
        out = have_.subspan(c.pos, n);
        c.pos += n;
        return true;
    }

    bool u8(cursor& c, std::string_view what, std::size_t& out) {
        std::span<const std::uint8_t> b;
        if (!take(c, 1, what, b)) {
            return false;
        }
        out = b[0];
        return true;
    }

    bool u16(cursor& c, std::string_view what, std::size_t& out) {
        std::span<const std::uint8_t> b;
        if (!take(c, 2, what, b)) {
            return false;
        }
        out = u16_at(b, 0);
        return true;
    }

    bool u24(cursor& c, std::string_view what, std::size_t& out) {
        std::span<const std::uint8_t> b;
        if (!take(c, 3, what, b)) {
            return false;
        }
        out = u24_at(b, 0);
        return true;
    }

    /// Opens a field of `length` bytes at `c.pos` and moves `c` past it. Only the bound is
    /// checked here: the bytes inside are read through the returned cursor.
    bool open(cursor& c, std::size_t length, std::string_view what, cursor& inner) {
        if (length > c.end - c.pos) {
            return fail(std::string(what) + " length " + std::to_string(length) +
                        " runs past its enclosing length");
        }
        inner = cursor{c.pos, c.pos + length};
        c.pos += length;
        return true;
    }

private:
    std::span<const std::uint8_t> have_;
    hello_result result_;
};

bool visible_ascii(std::span<const std::uint8_t> name) {
    return std::all_of(name.begin(), name.end(),
                       [](std::uint8_t b) { return b >= 0x21 && b <= 0x7e; });
}

/// Reads a server_name extension body (RFC 6066 3) into `sni`.
bool read_server_name(message_reader& r, cursor ext, std::string& sni) {
    std::size_t list_length = 0;
    if (!r.u16(ext, "server_name_list length", list_length)) {
        return false;
    }
    if (list_length != ext.end - ext.pos) {
        return r.fail("server_name_list length " + std::to_string(list_length) +
                      " does not match its extension");
    }
    if (list_length == 0) {
        return r.fail("empty server_name_list");
    }
    bool have_host_name = false;
    while (!ext.at_end()) {
        std::size_t name_type = 0;
        std::size_t name_length = 0;
        std::span<const std::uint8_t> name;
        if (!r.u8(ext, "server_name name_type", name_type) ||
            !r.u16(ext, "server_name name length", name_length) ||
            !r.take(ext, name_length, "server_name name", name)) {
            return false;
        }
        if (name_type != name_type_host_name) {
            continue;  // no other type is defined; RFC 6066 lets servers skip them
        }
        if (have_host_name) {
            return r.fail("more than one host_name in server_name");
        }
        if (name.empty() || name.size() > max_host_name) {
            return r.fail("host_name of " + std::to_string(name.size()) +
                          " bytes (must be 1..255)");
        }
        if (!visible_ascii(name)) {
            return r.fail("host_name has a byte outside visible ASCII (0x21..0x7e)");
        }
        sni.assign(name.begin(), name.end());
        have_host_name = true;
    }
    return true;
}

/// Reads the extensions block (RFC 8446 4.2); `sni` is set when server_name has a host_name.
bool read_extensions(message_reader& r, cursor& body, std::string& sni) {
    std::size_t length = 0;
    if (!r.u16(body, "extensions length", length)) {
        return false;
    }
    if (length != body.end - body.pos) {
        return r.fail("extensions length " + std::to_string(length) + " does not match the " +
                      std::to_string(body.end - body.pos) + " bytes left in the message");
    }
    cursor block;
    if (!r.open(body, length, "extensions", block)) {
        return false;
    }
    std::bitset<65536> seen;
    while (!block.at_end()) {
        std::size_t type = 0;
        std::size_t ext_length = 0;
        cursor ext;
        if (!r.u16(block, "extension type", type) ||
            !r.u16(block, "extension length", ext_length) ||
            !r.open(block, ext_length, "extension " + std::to_string(type), ext)) {
            return false;
        }
        if (seen.test(type)) {
            return r.fail("duplicate extension " + std::to_string(type));
        }
        seen.set(type);
        if (type == extension_server_name) {
            if (!read_server_name(r, ext, sni)) {
                return false;
            }
        } else {
            std::span<const std::uint8_t> skipped;
            if (!r.take(ext, ext_length, "extension " + std::to_string(type), skipped)) {
                return false;
            }
        }
    }
    return true;
}

/// Reads the ClientHello (RFC 8446 4.1.2). True when it is complete and well formed.
bool read_client_hello(message_reader& r, std::string& sni) {
    cursor header{0, handshake_header_size};
    std::size_t type = 0;
    std::size_t length = 0;
    if (!r.u8(header, "handshake type", type)) {
        return false;
    }
    if (type != handshake_client_hello) {
        return r.fail("first handshake message has type " + std::to_string(type) +
                      ", not ClientHello (1)");
    }
    if (!r.u24(header, "handshake length", length)) {
        return false;
    }
    const std::size_t total = handshake_header_size + length;
    if (min_stream_size(total) > max_client_hello_bytes) {
        return r.fail("message of " + std::to_string(total) + " bytes exceeds the " +
                      std::to_string(max_client_hello_bytes) + "-byte limit");
    }
    cursor body{handshake_header_size, total};
    std::size_t version = 0;
    std::size_t session_id_length = 0;
    std::size_t suites_length = 0;
    std::size_t compression_length = 0;
    std::span<const std::uint8_t> skipped;
    if (!r.u16(body, "legacy_version", version)) {
        return false;
    }
    if (version < min_version || version > max_version) {
        return r.fail("legacy_version " + hex(version, 4) + " is not 0x0300..0x0304");
    }
    if (!r.take(body, random_size, "random", skipped) ||
        !r.u8(body, "session_id length", session_id_length)) {
        return false;
    }
    if (session_id_length > max_session_id) {
        return r.fail("session_id of " + std::to_string(session_id_length) + " bytes (at most 32)");
    }
    if (!r.take(body, session_id_length, "session_id", skipped) ||
        !r.u16(body, "cipher_suites length", suites_length)) {
        return false;
    }
    if (suites_length < 2 || suites_length % 2 != 0) {
        return r.fail("cipher_suites length " + std::to_string(suites_length) +
                      " (must be even and at least 2)");
    }
    if (!r.take(body, suites_length, "cipher_suites", skipped) ||
        !r.u8(body, "compression_methods length", compression_length)) {
        return false;
    }
    if (compression_length == 0) {
        return r.fail("no compression_methods");
    }
    if (!r.take(body, compression_length, "compression_methods", skipped)) {
        return false;
    }
    if (body.at_end()) {
        return true;  // no extensions at all (allowed before TLS 1.3)
    }
    return read_extensions(r, body, sni);
}

}  // namespace

hello_result parse_client_hello(std::span<const std::uint8_t> data) {
    gathered g = gather_records(data);
    if (g.record_error.status == hello_status::not_tls) {
        return std::move(g.record_error);
    }
    message_reader reader(g.message);
    std::string sni;
    if (!read_client_hello(reader, sni)) {
        if (reader.result().status == hello_status::bad) {
            return std::move(reader.result());
        }
        // The message so far is a valid prefix: a fault in a later record header decides.
        return std::move(g.record_error);
    }
    if (g.trailing) {
        return bad("bytes after the ClientHello in its last record");
    }
    hello_result r;
    r.status = sni.empty() ? hello_status::no_sni : hello_status::ok;
    r.sni = std::move(sni);
    r.consumed = g.consumed;
    return r;
}

sni_verdict check_sni(std::string_view want, std::span<const std::uint8_t> data) {
    const hello_result r = parse_client_hello(data);
    if (r.status == hello_status::need_more) {
        return sni_verdict::need_more;
    }
    if (r.status != hello_status::ok) {
        return sni_verdict::mismatch;
    }
    const config::host_result sni = config::normalise_host(r.sni);
    return sni.ok() && sni.value == want ? sni_verdict::match : sni_verdict::mismatch;
}

}  // namespace cordon::proxy::data
