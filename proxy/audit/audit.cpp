#include "proxy/audit/audit.hpp"

#include "common/time.hpp"
#include "proxy/audit/audit_files.hpp"
#include "proxy/audit/redact.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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
    for (int k = 0; k < 3 && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80;
         ++k) {
        --cut;
    }
    s.resize(cut);
    s.append(truncated_suffix);
}

std::int64_t day_of(common::wall_clock::time_point t) { return audit_day_of(t); }

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
    thread_local key_info overflow;       // a key that finds no slot is derived each time
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

std::string errno_text(const char* what, const std::string& path, int err) {
    return std::string("audit: ") + what + " " + path + ": " + std::strerror(err);
}

// mkdir -p with mode 0750 for the directories it creates.
bool make_dirs(const std::string& dir, std::string& error) {
    if (dir.empty()) {
        error = "audit: no directory configured (audit.path)";
        return false;
    }
    for (std::size_t at = 1; at <= dir.size(); ++at) {
        if (at != dir.size() && dir[at] != '/') {
            continue;
        }
        const std::string prefix = dir.substr(0, at);
        if (::mkdir(prefix.c_str(), 0750) != 0 && errno != EEXIST) {
            error = errno_text("cannot create directory", prefix, errno);
            return false;
        }
    }
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
        error = errno_text("cannot stat", dir, errno);
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        error = "audit: " + dir + " is not a directory";
        return false;
    }
    return true;
}

}  // namespace

bool audit_must_keep(std::string_view event) noexcept {
    return event == "kill.network" || event == "kill.session" || event == "revive" ||
           event.starts_with("session.") || event == "token.revoke";
}

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

// --- audit_log ------------------------------------------------------------------------------

audit_log::audit_log(audit_options opts, error_fn on_error)
    : opts_(std::move(opts)),
      on_error_(std::move(on_error)),
      pruned_day_(std::numeric_limits<std::int64_t>::min()),
      writer_([this] { run(); }) {}

audit_log::~audit_log() { stop(); }

bool audit_log::open(std::string& error) {
    std::lock_guard io(io_mutex_);
    const std::int64_t today = day_of(common::wall_clock::now());
    if (!make_dirs(opts_.dir, error)) {
        healthy_ = false;
        return false;
    }
    prune(today);
    pruned_day_ = today;
    const bool ok = ensure_open(today, error);
    healthy_ = ok;
    return ok;
}

bool audit_log::write(audit_record&& r) {
    std::lock_guard lock(mutex_);
    // Kills, revives and session records are queued whatever the backlog: they are rare
    // (admin calls) and are the record an investigation starts from.
    const bool keep = audit_must_keep(r.event());
    if (stopping_ || (!keep && queue_.size() - must_keep_queued_ >= opts_.max_queue)) {
        if (stopping_ && keep) {
            lost_lines_.push_back(r.to_json_line());
        }
        ++dropped_;
        return false;
    }
    queue_.push_back(std::move(r));
    must_keep_queued_ += keep ? 1 : 0;
    const bool ok = healthy_.load();
    // A burst fills the queue faster than the interval drains it: wake the writer early.
    // Not while unhealthy, so a broken disk is retried on the interval, not per record.
    if (ok && !wake_requested_ && queue_.size() >= std::max<std::size_t>(1, opts_.max_queue / 2)) {
        wake_requested_ = true;
        wake_.notify_one();
    }
    return ok;
}

bool audit_log::healthy() const noexcept { return healthy_.load(); }

bool audit_log::flush() { return flush_for(std::chrono::milliseconds::max()); }

bool audit_log::flush_for(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (writer_exited_) {
        return queue_.empty() && last_pass_ok_;
    }
    const std::uint64_t ticket = ++flush_requested_;
    wake_.notify_one();
    const auto done = [&] { return flush_done_ >= ticket || writer_exited_; };
    if (timeout == std::chrono::milliseconds::max()) {
        done_.wait(lock, done);
    } else if (!done_.wait_for(lock, timeout, done)) {
        return false;
    }
    return last_pass_ok_ && (flush_done_ >= ticket || queue_.empty());
}

bool audit_log::write_durable(audit_record&& r, std::chrono::milliseconds timeout) {
    if (!write(std::move(r))) {
        return false;
    }
    return flush_for(timeout);
}

void audit_log::stop() {
    std::call_once(stop_once_, [this] {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
            stop_deadline_ = std::chrono::steady_clock::now() + opts_.stop_retry;
        }
        wake_.notify_one();
        if (writer_.joinable()) {
            writer_.join();
        }
        std::lock_guard io(io_mutex_);
        std::string error;
        if (fd_ >= 0 && !sync_and_close(error)) {
            ++write_errors_;
            healthy_ = false;
            if (on_error_) {
                on_error_(error);
            }
        }
    });
}

std::uint64_t audit_log::write_errors() const noexcept { return write_errors_.load(); }

std::uint64_t audit_log::dropped() const noexcept { return dropped_.load(); }

