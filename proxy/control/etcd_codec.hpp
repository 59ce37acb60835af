#pragma once
// etcd's v3 JSON gateway, as bytes: the request bodies cordon sends (/v3/kv/put, range, txn,
// /v3/lease/grant, keepalive, /v3/watch) and the answers it reads, parsed and bounded. Keys and
// values are base64 in the gateway's JSON; 64-bit numbers are JSON strings. Pure: Boost.JSON,
// no sockets, no Asio. Every byte from etcd is untrusted: a malformed, oversized or unexpected
// answer is an error, never a guess.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace boost::json {
class value;
}

namespace cordon::proxy::control::etcd {

/// Bounds on what etcd may hand cordon.
inline constexpr std::size_t max_message = 8u << 20;  ///< one answer, or one watch message
inline constexpr std::size_t max_key = 1024;          ///< a decoded key
inline constexpr std::size_t max_value = 256u << 10;  ///< a decoded value
inline constexpr std::size_t max_kvs_per_answer = 100000;
inline constexpr std::size_t max_events_per_message = 100000;

/// A JSON value as a 64-bit integer (`Int`: std::int64_t or std::uint64_t): a JSON integer in
/// range, or, with `from_string`, a string of decimal digits (how the gateway writes its int64
/// and uint64 fields). nullopt for anything else (a fraction, a sign out of range, text).
template <class Int>
std::optional<Int> integer(const boost::json::value& v, bool from_string);

std::string base64_encode(std::string_view bytes);
/// nullopt unless `text` is canonical padded base64 (RFC 4648 section 4) of at most `max_out`
/// bytes.
std::optional<std::string> base64_decode(std::string_view text, std::size_t max_out);
/// The range_end that makes [prefix, range_end) every key starting with `prefix`.
std::string range_end_of(std::string_view prefix);

/// One key as etcd holds it.
struct key_value {
    std::string key;
    std::string value;
    std::int64_t create_revision = 0;
    std::int64_t mod_revision = 0;
    std::int64_t version = 0;
    std::int64_t lease = 0;
};

/// The header of every answer.
struct header {
    std::uint64_t cluster_id = 0;
    std::uint64_t member_id = 0;
    std::int64_t revision = 0;
    std::int64_t raft_term = 0;
};

/// A change a watch reports: a put (new value) or a delete (kv.key and kv.mod_revision only).
struct event {
    bool deleted = false;
    key_value kv;
};

// Request bodies.
std::string put_body(std::string_view key, std::string_view value, std::int64_t lease = 0);
/// `revision` 0: the latest; `limit` 0: no limit.
std::string range_body(std::string_view key, std::string_view range_end, std::int64_t revision = 0,
                       std::int64_t limit = 0);
std::string lease_grant_body(std::int64_t ttl_seconds);
std::string lease_keepalive_body(std::int64_t id);
std::string lease_revoke_body(std::int64_t id);
/// A watch of [key, range_end) from `start_revision` (inclusive), with progress notices.
std::string watch_create_body(std::string_view key, std::string_view range_end,
                              std::int64_t start_revision);

/// One operation of a transaction.
struct txn_op {
    bool is_delete = false;
    std::string key;
    std::string value;       ///< puts only
    std::int64_t lease = 0;  ///< puts only
};
/// A compare of a transaction: the key's create_revision equals `create_revision` (0: the key
/// does not exist).
struct txn_compare {
    std::string key;
    std::int64_t create_revision = 0;
};
std::string txn_body(const std::vector<txn_compare>& compare, const std::vector<txn_op>& success);

// Answers. Each is false, with `error` set, on anything but a well-formed answer of its kind;
// the gateway's own errors ({"error", "code", "message"}) become "etcd: MESSAGE (code N)".
bool parse_put(std::string_view body, header& h, std::string& error);
/// `more`: etcd has more keys than it returned (ask again past the last one).
bool parse_range(std::string_view body, header& h, std::vector<key_value>& kvs, bool& more,
                 std::string& error);
bool parse_txn(std::string_view body, header& h, bool& succeeded, std::string& error);
bool parse_lease_grant(std::string_view body, std::int64_t& id, std::int64_t& ttl,
                       std::string& error);
/// One keepalive answer (a stream message {"result": ...}). `ttl` 0: the lease is gone.
/// /v3/lease/timetolive's answer: the seconds left (`ttl` -1: the lease is gone).
bool parse_time_to_live(std::string_view body, std::int64_t& ttl, std::string& error);
bool parse_keepalive(std::string_view body, std::int64_t& id, std::int64_t& ttl,
                     std::string& error);

/// One message of a watch stream.
struct watch_message {
    header h;
    std::int64_t watch_id = 0;
    bool created = false;
    bool canceled = false;
    std::int64_t compact_revision = 0;  ///< non-zero: history before it is gone (reload whole)
    std::string cancel_reason;
    std::vector<event> events;
};
bool parse_watch_message(std::string_view text, watch_message& out, std::string& error);

/// The watch stream's body: JSON messages one after another, each ended by a new line (the
/// gateway's delimiter), in chunks cut anywhere. Bounded: a message over `max` bytes is bad.
class watch_stream {
public:
    enum class status { good, bad, need_more };

    explicit watch_stream(std::size_t max = max_message) : max_(max) {}

    /// Takes the next bytes of the body; every message they complete is parsed and appended to
    /// `out`. need_more: no complete message yet (or the bytes ended mid-message); good: at
    /// least one message; bad: a message that does not parse, or one over the bound (`error`
    /// says which): the stream cannot be trusted any further.
    status feed(std::string_view bytes, std::vector<watch_message>& out, std::string& error);
    /// Bytes held of a message not yet complete.
    std::size_t pending() const noexcept { return pending_.size(); }

private:
    std::size_t max_;
    std::string pending_;
    bool broken_ = false;
};

}  // namespace cordon::proxy::control::etcd
