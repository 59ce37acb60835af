#include "dns/server.hpp"

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string_view>
#include <system_error>
#include <unordered_map>

#include "common/accept_loop.hpp"
#include "dns/asio_address.hpp"
#include "dns/repeats.hpp"
#include "dns/resolver.hpp"
#include "dns/server_tables.hpp"

namespace cordon::dns {
namespace {

namespace net = boost::asio;
using namespace net::experimental::awaitable_operators;
using udp = net::ip::udp;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;
using steady = std::chrono::steady_clock;
template <class T>
using awaitable = net::awaitable<T>;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

constexpr std::uint32_t max_positive_ttl = 3600;
constexpr std::uint32_t max_negative_ttl = 300;
constexpr std::uint32_t hosts_ttl = 60;
constexpr std::size_t max_rate_clients = 65536;

// How long an answer may be served from cache: the lowest TTL of its records (already
// clamped by sanitize_answer, so the TTL served and the time cached agree).
std::uint32_t cache_ttl(const clean_answer& a) {
    if (a.min_ttl == UINT32_MAX) {
        return std::min<std::uint32_t>(60, a.negative ? max_negative_ttl : max_positive_ttl);
    }
    return a.min_ttl;
}

}  // namespace

std::shared_ptr<server::tables> server::make_tables() { return std::make_shared<tables>(); }

using detail::give_back;
using detail::key_of;
using detail::take;

struct server::impl : std::enable_shared_from_this<server::impl> {
    impl(net::io_context& ioc, resolver& up, policy_hook& h, server_options o,
         std::shared_ptr<tables> t)
        : ex(ioc.get_executor()),
          upstream(up),
          hook(h),
          opts(std::move(o)),
          shared(std::move(t)),
          udp_socket(ioc),
          acceptor(ioc) {
        // Never let DNS over TCP take the descriptors the rest of the daemon needs.
        rlimit rl{};
        if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
            opts.tcp_max_connections = static_cast<std::uint32_t>(
                std::min<rlim_t>(opts.tcp_max_connections, std::max<rlim_t>(1, rl.rlim_cur / 4)));
        }
    }

    net::any_io_executor ex;
    resolver& upstream;
    policy_hook& hook;
    server_options opts;
    std::shared_ptr<tables> shared;
    udp::socket udp_socket;
    tcp::acceptor acceptor;
    std::mt19937 ids{std::random_device{}()};
    repeat_filter repeats{opts.audit_window};
    std::string cache_key;  // reused: a cache lookup allocates nothing
    net::steady_timer repeat_timer{ex};

    bool type_served(std::uint16_t t) const {
        return std::find(opts.query_types.begin(), opts.query_types.end(), t) !=
               opts.query_types.end();
    }

    rcode deny_rcode() const {
        return opts.deny == config::deny_rcode::nxdomain ? rcode::nxdomain : rcode::refused;
    }

    static void make_cache_key(std::string& out, const question& q) {
        out.assign(q.name).push_back('/');
        out.append(std::to_string(q.qtype)).push_back('/');
        out.append(std::to_string(q.qclass));
    }

    // Token bucket per session, else per client address: a tunnel over DNS cannot run at
    // full speed, and one sandbox behind the shim's relay cannot spend another's budget.
    bool within_rate(const client_key& key, steady::time_point now) {
        std::lock_guard lock(shared->mu);
        auto& buckets = shared->buckets;
        if (buckets.size() >= max_rate_clients && buckets.find(key) == buckets.end()) {
            buckets.clear();  // bounded memory; a reset only ever gives a client a full bucket
        }
        auto [it, fresh] = buckets.try_emplace(key);
        tables::bucket& b = it->second;
        if (fresh) {
            b.tokens = opts.rate_burst;
        } else {
            const double elapsed = std::chrono::duration<double>(now - b.last).count();
            b.tokens = std::min<double>(opts.rate_burst, b.tokens + elapsed * opts.rate_qps);
        }
        b.last = now;
        if (b.tokens < 1) {
            return false;
        }
        b.tokens -= 1;
        return true;
    }

    void remember(const std::string& key, std::vector<std::uint8_t> answer,
                  std::vector<ttl_field> ttls, std::uint32_t ttl) {
        if (opts.cache_entries == 0 || ttl == 0) {
            return;
        }
        std::lock_guard lock(shared->mu);
        auto& cache = shared->cache;
        auto& cache_order = shared->cache_order;
        if (cache.find(key) == cache.end()) {
            while (cache.size() >= opts.cache_entries && !cache_order.empty()) {
                cache.erase(cache_order.front());
                cache_order.pop_front();
            }
            cache_order.push_back(key);
        }
        cache[key] = tables::cache_entry{std::move(answer), std::move(ttls), steady::now(), ttl};
    }