std::vector<std::string> audit_log::lost_records() const {
    std::lock_guard lock(mutex_);
    return lost_lines_;
}

void audit_log::run() {
    const auto interval = std::max(opts_.flush_interval, std::chrono::milliseconds(1));
    std::unique_lock lock(mutex_);
    while (true) {
        wake_.wait_for(lock, interval, [this] {
            return stopping_ || wake_requested_ || flush_requested_ != flush_done_;
        });
        const bool stop = stopping_;
        const std::uint64_t ticket = flush_requested_;
        wake_requested_ = false;
        std::deque<audit_record> batch;
        batch.swap(queue_);
        must_keep_queued_ = 0;
        lock.unlock();

        std::string error;
        const bool ok = write_batch(batch, error);
        if (!ok) {
            ++write_errors_;
            healthy_ = false;
            if (on_error_) {
                on_error_(error);
            }
        }

        lock.lock();
        flush_done_ = ticket;
        last_pass_ok_ = ok;
        if (stop && !ok && !queue_.empty() &&
            std::chrono::steady_clock::now() < stop_deadline_) {
            // Stopping during an outage: keep trying, bounded, before anything is lost.
            done_.notify_all();
            lock.unlock();
            std::this_thread::sleep_for(std::min(interval, std::chrono::milliseconds(100)));
            lock.lock();
            continue;
        }
        if (stop) {
            dropped_ += queue_.size();
            for (const auto& r : queue_) {
                if (audit_must_keep(r.event())) {
                    lost_lines_.push_back(r.to_json_line());
                }
            }
            last_pass_ok_ = ok && queue_.empty();
            queue_.clear();
            writer_exited_ = true;
            done_.notify_all();
            return;
        }
        done_.notify_all();
    }
}

bool audit_log::write_batch(std::deque<audit_record>& batch, std::string& error) {
    std::lock_guard io(io_mutex_);
    const std::int64_t today = day_of(common::wall_clock::now());
    if (today != pruned_day_) {
        prune(today);
        pruned_day_ = today;
    }
    if (batch.empty()) {
        // Nothing to write; while broken, try to reopen so health can come back.
        if (!healthy_.load()) {
            std::string ignored;
            if (ensure_open(today, ignored)) {
                healthy_ = true;
            }
        }
        return true;
    }
    // Records [first, last) are in `bytes`, not yet written; those before `first` are.
    // A write that fails part way keeps the whole lines it wrote (`kept` of them): they
    // are written, and only the rest is queued again, so a backlog larger than the free
    // space drains into whatever space there is.
    std::size_t first = 0;
    std::string bytes;
    std::size_t kept = 0;
    const auto fail = [&] {
        first += kept;
        batch.erase(batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(first));
        requeue(std::move(batch));
        return false;
    };
    while (first < batch.size()) {
        const std::int64_t day = day_of(batch[first].ts());
        if (!ensure_open(day, error)) {
            return fail();
        }
        std::size_t last = first;
        bytes.clear();
        bytes.reserve((batch.size() - first) * 256);
        while (last < batch.size() && day_of(batch[last].ts()) == day) {
            // Each line is built where it goes; `before` bytes precede it.
            const std::size_t before = bytes.size();
            batch[last].append_json_line(bytes);
            const std::uint64_t would = fd_size_ + bytes.size();
            if (would > opts_.max_file_bytes && fd_size_ + before > 0 &&
                fd_part_ < max_audit_part) {
                // The file is full: write what fits, then continue in the day's next part.
                if (before > 0 &&
                    !append(std::string_view(bytes).substr(0, before), error, kept)) {
                    return fail();
                }
                first = last;
                bytes.erase(0, before);
                if (!open_part(day, fd_part_ + 1, error)) {
                    return fail();
                }
            }
            ++last;
        }
        if (!append(bytes, error, kept)) {
            return fail();
        }
        first = last;
    }
    if (::fdatasync(fd_) != 0) {
        // The lines may or may not be on disk; queueing them again could duplicate them.
        error = errno_text("cannot fdatasync", fd_path_, errno);
        ::close(fd_);
        fd_ = -1;
        return false;
    }
    healthy_ = true;
    return true;
}

bool audit_log::ensure_open(std::int64_t day, std::string& error) {
    if (fd_ >= 0 && fd_day_ == day) {
        struct stat st {};
        if (::fstat(fd_, &st) == 0 && st.st_nlink > 0) {
            return true;
        }
        ::close(fd_);  // deleted under us: open a new file
        fd_ = -1;
    }
    if (!make_dirs(opts_.dir, error)) {
        return false;
    }
    // After a restart (or a day switched back to), continue the day's last part.
    return open_part(day, last_part(day), error);
}

unsigned audit_log::last_part(std::int64_t day) const {
    std::string ignored;
    unsigned part = 0;
    for (const audit_file& f : list_audit_files(opts_.dir, ignored)) {
        if (f.id.day == day) {
            part = std::max(part, f.id.part);
        }
    }
    return part;
}

