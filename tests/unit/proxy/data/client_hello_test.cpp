// parse_client_hello: captured hellos from real clients (tests/data/client_hello) and crafted
// ones from a small builder, fed whole, in every prefix and over several records.
#include "proxy/data/client_hello.hpp"  // first: the header must compile on its own

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace cordon::proxy;
using namespace cordon::proxy::data;

namespace {

using bytes = std::vector<std::uint8_t>;

const std::string data_dir = CORDON_TEST_DATA;

bytes load_hex(const std::string& name) {
    std::ifstream in(data_dir + "/client_hello/" + name + ".hex");
    REQUIRE(in.good());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes out;
    int high = -1;
    for (const char c : text) {
        int v = -1;
        if (c >= '0' && c <= '9') {
            v = c - '0';
        } else if (c >= 'a' && c <= 'f') {
            v = c - 'a' + 10;
        } else {
            continue;
        }
        if (high < 0) {
            high = v;
        } else {
            out.push_back(static_cast<std::uint8_t>(high * 16 + v));
            high = -1;
        }
    }
    REQUIRE(high < 0);
    return out;
}

bytes from_text(std::string_view s) { return bytes(s.begin(), s.end()); }

void put8(bytes& out, std::size_t v) { out.push_back(static_cast<std::uint8_t>(v)); }

void put16(bytes& out, std::size_t v) {
    put8(out, v >> 8);
    put8(out, v);
}

void put24(bytes& out, std::size_t v) {
    put8(out, v >> 16);
    put16(out, v);
}

void append(bytes& out, const bytes& in) { out.insert(out.end(), in.begin(), in.end()); }

/// One extension; `length_lie` is written instead of the true length.
struct extension {
    std::uint16_t type = 0;
    bytes data;
    std::optional<std::size_t> length_lie;
};

/// One server_name entry.
bytes name_entry(std::uint8_t type, std::string_view name,
                 std::optional<std::size_t> length_lie = std::nullopt) {
    bytes out;
    put8(out, type);
    put16(out, length_lie.value_or(name.size()));
    append(out, from_text(name));
    return out;
}

/// A server_name extension over the given entries.
extension server_name(const std::vector<bytes>& entries,
                      std::optional<std::size_t> list_length_lie = std::nullopt) {
    bytes list;
    for (const bytes& e : entries) {
        append(list, e);
    }
    extension ext;
    ext.type = 0;
    put16(ext.data, list_length_lie.value_or(list.size()));
    append(ext.data, list);
    return ext;
}

extension sni(std::string_view host) { return server_name({name_entry(0, host)}); }

/// A ClientHello handshake message, TLS 1.3 style by default, with lengths that may lie.
struct hello {
    std::uint8_t handshake_type = 1;
    std::uint16_t version = 0x0303;
    bytes session_id = bytes(32, 0x5a);
    bytes cipher_suites{0x13, 0x01, 0x13, 0x02, 0xc0, 0x2f};
    bytes compression{0x00};
    bool has_extensions = true;
    std::vector<extension> extensions{
        {43, {0x02, 0x03, 0x04}, {}},                    // supported_versions: TLS 1.3
        {10, {0x00, 0x02, 0x00, 0x1d}, {}},              // supported_groups: x25519
        {13, {0x00, 0x04, 0x04, 0x03, 0x08, 0x04}, {}},  // signature_algorithms
    };
    std::optional<std::size_t> handshake_length_lie;
    std::optional<std::size_t> session_id_length_lie;
    std::optional<std::size_t> cipher_suites_length_lie;
    std::optional<std::size_t> compression_length_lie;
    std::optional<std::size_t> extensions_length_lie;

    hello& with(extension e) {
        extensions.insert(extensions.begin(), std::move(e));
        return *this;
    }