    awaitable<raw_result> ask_upstream(std::vector<std::uint8_t> message) {
        // Named, not a temporary (GCC 12 destroys co_await temporaries twice, PR 100611).
        auto initiation = [this, &message](auto handler) {
            auto h = std::make_shared<decltype(handler)>(std::move(handler));
            upstream.async_query(std::move(message), [h](raw_result r) {
                auto hex = net::get_associated_executor(*h);
                net::dispatch(hex, [h, r = std::move(r)]() mutable { (*h)(std::move(r)); });
            });
        };
        co_return co_await net::async_initiate<const net::use_awaitable_t<>&, void(raw_result)>(
            initiation, net::use_awaitable);
    }

    // Counts an answered query and writes its audit line, unless it repeats one already
    // written in this window: then the filter counts it, and the window's end writes one
    // line with the count and hands the count to the metrics and denial observers.
    void note(const config::ip_address& client, const question& q, const verdict& v, rcode rc,
              bool cached, steady::time_point now = steady::now()) {
        flush_repeats(now, false);
        if (repeats.admit(client, q, v, rc, cached, now)) {
            hook.count(client, q, v, 1);
            hook.audit(client, q, v, rc, cached, 0);
        }
    }

    void flush_repeats(steady::time_point now, bool force) {
        repeats.expire(
            now,
            [this](const repeat_filter::entry& e) {
                hook.count(e.client, e.q, e.v, e.repeats);
                hook.audit(e.client, e.q, e.v, e.rc, e.cached, e.repeats);
            },
            force);
    }

    // Writes the coalesced lines of a window that ended while no query came.
    awaitable<void> repeat_flush_loop() {
        auto self = shared_from_this();
        while (udp_socket.is_open() || acceptor.is_open()) {
            repeat_timer.expires_after(repeats.window());
            auto [ec] = co_await repeat_timer.async_wait(use_nothrow);
            if (ec) {
                break;
            }
            flush_repeats(steady::now(), false);
        }
    }

    // An upstream lookup slot of one client's budget (max_inflight_per_client), given back
    // when the lookup ends.
    struct inflight_slot {
        std::shared_ptr<tables> t;
        client_key key;
        inflight_slot(std::shared_ptr<tables> tables_, const client_key& k)
            : t(std::move(tables_)), key(k) {}
        inflight_slot(const inflight_slot&) = delete;
        inflight_slot& operator=(const inflight_slot&) = delete;
        ~inflight_slot() {
            std::lock_guard lock(t->mu);
            give_back(t->inflight, key);
        }
    };

    // The part of answering that needs no upstream. Returns true with `out` set (empty:
    // drop) when the query is settled here; false when it must go upstream: then `key` is
    // whose in-flight budget the lookup took a slot of (go_upstream gives it back).
    bool answer_now(std::span<const std::uint8_t> packet, const config::ip_address& client,
                    std::vector<std::uint8_t>& out, client_key& key, bool over_udp = true) {
        const parse_result pr = parse_query(packet);
        const auto now = steady::now();
        if (pr.status == parse_status::bad) {
            // Every query takes a token, a malformed one too (its address's: no session is
            // believed from a message that does not parse), so FORMERR answers and their
            // audit lines are bounded like denials.
            if (!within_rate(key_of(client), now)) {
                hook.rate_limited(client);
                return true;
            }
            if (packet.size() >= 12) {
                if (pr.value.has_question) {
                    note(client, pr.value.q, verdict{false, "bad_request", {}, {}}, pr.error, false,
                         now);
                }
                out = build_error(pr.value, pr.error);
            }
            return true;
        }
        const query& q = pr.value;
        verdict v = hook.decide(client, q);
        key = key_of(client, v);
        if (!within_rate(key, now)) {
            hook.rate_limited(client);
            return true;
        }
        // CH, HS, ANY: cordon resolves Internet names only (the fixed reason set has no
        // class of its own: "qtype" stands for "a question the resolver does not serve").
        if (v.allow && (q.q.qclass != class_in || !type_served(q.q.qtype))) {
            v.allow = false;
            v.reason = "qtype";
        }
        if (!v.allow) {
            const rcode rc = deny_rcode();
            note(client, q.q, v, rc, false, now);
            out = build_error(q, rc);
            return true;
        }
        bool cached = false;
        // The hosts file first, as for the proxy's own lookups.
        if (q.q.qtype == type_a || q.q.qtype == type_aaaa) {
            const auto addrs = upstream.hosts().find(q.q.name);
            if (!addrs.empty()) {
                out = build_address_answer(q, addrs, hosts_ttl);
            }
        }
        if (out.empty()) {
            make_cache_key(cache_key, q.q);
            std::lock_guard lock(shared->mu);
            if (auto it = shared->cache.find(cache_key); it != shared->cache.end()) {
                const auto age = static_cast<std::uint32_t>(
                    std::chrono::duration_cast<std::chrono::seconds>(now - it->second.stored)
                        .count());
                if (age < it->second.ttl) {
                    answer_for(it->second.answer, it->second.ttls, q, age, out);
                    cached = true;
                }
            }
        }
        if (out.empty()) {
            bool slot = false;
            {
                std::lock_guard lock(shared->mu);
                slot = take(shared->inflight, key, opts.max_inflight_per_client);
            }
            if (slot) {
                return false;
            }
            // This client has as many lookups in flight as it may: not one more.
            out = build_error(q, rcode::servfail);
        }
        note(client, q.q, v, static_cast<rcode>(out[3] & 0xF), cached, now);
        finish(q, out, over_udp);
        tell_answered(client, q.q, v, out);
        return true;
    }

