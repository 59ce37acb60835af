// A blocking, deadline-bounded client of etcd's v3 JSON gateway (HTTP/1.1 through Beast).

#include "proxy/control/etcd_client.hpp"

#include <boost/json.hpp>

#include "common/asio.hpp"

namespace cordon::proxy::control {
namespace {

namespace json = boost::json;

}  // namespace

struct etcd_client::impl {
    net::io_context ioc{1};
    std::optional<beast::tcp_stream> stream;
    std::size_t current = 0;  // index of the endpoint in use
    std::string token;        // etcd auth token, when a username is set
    beast::flat_buffer buffer;

    void drop() {
        if (stream) {
            error_code ignored;
            stream->socket().close(ignored);
            stream.reset();
        }
        buffer.clear();
    }

    // Runs the io_context until `done` or the deadline; false on the deadline (the socket is
    // closed and the handlers run to completion).
    bool run_until(const bool& done, std::chrono::steady_clock::time_point deadline) {
        ioc.restart();
        while (!done) {
            const auto now = std::chrono::steady_clock::now();
            if (now >= deadline) {
                break;
            }
            ioc.run_one_for(deadline - now);
        }
        if (!done) {
            drop();
            ioc.restart();
            ioc.poll();  // the cancelled handlers
            ioc.restart();
            return false;
        }
        return true;
    }
};

etcd_client::etcd_client(options o) : opts_(std::move(o)), impl_(std::make_unique<impl>()) {}
etcd_client::~etcd_client() = default;

std::string etcd_client::endpoint() const {
    if (opts_.endpoints.empty()) {
        return "(none)";
    }
    const auto& e = opts_.endpoints[impl_->current % opts_.endpoints.size()];
    return e.host + ":" + std::to_string(e.port);
}

bool etcd_client::post(std::string_view path, const std::string& body, std::string& answer,
                       std::string& error) {
    // A kept-alive connection that broke (its member stopped) is tried once more, on the next
    // endpoint: every call cordon makes is idempotent (puts of the same values, reads).
    const bool had_connection = impl_->stream.has_value();
    bool retry = false;
    if (post_once(path, body, answer, error, retry)) {
        return true;
    }
    if (had_connection && retry) {
        return post_once(path, body, answer, error, retry);
    }
    return false;
}

bool etcd_client::post_once(std::string_view path, const std::string& body, std::string& answer,
                            std::string& error, bool& retry) {
    retry = false;
    impl& d = *impl_;
    if (opts_.endpoints.empty()) {
        error = "etcd: no endpoints";
        return false;
    }
    auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
    if (cap_ != std::chrono::steady_clock::time_point{} && cap_ < deadline) {
        deadline = cap_;
    }
    if (!d.stream) {
        // Each endpoint once at most, within the call's deadline.
        for (std::size_t tried = 0; tried < opts_.endpoints.size() && !d.stream; ++tried) {
            const auto& ep = opts_.endpoints[d.current % opts_.endpoints.size()];
            tcp::resolver resolver(d.ioc);
            bool done = false;
            error_code ec;
            tcp::resolver::results_type results;
            resolver.async_resolve(ep.host, std::to_string(ep.port),
                                   [&](error_code e, tcp::resolver::results_type r) {
                                       ec = e;
                                       results = std::move(r);
                                       done = true;
                                   });
            if (!d.run_until(done, deadline)) {
                resolver.cancel();
                d.ioc.restart();
                d.ioc.poll();
                error = "etcd " + endpoint() + ": timed out resolving";
                ++d.current;
                continue;
            }
            if (ec) {
                error = "etcd " + endpoint() + ": cannot resolve: " + ec.message();
                ++d.current;
                continue;
            }
            d.stream.emplace(d.ioc);
            done = false;
            d.stream->async_connect(results, [&](error_code e, const tcp::endpoint&) {
                ec = e;
                done = true;
            });
            if (!d.run_until(done, deadline) || ec) {
                error = "etcd " + endpoint() + ": cannot connect" +
                        (ec ? ": " + ec.message() : std::string(" in time"));
                d.drop();
                ++d.current;
                continue;
            }
            d.stream->socket().set_option(tcp::no_delay(true), ec);
        }
        if (!d.stream) {
            return false;
        }
    }
    http::request<http::string_body> req{http::verb::post, std::string(path), 11};
    req.set(http::field::host, endpoint());
    req.set(http::field::content_type, "application/json");
    if (!d.token.empty()) {
        req.set(http::field::authorization, d.token);
    }
    req.body() = body;
    req.prepare_payload();
    bool done = false;
    error_code ec;
    http::response_parser<http::string_body> parser;
    parser.body_limit(etcd::max_message);
    parser.header_limit(16 * 1024);
    http::async_write(*d.stream, req, [&](error_code e, std::size_t) {
        ec = e;
        if (ec) {
            done = true;
            return;
        }
        http::async_read(*d.stream, d.buffer, parser, [&](error_code e2, std::size_t) {
            ec = e2;
            done = true;
        });
    });
    if (!d.run_until(done, deadline)) {
        error = "etcd " + endpoint() + ": no answer in " + std::to_string(opts_.timeout.count()) +
                " ms";
        ++d.current;
        return false;
    }
    if (ec) {
        error = "etcd " + endpoint() + ": " + ec.message();
        d.drop();
        ++d.current;
        retry = true;
        return false;
    }
    const auto& res = parser.get();
    if (res.result() != http::status::ok) {
        // The gateway's errors carry a JSON body; say its message, bounded.
        std::string why;
        etcd::header ignored;
        if (etcd::parse_put(res.body(), ignored, why)) {
            why = "HTTP " + std::to_string(res.result_int());
        }
        error = "etcd " + endpoint() + ": " + why;
        if (!res.keep_alive()) {
            d.drop();
        }
        return false;
    }
    answer = res.body();
    if (!res.keep_alive()) {
        d.drop();
    }
    return true;
}

bool etcd_client::auth_token(std::string& token, std::string& error) {
    if (!opts_.username) {
        token.clear();
        return true;
    }
    if (impl_->token.empty()) {
        std::string answer;
        const std::string body = json::serialize(
            json::object{{"name", *opts_.username}, {"password", opts_.password.value_or("")}});
        if (!post("/v3/auth/authenticate", body, answer, error)) {
            return false;
        }
        boost::system::error_code ec;
        const auto v = json::parse(answer, ec);
        const json::value* t = !ec && v.is_object() ? v.as_object().if_contains("token") : nullptr;
        if (t == nullptr || !t->is_string() || t->as_string().empty() ||
            t->as_string().size() > 4096) {
            error = "etcd: authentication gave no token";
            return false;
        }
        impl_->token = std::string(t->as_string());
    }
    token = impl_->token;
    return true;
}

namespace {

// Whether an error is etcd refusing our auth token (expired): authenticate again once.
bool auth_expired(const std::string& error) {
    return error.find("invalid auth token") != std::string::npos ||
           error.find("token") != std::string::npos;
}

}  // namespace

#define CORDON_ETCD_CALL(path, body, answer)                                      \
    do {                                                                          \
        std::string token_;                                                       \
        if (!auth_token(token_, error)) {                                         \
            return false;                                                         \
        }                                                                         \
        if (!post(path, body, answer, error)) {                                   \
            if (!opts_.username || !auth_expired(error)) {                        \
                return false;                                                     \
            }                                                                     \
            impl_->token.clear();                                                 \
            if (!auth_token(token_, error) || !post(path, body, answer, error)) { \
                return false;                                                     \
            }                                                                     \
        }                                                                         \
    } while (false)

bool etcd_client::put(std::string_view key, std::string_view value, std::int64_t lease,
                      etcd::header& h, std::string& error) {
    std::string answer;
    CORDON_ETCD_CALL("/v3/kv/put", etcd::put_body(key, value, lease), answer);
    return etcd::parse_put(answer, h, error);
}

bool etcd_client::txn(const std::vector<etcd::txn_compare>& cmp,
                      const std::vector<etcd::txn_op>& ops, bool& succeeded, etcd::header& h,
                      std::string& error) {
    std::string answer;
    CORDON_ETCD_CALL("/v3/kv/txn", etcd::txn_body(cmp, ops), answer);
    return etcd::parse_txn(answer, h, succeeded, error);
}

bool etcd_client::grant(std::int64_t ttl_seconds, std::int64_t& id, std::string& error) {
    std::string answer;
    CORDON_ETCD_CALL("/v3/lease/grant", etcd::lease_grant_body(ttl_seconds), answer);
    std::int64_t ttl = 0;
    return etcd::parse_lease_grant(answer, id, ttl, error);
}

bool etcd_client::keepalive(std::int64_t id, std::int64_t& ttl, std::string& error) {
    std::string answer;
    CORDON_ETCD_CALL("/v3/lease/keepalive", etcd::lease_keepalive_body(id), answer);
    std::int64_t got = 0;
    return etcd::parse_keepalive(answer, got, ttl, error);
}

bool etcd_client::revoke(std::int64_t id, std::string& error) {
    std::string answer;
    CORDON_ETCD_CALL("/v3/lease/revoke", etcd::lease_revoke_body(id), answer);
    return true;
}

bool etcd_client::time_to_live(std::int64_t id, std::int64_t& ttl, std::string& error) {
    std::string answer;
    // The same body as a revoke's: {"ID": "..."}.
    CORDON_ETCD_CALL("/v3/lease/timetolive", etcd::lease_revoke_body(id), answer);
    return etcd::parse_time_to_live(answer, ttl, error);
}

bool etcd_client::range_all(std::string_view prefix, std::vector<etcd::key_value>& kvs,
                            std::int64_t& revision, std::string& error) {
    kvs.clear();
    revision = 0;
    const std::string end = etcd::range_end_of(prefix);
    std::string from(prefix);
    // Bounded: pages of 5,000 keys, at most 400 pages (two million keys).
    for (int page = 0; page < 400; ++page) {
        std::string answer;
        CORDON_ETCD_CALL("/v3/kv/range", etcd::range_body(from, end, revision, 5000), answer);
        etcd::header h;
        std::vector<etcd::key_value> got;
        bool more = false;
        if (!etcd::parse_range(answer, h, got, more, error)) {
            return false;
        }
        if (revision == 0) {
            revision = h.revision;
        }
        for (auto& kv : got) {
            kvs.push_back(std::move(kv));
        }
        if (!more || kvs.empty()) {
            return true;
        }
        from = kvs.back().key + std::string(1, '\0');  // just past the last key read
    }
    error = "etcd: more than two million keys under " + std::string(prefix);
    return false;
}

bool etcd_client::newest_revision(std::string_view prefix, std::int64_t& revision,
                                  std::string& error) {
    json::object o{{"key", etcd::base64_encode(prefix)},
                   {"range_end", etcd::base64_encode(etcd::range_end_of(prefix))},
                   {"limit", "1"},
                   {"sort_order", "DESCEND"},
                   {"sort_target", "MOD"},
                   {"keys_only", true}};
    std::string answer;
    CORDON_ETCD_CALL("/v3/kv/range", json::serialize(o), answer);
    etcd::header h;
    std::vector<etcd::key_value> kvs;
    bool more = false;
    if (!etcd::parse_range(answer, h, kvs, more, error)) {
        return false;
    }
    revision = kvs.empty() ? 0 : kvs.front().mod_revision;
    return true;
}

#undef CORDON_ETCD_CALL

}  // namespace cordon::proxy::control
