#pragma once
// The policy as plain data: what the YAML file says, validated, with defaults filled in.
// Built by load.hpp; compiled for decisions by decide.hpp. No I/O here.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/cluster.hpp"
#include "config/host.hpp"
#include "config/http_rules.hpp"
#include "config/ip.hpp"

namespace cordon::config {

/// Where something was written in the policy file (1-based; 0 when not from a file).
struct source_pos {
    int line = 0;
    int column = 0;
};

/// How an allowed connection is carried.
enum class protocol : std::uint8_t {
    tls,   ///< CONNECT; the TLS ClientHello's SNI must equal the CONNECT host
    tcp,   ///< CONNECT; raw bytes, no SNI check
    http,  ///< plain HTTP forwarding of absolute-form requests; `methods` and `http` enforced
    /// CONNECT, TLS terminated by cordon (the `inspect` section): the SNI must equal the
    /// CONNECT host, and each HTTP/1.1 request inside is decided on its own (`methods`, `http`)
    https,
    /// CONNECT (or SOCKS5); raw bytes once the client's first line is an SSH identification
    /// string (`SSH-2.0-...`); anything else is refused as `protocol`
    ssh,
};
std::string_view to_string(protocol p) noexcept;

enum class job_mode : std::uint8_t {
    enforce,  ///< deny what no rule allows
    report,   ///< allow, but log what enforce mode would deny
};
std::string_view to_string(job_mode m) noexcept;

/// A credential cordon injects on an https rule (the credential broker, docs/inspect.md):
/// the session's placeholder in `header` is replaced by the real value of `secret`, written
/// as `prefix` + value + `suffix` (the policy's `format`, split at "{}").
struct credential_spec {
    std::string secret;  ///< a name of the policy's `secrets`
    std::string header;  ///< e.g. Authorization
    std::string prefix;  ///< e.g. "Bearer "
    std::string suffix;
};

/// An MCP rule's part (`mcp:`, docs/mcp.md): the rule's traffic is MCP (JSON-RPC 2.0 over
/// Streamable HTTP); each tools/call is decided on the tool it names.
struct mcp_spec {
    std::vector<std::string> tools;  ///< the tools a tools/call may name; sorted, unique
    std::uint64_t max_body = 1024 *
                             1024;  ///< a request body or one response message above: refused
    bool allows_tool(std::string_view name) const noexcept;
};

/// A name `mcp.tools` may list: 1 to 128 letters, digits and "_-./" (MCP tool names as
/// servers write them; exact, no patterns).
bool valid_mcp_tool_name(std::string_view s) noexcept;

/// One egress rule of a job card: a host pattern or a CIDR, ports, protocol.
struct egress_rule {
    std::optional<host_pattern> host;  ///< exactly one of host and net is set
    std::optional<cidr> net;
    std::vector<std::uint16_t> ports;  ///< sorted, unique, never empty
    protocol proto = protocol::tls;
    std::vector<std::string> methods;  ///< http and https only; empty means any method
    /// http and https only: request rules, first match wins; empty means any request. When
    /// set, the request's path is normalised (config/http_rules.hpp), matched, and sent so.
    std::vector<http_rule> http;
    std::vector<cidr> resolves_to;              ///< non-public ranges this host may resolve into
    std::optional<credential_spec> credential;  ///< https only: the secret cordon injects
    std::optional<mcp_spec> mcp;                ///< http and https only: MCP traffic
    source_pos pos;