    // The addresses the client is given, as given (after truncation: a truncated answer
    // gives none), for the proxy's SOCKS5 address targets.
    void tell_answered(const config::ip_address& client, const question& q, const verdict& v,
                       std::span<const std::uint8_t> answer) {
        if (v.allow && !v.job.empty() && (q.qtype == type_a || q.qtype == type_aaaa) &&
            answer.size() > header_size) {
            hook.answered(client, q, v, answer);
        }
    }

    static void finish(const query& q, std::vector<std::uint8_t>& answer, bool over_udp) {
        if (over_udp) {
            // At most what the client accepts, and never over 1232 bytes (DNS flag day
            // 2020): a small query with a spoofed source cannot fetch a large answer at
            // someone else. Larger answers go out truncated (TC) and over TCP.
            const std::size_t limit =
                q.has_edns ? std::clamp<std::size_t>(q.udp_size, 512, cordon_udp_size) : 512;
            if (answer.size() > limit) {
                answer = truncate_for_udp(answer, limit);
            }
        }
    }

    // One query to one answer (empty: drop), going upstream when it must.
    awaitable<std::vector<std::uint8_t>> handle(std::span<const std::uint8_t> packet,
                                                const config::ip_address& client, bool over_udp) {
        std::vector<std::uint8_t> answer;
        client_key key;
        if (answer_now(packet, client, answer, key, over_udp)) {
            co_return answer;
        }
        co_return co_await go_upstream(packet, client, key, over_udp);
    }

    // The rest of handle(): a query answer_now() found allowed but not answerable locally,
    // holding one slot of `key`'s in-flight budget. (Parsed again: cheap, and no state is
    // carried across the suspension; the rate token was taken by answer_now().) Decided
    // again before it goes out and again when the upstream answers: a network kill, a
    // session kill or a reload in between refuses it, and nothing learnt upstream is given.
    awaitable<std::vector<std::uint8_t>> go_upstream(std::span<const std::uint8_t> packet,
                                                     const config::ip_address& client,
                                                     client_key key, bool over_udp) {
        const inflight_slot slot(shared, key);
        std::vector<std::uint8_t> answer;
        const query q = parse_query(packet).value;
        verdict v = hook.decide(client, q);
        if (!v.allow) {
            const rcode rc = deny_rcode();
            note(client, q.q, v, rc, false);
            co_return build_error(q, rc);
        }
        std::string key_text;
        make_cache_key(key_text, q.q);
        rcode rc = rcode::noerror;
        // A fresh query: the client's EDNS options (its session token) never go upstream.
        std::vector<std::uint8_t> out = build_query(q.q.name, q.q.qtype,
                                                    static_cast<std::uint16_t>(ids()), true);
        const raw_result r = co_await ask_upstream(std::move(out));
        std::optional<clean_answer> clean;
        if (r.error.empty()) {
            if (const auto view = parse_answer(r.answer); view && answers_question(*view, q.q)) {
                clean = sanitize_answer(*view, max_positive_ttl, max_negative_ttl);
            }
        }
        if (clean) {
            remember(key_text, clean->message, clean->ttls, cache_ttl(*clean));
        }
        v = hook.decide(client, q);
        if (!v.allow) {
            rc = deny_rcode();
            answer = build_error(q, rc);
        } else if (!clean) {
            rc = rcode::servfail;
            answer = build_error(q, rc);
        } else {
            answer_for(clean->message, clean->ttls, q, 0, answer);
            rc = static_cast<rcode>(answer[3] & 0xF);
        }
        note(client, q.q, v, rc, false);
        finish(q, answer, over_udp);
        tell_answered(client, q.q, v, answer);
        co_return answer;
    }

