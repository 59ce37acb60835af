#pragma once
// One request's audit trail, by construction: conn.open when it is connected, then exactly
// one terminal record - conn.deny or conn.error before an open, conn.close after one. A
// request that ends without saying how (a kill during connect, a client gone before the
// answer) gets its terminal record from the destructor.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/decide.hpp"
#include "proxy/audit/audit.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy::data {

/// Where a request's records go: the runtime's audit log, or a test's list.
class record_sink {
public:
    virtual ~record_sink() = default;
    virtual audit::audit_record make(std::string_view event) = 0;
    virtual void write(audit::audit_record&& r) = 0;
};

/// The audit log of the runtime.
class runtime_sink final : public record_sink {
public:
    explicit runtime_sink(control::runtime& rt) : rt_(rt) {}
    audit::audit_record make(std::string_view event) override { return rt_.record(event); }
    void write(audit::audit_record&& r) override { rt_.audit(std::move(r)); }

private:
    control::runtime& rt_;
};

/// The records of one request. `who` (session, job, method as the connection has them when
/// a record is written) and `client` must outlive the log; `closed_by` is the connection's
/// reason for a close from outside ("" until a kill, revocation or reload closes it).
/// Movable, so an established tunnel can carry it; a moved-from log writes nothing.
/// One worker thread.
class request_log {
public:
    request_log(record_sink& sink, const control::live_connection& who, const std::string& client,
                const std::string& closed_by)
        : sink_(&sink), who_(&who), client_(&client), closed_by_(&closed_by) {}
    ~request_log() { finish(); }
    request_log(request_log&& o) noexcept;
    request_log& operator=(request_log&& o) noexcept;
    request_log(const request_log&) = delete;
    request_log& operator=(const request_log&) = delete;

    // What the records carry, filled in phase by phase.
    std::string target;  ///< "host:port" (or the raw request target when refused early)
    std::string ip;
    std::string resolved;  ///< what the name resolved to; written once (open, or a deny)
    /// A forwarded request's path, without its query (values may be secret); in conn.open
    /// and conn.deny when set.
    std::string path;
    config::deny_reason would_deny = config::deny_reason::none;
    /// How the client asked when not by HTTP: "socks5" (a static string), in every record.
    std::string_view via;
    double dns_ms = 0;
    double connect_ms = 0;
    std::uint64_t bytes_up = 0;
    std::uint64_t bytes_down = 0;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

    bool opened() const noexcept { return state_ == state::open; }
    bool ended() const noexcept { return state_ == state::ended; }

    /// conn.open, with the rule that allowed it ("" for none).
    void open(std::string_view rule);
    /// conn.deny. Terminal: after an open it is a conn.close with `reason` instead (an SNI
    /// mismatch, seen only once the tunnel is open), so a request never has both. `sni`,
    /// when given, is added.
    void deny(config::deny_reason reason, int status, std::string_view sni = {});
    /// conn.error: terminal before an open; after one, a note (the conn.close follows).
    void error(int status, std::string_view message);
    /// conn.close (terminal), when opened; else as the destructor would end it.
    void close(std::string_view reason);
    /// No record for this request (nothing was asked, the reserved host, the audit log is
    /// down). Terminal.
    void dismiss() noexcept { state_ = state::ended; }
    /// Ends the request now if it has not ended: conn.close (reason: the outside close, or
    /// "error") when opened; otherwise conn.deny with the outside close's reason, or
    /// conn.error ("closed before an answer").
    void finish();

private:
    enum class state { fresh, open, ended };
    audit::audit_record make(std::string_view event) const;
    void write_close(std::string_view reason, std::string_view sni = {});

    record_sink* sink_;
    const control::live_connection* who_;
    const std::string* client_;
    const std::string* closed_by_;
    state state_ = state::fresh;
};

}  // namespace cordon::proxy::data
