#include "dns/resolver.hpp"

#include <ares.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "config/host.hpp"
#include "dns/hosts.hpp"

namespace cordon::dns {
namespace {

namespace net = boost::asio;
using clock_type = std::chrono::steady_clock;
using wait_type = net::posix::descriptor_base::wait_type;
constexpr std::chrono::milliseconds gate_poll{100};

// The text callers see for a c-ares status.
std::string describe(int status) {
    switch (status) {
        case ARES_ENOTFOUND: return "NXDOMAIN";
        case ARES_ENODATA: return "no addresses";
        case ARES_ETIMEOUT: return "timeout";
        case ARES_ESERVFAIL: return "SERVFAIL";
        case ARES_EREFUSED: return "REFUSED";
        case ARES_ENOTIMP: return "NOTIMP";
        case ARES_EFORMERR: return "FORMERR";
        // c-ares' catch-all once every server failed: unreachable, or answering SERVFAIL,
        // REFUSED or NOTIMP (1.18 reports those rcodes this way too).
        case ARES_ECONNREFUSED: return "upstream failed";
        case ARES_EBADRESP: return "bad response";
        case ARES_EBADNAME: return "bad name";
        case ARES_ECANCELLED:
        case ARES_EDESTRUCTION: return "cancelled";
        default: return ares_strerror(status);
    }
}

bool is_localhost(std::string_view name) {
    return name == "localhost" || name.ends_with(".localhost");
}

void add_unique(std::vector<config::ip_address>& out, const config::ip_address& a) {
    if (std::find(out.begin(), out.end(), a) == out.end()) {
        out.push_back(a);
    }
}

// Addresses of a c-ares answer, deduplicated, IPv4 first.
std::vector<config::ip_address> addresses_of(const ares_addrinfo* res) {
    std::vector<config::ip_address> out;
    for (const ares_addrinfo_node* n = res != nullptr ? res->nodes : nullptr; n != nullptr;
         n = n->ai_next) {
        if (n->ai_addr == nullptr) {
            continue;
        }
        const auto len = static_cast<std::size_t>(n->ai_addrlen);
        if (n->ai_family == AF_INET && len >= sizeof(sockaddr_in)) {
            sockaddr_in sin{};
            std::memcpy(&sin, n->ai_addr, sizeof sin);
            std::array<std::uint8_t, 4> b{};
            std::memcpy(b.data(), &sin.sin_addr, b.size());
            add_unique(out, config::ip_address::v4(b));
        } else if (n->ai_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
            sockaddr_in6 sin6{};
            std::memcpy(&sin6, n->ai_addr, sizeof sin6);
            std::array<std::uint8_t, 16> b{};
            std::memcpy(b.data(), &sin6.sin6_addr, b.size());
            add_unique(out, config::ip_address::v6(b));
        }
    }
    std::stable_partition(out.begin(), out.end(),
                          [](const config::ip_address& a) { return a.is_v4(); });
    return out;
}

// "192.0.2.1:53" or "[2001:db8::1]:53", as ares_set_servers_ports_csv reads them.
std::string csv_entry(const config::ip_address& a, std::uint16_t port) {
    return config::host_port(a.to_string(), port == 0 ? 53 : port);
}

struct addrinfo_deleter {
    void operator()(ares_addrinfo* p) const noexcept { ares_freeaddrinfo(p); }
};

// The resolver: one c-ares channel whose sockets are watched by Asio on one io_context.
class resolver_impl final : public resolver {
public:
    resolver_impl(net::io_context& ioc, const resolver_options& opts);
    ~resolver_impl() override;
    resolver_impl(const resolver_impl&) = delete;
    resolver_impl& operator=(const resolver_impl&) = delete;

    void async_resolve(std::string name, std::function<void(resolve_result)> done) override;
    void async_query(std::vector<std::uint8_t> message,
                     std::function<void(raw_result)> done) override;
    const hosts_table& hosts() const override { return hosts_; }
    void cancel_all() override;

private:
    using callback = std::function<void(resolve_result)>;

    // One lookup handed to c-ares; its address is the c-ares callback argument.
    struct query {
        resolver_impl* owner = nullptr;
        callback done;                             // empty once cancel_all() has answered it
        std::function<void(raw_result)> raw_done;  // for async_query instead
        clock_type::time_point start;
    };