    bool allows_port(std::uint16_t port) const noexcept;
    /// http and https: each request is decided on its own (methods, request rules).
    bool per_request() const noexcept {
        return proto == protocol::http || proto == protocol::https;
    }
    bool allows_method(std::string_view method) const noexcept;
    /// "api.example.com:443/tls", "203.0.113.0/24:22/tcp": for logs and messages.
    std::string describe() const;
};

/// Per-session limits; unset means unlimited.
struct job_limits {
    std::optional<std::uint32_t> max_tunnels;
    std::optional<std::uint64_t> max_bytes_up;
};

struct identity_spec {
    std::chrono::milliseconds ttl = std::chrono::minutes(30);  ///< within 1m..24h
    std::optional<std::string> mint;    ///< command printing a short-lived credential
    std::optional<std::string> revoke;  ///< command run at session end and on kill
    /// Where `cordon run` puts the minted credential: an environment variable (default
    /// CORDON_IDENTITY) or a file name inside scratch; at most one is set.
    std::optional<std::string> mint_env;
    std::optional<std::string> mint_file;
};

struct filesystem_spec {
    std::optional<std::string> scratch;    ///< absolute path; the only writable place
    std::vector<std::string> never_write;  ///< absolute paths
    /// `landlock: optional`: `cordon run` may run on the read-only mounts alone where the
    /// kernel has no Landlock (with a warning); required by default.
    bool landlock_optional = false;
};

/// A job card: what the agent is for and exactly what that needs.
struct job {
    std::string name;
    std::string task;
    std::vector<std::string> inputs;
    std::vector<std::string> outputs;
    job_mode mode = job_mode::enforce;
    std::vector<egress_rule> egress;  ///< empty: no egress at all
    job_limits limits;
    std::vector<cidr> sources;  ///< clients here belong to this job without a token
    identity_spec identity;
    filesystem_spec filesystem;
    std::vector<std::string> env;  ///< variable names passed into the sandbox
    /// Names of `env` marked `allow_long_lived: true`: passed even if the value looks like a
    /// long-lived key (`cordon run` refuses such values otherwise).
    std::vector<std::string> env_allow_long_lived;
    /// Sandbox variable -> secret name: each session gets a placeholder per entry (in its
    /// answer and `cordon run`'s environment); the real value never leaves cordon.
    std::vector<std::pair<std::string, std::string>> credentials;
    source_pos pos;
};

/// An IP address and port to listen on or to reach.
struct endpoint {
    ip_address address;
    std::uint16_t port = 0;
    std::string to_string() const;  ///< "127.0.0.1:3128", "[::1]:53"
    friend bool operator==(const endpoint&, const endpoint&) = default;
};

/// Parses "127.0.0.1:3128" or "[::1]:3128". Port 0 asks the OS for a free port.
struct endpoint_result {
    std::optional<endpoint> value;
    std::string error;
};
endpoint_result parse_endpoint(std::string_view text);

struct listen_spec {
    endpoint proxy;                 ///< HTTP proxy; SOCKS5 too (a first byte 5)
    std::optional<endpoint> socks;  ///< unset: no SOCKS5-only listener
    std::optional<endpoint> dns;    ///< unset: no DNS listener
    std::optional<endpoint> admin;  ///< unset: no admin listener
};

struct tls_files {
    std::string cert;
    std::string key;
    std::optional<std::string> client_ca;  ///< set: clients must present a certificate
};

struct admin_spec {
    std::optional<std::string> token_file;  ///< required when listen.admin is set
    std::optional<tls_files> tls;
};

enum class deny_rcode : std::uint8_t { refused, nxdomain };
std::string_view to_string(deny_rcode r) noexcept;

struct dns_upstream {
    bool system = false;  ///< true: the servers of /etc/resolv.conf
    endpoint server;      ///< when !system
};

struct dns_spec {
    std::vector<dns_upstream> upstream{dns_upstream{true, {}}};
    deny_rcode deny = deny_rcode::refused;
    std::optional<std::string> default_job;
    std::uint32_t cache_entries = 10'000;  ///< answers kept (bounded memory)
    /// Query types answered (numbers); everything else is refused. Default: what a client
    /// needs to connect: A, AAAA, CNAME, HTTPS, SVCB.
    std::vector<std::uint16_t> query_types{1, 28, 5, 65, 64};
    std::uint32_t rate_qps = 100;    ///< per session (else client address): stops a tunnel
    std::uint32_t rate_burst = 200;  ///< over DNS from running at full speed
    /// Upstream lookups in flight: per session (else address), and for all the listener's
    /// clients per thread (the rest of the resolver's 4096 is the proxy's): names that never
    /// resolve cannot starve other clients nor the proxy.
    std::uint32_t inflight_per_client = 64;
    std::uint32_t inflight_total = 2048;
    /// DNS over TCP: open connections (at most a quarter of the descriptor limit), per client
    /// (address, then session), and each connection's whole life: descriptor hoarding.
    std::uint32_t tcp_max_connections = 256;
    std::uint32_t tcp_max_per_client = 16;
    std::chrono::milliseconds tcp_timeout{10'000};
};

/// The query type named `name` (A, AAAA, CNAME, HTTPS, SVCB, TXT, MX, NS, PTR, SRV, SOA,
/// CAA, ANY), or nullopt.
std::optional<std::uint16_t> parse_query_type(std::string_view name);

struct state_spec {
    std::string path = "/var/lib/cordon";
};

struct audit_spec {
    std::string path = "/var/log/cordon";
    int retention_days = 90;
    /// A day's file continues in a new part (cordon-DAY.p0001.jsonl, ...) beyond this size.
    std::uint64_t max_file_bytes = 256ull * 1024 * 1024;
};

/// The alert webhook: denials coalesced per session into JSON POSTs (proxy/alerts/webhook.hpp).
struct webhook_spec {
    std::string url;  ///< http(s); may embed a secret: log only config::http_url::origin()
    std::chrono::milliseconds interval{60'000};      ///< coalescing window per session
    std::uint32_t max_per_minute = 30;               ///< POSTs across all sessions
    std::chrono::milliseconds timeout{5'000};        ///< one delivery attempt, end to end
    std::uint32_t retries = 3;                       ///< after the first attempt
    std::uint32_t burst_threshold = 10;              ///< denials of one session within
    std::chrono::milliseconds burst_window{60'000};  ///< burst_window that make a burst
    /// Extra request headers (e.g. Authorization). Values are secrets: never logged.
    std::vector<std::pair<std::string, std::string>> headers;
};

struct alerts_spec {
    std::optional<webhook_spec> webhook;  ///< unset: no webhook
};

struct kill_spec {
    std::vector<std::string> stop_authority;
    int max_stop_seconds = 60;
};

/// Limits and timeouts of the proxy listener. Each stops an attack named beside it.
struct proxy_spec {
    std::size_t max_header_bytes = 16 * 1024;             ///< request head size: header floods
    std::chrono::milliseconds header_timeout{10'000};     ///< whole request head: slowloris
    std::chrono::milliseconds connect_timeout{10'000};    ///< upstream TCP connect: blackholes
    std::chrono::milliseconds handshake_timeout{10'000};  ///< TLS ClientHello after 200:
                                                          ///< tunnels held open unused
    std::chrono::milliseconds idle_timeout{300'000};      ///< no byte either way: idle hoarding
    std::uint32_t max_connections = 20'000;               ///< client connections: fd exhaustion
};

/// TLS inspection (`protocol: https` rules): cordon's CA, whom upstreams must chain to, and
/// the leaves it mints (proxy/inspect/). Needed by any https rule.
struct inspect_spec {
    std::string ca_cert;  ///< PEM certificate made by `cordon ca init`
    std::string ca_key;   ///< its PEM private key (mode 0600)
    /// PEM bundle upstream servers must chain to; unset: the system's roots
    std::optional<std::string> upstream_ca;
    std::chrono::seconds leaf_ttl = std::chrono::hours(24);  ///< within 1h..90 days
    std::uint32_t leaf_cache = 10'000;                       ///< leaves kept (names), bounded LRU
};

/// A real credential, read by cordon only (docs/inspect.md "Credentials"): from a file or
/// an environment variable of cordon's, again on every reload. Never logged.
struct secret_spec {
    std::string name;
    std::optional<std::string> file;  ///< absolute path; exactly one of file and env is set
    std::optional<std::string> env;
    source_pos pos;
};

/// A parent HTTP proxy (`upstream_proxy`): allowed targets are reached through it with
/// CONNECT to the address cordon checked, after cordon's own decision and address checks.
struct upstream_proxy_spec {
    std::string host;  ///< a name (resolved by cordon) or an IP literal, no brackets
    std::uint16_t port = 0;
    std::vector<cidr> no_proxy_nets;          ///< addresses dialled directly
    std::vector<std::string> no_proxy_names;  ///< exact names, or ".suffix" for names below
    /// "user:password" for Basic, read from `credentials_file` at load (and reload); a secret:
    /// never logged, never in an answer
    std::string credentials;
    std::optional<std::string> credentials_file;
    /// "host:port" as logs and answers show it (no credentials).
    std::string display() const;
    /// True when `name` (normalised) or `address` is one of no_proxy's.
    bool direct(std::string_view name, const ip_address& address) const;
};

/// A whole validated policy file.
struct policy {
    std::string source;  ///< file name it was loaded from, for messages
    listen_spec listen;
    admin_spec admin;
    dns_spec dns;
    state_spec state;
    audit_spec audit;
    alerts_spec alerts;
    kill_spec kill;
    proxy_spec proxy;
    std::optional<inspect_spec> inspect;  ///< unset: no https rule may exist
    std::vector<secret_spec> secrets;     ///< names unique; need `inspect`
    std::vector<job> jobs;                ///< in file order; names unique
    /// unset: every target dialled directly
    std::optional<upstream_proxy_spec> upstream_proxy;
    std::optional<cluster_spec> cluster;  ///< set: state in etcd, shared by a fleet (fleet.md)

    const job* find_job(std::string_view name) const noexcept;
    std::size_t rule_count() const noexcept;
};

/// The settings `cordon serve` applies only when it starts: listen.proxy, listen.socks,
/// listen.dns, listen.admin, admin.token_file, state.path, audit.path, audit.retention_days and
/// audit.max_file_bytes. Those `next` changes from `running` are set back to the running
/// values and named in the result (in that order), so a reload keeps what is really in
/// force, /v1/status reports it, and the caller can say "needs restart".
std::vector<std::string> keep_restart_only(const policy& running, policy& next);

}  // namespace cordon::config