    bytes message() const {
        bytes body;
        put16(body, version);
        append(body, bytes(32, 0xab));
        put8(body, session_id_length_lie.value_or(session_id.size()));
        append(body, session_id);
        put16(body, cipher_suites_length_lie.value_or(cipher_suites.size()));
        append(body, cipher_suites);
        put8(body, compression_length_lie.value_or(compression.size()));
        append(body, compression);
        if (has_extensions) {
            bytes block;
            for (const extension& e : extensions) {
                put16(block, e.type);
                put16(block, e.length_lie.value_or(e.data.size()));
                append(block, e.data);
            }
            put16(body, extensions_length_lie.value_or(block.size()));
            append(body, block);
        }
        bytes out;
        put8(out, handshake_type);
        put24(out, handshake_length_lie.value_or(body.size()));
        append(out, body);
        return out;
    }
};

/// One TLS record; `length_lie` is written instead of the true length.
bytes record(const bytes& payload, std::uint8_t type = 22, std::uint16_t version = 0x0301,
             std::optional<std::size_t> length_lie = std::nullopt) {
    bytes out;
    put8(out, type);
    put16(out, version);
    put16(out, length_lie.value_or(payload.size()));
    append(out, payload);
    return out;
}

/// `message` in records of the given fragment sizes; the last record takes the rest.
bytes records(const bytes& message, const std::vector<std::size_t>& sizes = {}) {
    bytes out;
    std::size_t at = 0;
    for (const std::size_t n : sizes) {
        append(out, record(bytes(message.begin() + static_cast<std::ptrdiff_t>(at),
                                 message.begin() + static_cast<std::ptrdiff_t>(at + n))));
        at += n;
    }
    append(out, record(bytes(message.begin() + static_cast<std::ptrdiff_t>(at), message.end())));
    return out;
}

/// The ClientHello in records of at most 16384 bytes, as a client would send a large one.
bytes full_records(const bytes& message) {
    std::vector<std::size_t> sizes;
    for (std::size_t left = message.size(); left > 16384; left -= 16384) {
        sizes.push_back(16384);
    }
    return records(message, sizes);
}

hello_result parse(const bytes& b) { return parse_client_hello(b); }

hello_result parse_prefix(const bytes& b, std::size_t n) {
    return parse_client_hello(std::span<const std::uint8_t>(b.data(), n));
}

/// Every proper prefix is need_more or, once decided, exactly the final result. Inputs over
/// 4 KiB are sampled (every 61st prefix and the last few) to keep the test fast.
void check_prefixes(const bytes& b, bool decided_only_at_end) {
    const hello_result whole = parse(b);
    const std::size_t stride = b.size() > 4096 ? 61 : 1;
    for (std::size_t n = 0; n < b.size(); n += (n + 8 >= b.size() ? 1 : stride)) {
        const hello_result r = parse_prefix(b, n);
        INFO("prefix of " << n << " of " << b.size() << " bytes: " << r.error);
        if (decided_only_at_end || r.status == hello_status::need_more) {
            REQUIRE(r.status == hello_status::need_more);
            REQUIRE(r.sni.empty());
            REQUIRE(r.error.empty());
            REQUIRE(r.consumed == 0);
        } else {
            REQUIRE(r.status == whole.status);
            REQUIRE(r.sni == whole.sni);
            REQUIRE(r.error == whole.error);
            REQUIRE(r.consumed == whole.consumed);
        }
    }
}

void check_ok(const bytes& b, std::string_view want_sni) {
    const hello_result r = parse(b);
    INFO(r.error);
    CHECK(r.status == hello_status::ok);
    CHECK(r.sni == want_sni);
    CHECK(r.error.empty());
    CHECK(r.consumed == b.size());
}

void check_bad(const bytes& b, std::string_view why) {
    const hello_result r = parse(b);
    CHECK(r.status == hello_status::bad);
    CHECK_THAT(r.error, Catch::Contains(std::string(why)));
    CHECK(r.sni.empty());
    CHECK(r.consumed == 0);
    check_prefixes(b, false);
}

}  // namespace