    awaitable<void> udp_answer(std::vector<std::uint8_t> packet, udp::endpoint from,
                               client_key key) {
        const config::ip_address client = to_ip(from.address());
        std::vector<std::uint8_t> resp = co_await go_upstream(packet, client, key, true);
        if (!resp.empty() && udp_socket.is_open()) {
            co_await udp_socket.async_send_to(net::buffer(resp), from, use_nothrow);
        }
    }

    // Receives in batches (recvmmsg) and sends the settled answers in batches (sendmmsg):
    // a DNS server's cost is mostly syscalls and wake-ups, so a busy server reads up to
    // `batch` queries per wake-up. Most answers need no upstream (denied, cached, hosts
    // file) and go out here; only upstream lookups get a coroutine of their own.
    static constexpr unsigned batch = 32;
    static constexpr std::size_t slot_size = 4096;  // larger datagrams are no DNS query

    awaitable<void> udp_loop() {
        auto self = shared_from_this();
        std::vector<std::uint8_t> rx(batch * slot_size);
        std::array<mmsghdr, batch> msgs{};
        std::array<iovec, batch> iov{};
        std::array<sockaddr_storage, batch> from{};
        std::vector<std::vector<std::uint8_t>> answers(batch);
        std::array<mmsghdr, batch> out{};
        std::array<iovec, batch> out_iov{};
        const int fd = udp_socket.native_handle();
        for (;;) {
            auto [wec] = co_await udp_socket.async_wait(udp::socket::wait_read, use_nothrow);
            if (!udp_socket.is_open() || wec == net::error::operation_aborted) {
                co_return;
            }
            for (int round = 0; round < 16; ++round) {  // bounded: then yield to the others
                for (unsigned i = 0; i < batch; ++i) {
                    iov[i] = iovec{rx.data() + i * slot_size, slot_size};
                    msgs[i] = mmsghdr{};
                    msgs[i].msg_hdr.msg_iov = &iov[i];
                    msgs[i].msg_hdr.msg_iovlen = 1;
                    msgs[i].msg_hdr.msg_name = &from[i];
                    msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
                }
                const int n = ::recvmmsg(fd, msgs.data(), batch, MSG_DONTWAIT, nullptr);
                if (n <= 0) {
                    break;
                }
                unsigned k = 0;
                for (int i = 0; i < n; ++i) {
                    udp::endpoint ep;
                    const auto namelen = msgs[static_cast<unsigned>(i)].msg_hdr.msg_namelen;
                    if (namelen > ep.capacity()) {
                        continue;
                    }
                    std::memcpy(ep.data(), &from[static_cast<unsigned>(i)], namelen);
                    ep.resize(namelen);
                    if ((msgs[static_cast<unsigned>(i)].msg_hdr.msg_flags & MSG_TRUNC) != 0) {
                        continue;  // over slot_size: not a query cordon answers
                    }
                    const std::span<const std::uint8_t> packet(
                        rx.data() + static_cast<unsigned>(i) * slot_size,
                        msgs[static_cast<unsigned>(i)].msg_len);
                    std::vector<std::uint8_t>& now = answers[k];
                    now.clear();
                    client_key key;
                    if (!answer_now(packet, to_ip(ep.address()), now, key)) {
                        std::vector<std::uint8_t> copy(packet.begin(), packet.end());
                        net::co_spawn(ex, self->udp_answer(std::move(copy), ep, key),
                                      net::detached);
                        continue;
                    }
                    if (now.empty()) {
                        continue;
                    }
                    out_iov[k] = iovec{now.data(), now.size()};
                    out[k] = mmsghdr{};
                    out[k].msg_hdr.msg_iov = &out_iov[k];
                    out[k].msg_hdr.msg_iovlen = 1;
                    out[k].msg_hdr.msg_name = &from[static_cast<unsigned>(i)];
                    out[k].msg_hdr.msg_namelen = msgs[static_cast<unsigned>(i)].msg_hdr.msg_namelen;
                    ++k;
                }
                for (unsigned sent = 0; sent < k;) {
                    const int m = ::sendmmsg(fd, out.data() + sent, k - sent, MSG_DONTWAIT);
                    if (m <= 0) {
                        break;  // a full send buffer drops answers, as UDP may
                    }
                    sent += static_cast<unsigned>(m);
                }
                if (static_cast<unsigned>(n) < batch) {
                    break;
                }
            }
        }
    }

