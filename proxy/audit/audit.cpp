// The audit log: the writer thread, its queue and the daily files it appends to.
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

std::int64_t day_of(common::wall_clock::time_point t) { return audit_day_of(t); }

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
            lost_lines_.push_back(filtered_line(r));
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

void audit_log::set_line_filter(std::shared_ptr<const line_filter> f) {
    filter_.store(std::move(f));
}

std::string audit_log::filtered_line(const audit_record& r) const {
    std::string line = r.to_json_line();
    if (const auto f = filter_.load()) {
        (*f)(line, 0);
    }
    return line;
}

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
        if (stop && !ok && !queue_.empty() && std::chrono::steady_clock::now() < stop_deadline_) {
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
                    lost_lines_.push_back(filtered_line(r));
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
    const auto filter = filter_.load();
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
            if (filter) {
                (*filter)(bytes, before);
            }
            const std::uint64_t would = fd_size_ + bytes.size();
            if (would > opts_.max_file_bytes && fd_size_ + before > 0 &&
                fd_part_ < max_audit_part) {
                // The file is full: write what fits, then continue in the day's next part.
                if (before > 0 && !append(std::string_view(bytes).substr(0, before), error, kept)) {
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
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
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
                [[maybe_unused]] const int cut = ::ftruncate(
                    fd_, st.st_size + static_cast<off_t>(whole.size()));
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
