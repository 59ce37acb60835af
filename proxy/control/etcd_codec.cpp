// etcd's v3 JSON gateway as bytes: request bodies out, answers in (parsed and bounded).

#include "proxy/control/etcd_codec.hpp"

#include <boost/json.hpp>

#include <array>
#include <charconv>
#include <limits>
#include <type_traits>

namespace cordon::proxy::control::etcd {

template <class Int>
std::optional<Int> integer(const boost::json::value& v, bool from_string) {
    static_assert(std::is_same_v<Int, std::int64_t> || std::is_same_v<Int, std::uint64_t>);
    constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<Int>::max());
    if (v.is_int64() && (std::is_signed_v<Int> || v.as_int64() >= 0)) {
        return static_cast<Int>(v.as_int64());
    }
    if (v.is_uint64() && v.as_uint64() <= max) {
        return static_cast<Int>(v.as_uint64());
    }
    if (from_string && v.is_string()) {
        const auto& s = v.as_string();
        Int out = 0;
        if (!s.empty() && s.size() <= 20) {
            const auto* end = s.data() + s.size();
            const auto r = std::from_chars(s.data(), end, out);
            if (r.ec == std::errc() && r.ptr == end) {
                return out;
            }
        }
    }
    return std::nullopt;
}

template std::optional<std::int64_t> integer<std::int64_t>(const boost::json::value&, bool);
template std::optional<std::uint64_t> integer<std::uint64_t>(const boost::json::value&, bool);

namespace {

namespace json = boost::json;

constexpr std::string_view alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int b64_value(char c) noexcept {
    if (c >= 'A' && c <= 'Z') {
        return c - 'A';
    }
    if (c >= 'a' && c <= 'z') {
        return c - 'a' + 26;
    }
    if (c >= '0' && c <= '9') {
        return c - '0' + 52;
    }
    if (c == '+') {
        return 62;
    }
    if (c == '/') {
        return 63;
    }
    return -1;
}

std::string num(std::int64_t v) { return std::to_string(v); }

// A 64-bit number as the gateway writes it: a JSON string of decimal digits (int64 and uint64
// fields), or a plain JSON integer (some fields, some versions). Absent: 0.
template <class Int>
bool read_number(const json::object& o, std::string_view name, Int& out, std::string& error) {
    out = 0;
    const auto* v = o.if_contains(name);
    if (v == nullptr) {
        return true;
    }
    if (const auto n = integer<Int>(*v, true)) {
        out = *n;
        return true;
    }
    error = "etcd: field " + std::string(name) + " is not " +
            (std::is_signed_v<Int> ? "a 64-bit number" : "an unsigned 64-bit number");
    return false;
}

bool read_int(const json::object& o, std::string_view name, std::int64_t& out, std::string& error) {
    return read_number(o, name, out, error);
}

bool read_uint(const json::object& o, std::string_view name, std::uint64_t& out,
               std::string& error) {
    return read_number(o, name, out, error);
}

bool read_bool(const json::object& o, std::string_view name, bool& out, std::string& error) {
    out = false;
    const auto* v = o.if_contains(name);
    if (v == nullptr) {
        return true;
    }
    if (!v->is_bool()) {
        error = "etcd: field " + std::string(name) + " is not a boolean";
        return false;
    }
    out = v->as_bool();
    return true;
}

bool read_bytes(const json::object& o, std::string_view name, std::size_t max, std::string& out,
                std::string& error) {
    out.clear();
    const auto* v = o.if_contains(name);
    if (v == nullptr) {
        return true;
    }
    if (!v->is_string()) {
        error = "etcd: field " + std::string(name) + " is not a string";
        return false;
    }
    auto d = base64_decode(v->as_string(), max);
    if (!d) {
        error = "etcd: field " + std::string(name) + " is not base64 of at most " +
                std::to_string(max) + " bytes";
        return false;
    }
    out = std::move(*d);
    return true;
}

// The body as a JSON object; the gateway's error shape becomes `error`.
bool parse_object(std::string_view body, json::object& out, std::string& error) {
    if (body.size() > max_message) {
        error = "etcd: an answer of " + std::to_string(body.size()) + " bytes (limit " +
                std::to_string(max_message) + ")";
        return false;
    }
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (ec || !v.is_object()) {
        error = "etcd: an answer that is not a JSON object";
        return false;
    }
    out = std::move(v.as_object());
    if (const auto* e = out.if_contains("error")) {
        std::string message = "unknown error";
        if (const auto* m = out.if_contains("message"); m != nullptr && m->is_string()) {
            message = std::string(m->as_string().subview().substr(0, 512));
        } else if (e->is_string()) {
            message = std::string(e->as_string().subview().substr(0, 512));
        } else if (e->is_object()) {
            if (const auto* m2 = e->as_object().if_contains("message");
                m2 != nullptr && m2->is_string()) {
                message = std::string(m2->as_string().subview().substr(0, 512));
            }
        }
        std::int64_t code = 0;
        std::string ignored;
        read_int(out, "code", code, ignored);
        error = "etcd: " + message + " (code " + std::to_string(code) + ")";
        return false;
    }
    return true;
}

bool parse_header(const json::object& o, header& h, std::string& error) {
    h = header{};
    const auto* v = o.if_contains("header");
    if (v == nullptr) {
        return true;  // some nested answers have none
    }
    if (!v->is_object()) {
        error = "etcd: header is not an object";
        return false;
    }
    const auto& ho = v->as_object();
    return read_uint(ho, "cluster_id", h.cluster_id, error) &&
           read_uint(ho, "member_id", h.member_id, error) &&
           read_int(ho, "revision", h.revision, error) &&
           read_int(ho, "raft_term", h.raft_term, error);
}

bool parse_kv(const json::value& v, key_value& kv, std::string& error) {
    if (!v.is_object()) {
        error = "etcd: a key-value that is not an object";
        return false;
    }
    const auto& o = v.as_object();
    if (!read_bytes(o, "key", max_key, kv.key, error) ||
        !read_bytes(o, "value", max_value, kv.value, error) ||
        !read_int(o, "create_revision", kv.create_revision, error) ||
        !read_int(o, "mod_revision", kv.mod_revision, error) ||
        !read_int(o, "version", kv.version, error) || !read_int(o, "lease", kv.lease, error)) {
        return false;
    }
    if (kv.key.empty()) {
        error = "etcd: a key-value without a key";
        return false;
    }
    if (kv.mod_revision < 0 || kv.create_revision < 0 || kv.version < 0) {
        error = "etcd: a negative revision";
        return false;
    }
    return true;
}

}  // namespace