    // One DNS-over-TCP connection's place in the counts (tcp_max_connections, and
    // tcp_max_per_client of its address, then of its session once a query names one).
    struct tcp_slot {
        std::shared_ptr<tables> t;
        client_key key;
        tcp_slot(std::shared_ptr<tables> tables_, const client_key& k)
            : t(std::move(tables_)), key(k) {}
        tcp_slot(const tcp_slot&) = delete;
        tcp_slot& operator=(const tcp_slot&) = delete;
        ~tcp_slot() {
            std::lock_guard lock(t->mu);
            give_back(t->tcp_per_client, key);
            --t->tcp_open;
        }
        // Counts the connection as `k`'s instead; false (nothing changed) when `k` is full.
        bool move_to(const client_key& k, std::uint32_t limit) {
            if (k == key) {
                return true;
            }
            std::lock_guard lock(t->mu);
            if (!take(t->tcp_per_client, k, limit)) {
                return false;
            }
            give_back(t->tcp_per_client, key);
            key = k;
            return true;
        }
    };

    awaitable<void> tcp_client(tcp::socket s, config::ip_address client,
                               std::shared_ptr<tcp_slot> place) {
        auto self = shared_from_this();
        std::vector<std::uint8_t> in;
        std::array<std::uint8_t, 4096> chunk{};
        // One deadline for the whole connection, never moved: bytes that trickle in do not
        // keep it open (a drip of one byte every few seconds held descriptors for good).
        net::steady_timer deadline(ex);
        deadline.expires_after(opts.tcp_timeout);
        for (;;) {
            const frame_result f = next_tcp_message(in);
            if (f.status == frame_status::bad) {
                co_return;
            }
            if (f.status == frame_status::good) {
                const std::vector<std::uint8_t> msg(f.message.begin(), f.message.end());
                in.erase(in.begin(), in.begin() + static_cast<long>(f.consumed));
                std::vector<std::uint8_t> resp = co_await handle(msg, client, false);
                if (deadline.expiry() <= steady::now()) {
                    co_return;
                }
                // A relayed connection belongs to the session its queries name: each
                // session has its own share of the per-client count.
                bool last = false;
                if (const parse_result pr = parse_query(msg); pr.status == parse_status::good) {
                    const verdict v = hook.decide(client, pr.value);
                    last = !place->move_to(key_of(client, v), opts.tcp_max_per_client);
                }
                if (!resp.empty()) {
                    std::vector<std::uint8_t> framed(resp.size() + 2);
                    framed[0] = static_cast<std::uint8_t>(resp.size() >> 8);
                    framed[1] = static_cast<std::uint8_t>(resp.size() & 0xFF);
                    std::copy(resp.begin(), resp.end(), framed.begin() + 2);
                    auto result = co_await (net::async_write(s, net::buffer(framed), use_nothrow) ||
                                            deadline.async_wait(use_nothrow));
                    if (result.index() == 1) {
                        co_return;  // a client that does not read its answers
                    }
                    auto [wec, wn] = std::get<0>(result);
                    (void)wn;
                    if (wec) {
                        co_return;
                    }
                }
                if (last) {
                    co_return;  // its session has as many connections as it may
                }
                continue;
            }
            auto result = co_await (s.async_read_some(net::buffer(chunk), use_nothrow) ||
                                    deadline.async_wait(use_nothrow));
            if (result.index() == 1) {
                co_return;  // the connection's time is up
            }
            auto [rec, n] = std::get<0>(result);
            if (rec) {
                co_return;
            }
            in.insert(in.end(), chunk.begin(), chunk.begin() + static_cast<long>(n));
        }
    }

    awaitable<void> tcp_loop() {
        auto self = shared_from_this();
        co_await common::accept_loop(acceptor,
                                     [this, &self](tcp::socket& s) { return admit_tcp(self, s); });
    }