TEST_CASE("client_hello: captured hellos from real clients", "[client_hello]") {
    const std::vector<std::pair<std::string, std::string>> captured{
        {"openssl_sni", "example.com"},           {"openssl_sni_mixed_case", "Api.Example.COM"},
        {"openssl_tls12_sni", "api.zendesk.com"}, {"python_ssl_sni", "pypi.org"},
        {"curl_sni", "www.example.org"},
    };
    for (const auto& [name, want] : captured) {
        INFO(name);
        const bytes b = load_hex(name);
        check_ok(b, want);
    }

    const bytes nosni = load_hex("openssl_nosni");
    const hello_result r = parse(nosni);
    CHECK(r.status == hello_status::no_sni);
    CHECK(r.sni.empty());
    CHECK(r.error.empty());
    CHECK(r.consumed == nosni.size());
}

TEST_CASE("client_hello: the SNI keeps the case the client sent", "[client_hello]") {
    check_ok(load_hex("openssl_sni_mixed_case"), "Api.Example.COM");
    check_ok(records(hello{}.with(sni("WWW.Example.Org.")).message()), "WWW.Example.Org.");
}

TEST_CASE("client_hello: every prefix of a good hello asks for more", "[client_hello]") {
    for (const char* name :
         {"openssl_sni", "openssl_nosni", "openssl_tls12_sni", "python_ssl_sni", "curl_sni"}) {
        INFO(name);
        check_prefixes(load_hex(name), true);
    }
    check_prefixes(records(hello{}.with(sni("a.example")).message()), true);
    check_prefixes(records(hello{}.message()), true);
}

TEST_CASE("client_hello: a hello fragmented over several records", "[client_hello]") {
    const bytes python = load_hex("python_ssl_sni");
    const bytes message(python.begin() + 5, python.end());  // strip its one record header
    REQUIRE(message.size() == 512);

    const std::vector<std::vector<std::size_t>> splits{
        {1},         // inside the handshake header
        {4},         // right after it
        {100},       // two records
        {2, 300},    // three records, the first inside the header
        {200, 200},  // three records
        {511},       // the last byte alone
    };
    for (const auto& sizes : splits) {
        INFO("first fragments: " << sizes.front() << " (" << sizes.size() + 1 << " records)");
        const bytes b = records(message, sizes);
        check_ok(b, "pypi.org");
        CHECK(parse(b).consumed == message.size() + 5 * (sizes.size() + 1));
        check_prefixes(b, true);
    }

    const bytes crafted = hello{}.with(sni("split.example")).message();
    check_ok(records(crafted, {3, 40}), "split.example");
    check_prefixes(records(crafted, {3, 40}), true);
}

TEST_CASE("client_hello: bytes after the hello's records are not looked at", "[client_hello]") {
    const bytes hello_records = load_hex("openssl_sni");
    bytes b = hello_records;
    append(b, record({0x01}, 20, 0x0303));   // change_cipher_spec
    append(b, record(bytes(40, 0x77), 23));  // early application data
    append(b, from_text("garbage"));
    const hello_result r = parse(b);
    CHECK(r.status == hello_status::ok);
    CHECK(r.sni == "example.com");
    CHECK(r.consumed == hello_records.size());
}

TEST_CASE("client_hello: hellos without an SNI host name", "[client_hello]") {
    SECTION("no server_name extension") {
        const bytes b = records(hello{}.message());
        const hello_result r = parse(b);
        CHECK(r.status == hello_status::no_sni);
        CHECK(r.consumed == b.size());
    }
    SECTION("no extensions at all") {
        hello h;
        h.has_extensions = false;
        const bytes b = records(h.message());
        const hello_result r = parse(b);
        CHECK(r.status == hello_status::no_sni);
        CHECK(r.consumed == b.size());
        check_prefixes(b, true);
    }
    SECTION("a server_name with only an unknown name type") {
        const bytes b = records(hello{}.with(server_name({name_entry(7, "opaque")})).message());
        CHECK(parse(b).status == hello_status::no_sni);
    }
}