    // One socket c-ares asked us to watch. The descriptor never closes the fd: c-ares owns
    // it, so it is release()d when c-ares says it stops watching (just before it closes).
    struct watch {
        explicit watch(net::io_context& ioc) : sd(ioc) {}
        ~watch() { release(); }
        watch(const watch&) = delete;
        watch& operator=(const watch&) = delete;
        void release() noexcept {
            released = true;
            if (sd.is_open()) {
                sd.release();  // cancels pending waits; their handlers see operation_aborted
            }
        }
        net::posix::stream_descriptor sd;
        bool want_read = false;
        bool want_write = false;
        bool reading = false;  // an async_wait(wait_read) is pending
        bool writing = false;
        bool released = false;
    };

    static void on_sock_state(void* data, ares_socket_t fd, int readable, int writable);
    static void on_addrinfo(void* arg, int status, int timeouts, ares_addrinfo* res);
    static void on_send(void* arg, int status, int timeouts, unsigned char* abuf, int alen);

    void sock_state(ares_socket_t fd, bool readable, bool writable);
    void arm(const std::shared_ptr<watch>& w);
    void start_wait(const std::shared_ptr<watch>& w, wait_type type);
    void on_ready(const std::shared_ptr<watch>& w, wait_type type,
                  const boost::system::error_code& ec);
    void arm_timer();
    void on_timer();
    void finish(query& q, int status, const ares_addrinfo* res);
    void deliver(callback done, resolve_result r, clock_type::time_point start);
    void destroy_channel() noexcept;

