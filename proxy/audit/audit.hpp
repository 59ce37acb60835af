#pragma once
// The audit log: events built field by field with secrets redacted, serialised as JSON lines,
// and the sinks they go to (daily files written by a background thread, or memory in tests).

#include "common/json_string.hpp"
#include "common/time.hpp"

#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace cordon::proxy::audit {

/// The one JSON string escaper (common/json_string.hpp): quotes, control characters as
/// \u00XX, invalid UTF-8 replaced by U+FFFD.
using common::append_json_string;

/// One audit event, built field by field, serialised as one JSON line. Field order is kept;
/// `ts` and `event` always come first. Values of fields whose names look secret
/// (secret_field_name) are replaced by "REDACTED" whatever their type (empty strings and
/// nulls stay as they are); other string values pass through redact_text(), and fields
/// named url, uri, target, referer, location or ending in url/uri (proxy_url, redirect_uri)
/// through redact_url() first. String values longer than max_string_bytes (after
/// redaction) are cut and end with "...(truncated)". Strings are JSON-escaped (control
/// chars, quotes, backslash, invalid UTF-8 replaced by U+FFFD) so a hostile host name cannot
/// break a line. Adding a key again replaces its value in place; the keys "ts" and "event"
/// are reserved and adding them is ignored.
/// Not thread-safe: build it on one thread, then hand it to a sink with std::move.
class audit_record {
public:
    static constexpr std::size_t max_string_bytes = 16 * 1024;

    audit_record(std::string_view event, common::wall_clock::time_point ts);

    audit_record& add(std::string_view key, std::string_view value);
    audit_record& add(std::string_view key, const char* value);  ///< nullptr adds null
    audit_record& add(std::string_view key, std::int64_t value);
    audit_record& add(std::string_view key, std::uint64_t value);
    audit_record& add(std::string_view key, double value);  ///< NaN and infinities add null
    audit_record& add(std::string_view key, bool value);
    audit_record& add_null(std::string_view key);
    /// A value that redaction has already been through, part by part: a tool call's
    /// arguments as redact_tool_arguments() wrote them (every member name and string passed
    /// redact_text(), secret-named members replaced), which a second redact_text() over the
    /// JSON text would only scan again. Cut and escaped as any value; "REDACTED" under a
    /// secret-looking key.
    audit_record& add_redacted(std::string_view key, std::string_view value);
    /// A value cordon formatted itself from parsed numbers (an address, "address:port", a
    /// list of addresses): no bytes of anyone's choosing, so nothing redaction could find.
    /// As add_redacted; the point is the saving (a client's port is new on every connection,
    /// so redaction's per-thread cache of clean values never hits it).
    audit_record& add_formatted(std::string_view key, std::string_view value) {
        return add_redacted(key, value);
    }
    /// Milliseconds to the microsecond ("0.043", "12.5", "7"): shortest-round-trip double
    /// formatting costs about a thousand instructions and prints digits no clock has.
    /// Negative, NaN and infinite values add null.
    audit_record& add_millis(std::string_view key, double ms);
    /// A field whose name looks secret but whose value only names a secret (the credential
    /// broker's `credential`: the secret's name in the policy, never its value): kept, though
    /// still run through redact_text().
    audit_record& add_name_of_secret(std::string_view key, std::string_view name);

    /// Other integer types (int, unsigned, long long, ...) go to the 64-bit overloads, so
    /// `add("port", 443)` is not ambiguous.
    template <std::integral T>
    requires(!std::same_as<T, bool> && !std::same_as<T, char> && !std::same_as<T, std::int64_t> &&
             !std::same_as<T, std::uint64_t>) audit_record& add(std::string_view key, T value) {
        if constexpr (std::is_signed_v<T>) {
            return add(key, static_cast<std::int64_t>(value));
        } else {
            return add(key, static_cast<std::uint64_t>(value));
        }
    }

    /// `{"ts":"2026-11-29T15:20:18.123Z","event":"conn.open",...}` and a '\n'. `ts` is
    /// RFC 3339 UTC with milliseconds.
    std::string to_json_line() const;
    /// Appends to_json_line() to `out` (the audit writer builds a batch in one buffer).
    void append_json_line(std::string& out) const;

    const std::string& event() const noexcept { return event_; }
    common::wall_clock::time_point ts() const noexcept { return ts_; }
    /// Number of fields besides ts and event.
    std::size_t size() const noexcept { return count_; }

private:
    // A field is serialised as it is added: begin_field appends `,"key":` to body_ (npos for
    // the reserved keys), the caller appends the value, end_field moves it into the place
    // of an earlier field of the same key, if any.
    std::size_t begin_field(std::string_view key);
    audit_record& end_field(std::size_t at);
    // Stores `json` (an already serialised JSON value) under `key`.
    audit_record& put(std::string_view key, std::string_view json);
    // The same, or "REDACTED" when the key looks secret.
    audit_record& put_unless_secret(std::string_view key, std::string_view json);