    // An accepted DNS-over-TCP connection: served when the caps admit it, else closed at
    // once, so the descriptor is free again at once.
    common::after_accept admit_tcp(const std::shared_ptr<impl>& self, tcp::socket& s) {
        error_code rec;
        const auto remote = s.remote_endpoint(rec);
        if (rec) {
            return common::after_accept::next;  // gone already: the socket closes here
        }
        const config::ip_address client = to_ip(remote.address());
        const client_key key = key_of(client);
        bool admitted = false;
        {
            std::lock_guard lock(shared->mu);
            if (shared->tcp_open < opts.tcp_max_connections &&
                take(shared->tcp_per_client, key, opts.tcp_max_per_client)) {
                ++shared->tcp_open;
                admitted = true;
            }
        }
        if (!admitted) {
            hook.tcp_refused(client);
            return common::after_accept::next;
        }
        auto place = std::make_shared<tcp_slot>(shared, key);
        net::co_spawn(ex, self->tcp_client(std::move(s), client, std::move(place)), net::detached);
        return common::after_accept::next;
    }
};

// Binds the UDP socket and the TCP acceptor of `im` on one address and port; throws
// bind_error naming the socket that failed, with the system's reason.
void bind_both(server::impl& im, const udp::endpoint& uep, const net::ip::address& addr, int one) {
    error_code ec;
    const auto check = [&ec](const char* transport) {
        if (ec) {
            throw bind_error(transport, ec.message());
        }
    };
    const auto reuse_port = [&im, one](int fd, const char* transport) {
        if (im.opts.reuse_port &&
            ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
            throw bind_error(transport, "SO_REUSEPORT: " + std::generic_category().message(errno));
        }
    };
    im.udp_socket.open(uep.protocol(), ec);
    check("UDP");
    if (addr.is_v6()) {
        im.udp_socket.set_option(net::ip::v6_only(true), ec);
        check("UDP");
    }
    reuse_port(im.udp_socket.native_handle(), "UDP");
    im.udp_socket.bind(uep, ec);
    check("UDP");
    // TCP on the same port as UDP (port 0: the one the UDP bind got).
    const auto bound = im.udp_socket.local_endpoint(ec);
    check("UDP");
    tcp::endpoint tep(addr, bound.port());
    im.acceptor.open(tep.protocol(), ec);
    check("TCP");
    im.acceptor.set_option(net::socket_base::reuse_address(true), ec);
    check("TCP");
    if (addr.is_v6()) {
        im.acceptor.set_option(net::ip::v6_only(true), ec);
        check("TCP");
    }
    reuse_port(im.acceptor.native_handle(), "TCP");
    im.acceptor.bind(tep, ec);
    check("TCP");
    im.acceptor.listen(net::socket_base::max_listen_connections, ec);
    check("TCP");
}

server::server(net::io_context& ioc, resolver& upstream, policy_hook& hook, server_options opts,
               std::shared_ptr<tables> shared)
    : impl_(std::make_shared<impl>(ioc, upstream, hook, std::move(opts),
                                   shared ? std::move(shared) : make_tables())) {
    const net::ip::address addr = to_asio(impl_->opts.listen.address);
    udp::endpoint uep(addr, impl_->opts.listen.port);
    const int one = 1;
    // Port 0: UDP picks a free port and TCP must get the same one; a TCP socket lingering
    // in TIME-WAIT there can refuse it, so try a few ports.
    for (int attempt = 0;; ++attempt) {
        try {
            bind_both(*impl_, uep, addr, one);
            break;
        } catch (const bind_error&) {
            if (impl_->opts.listen.port != 0 || attempt >= 20) {
                throw;
            }
            error_code ignored;
            impl_->udp_socket.close(ignored);
            impl_->acceptor.close(ignored);
        }
    }
}

server::~server() = default;

config::endpoint server::local_endpoint() const {
    const auto ep = impl_->udp_socket.local_endpoint();
    return config::endpoint{to_ip(ep.address()), ep.port()};
}

void server::start() {
    net::co_spawn(impl_->ex, impl_->udp_loop(), net::detached);
    net::co_spawn(impl_->ex, impl_->tcp_loop(), net::detached);
    if (impl_->repeats.window() > std::chrono::milliseconds::zero()) {
        net::co_spawn(impl_->ex, impl_->repeat_flush_loop(), net::detached);
    }
}

void server::stop() {
    error_code ignored;
    impl_->udp_socket.close(ignored);
    impl_->acceptor.close(ignored);
    impl_->repeat_timer.cancel();
    impl_->flush_repeats(steady::now(), true);
}

}  // namespace cordon::dns