    net::io_context& ioc_;
    // Handlers hold a weak_ptr to this: expired means the resolver is gone, so they return
    // without touching it (they may run after it was destroyed).
    std::shared_ptr<char> life_ = std::make_shared<char>();
    hosts_table hosts_;
    std::size_t max_queries_;
    std::size_t max_relayed_;
    std::size_t relayed_ = 0;  // async_query lookups in queries_
    std::function<bool()> gate_;
    bool upstream_allowed() const { return !gate_ || gate_(); }
    net::steady_timer timer_;
    bool timer_armed_ = false;
    clock_type::time_point timer_deadline_{};
    std::unordered_map<ares_socket_t, std::shared_ptr<watch>> watches_;
    std::unordered_map<query*, std::unique_ptr<query>> queries_;
    bool destroying_ = false;
    ares_channel channel_ = nullptr;  // null: no upstream, hosts file only
};

resolver_impl::resolver_impl(net::io_context& ioc, const resolver_options& opts)
    : ioc_(ioc),
      hosts_(opts.hosts_file.empty() ? hosts_table{} : hosts_table::load(opts.hosts_file)),
      max_queries_(opts.max_queries),
      max_relayed_(opts.max_relayed),
      gate_(opts.upstream_allowed),
      timer_(ioc) {
    if (opts.upstream.empty()) {
        return;
    }
    ares_options o{};
    char lookups[] = "b";  // DNS only: the hosts file is ours
    o.lookups = lookups;
    o.sock_state_cb = &resolver_impl::on_sock_state;
    o.sock_state_cb_data = this;
    o.timeout = static_cast<int>(
        std::clamp<std::chrono::milliseconds::rep>(opts.timeout.count(), 1, INT_MAX));
    o.tries = std::max(1, opts.tries);
    o.flags = ARES_FLAG_NOALIASES;  // HOSTALIASES must not redirect the proxy's lookups
    const int mask = ARES_OPT_LOOKUPS | ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS |
                     ARES_OPT_TRIES | ARES_OPT_FLAGS;
    if (const int rc = ares_init_options(&channel_, &o, mask); rc != ARES_SUCCESS) {
        channel_ = nullptr;
        throw std::runtime_error(std::string("dns: cannot set up c-ares: ") + ares_strerror(rc));
    }
    const bool only_system = std::all_of(opts.upstream.begin(), opts.upstream.end(),
                                         [](const config::dns_upstream& u) { return u.system; });
    if (only_system) {
        return;  // c-ares has read /etc/resolv.conf
    }
    // Custom servers, with each `system` entry standing for resolv.conf's servers in place.
    std::string csv;
    auto append = [&csv](const std::string& entry) {
        csv += csv.empty() ? "" : ",";
        csv += entry;
    };
    for (const auto& u : opts.upstream) {
        if (!u.system) {
            append(csv_entry(u.server.address, u.server.port));
            continue;
        }
        ares_addr_port_node* sys = nullptr;
        if (ares_get_servers_ports(channel_, &sys) != ARES_SUCCESS) {
            continue;
        }
        for (const ares_addr_port_node* n = sys; n != nullptr; n = n->next) {
            if (n->family == AF_INET) {
                std::array<std::uint8_t, 4> b{};
                std::memcpy(b.data(), &n->addr.addr4, b.size());
                append(
                    csv_entry(config::ip_address::v4(b), static_cast<std::uint16_t>(n->udp_port)));
            } else if (n->family == AF_INET6) {
                std::array<std::uint8_t, 16> b{};
                std::memcpy(b.data(), &n->addr.addr6, b.size());
                append(
                    csv_entry(config::ip_address::v6(b), static_cast<std::uint16_t>(n->udp_port)));
            }
        }
        ares_free_data(sys);
    }
    if (const int rc = ares_set_servers_ports_csv(channel_, csv.c_str()); rc != ARES_SUCCESS) {
        destroy_channel();
        throw std::runtime_error("dns: cannot use upstream servers \"" + csv +
                                 "\": " + ares_strerror(rc));
    }
}

resolver_impl::~resolver_impl() {
    life_.reset();  // queued handlers and results now drop out unrun
    destroy_channel();
}

void resolver_impl::destroy_channel() noexcept {
    destroying_ = true;
    if (channel_ != nullptr) {
        // Ends every query with ARES_EDESTRUCTION (finish() drops them) and closes the
        // sockets, telling on_sock_state first so each descriptor is released, not closed.
        ares_destroy(channel_);
        channel_ = nullptr;
    }
    for (auto& [fd, w] : watches_) {
        w->release();  // never close an fd of c-ares', even one it forgot to report
    }
    watches_.clear();
    queries_.clear();
    relayed_ = 0;
}

void resolver_impl::async_resolve(std::string name, callback done) {
    const auto start = clock_type::now();
    resolve_result r;
    const config::literal lit = config::parse_literal(name);
    if (lit.kind == config::literal_kind::ipv4 ||
        (lit.kind == config::literal_kind::ipv6 && lit.zone.empty())) {
        r.addresses.push_back(lit.address);
        deliver(std::move(done), std::move(r), start);
        return;
    }
    const config::host_result host = lit.kind == config::literal_kind::not_ip
                                         ? config::normalise_host(name)
                                         : config::host_result{{}, "not a host name"};
    if (!host.ok()) {
        r.error = "bad name";
    } else if (auto from_file = hosts_.find(host.value); !from_file.empty()) {
        r.addresses = std::move(from_file);
        r.from_hosts = true;
    } else if (is_localhost(host.value)) {
        // RFC 6761 6.3: answered here, never sent upstream.
        r.addresses = {config::ip_address::v4(0x7f000001u),
                       config::ip_address::v6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})};
    } else if (channel_ == nullptr) {
        r.error = "no upstream";
    } else if (!upstream_allowed()) {
        r.error = "cancelled";
    } else if (queries_.size() >= max_queries_) {
        r.error = "too many queries";
    } else {
        auto q = std::make_unique<query>();
        q->owner = this;
        q->done = std::move(done);
        q->start = start;
        query* arg = q.get();
        queries_.emplace(arg, std::move(q));
        ares_addrinfo_hints hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_flags = ARES_AI_NOSORT;  // RFC 6724 sorting would connect() probe sockets
        // Fully qualified: resolv.conf search domains never apply to the proxy's names.
        const std::string fqdn = host.value + ".";
        // May call on_addrinfo before returning; finish() only posts, so that is safe.
        ares_getaddrinfo(channel_, fqdn.c_str(), nullptr, &hints, &resolver_impl::on_addrinfo, arg);
        arm_timer();
        return;
    }
    deliver(std::move(done), std::move(r), start);
}