    std::string event_;
    common::wall_clock::time_point ts_;
    // Where field i begins in body_: the first ones inline, no allocation for them.
    std::uint32_t& start(std::size_t i) {
        return i < inline_starts ? starts_[i] : more_starts_[i - inline_starts];
    }

    static constexpr std::size_t inline_starts = 16;
    std::string body_;  // `,"key":value` for each field, in order
    std::size_t count_ = 0;
    // One bit per key hash (of 64) for the keys added so far: a key whose bit is clear is
    // new, and end_field skips the search for an earlier field of the same key.
    std::uint64_t key_bits_ = 0;
    // The field begin_field opened: its `,"key":` length, its key's bit and meaning.
    std::size_t pending_prefix_ = 0;
    std::uint64_t pending_bit_ = 0;
    bool pending_secret_ = false;
    bool pending_url_ = false;
    std::uint32_t starts_[inline_starts] = {};
    std::vector<std::uint32_t> more_starts_;
};

/// True for the events the audit log never drops however long the disk fails: kills,
/// revives, session and token-revocation records (kill.network, kill.session, revive,
/// session.*, token.revoke). They are rare (admin calls), and an investigation starts there.
bool audit_must_keep(std::string_view event) noexcept;

/// Where audit records go. Implementations: the file log below, and a fake in tests.
class audit_sink {
public:
    virtual ~audit_sink() = default;
    /// Queues a record; never blocks the caller on disk I/O. Returns false when the log is
    /// unhealthy (then the daemon fails closed: it denies new connections).
    virtual bool write(audit_record&& r) = 0;
    /// True while records are being written successfully.
    virtual bool healthy() const noexcept = 0;
};

struct audit_options {
    /// audit.path; created if missing (0750, like mkdir -p).
    std::string dir;
    /// Files of days before today - retention_days are deleted; <= 0 keeps every file.
    int retention_days = 90;
    /// Records waiting; beyond it write() returns false and counts a drop. The records
    /// audit_must_keep() names are queued whatever the backlog, and not counted here.
    std::size_t max_queue = 65536;
    /// How long stop() keeps retrying a failing disk before what is still queued is lost
    /// (counted as dropped; the must-keep ones are handed to lost_records()).
    std::chrono::milliseconds stop_retry{2000};
    /// How long a record may wait before it is written and synced (at least 1 ms).
    std::chrono::milliseconds flush_interval{200};
    /// audit.max_file_bytes: a day's file continues in its next part (audit_files.hpp)
    /// rather than grow past this. A line is never split; a single line longer than this
    /// gets a part of its own.
    std::uint64_t max_file_bytes = 256ull * 1024 * 1024;
};

/// JSON-lines files `cordon-YYYY-MM-DD.jsonl` (UTC day of each record's ts) under `dir`,
/// continued in `cordon-YYYY-MM-DD.pNNNN.jsonl` parts when a file would outgrow
/// max_file_bytes (audit_files.hpp); after a restart the last part of the day is continued.
/// Written by one background thread: every flush_interval (or sooner when the queue is half
/// full, or on flush()) it takes all queued records, appends them with write(2) and
/// fdatasync()s the file. Files are opened O_RDWR|O_APPEND|O_CLOEXEC|O_NOFOLLOW with mode
/// 0640; a file whose last line was cut (a crash) gets a '\n' before new lines. Audit files
/// (every part) of days before today - retention_days are deleted by open() and whenever the
/// UTC day changes; no other file is touched.
/// If a directory creation, open, write or fdatasync fails: healthy() turns false,
/// write_errors() counts it, `on_error` is called (on the writer thread, or in stop() for the
/// final fdatasync; without locks held; it must not call flush() or stop(); while the disk
/// stays broken it comes once per retry), the bytes of the failed batch are truncated away and
/// its records are queued again (after a failed fdatasync the lines stay and are not written
/// again); a write that fails part way (a full disk) keeps the whole lines it wrote and
/// queues only the rest, so a backlog drains into what space there is. The writer retries
/// every flush_interval (also with an empty queue, by opening today's file) and turns
/// healthy again when that succeeds. Records that cannot be queued again (queue full) or
/// are still queued when stop() gives up (after retrying for stop_retry) count as dropped;
/// kills, revives and session records are never dropped from the queue (audit_must_keep),
/// only lost at stop, and then kept for lost_records().
/// Thread-safe: every member may be called from any thread.
class audit_log final : public audit_sink {
public:
    using error_fn = std::function<void(const std::string& error)>;

    /// Starts the writer thread. Does not touch the disk: call open().
    explicit audit_log(audit_options opts, error_fn on_error = {});
    ~audit_log() override;  ///< stop()
    audit_log(const audit_log&) = delete;
    audit_log& operator=(const audit_log&) = delete;