bool audit_log::open_part(std::int64_t day, unsigned part, std::string& error) {
    if (fd_ >= 0 && !sync_and_close(error)) {
        return false;
    }
    std::string path = opts_.dir;
    if (!path.ends_with('/')) {
        path.push_back('/');
    }
    path += audit_file_name(audit_file_id{day, part});
    const int fd =
        ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
    if (fd < 0) {
        error = errno_text("cannot open", path, errno);
        return false;
    }
    fd_ = fd;
    fd_day_ = day;
    fd_part_ = part;
    fd_path_ = std::move(path);
    fd_size_ = 0;
    // A line cut by a crash would swallow the next one: start on a fresh line.
    struct stat st {};
    char last = '\n';
    if (::fstat(fd_, &st) == 0) {
        fd_size_ = static_cast<std::uint64_t>(st.st_size);
        std::size_t ignored = 0;
        if (st.st_size > 0 && ::pread(fd_, &last, 1, st.st_size - 1) == 1 && last != '\n' &&
            !append("\n", error, ignored)) {
            return false;
        }
    }
    return true;
}

bool audit_log::append(std::string_view bytes, std::string& error, std::size_t& kept_lines) {
    kept_lines = 0;
    struct stat st {};
    const bool sized = ::fstat(fd_, &st) == 0;
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            error = errno_text("cannot write", fd_path_, n < 0 ? errno : EIO);
            if (sized && done > 0) {
                // Keep the whole lines written (synced), take back the cut one, so the
                // retry neither leaves a cut line nor writes a kept one again. (Should the
                // cut line stay, the next open_part() starts a fresh line after it.)
                const std::string_view whole = bytes.substr(0, bytes.rfind('\n', done - 1) + 1);
                [[maybe_unused]] const int cut =
                    ::ftruncate(fd_, st.st_size + static_cast<off_t>(whole.size()));
                if (!whole.empty()) {
                    [[maybe_unused]] const int synced = ::fdatasync(fd_);
                }
                kept_lines = static_cast<std::size_t>(std::count(whole.begin(), whole.end(), '\n'));
            }
            ::close(fd_);
            fd_ = -1;
            return false;
        }
        done += static_cast<std::size_t>(n);
    }
    fd_size_ += bytes.size();
    return true;
}

bool audit_log::sync_and_close(std::string& error) {
    bool ok = true;
    if (::fdatasync(fd_) != 0) {
        error = errno_text("cannot fdatasync", fd_path_, errno);
        ok = false;
    }
    ::close(fd_);
    fd_ = -1;
    return ok;
}

void audit_log::prune(std::int64_t today) {
    if (opts_.retention_days <= 0) {
        return;
    }
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::directory_iterator it(opts_.dir, ec);
    if (ec) {
        return;
    }
    for (; it != fs::directory_iterator(); it.increment(ec)) {
        if (ec) {
            return;
        }
        const auto id = parse_audit_file_name(it->path().filename().string());
        if (!id || id->day >= today - opts_.retention_days || (fd_ >= 0 && id->day == fd_day_)) {
            continue;
        }
        std::error_code type_ec;
        const fs::file_status st = it->symlink_status(type_ec);
        if (type_ec || (!fs::is_regular_file(st) && !fs::is_symlink(st))) {
            continue;
        }
        std::error_code remove_ec;
        fs::remove(it->path(), remove_ec);  // best effort: an old file left is no failure
    }
}

void audit_log::requeue(std::deque<audit_record>&& failed) {
    std::lock_guard lock(mutex_);
    for (auto& r : queue_) {
        failed.push_back(std::move(r));
    }
    queue_.swap(failed);
    must_keep_queued_ = 0;
    for (const auto& r : queue_) {
        must_keep_queued_ += audit_must_keep(r.event()) ? 1 : 0;
    }
    if (queue_.size() - must_keep_queued_ <= opts_.max_queue) {
        return;
    }
    // Over the bound: the newest records that may be dropped go; those that must be kept
    // (audit_must_keep) stay wherever they are.
    std::size_t room = opts_.max_queue;
    std::deque<audit_record> out;
    for (auto& r : queue_) {
        if (audit_must_keep(r.event())) {
            out.push_back(std::move(r));
        } else if (room > 0) {
            --room;
            out.push_back(std::move(r));
        } else {
            ++dropped_;
        }
    }
    queue_.swap(out);
}

// --- memory_audit_sink ----------------------------------------------------------------------

bool memory_audit_sink::write(audit_record&& r) {
    if (!healthy_.load()) {
        return false;
    }
    std::string line = r.to_json_line();
    line.pop_back();
    std::lock_guard lock(mutex_);
    lines_.push_back(std::move(line));
    return true;
}

bool memory_audit_sink::healthy() const noexcept { return healthy_.load(); }

std::vector<std::string> memory_audit_sink::lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
}

void memory_audit_sink::set_healthy(bool healthy) noexcept { healthy_ = healthy; }

void memory_audit_sink::clear() {
    std::lock_guard lock(mutex_);
    lines_.clear();
}

}  // namespace cordon::proxy::audit