TEST_CASE("client_hello: host name edge cases that are fine", "[client_hello]") {
    check_ok(records(hello{}.with(sni("a")).message()), "a");
    const std::string longest(255, 'h');
    check_ok(records(hello{}.with(sni(longest)).message()), longest);
    check_ok(
        records(
            hello{}.with(server_name({name_entry(7, "x"), name_entry(0, "b.example")})).message()),
        "b.example");
    // server_name anywhere in the list, and an empty session id, TLS 1.0 record and hello.
    hello h;
    h.session_id.clear();
    h.version = 0x0301;
    h.extensions.push_back(sni("last.example"));
    check_ok(records(h.message()), "last.example");
}

TEST_CASE("client_hello: not TLS at all", "[client_hello]") {
    const std::vector<bytes> inputs{
        from_text("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"),
        from_text("CONNECT example.com:443 HTTP/1.1\r\n\r\n"),
        from_text("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"), from_text("G"),
        // An SSLv2-compatible ClientHello: 2-byte header with the top bit set, type 1.
        bytes{0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10},
        record(bytes(10, 0x01), 23),  // a TLS record, but application data
        record({0x02, 0x28}, 21),     // an alert
    };
    for (const bytes& b : inputs) {
        INFO(std::string(b.begin(), b.end()));
        const hello_result r = parse(b);
        CHECK(r.status == hello_status::not_tls);
        CHECK_FALSE(r.error.empty());
        CHECK(r.consumed == 0);
        check_prefixes(b, false);
    }
    CHECK_THAT(parse(inputs[0]).error, Catch::Contains("0x47"));
    CHECK_THAT(parse(inputs[4]).error, Catch::Contains("SSLv2"));
    CHECK(parse({}).status == hello_status::need_more);
}

TEST_CASE("client_hello: malformed records", "[client_hello]") {
    const bytes message = hello{}.with(sni("r.example")).message();
    const bytes payload(message.begin(), message.begin() + 20);

    check_bad(record(message, 22, 0x0301, 0), "empty handshake record");
    check_bad(record(bytes(16385, 0x01), 22, 0x0301), "16385 bytes, over 16384");
    check_bad(record(message, 22, 0x0301, 0xffff), "over 16384");
    check_bad(record(message, 22, 0x0200), "version 0x0200");
    check_bad(record(message, 22, 0x0305), "version 0x0305");
    check_bad(record(message, 22, 0x0403), "version 0x0403");

    // A record that claims one byte more than the hello: it holds bytes past the hello.
    check_bad(record(message, 22, 0x0301, message.size() + 1), "bytes after the ClientHello");
    bytes with_tail = message;
    with_tail.push_back(0x00);
    check_bad(record(with_tail), "bytes after the ClientHello");
    // One byte less: the hello's last byte is read as the next record's content type.
    check_bad(record(message, 22, 0x0301, message.size() - 1), "content type");

    // The rest of a fragmented hello in a record that is not a handshake record.
    bytes b = record(payload);
    append(b, record(bytes(message.begin() + 20, message.end()), 23, 0x0303));
    check_bad(b, "content type 23");
    b = record(payload);
    append(b, record(bytes(message.begin() + 20, message.end()), 22, 0x0301, 0));
    check_bad(b, "empty handshake record");
}

TEST_CASE("client_hello: malformed handshake header and fixed fields", "[client_hello]") {
    hello h;
    h.handshake_type = 2;  // ServerHello
    check_bad(records(h.message()), "not ClientHello");

    h = hello{};
    h.version = 0x0200;
    check_bad(records(h.message()), "legacy_version 0x0200");

    h = hello{};
    h.session_id = bytes(33, 0x01);
    check_bad(records(h.message()), "session_id of 33 bytes");

    h = hello{};
    h.cipher_suites = {0x13, 0x01, 0x13};
    check_bad(records(h.message()), "cipher_suites length 3");

    h = hello{};
    h.cipher_suites.clear();
    check_bad(records(h.message()), "cipher_suites length 0");

    h = hello{};
    h.compression.clear();
    check_bad(records(h.message()), "no compression_methods");

    h = hello{};
    h.has_extensions = false;
    h.compression.push_back(0x01);  // DEFLATE, then nothing: fine
    CHECK(parse(records(h.message())).status == hello_status::no_sni);
}