void resolver_impl::async_query(std::vector<std::uint8_t> message,
                                std::function<void(raw_result)> done) {
    auto post_result = [this](std::function<void(raw_result)> cb, raw_result r) {
        net::post(ioc_, [life = std::weak_ptr<char>(life_), cb = std::move(cb),
                         r = std::move(r)]() mutable {
            if (!life.expired()) {
                cb(std::move(r));
            }
        });
    };
    if (channel_ == nullptr) {
        post_result(std::move(done), raw_result{{}, "no upstream"});
        return;
    }
    if (!upstream_allowed()) {
        post_result(std::move(done), raw_result{{}, "cancelled"});
        return;
    }
    if (queries_.size() >= max_queries_ || relayed_ >= max_relayed_) {
        post_result(std::move(done), raw_result{{}, "too many queries"});
        return;
    }
    if (message.size() < 12 || message.size() > 65535) {
        post_result(std::move(done), raw_result{{}, "bad query"});
        return;
    }
    auto q = std::make_unique<query>();
    q->owner = this;
    q->raw_done = std::move(done);
    q->start = clock_type::now();
    query* arg = q.get();
    queries_.emplace(arg, std::move(q));
    ++relayed_;
    // May call on_send before returning; the result is only posted, so that is safe.
    ares_send(channel_, message.data(), static_cast<int>(message.size()), &resolver_impl::on_send,
              arg);
    arm_timer();
}

void resolver_impl::on_send(void* arg, int status, int /*timeouts*/, unsigned char* abuf,
                            int alen) {
    auto* q = static_cast<query*>(arg);
    resolver_impl* self = q->owner;
    std::function<void(raw_result)> done = std::move(q->raw_done);
    self->queries_.erase(q);
    --self->relayed_;
    if (!done || self->destroying_) {
        return;
    }
    raw_result r;
    if (status == ARES_SUCCESS && abuf != nullptr && alen > 0) {
        r.answer.assign(abuf, abuf + alen);
    } else {
        r.error = describe(status);
    }
    net::post(self->ioc_, [life = std::weak_ptr<char>(self->life_), done = std::move(done),
                           r = std::move(r)]() mutable {
        if (!life.expired()) {
            done(std::move(r));
        }
    });
}

void resolver_impl::cancel_all() {
    // Answer by flag first, so the outcome does not depend on what c-ares reports below
    // (it returns partial successes for half-finished A+AAAA pairs).
    for (auto& [ptr, q] : queries_) {
        if (q->raw_done) {
            auto raw = std::move(q->raw_done);
            q->raw_done = nullptr;
            net::post(ioc_, [life = std::weak_ptr<char>(life_), raw = std::move(raw)]() mutable {
                if (!life.expired()) {
                    raw(raw_result{{}, "cancelled"});
                }
            });
        }
        if (q->done) {
            callback done = std::move(q->done);
            q->done = nullptr;
            resolve_result r;
            r.error = "cancelled";
            deliver(std::move(done), std::move(r), q->start);
        }
    }
    if (channel_ != nullptr) {
        ares_cancel(channel_);  // frees c-ares' queries now; finish() sees them answered
    }
}

void resolver_impl::on_sock_state(void* data, ares_socket_t fd, int readable, int writable) {
    static_cast<resolver_impl*>(data)->sock_state(fd, readable != 0, writable != 0);
}

void resolver_impl::sock_state(ares_socket_t fd, bool readable, bool writable) {
    auto it = watches_.find(fd);
    if (!readable && !writable) {
        // c-ares is about to close fd: give it back untouched.
        if (it != watches_.end()) {
            it->second->release();
            watches_.erase(it);
        }
        return;
    }
    if (it == watches_.end()) {
        auto w = std::make_shared<watch>(ioc_);
        boost::system::error_code ec;
        w->sd.assign(fd, ec);
        if (ec) {
            w->released = true;  // cannot watch it: the timer will time its queries out
        }
        it = watches_.emplace(fd, std::move(w)).first;
    }
    it->second->want_read = readable;
    it->second->want_write = writable;
    if (destroying_) {
        return;
    }
    arm(it->second);
}

void resolver_impl::arm(const std::shared_ptr<watch>& w) {
    if (w->released) {
        return;
    }
    if (w->want_read && !w->reading) {
        start_wait(w, net::posix::descriptor_base::wait_read);
    }
    if (w->want_write && !w->writing) {
        start_wait(w, net::posix::descriptor_base::wait_write);
    }
}

void resolver_impl::start_wait(const std::shared_ptr<watch>& w, wait_type type) {
    (type == net::posix::descriptor_base::wait_read ? w->reading : w->writing) = true;
    w->sd.async_wait(type, [this, life = std::weak_ptr<char>(life_), w,
                            type](const boost::system::error_code& ec) {
        if (life.expired()) {
            return;
        }
        on_ready(w, type, ec);
    });
}

