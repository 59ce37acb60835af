#pragma once
// RAII for SQLite: a prepared statement, a reset guard and a connection, and result-code helpers.

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/control/tokens.hpp"

/// Every raw sqlite3 call of the state store is in these classes.
namespace cordon::proxy::control::sqlite {

/// One prepared statement. Binds record their first failure, which step() then returns, so a
/// sequence of binds is checked once. reset() also clears the bindings, so bound text is never
/// referenced after the caller's strings are gone (they are bound without a copy).
class statement {
public:
    statement() = default;
    ~statement() { sqlite3_finalize(stmt_); }
    statement(const statement&) = delete;
    statement& operator=(const statement&) = delete;

    int prepare(sqlite3* db, std::string_view sql, bool persistent) {
        sqlite3_finalize(stmt_);
        stmt_ = nullptr;
        return sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                  persistent ? SQLITE_PREPARE_PERSISTENT : 0, &stmt_, nullptr);
    }

    void bind(int i, std::int64_t v) { note(sqlite3_bind_int64(stmt_, i, v)); }
    void bind(int i, std::string_view v) {
        // A null pointer would bind SQL NULL; the empty string is "".
        note(sqlite3_bind_text64(stmt_, i, v.empty() ? "" : v.data(), v.size(), nullptr,
                                 SQLITE_UTF8));
    }
    void bind_blob(int i, const void* data, std::size_t size) {
        note(sqlite3_bind_blob64(stmt_, i, data, size, nullptr));
    }

    /// SQLITE_ROW, SQLITE_DONE, or an error code (a failed bind included).
    int step() { return bind_rc_ != SQLITE_OK ? bind_rc_ : sqlite3_step(stmt_); }

    void reset() {
        sqlite3_reset(stmt_);  // its code repeats the step's, already handled
        sqlite3_clear_bindings(stmt_);
        bind_rc_ = SQLITE_OK;
    }

    std::int64_t integer(int col) const { return sqlite3_column_int64(stmt_, col); }
    bool is_integer(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_INTEGER; }
    std::string text(int col) const {
        const auto* p = sqlite3_column_text(stmt_, col);
        const int n = sqlite3_column_bytes(stmt_, col);
        return p == nullptr
                   ? std::string()
                   : std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
    }
    /// False unless the column is a blob of exactly out.size() bytes.
    bool hash(int col, secret_hash& out) const {
        if (sqlite3_column_type(stmt_, col) != SQLITE_BLOB) {
            return false;
        }
        const void* p = sqlite3_column_blob(stmt_, col);
        if (p == nullptr || sqlite3_column_bytes(stmt_, col) != static_cast<int>(out.size())) {
            return false;
        }
        std::memcpy(out.data(), p, out.size());
        return true;
    }

private:
    void note(int rc) {
        if (bind_rc_ == SQLITE_OK && rc != SQLITE_OK) {
            bind_rc_ = rc;
        }
    }

    sqlite3_stmt* stmt_ = nullptr;
    int bind_rc_ = SQLITE_OK;
};

/// Resets a statement when the scope ends, whatever the path: a statement left mid-step would
/// hold a read transaction and keep the WAL from being checkpointed.
class reset_on_exit {
public:
    explicit reset_on_exit(statement& s) : s_(s) {}
    ~reset_on_exit() { s_.reset(); }
    reset_on_exit(const reset_on_exit&) = delete;
    reset_on_exit& operator=(const reset_on_exit&) = delete;

private:
    statement& s_;
};

/// One connection, closed on destruction.
class connection {
public:
    connection() = default;
    ~connection() { sqlite3_close_v2(db_); }
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    /// Opens an existing file (never creates one), with extended result codes.
    int open(const std::string& path) {
        sqlite3_close_v2(db_);
        db_ = nullptr;
        return sqlite3_open_v2(path.c_str(), &db_,
                               SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
                               nullptr);
    }
    /// Closes now; SQLITE_OK or the reason it could not (statements must be finalized first).
    int close() {
        const int rc = sqlite3_close(db_);
        if (rc == SQLITE_OK) {
            db_ = nullptr;
        }
        return rc;
    }

    sqlite3* get() const noexcept { return db_; }

    /// "message (code N)" for the last error on this connection, or the generic text of `rc`.
    std::string message(int rc) const {
        const char* msg = db_ != nullptr && sqlite3_extended_errcode(db_) == rc
                              ? sqlite3_errmsg(db_)
                              : sqlite3_errstr(rc);
        return std::string(msg) + " (code " + std::to_string(rc) + ")";
    }

    int busy_timeout(int ms) { return sqlite3_busy_timeout(db_, ms); }
    /// Whether closing the connection may checkpoint the WAL into the database file.
    int checkpoint_on_close(bool on) {
        return sqlite3_db_config(db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, on ? 0 : 1, nullptr);
    }
    /// Runs statements that take no parameters and return no rows (the schema).
    int exec(const char* sql) { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr); }
    std::int64_t last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
    bool in_transaction() const { return sqlite3_get_autocommit(db_) == 0; }

private:
    sqlite3* db_ = nullptr;
};

/// Runs `sql` once and collects the first column of every row as text.
int query_column(connection& db, std::string_view sql, std::vector<std::string>& rows);

/// True for the result codes that mean the file's content is damaged.
bool is_damage(int rc);

}  // namespace cordon::proxy::control::sqlite