    /// Creates the directory, prunes old files and opens today's file now; returns false and
    /// sets `error` if it cannot (the daemon refuses to start then). Does not call on_error.
    bool open(std::string& error);
    /// Queues `r`. Returns false (r is still queued, for a retry) while unhealthy; returns
    /// false and drops `r` when the queue is full or the log is stopped.
    bool write(audit_record&& r) override;
    bool healthy() const noexcept override;
    /// Blocks until everything queued before the call has been written and fdatasync()ed;
    /// returns false if that attempt failed (the records stay queued) or the log is stopped
    /// with records lost.
    bool flush();
    /// flush() that gives up after `timeout` (then returns false; the records stay queued
    /// and are written by the next pass).
    bool flush_for(std::chrono::milliseconds timeout);
    /// Queues `r` and waits (up to `timeout`) until it and everything queued before it are
    /// written and fdatasync()ed: for the records of kills and revocations, which must be on
    /// disk when the call that made them returns. False if that did not happen in time.
    bool write_durable(audit_record&& r, std::chrono::milliseconds timeout);
    /// Writes what is queued (one attempt), then stops the thread and closes the file.
    /// Idempotent; concurrent callers all return once it is done.
    void stop();
    std::uint64_t write_errors() const noexcept;
    std::uint64_t dropped() const noexcept;

    /// Rewrites the bytes of a serialised line, `text` from `from` on, before it is
    /// written (or kept for lost_records()): the daemon's hides the credential broker's
    /// secret values, which no record may carry whatever field an agent put them in
    /// (docs/inspect.md). Runs on the writer thread, and on a caller's in write() and
    /// stop(); it must be thread-safe.
    using line_filter = std::function<void(std::string& text, std::size_t from)>;
    /// Replaces the filter (nullptr: none) for lines built from now on.
    void set_line_filter(std::shared_ptr<const line_filter> f);
    /// The JSON lines (with '\n') of the audit_must_keep() records that stop() could not
    /// write (or that came after it): the daemon prints them to stderr, the last place left.
    std::vector<std::string> lost_records() const;

private:
    void run();
    bool write_batch(std::deque<audit_record>& batch, std::string& error);
    bool ensure_open(std::int64_t day, std::string& error);
    bool open_part(std::int64_t day, unsigned part, std::string& error);
    unsigned last_part(std::int64_t day) const;
    /// Writes `bytes` (whole lines) at the end of the file. On failure the whole lines that
    /// made it are kept (synced; `kept_lines` of them) and a cut one is taken back.
    bool append(std::string_view bytes, std::string& error, std::size_t& kept_lines);
    bool sync_and_close(std::string& error);
    void prune(std::int64_t today);
    void requeue(std::deque<audit_record>&& failed);

    const audit_options opts_;
    const error_fn on_error_;

    // Queue state, guarded by mutex_.
    mutable std::mutex mutex_;
    std::condition_variable wake_;  // the writer waits here
    std::condition_variable done_;  // flush() waits here
    std::deque<audit_record> queue_;
    std::size_t must_keep_queued_ = 0;  // records of queue_ that audit_must_keep()
    bool stopping_ = false;
    bool wake_requested_ = false;
    bool writer_exited_ = false;
    bool last_pass_ok_ = true;
    std::uint64_t flush_requested_ = 0;
    std::uint64_t flush_done_ = 0;
    std::chrono::steady_clock::time_point stop_deadline_{};
    std::vector<std::string> lost_lines_;

    // File state, guarded by io_mutex_ (taken before mutex_ when both are needed).
    std::mutex io_mutex_;
    int fd_ = -1;
    std::int64_t fd_day_ = 0;
    unsigned fd_part_ = 0;
    std::uint64_t fd_size_ = 0;  // bytes in the open file
    std::string fd_path_;
    std::int64_t pruned_day_;

    std::atomic<std::shared_ptr<const line_filter>> filter_;
    // One line of `r` for lost_lines_, through the filter.
    std::string filtered_line(const audit_record& r) const;

    std::atomic<bool> healthy_{true};
    std::atomic<std::uint64_t> write_errors_{0};
    std::atomic<std::uint64_t> dropped_{0};
    std::once_flag stop_once_;
    std::thread writer_;  // last: starts after everything above is built
};

/// In-memory sink for tests: keeps the lines (without their '\n') of the records written
/// while healthy; while unhealthy, write() keeps nothing and returns false.
/// Thread-safe.
class memory_audit_sink final : public audit_sink {
public:
    bool write(audit_record&& r) override;
    bool healthy() const noexcept override;
    std::vector<std::string> lines() const;
    void set_healthy(bool healthy) noexcept;
    void clear();

private:
    mutable std::mutex mutex_;
    std::vector<std::string> lines_;
    std::atomic<bool> healthy_{true};
};

}  // namespace cordon::proxy::audit