void resolver_impl::on_ready(const std::shared_ptr<watch>& w, wait_type type,
                             const boost::system::error_code& ec) {
    const bool read = type == net::posix::descriptor_base::wait_read;
    (read ? w->reading : w->writing) = false;
    if (w->released || ec == net::error::operation_aborted) {
        return;
    }
    if (!upstream_allowed()) {
        cancel_all();  // first: what is read below answers no lookup and starts no retry
        if (w->released) {
            return;
        }
    }
    if (read ? w->want_read : w->want_write) {
        const ares_socket_t fd = w->sd.native_handle();
        ares_process_fd(channel_, read ? fd : ARES_SOCKET_BAD, read ? ARES_SOCKET_BAD : fd);
    }
    // c-ares may have closed the socket meanwhile (then `w` is released). A failed wait is
    // not re-armed, so it cannot spin; the timer still ends the query.
    if (!ec) {
        arm(w);
    }
    arm_timer();
}

void resolver_impl::arm_timer() {
    if (channel_ == nullptr) {
        return;
    }
    timeval tv{};
    if (ares_timeout(channel_, nullptr, &tv) == nullptr) {
        return;  // nothing pending; a timer still armed just fires once for nothing
    }
    auto wait = std::chrono::ceil<std::chrono::milliseconds>(std::chrono::seconds(tv.tv_sec) +
                                                             std::chrono::microseconds(tv.tv_usec));
    if (gate_) {
        // While lookups are pending, look at the gate at least this often: a kill cancels
        // them within it, not only at their next retry (seconds away).
        wait = std::min(wait, gate_poll);
    }
    const auto deadline = clock_type::now() + wait;
    if (timer_armed_ && timer_deadline_ <= deadline) {
        return;  // fires early enough; on_timer() re-arms from ares_timeout
    }
    timer_armed_ = true;
    timer_deadline_ = deadline;
    timer_.expires_at(deadline);  // cancels the previous wait (operation_aborted)
    timer_.async_wait(
        [this, life = std::weak_ptr<char>(life_)](const boost::system::error_code& ec) {
            if (life.expired() || ec == net::error::operation_aborted) {
                return;
            }
            on_timer();
        });
}

void resolver_impl::on_timer() {
    timer_armed_ = false;
    if (!upstream_allowed()) {
        cancel_all();  // no retry of a lookup goes out once the gate is closed
    }
    ares_process_fd(channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts and retries
    arm_timer();
}

void resolver_impl::on_addrinfo(void* arg, int status, int /*timeouts*/, ares_addrinfo* res) {
    const std::unique_ptr<ares_addrinfo, addrinfo_deleter> owned(res);
    auto* q = static_cast<query*>(arg);
    q->owner->finish(*q, status, res);
}

// Called by c-ares, possibly from inside ares_getaddrinfo, ares_process_fd, ares_cancel or
// ares_destroy: it must not call back into c-ares, so the user's callback is only posted.
void resolver_impl::finish(query& q, int status, const ares_addrinfo* res) {
    callback done = std::move(q.done);
    const auto start = q.start;
    queries_.erase(&q);
    if (!done || destroying_) {
        return;  // already answered by cancel_all(), or the resolver is going away
    }
    resolve_result r;
    if (status == ARES_SUCCESS) {
        r.addresses = addresses_of(res);
        if (r.addresses.empty()) {
            r.error = "no addresses";
        }
    } else {
        r.error = describe(status);
    }
    deliver(std::move(done), std::move(r), start);
}

void resolver_impl::deliver(callback done, resolve_result r, clock_type::time_point start) {
    r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - start);
    net::post(ioc_, [life = std::weak_ptr<char>(life_), done = std::move(done),
                     r = std::move(r)]() mutable {
        if (!life.expired()) {
            done(std::move(r));
        }
    });
}

}  // namespace

std::unique_ptr<resolver> make_resolver(boost::asio::io_context& ioc,
                                        const resolver_options& opts) {
    return std::make_unique<resolver_impl>(ioc, opts);
}

bool init_library(std::string& error) {
    static std::once_flag once;
    static int status = ARES_SUCCESS;
    std::call_once(once, [] { status = ares_library_init(ARES_LIB_INIT_ALL); });
    if (status != ARES_SUCCESS) {
        error = std::string("c-ares: ") + ares_strerror(status);
        return false;
    }
    return true;
}

}  // namespace cordon::dns