TEST_CASE("client_hello: lengths that lie, field by field", "[client_hello]") {
    const hello base = hello{}.with(sni("lie.example"));
    const std::size_t body_size = base.message().size() - 4;

    SECTION("handshake length") {
        hello h = base;
        h.handshake_length_lie = body_size - 1;
        check_bad(records(h.message()), "extensions length");
        h.handshake_length_lie = body_size + 1;
        check_bad(records(h.message()), "extensions length");
        h.handshake_length_lie = 20;
        check_bad(records(h.message()), "random runs past");
    }
    SECTION("session_id length") {
        hello h = base;
        h.session_id_length_lie = 31;
        check_bad(records(h.message()), "cipher_suites runs past");
        h.session_id_length_lie = 0;
        check_bad(records(h.message()), "cipher_suites runs past");
    }
    SECTION("cipher_suites length") {
        hello h = base;
        h.cipher_suites_length_lie = 8;
        check_bad(records(h.message()), "no compression_methods");
        h.cipher_suites_length_lie = 0xfffe;
        check_bad(records(h.message()), "cipher_suites runs past");
    }
    SECTION("compression_methods length") {
        hello h = base;
        h.compression_length_lie = 2;
        check_bad(records(h.message()), "extensions length 11520 does not match");
        h.compression_length_lie = 255;
        check_bad(records(h.message()), "compression_methods runs past");
    }
    SECTION("extensions length") {
        hello h = base;
        h.extensions_length_lie = 4;
        check_bad(records(h.message()), "extensions length 4 does not match");
        h.extensions_length_lie = 0xffff;
        check_bad(records(h.message()), "extensions length 65535 does not match");
    }
    SECTION("one extension's length") {
        hello h = base;
        h.extensions.back().length_lie = h.extensions.back().data.size() + 1;
        check_bad(records(h.message()), "extension 13 length 7 runs past");
        h = base;
        h.extensions.front().length_lie = 0xffff;
        check_bad(records(h.message()), "extension 0 length 65535 runs past");
        h = base;
        h.extensions[1].length_lie = 2;  // the rest is read as extension headers
        check_bad(records(h.message()), "extension 1024 length 2560 runs past");
    }
    SECTION("server_name_list length") {
        check_bad(records(hello{}.with(server_name({name_entry(0, "x.example")}, 9)).message()),
                  "server_name_list length 9 does not match");
        check_bad(records(hello{}.with(server_name({name_entry(0, "x.example")}, 13)).message()),
                  "server_name_list length 13 does not match");
        check_bad(records(hello{}.with(server_name({})).message()), "empty server_name_list");
        extension empty;  // a server_name extension with no body at all
        check_bad(records(hello{}.with(empty).message()), "server_name_list length runs past");
    }
    SECTION("host name length") {
        check_bad(records(hello{}.with(server_name({name_entry(0, "x.example", 10)})).message()),
                  "server_name name runs past");
        check_bad(records(hello{}.with(server_name({name_entry(0, "x.example", 8)})).message()),
                  "server_name name length runs past");
    }
}