std::string base64_encode(std::string_view bytes) {
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
        const std::uint32_t n =
            (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16) |
            (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8) |
            static_cast<unsigned char>(bytes[i + 2]);
        out += alphabet[(n >> 18) & 63];
        out += alphabet[(n >> 12) & 63];
        out += alphabet[(n >> 6) & 63];
        out += alphabet[n & 63];
    }
    const std::size_t rest = bytes.size() - i;
    if (rest > 0) {
        std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
        if (rest == 2) {
            n |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
        }
        out += alphabet[(n >> 18) & 63];
        out += alphabet[(n >> 12) & 63];
        out += rest == 2 ? alphabet[(n >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

std::optional<std::string> base64_decode(std::string_view text, std::size_t max_out) {
    if (text.size() % 4 != 0 || text.size() / 4 * 3 > max_out + 2) {
        return std::nullopt;
    }
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (std::size_t i = 0; i < text.size(); i += 4) {
        const bool last = i + 4 == text.size();
        std::array<int, 4> v{};
        int pad = 0;
        for (int j = 0; j < 4; ++j) {
            const char c = text[i + static_cast<std::size_t>(j)];
            if (c == '=' && last && j >= 2) {
                v[static_cast<std::size_t>(j)] = 0;
                ++pad;
                continue;
            }
            if (pad > 0) {
                return std::nullopt;  // data after padding
            }
            v[static_cast<std::size_t>(j)] = b64_value(c);
            if (v[static_cast<std::size_t>(j)] < 0) {
                return std::nullopt;
            }
        }
        const std::uint32_t n = (static_cast<std::uint32_t>(v[0]) << 18) |
                                (static_cast<std::uint32_t>(v[1]) << 12) |
                                (static_cast<std::uint32_t>(v[2]) << 6) |
                                static_cast<std::uint32_t>(v[3]);
        // Canonical: the bits padding leaves unused are zero.
        if ((pad == 1 && (n & 0xff) != 0) || (pad == 2 && (n & 0xffff) != 0)) {
            return std::nullopt;
        }
        out += static_cast<char>((n >> 16) & 0xff);
        if (pad < 2) {
            out += static_cast<char>((n >> 8) & 0xff);
        }
        if (pad < 1) {
            out += static_cast<char>(n & 0xff);
        }
    }
    if (out.size() > max_out) {
        return std::nullopt;
    }
    return out;
}

std::string range_end_of(std::string_view prefix) {
    std::string end(prefix);
    while (!end.empty()) {
        auto& c = end.back();
        if (static_cast<unsigned char>(c) < 0xff) {
            c = static_cast<char>(static_cast<unsigned char>(c) + 1);
            return end;
        }
        end.pop_back();
    }
    return std::string(1, '\0');  // every key
}

std::string put_body(std::string_view key, std::string_view value, std::int64_t lease) {
    json::object o{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
    if (lease != 0) {
        o["lease"] = num(lease);
    }
    return json::serialize(o);
}

std::string range_body(std::string_view key, std::string_view range_end, std::int64_t revision,
                       std::int64_t limit) {
    json::object o{{"key", base64_encode(key)}};
    if (!range_end.empty()) {
        o["range_end"] = base64_encode(range_end);
    }
    if (revision > 0) {
        o["revision"] = num(revision);
    }
    if (limit > 0) {
        o["limit"] = num(limit);
    }
    return json::serialize(o);
}

std::string lease_grant_body(std::int64_t ttl_seconds) {
    return json::serialize(json::object{{"TTL", num(ttl_seconds)}});
}

std::string lease_keepalive_body(std::int64_t id) {
    return json::serialize(json::object{{"ID", num(id)}});
}

std::string lease_revoke_body(std::int64_t id) {
    return json::serialize(json::object{{"ID", num(id)}});
}

std::string watch_create_body(std::string_view key, std::string_view range_end,
                              std::int64_t start_revision) {
    json::object c{{"key", base64_encode(key)},
                   {"range_end", base64_encode(range_end)},
                   {"progress_notify", true}};
    if (start_revision > 0) {
        c["start_revision"] = num(start_revision);
    }
    return json::serialize(json::object{{"create_request", std::move(c)}});
}

std::string txn_body(const std::vector<txn_compare>& compare, const std::vector<txn_op>& success) {
    json::array cmp;
    for (const auto& c : compare) {
        cmp.push_back(json::object{{"key", base64_encode(c.key)},
                                   {"target", "CREATE"},
                                   {"result", "EQUAL"},
                                   {"create_revision", num(c.create_revision)}});
    }
    json::array ops;
    for (const auto& op : success) {
        if (op.is_delete) {
            ops.push_back(json::object{
                {"request_delete_range", json::object{{"key", base64_encode(op.key)}}}});
            continue;
        }
        json::object put{{"key", base64_encode(op.key)}, {"value", base64_encode(op.value)}};
        if (op.lease != 0) {
            put["lease"] = num(op.lease);
        }
        ops.push_back(json::object{{"request_put", std::move(put)}});
    }
    return json::serialize(json::object{{"compare", std::move(cmp)}, {"success", std::move(ops)}});
}

bool parse_put(std::string_view body, header& h, std::string& error) {
    json::object o;
    return parse_object(body, o, error) && parse_header(o, h, error);
}

bool parse_range(std::string_view body, header& h, std::vector<key_value>& kvs, bool& more,
                 std::string& error) {
    json::object o;
    if (!parse_object(body, o, error) || !parse_header(o, h, error) ||
        !read_bool(o, "more", more, error)) {
        return false;
    }
    kvs.clear();
    const auto* list = o.if_contains("kvs");
    if (list == nullptr) {
        return true;
    }
    if (!list->is_array() || list->as_array().size() > max_kvs_per_answer) {
        error = "etcd: kvs is not a list of at most " + std::to_string(max_kvs_per_answer);
        return false;
    }
    for (const auto& v : list->as_array()) {
        key_value kv;
        if (!parse_kv(v, kv, error)) {
            return false;
        }
        kvs.push_back(std::move(kv));
    }
    return true;
}

bool parse_txn(std::string_view body, header& h, bool& succeeded, std::string& error) {
    json::object o;
    return parse_object(body, o, error) && parse_header(o, h, error) &&
           read_bool(o, "succeeded", succeeded, error);
}

bool parse_lease_grant(std::string_view body, std::int64_t& id, std::int64_t& ttl,
                       std::string& error) {
    json::object o;
    if (!parse_object(body, o, error) || !read_int(o, "ID", id, error) ||
        !read_int(o, "TTL", ttl, error)) {
        return false;
    }
    if (id <= 0 || ttl <= 0) {
        error = "etcd: a lease grant without an ID or TTL";
        return false;
    }
    return true;
}

bool parse_time_to_live(std::string_view body, std::int64_t& ttl, std::string& error) {
    json::object o;
    return parse_object(body, o, error) && read_int(o, "TTL", ttl, error);
}

bool parse_keepalive(std::string_view body, std::int64_t& id, std::int64_t& ttl,
                     std::string& error) {
    // Streamed: the first message of the body, up to its new line.
    const auto nl = body.find('\n');
    json::object o;
    if (!parse_object(body.substr(0, nl), o, error)) {
        return false;
    }
    const auto* r = o.if_contains("result");
    if (r == nullptr || !r->is_object()) {
        error = "etcd: a keepalive answer without a result";
        return false;
    }
    return read_int(r->as_object(), "ID", id, error) && read_int(r->as_object(), "TTL", ttl, error);
}

bool parse_watch_message(std::string_view text, watch_message& out, std::string& error) {
    out = watch_message{};
    json::object o;
    if (!parse_object(text, o, error)) {
        return false;
    }
    const auto* r = o.if_contains("result");
    if (r == nullptr || !r->is_object()) {
        error = "etcd: a watch message without a result";
        return false;
    }
    const auto& ro = r->as_object();
    if (!parse_header(ro, out.h, error) || !read_int(ro, "watch_id", out.watch_id, error) ||
        !read_bool(ro, "created", out.created, error) ||
        !read_bool(ro, "canceled", out.canceled, error) ||
        !read_int(ro, "compact_revision", out.compact_revision, error)) {
        return false;
    }
    if (const auto* cr = ro.if_contains("cancel_reason"); cr != nullptr && cr->is_string()) {
        out.cancel_reason = std::string(cr->as_string().subview().substr(0, 512));
    }
    const auto* evs = ro.if_contains("events");
    if (evs == nullptr) {
        return true;
    }
    if (!evs->is_array() || evs->as_array().size() > max_events_per_message) {
        error = "etcd: events is not a list of at most " + std::to_string(max_events_per_message);
        return false;
    }
    for (const auto& ev : evs->as_array()) {
        if (!ev.is_object()) {
            error = "etcd: an event that is not an object";
            return false;
        }
        const auto& eo = ev.as_object();
        event e;
        if (const auto* t = eo.if_contains("type")) {
            // PUT is the enum's zero value, which the gateway leaves out.
            if (!t->is_string() || (t->as_string() != "PUT" && t->as_string() != "DELETE")) {
                error = "etcd: an event of unknown type";
                return false;
            }
            e.deleted = t->as_string() == "DELETE";
        }
        const auto* kv = eo.if_contains("kv");
        if (kv == nullptr || !parse_kv(*kv, e.kv, error)) {
            if (kv == nullptr) {
                error = "etcd: an event without kv";
            }
            return false;
        }
        out.events.push_back(std::move(e));
    }
    return true;
}

watch_stream::status watch_stream::feed(std::string_view bytes, std::vector<watch_message>& out,
                                        std::string& error) {
    if (broken_) {
        error = "etcd: the watch stream was already bad";
        return status::bad;
    }
    bool any = false;
    while (!bytes.empty()) {
        const auto nl = bytes.find('\n');
        const std::string_view piece = bytes.substr(0, nl);
        if (pending_.size() + piece.size() > max_) {
            broken_ = true;
            error = "etcd: a watch message over " + std::to_string(max_) + " bytes";
            return status::bad;
        }
        if (nl == std::string_view::npos) {
            pending_.append(piece);
            break;
        }
        bytes.remove_prefix(nl + 1);
        std::string_view text = piece;
        if (!pending_.empty()) {
            pending_.append(piece);
            text = pending_;
        }
        // Blank lines (and a CR before the LF) carry nothing.
        while (!text.empty() && (text.back() == '\r' || text.back() == ' ')) {
            text.remove_suffix(1);
        }
        if (!text.empty()) {
            watch_message m;
            if (!parse_watch_message(text, m, error)) {
                broken_ = true;
                pending_.clear();
                return status::bad;
            }
            out.push_back(std::move(m));
            any = true;
        }
        pending_.clear();
    }
    return any ? status::good : status::need_more;
}

}  // namespace cordon::proxy::control::etcd
