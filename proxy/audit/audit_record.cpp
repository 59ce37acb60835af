// The audit record: one event's fields as a JSON line, secrets redacted and long values cut.
#include "proxy/audit/audit.hpp"

#include "common/time.hpp"
#include "proxy/audit/redact.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace cordon::proxy::audit {
namespace {

constexpr std::string_view truncated_suffix = "...(truncated)";

// The value of a secret field that is not a string (a number, a flag): `redacted`
// (redact.hpp) as a JSON string. String values get `redacted` through append_json_string.
constexpr std::string_view redacted_json = "\"REDACTED\"";
static_assert(redacted_json.substr(1, redacted_json.size() - 2) == redacted);

bool url_key(std::string_view key) {
    std::string k;
    for (const char c : key) {
        if (c != '-' && c != '_' && c != '.') {
            k.push_back((c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c);
        }
    }
    return k == "target" || k == "referer" || k == "referrer" || k == "location" ||
           k.ends_with("url") || k.ends_with("uri");
}

// Cuts `s` to at most `max` bytes (not inside a UTF-8 sequence) and marks the cut.
void truncate_value(std::string& s, std::size_t max) {
    if (s.size() <= max) {
        return;
    }
    std::size_t cut = max - truncated_suffix.size();
    for (int k = 0; k < 3 && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80; ++k) {
        --cut;
    }
    s.resize(cut);
    s.append(truncated_suffix);
}

// FNV-1a: short keys, a few instructions a byte.
std::uint64_t key_hash(std::string_view s) noexcept {
    std::uint64_t h = 14695981039346656037ULL;
    for (const char c : s) {
        h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    }
    return h;
}

// What a field name means, derived once per thread: field names are a small fixed set
// (written in the code), and deriving this per field was most of a record's cost.
struct key_info {
    std::string key;
    std::string prefix;     // `,"key":` as serialised
    bool secret = false;    // secret_field_name: any value is REDACTED
    bool url = false;       // url_key: string values go through redact_url first
    std::uint64_t bit = 0;  // of audit_record::key_bits_
    bool used = false;
};

// Per thread, open addressing: a key keeps its slot (two keys of one record never evict
// each other), a hit costs a hash and a compare or two. The reference is valid until the
// next call on this thread.
const key_info& info_of(std::string_view key) {
    constexpr std::size_t slots = 256;
    constexpr std::size_t probes = 8;
    thread_local std::array<key_info, slots> memo;
    constexpr std::size_t max_key = 64;  // longer keys (from event payloads) are not kept
    thread_local key_info overflow;      // a key that finds no slot is derived each time
    const std::uint64_t h = key_hash(key);
    key_info* free_slot = nullptr;
    for (std::size_t p = 0; p < probes && key.size() <= max_key; ++p) {
        key_info& e = memo[(h + p) % slots];
        if (!e.used) {
            free_slot = &e;
            break;
        }
        if (e.key == key) {
            return e;
        }
    }
    key_info& e = free_slot != nullptr ? *free_slot : overflow;
    e.key.assign(key);
    e.prefix.assign(",");
    common::append_json_string(e.prefix, key);
    e.prefix.push_back(':');
    e.secret = secret_field_name(key);
    e.url = url_key(key);
    e.bit = std::uint64_t{1} << ((h >> 32) % 64);
    e.used = true;
    return e;
}

}  // namespace

// --- audit_record ---------------------------------------------------------------------------

audit_record::audit_record(std::string_view event, common::wall_clock::time_point ts)
    : event_(event), ts_(ts) {
    body_.reserve(320);
}

std::size_t audit_record::begin_field(std::string_view key) {
    if (key == "ts" || key == "event") {
        return std::string::npos;
    }
    const key_info& k = info_of(key);
    const std::size_t at = body_.size();
    body_.append(k.prefix);
    pending_prefix_ = k.prefix.size();
    pending_bit_ = k.bit;
    pending_secret_ = k.secret;
    pending_url_ = k.url;
    return at;
}

audit_record& audit_record::end_field(std::size_t at) {
    if (at == std::string::npos) {
        return *this;
    }
    // The new field's `,"key":`, as begin_field wrote it. A key whose bit was clear is new;
    // otherwise an earlier field with the same prefix has the same key.
    const std::string_view fresh(body_.data() + at, pending_prefix_);
    const bool maybe_seen = (key_bits_ & pending_bit_) != 0;
    key_bits_ |= pending_bit_;
    for (std::size_t i = 0; maybe_seen && i < count_; ++i) {
        const std::size_t s = start(i);
        if (std::string_view(body_).substr(s, fresh.size()) != fresh) {
            continue;
        }
        const std::size_t end = i + 1 < count_ ? start(i + 1) : at;
        const std::string field = body_.substr(at);
        body_.resize(at);
        body_.replace(s, end - s, field);
        for (std::size_t k = i + 1; k < count_; ++k) {
            start(k) = static_cast<std::uint32_t>(start(k) + field.size() - (end - s));
        }
        return *this;
    }
    if (count_ < inline_starts) {
        starts_[count_] = static_cast<std::uint32_t>(at);
    } else {
        more_starts_.push_back(static_cast<std::uint32_t>(at));
    }
    ++count_;
    return *this;
}

audit_record& audit_record::put(std::string_view key, std::string_view json) {
    const std::size_t at = begin_field(key);
    if (at != std::string::npos) {
        body_.append(json);
    }
    return end_field(at);
}

audit_record& audit_record::put_unless_secret(std::string_view key, std::string_view json) {
    const std::size_t at = begin_field(key);
    if (at != std::string::npos) {
        body_.append(pending_secret_ ? redacted_json : json);
    }
    return end_field(at);
}

namespace {

// Short values redaction leaves as they are, per thread (direct-mapped by hash): the same
// job, client, target, method and address come back on every request of a connection, and
// scanning them for secrets again each time is most of an audit record's cost. Only values
// redaction did not change are kept, so nothing here is more secret than the log itself.
class clean_values {
public:
    static constexpr std::size_t max_value = 128;
    bool known(std::string_view v, bool url) const {
        const auto& e = slots_[index(v, url)];
        return e.used && e.url == url && e.value == v;
    }
    void remember(std::string_view v, bool url) {
        auto& e = slots_[index(v, url)];
        e.value.assign(v);
        e.url = url;
        e.used = true;
    }

private:
    static std::size_t index(std::string_view v, bool url) {
        return (std::hash<std::string_view>{}(v) + (url ? 1 : 0)) % slot_count;
    }
    // Enough for the values of a worker's usual connections (each client's address is one)
    // without eviction thrashing; values up to 15 bytes live inside their slot.
    static constexpr std::size_t slot_count = 1024;
    struct entry {
        std::string value;
        bool url = false;
        bool used = false;
    };
    std::array<entry, slot_count> slots_;
};

}  // namespace

audit_record& audit_record::add(std::string_view key, std::string_view value) {
    const std::size_t at = begin_field(key);
    if (at == std::string::npos) {
        return *this;
    }
    const bool url = pending_url_;
    if (pending_secret_) {
        common::append_json_string(body_, value.empty() ? std::string_view{} : redacted);
        return end_field(at);
    }
    thread_local clean_values clean_cache;
    const bool short_value = value.size() <= clean_values::max_value;
    if (short_value && clean_cache.known(value, url)) {
        common::append_json_string(body_, value);
        return end_field(at);
    }
    std::string clean = url ? redact_text(redact_url(value)) : redact_text(value);
    if (short_value && clean == value) {
        clean_cache.remember(value, url);
    }
    truncate_value(clean, max_string_bytes);
    common::append_json_string(body_, clean);
    return end_field(at);
}

audit_record& audit_record::add_redacted(std::string_view key, std::string_view value) {
    const std::size_t at = begin_field(key);
    if (at == std::string::npos) {
        return *this;
    }
    if (pending_secret_) {
        common::append_json_string(body_, value.empty() ? std::string_view{} : redacted);
        return end_field(at);
    }
    if (value.size() <= max_string_bytes) {
        common::append_json_string(body_, value);
        return end_field(at);
    }
    std::string clean(value);
    truncate_value(clean, max_string_bytes);
    common::append_json_string(body_, clean);
    return end_field(at);
}

audit_record& audit_record::add_name_of_secret(std::string_view key, std::string_view name) {
    const std::size_t at = begin_field(key);
    if (at == std::string::npos) {
        return *this;
    }
    std::string clean = redact_text(name);
    truncate_value(clean, max_string_bytes);
    common::append_json_string(body_, clean);
    return end_field(at);
}

audit_record& audit_record::add(std::string_view key, const char* value) {
    if (value == nullptr) {
        return add_null(key);
    }
    return add(key, std::string_view(value));
}

namespace {

template <class T>
std::string_view integer_text(char (&buf)[32], T value) {
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
    (void)ec;  // 32 bytes hold any 64-bit integer
    return std::string_view(buf, static_cast<std::size_t>(end - buf));
}

}  // namespace

audit_record& audit_record::add(std::string_view key, std::int64_t value) {
    char buf[32];
    return put_unless_secret(key, integer_text(buf, value));
}

audit_record& audit_record::add(std::string_view key, std::uint64_t value) {
    char buf[32];
    return put_unless_secret(key, integer_text(buf, value));
}

audit_record& audit_record::add(std::string_view key, double value) {
    if (!std::isfinite(value)) {
        return put_unless_secret(key, "null");
    }
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
    if (ec != std::errc{}) {
        return put_unless_secret(key, "null");  // cannot happen: 64 bytes hold any double
    }
    return put_unless_secret(key, std::string_view(buf, static_cast<std::size_t>(end - buf)));
}

audit_record& audit_record::add_millis(std::string_view key, double ms) {
    // 1e12 ms is 30 years: beyond it (or negative, NaN) nothing a timer measured.
    if (!(ms >= 0 && ms < 1e12)) {
        return put_unless_secret(key, "null");
    }
    const auto us = static_cast<std::uint64_t>(std::llround(ms * 1000));
    char buf[32];
    char* end = std::to_chars(buf, buf + 24, us / 1000).ptr;
    if (std::uint64_t frac = us % 1000; frac != 0) {
        *end++ = '.';
        for (int d = 100; d > 0 && frac != 0; d /= 10) {
            *end++ = static_cast<char>('0' + frac / static_cast<std::uint64_t>(d));
            frac %= static_cast<std::uint64_t>(d);
        }
    }
    return put_unless_secret(key, std::string_view(buf, static_cast<std::size_t>(end - buf)));
}

audit_record& audit_record::add(std::string_view key, bool value) {
    return put_unless_secret(key, value ? "true" : "false");
}

audit_record& audit_record::add_null(std::string_view key) { return put(key, "null"); }

void audit_record::append_json_line(std::string& out) const {
    out.append("{\"ts\":\"");
    common::append_rfc3339(out, ts_);
    out.append("\",\"event\":");
    common::append_json_string(out, event_);
    out.append(body_);
    out.append("}\n");
}

std::string audit_record::to_json_line() const {
    std::string out;
    out.reserve(body_.size() + event_.size() + 48);
    append_json_line(out);
    return out;
}

}  // namespace cordon::proxy::audit
