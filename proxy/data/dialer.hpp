#pragma once
// How the data plane reaches an upstream, for CONNECT tunnels and HTTP forwarding alike:
// resolve -> classify -> connect, over one normalised target. The name lookup and the TCP
// connect sit behind small seams (`resolver`, `connector`) so tests drive the phases
// without sockets or DNS.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/asio.hpp"
#include "config/decide.hpp"
#include "config/ip.hpp"
#include "dns/resolver.hpp"
#include "proxy/control/runtime.hpp"

namespace cordon::proxy::data {

/// The upstream a request names, normalised once when the request is parsed; every later
/// phase (decide, resolve, the SNI check, the kept-alive upstream's key, the logs) reads it.
struct upstream_target {
    std::string host;  ///< as parsed from the request: what the policy decides on
    std::string name;  ///< normalised (lower case, no trailing dot): DNS and SNI compare this
    std::uint16_t port = 0;
    std::optional<config::ip_address> literal;  ///< the address, when `host` is an IP literal
    std::string text;                           ///< "host:port" as logs and answer bodies show it
    /// A SOCKS5 address target decided as the name cordon's resolver answered with it
    /// (dns/answered.hpp): `host` and `name` are that name, `literal` the address, dialled
    /// instead of resolving the name again and classified as the name's answer (resolves_to).
    bool pinned = false;

    /// "name:port": the identity of a kept-alive upstream connection.
    std::string key() const { return name + ":" + std::to_string(port); }
};

/// Normalises `host` once (config::normalise_host; a name that does not normalise keeps
/// its spelling) and notes whether it is an IP literal.
upstream_target make_target(std::string_view host, std::uint16_t port, std::string text);

/// Looks up a name's addresses. Seam onto dns::resolver; completes on the awaiting
/// coroutine's executor. Used from one worker thread.
class resolver {
public:
    virtual ~resolver() = default;
    virtual awaitable<dns::resolve_result> resolve(const std::string& name) = 0;
};

/// The worker's DNS resolver (hosts file, then c-ares) behind the seam.
class dns_resolver final : public resolver {
public:
    explicit dns_resolver(dns::resolver& r) : r_(r) {}
    awaitable<dns::resolve_result> resolve(const std::string& name) override;

private:
    dns::resolver& r_;
};

/// Opens one TCP connection to one address within a timeout. Seam onto the upstream socket.
class connector {
public:
    virtual ~connector() = default;
    /// Closes what was open before, then connects; `timeout` bounds the attempt.
    virtual awaitable<error_code> connect(const tcp::endpoint& to,
                                          std::chrono::milliseconds timeout) = 0;
    /// Said after a failed attempt's error in the answer and record ("" by default; the
    /// parent proxy's connector names the parent and its answer).
    virtual std::string detail() const { return {}; }
};

/// Connects a beast::tcp_stream (the client connection's upstream side), TCP_NODELAY set.
class stream_connector final : public connector {
public:
    explicit stream_connector(beast::tcp_stream& s) : s_(s) {}
    awaitable<error_code> connect(const tcp::endpoint& to,
                                  std::chrono::milliseconds timeout) override;

private:
    beast::tcp_stream& s_;
};

/// How a dial ended.
enum class dial_status {
    connected,    ///< `address` is connected
    denied,       ///< classify refused the addresses: `reason` (403)
    unresolved,   ///< DNS failed: `http_status` 502, `message`
    unreachable,  ///< every address failed: `http_status` 502 (or 504 on timeout), `message`
    aborted,      ///< the connection was closed from outside (kill, revocation, reload)
};

struct dial_result {
    dial_status status = dial_status::aborted;
    config::deny_reason reason = config::deny_reason::none;
    int http_status = 0;
    std::string message;
    std::optional<config::ip_address> address;
    std::string resolved;  ///< what the name resolved to, space separated ("" for a literal)
    double dns_ms = 0;
    double connect_ms = 0;
};

/// The classify phase, pure: the addresses a target resolved to (or its literal), checked
/// against the allowing decision (config::check_addresses: a name's addresses must be
/// public or covered by the rule's resolves_to; a literal was decided with the request),
/// then against cordon's own listeners (never connect to ourselves: private_address).
config::deny_reason classify(const config::decision& allowed, bool literal,
                             std::span<const config::ip_address> addresses,
                             const control::self_addresses& self, std::uint16_t port);

/// resolve -> classify -> connect. Seam for tests of the connection above it.
class dialer {
public:
    virtual ~dialer() = default;
    /// Dials `t` for a request `allowed` decided; `aborted` says whether the connection
    /// was closed from outside meanwhile (checked between phases and after each attempt).
    virtual awaitable<dial_result> dial(const upstream_target& t, const config::decision& allowed,
                                        const std::function<bool()>& aborted) = 0;
};

/// The dialer of the data plane: resolves through a `resolver`, classifies, and tries each
/// address in turn through a `connector`, each attempt within `connect_timeout`.
class upstream_dialer final : public dialer {
public:
    upstream_dialer(resolver& r, connector& c, const control::self_addresses& self,
                    std::chrono::milliseconds connect_timeout)
        : resolver_(r), connector_(c), self_(self), timeout_(connect_timeout) {}

    awaitable<dial_result> dial(const upstream_target& t, const config::decision& allowed,
                                const std::function<bool()>& aborted) override;

private:
    resolver& resolver_;
    connector& connector_;
    const control::self_addresses& self_;
    std::chrono::milliseconds timeout_;
};

}  // namespace cordon::proxy::data