TEST_CASE("client_hello: extension and host name refusals", "[client_hello]") {
    check_bad(records(hello{}.with({10, {0x00, 0x02, 0x00, 0x17}, {}}).message()),
              "duplicate extension 10");
    check_bad(records(hello{}.with(sni("a.example")).with(sni("a.example")).message()),
              "duplicate extension 0");
    check_bad(
        records(hello{}
                    .with(server_name({name_entry(0, "a.example"), name_entry(0, "b.example")}))
                    .message()),
        "more than one host_name");
    check_bad(records(hello{}.with(sni("")).message()), "host_name of 0 bytes");
    check_bad(records(hello{}.with(sni(std::string(256, 'h'))).message()),
              "host_name of 256 bytes");
    check_bad(records(hello{}.with(sni(std::string("a\0b.example", 11))).message()),
              "outside visible ASCII");
    check_bad(records(hello{}.with(sni("a b.example")).message()), "outside visible ASCII");
    check_bad(records(hello{}.with(sni("caf\xc3\xa9.example")).message()), "outside visible ASCII");
    check_bad(records(hello{}.with(sni("a.example\r\n")).message()), "outside visible ASCII");
}

TEST_CASE("client_hello: the 64 KiB bound on all records together", "[client_hello]") {
    // Four full records carry at most 65536 - 4 * 5 bytes of handshake message.
    const auto padded = [](std::size_t message_size) {
        hello h = hello{}.with(sni("big.example"));
        const std::size_t plain = h.message().size();
        h.extensions.push_back({21, bytes(message_size - plain - 4, 0x00), {}});  // padding
        bytes m = h.message();
        REQUIRE(m.size() == message_size);
        return m;
    };
    const bytes largest = full_records(padded(65536 - 20));
    REQUIRE(largest.size() == max_client_hello_bytes);
    check_ok(largest, "big.example");

    const bytes over = full_records(padded(65536 - 19));
    check_bad(over, "exceeds the 65536-byte limit");
    // Decided from the handshake header alone, before the rest arrives.
    CHECK(parse_prefix(over, 9).status == hello_status::bad);

    hello h;
    h.handshake_length_lie = 0xffffff;
    CHECK(parse(records(h.message())).status == hello_status::bad);

    // Small records cost 5 bytes each: a 12000-byte hello in 1-byte records is too long.
    const bytes message = padded(12000);
    bytes tiny;
    for (const std::uint8_t byte : message) {
        append(tiny, record({byte}));
    }
    const hello_result r = parse(tiny);
    CHECK(r.status == hello_status::bad);
    CHECK_THAT(r.error, Catch::Contains("records exceed 65536 bytes"));
    // ... while a small hello in 1-byte records is fine.
    bytes small_tiny;
    for (const std::uint8_t byte : hello{}.with(sni("t.example")).message()) {
        append(small_tiny, record({byte}));
    }
    check_ok(small_tiny, "t.example");
}

TEST_CASE("client_hello: the SNI check of a tls tunnel", "[client_hello]") {
    const bytes mixed = load_hex("openssl_sni_mixed_case");  // Api.Example.COM
    CHECK(check_sni("api.example.com", mixed) == sni_verdict::match);
    CHECK(check_sni("example.com", mixed) == sni_verdict::mismatch);
    CHECK(check_sni("api.example.com.evil.test", mixed) == sni_verdict::mismatch);
    const bytes dotted = records(hello{}.with(sni("WWW.Example.Org.")).message());
    CHECK(check_sni("www.example.org", dotted) == sni_verdict::match);
    // No SNI at all, not TLS: refused, never waited on.
    CHECK(check_sni("example.com", load_hex("openssl_nosni")) == sni_verdict::mismatch);
    const std::string http = "GET / HTTP/1.1\r\n\r\n";
    CHECK(check_sni("example.com", bytes(http.begin(), http.end())) == sni_verdict::mismatch);
    // Every strict prefix of the hello: read more.
    const bytes good = load_hex("openssl_sni");
    for (std::size_t n = 0; n < good.size(); ++n) {
        INFO("prefix " << n);
        REQUIRE(check_sni("example.com", std::span(good.data(), n)) == sni_verdict::need_more);
    }
    CHECK(check_sni("example.com", good) == sni_verdict::match);
}
