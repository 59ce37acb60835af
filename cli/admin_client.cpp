#include "cli/admin_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <cstdlib>
#include <fstream>
#include <iostream>

namespace cordon::cli {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

bool set_url(std::string_view url, admin_target& out) {
    if (url.starts_with("http://")) {
        url.remove_prefix(7);
    } else if (url.find("://") != std::string_view::npos) {
        std::cerr << "cordon: the admin URL must be http://HOST:PORT (TLS comes with admin.tls)\n";
        return false;
    }
    while (!url.empty() && url.back() == '/') {
        url.remove_suffix(1);
    }
    std::string_view host = url;
    std::string_view port = "9090";
    if (url.starts_with('[')) {
        const auto close = url.find(']');
        if (close == std::string_view::npos) {
            std::cerr << "cordon: bad admin URL\n";
            return false;
        }
        host = url.substr(1, close - 1);
        if (close + 1 < url.size() && url[close + 1] == ':') {
            port = url.substr(close + 2);
        }
    } else if (const auto colon = url.rfind(':'); colon != std::string_view::npos) {
        host = url.substr(0, colon);
        port = url.substr(colon + 1);
    }
    if (host.empty() || port.empty()) {
        std::cerr << "cordon: bad admin URL\n";
        return false;
    }
    out.host.assign(host);
    out.port.assign(port);
    return true;
}

}  // namespace

bool parse_admin_options(std::vector<std::string_view>& a, admin_target& out) {
    std::string url;
    std::string token_file;
    if (const char* e = std::getenv("CORDON_ADMIN")) {
        url = e;
    }
    if (const char* e = std::getenv("CORDON_ADMIN_TOKEN_FILE")) {
        token_file = e;
    }
    std::vector<std::string_view> rest;
    for (std::size_t i = 0; i < a.size(); ++i) {
        if ((a[i] == "--admin" || a[i] == "--admin-token-file") && i + 1 >= a.size()) {
            std::cerr << "cordon: " << a[i] << " needs a value\n";
            return false;
        }
        if (a[i] == "--admin") {
            url = std::string(a[++i]);
        } else if (a[i] == "--admin-token-file") {
            token_file = std::string(a[++i]);
        } else {
            rest.push_back(a[i]);
        }
    }
    a = std::move(rest);
    if (!url.empty() && !set_url(url, out)) {
        return false;
    }
    if (token_file.empty()) {
        std::cerr << "cordon: no admin token: pass --admin-token-file FILE or set "
                     "CORDON_ADMIN_TOKEN_FILE\n";
        return false;
    }
    std::ifstream in(token_file);
    if (!in || !std::getline(in, out.token) || out.token.empty()) {
        std::cerr << "cordon: cannot read the admin token from " << token_file << '\n';
        return false;
    }
    while (!out.token.empty() && (out.token.back() == '\r' || out.token.back() == ' ')) {
        out.token.pop_back();
    }
    return true;
}

admin_response admin_call(const admin_target& t, std::string_view method, std::string_view path,
                          std::string_view json_body) {
    net::io_context ioc;
    beast::tcp_stream stream(ioc);
    try {
        net::ip::tcp::resolver resolver(ioc);
        // Admin endpoints are addresses or names from /etc/hosts; this one lookup is the
        // CLI's, never the daemon's data path.
        const auto results = resolver.resolve(t.host, t.port);
        stream.expires_after(std::chrono::seconds(10));
        stream.connect(results);
        http::request<http::string_body> req{http::string_to_verb(method), std::string(path), 11};
        req.set(http::field::host, t.host + ":" + t.port);
        req.set(http::field::authorization, "Bearer " + t.token);
        req.set(http::field::user_agent, "cordon-cli");
        if (!json_body.empty()) {
            req.set(http::field::content_type, "application/json");
            req.body() = std::string(json_body);
        }
        req.keep_alive(false);
        req.prepare_payload();
        http::write(stream, req);
        beast::flat_buffer buffer;
        http::response_parser<http::string_body> parser;
        parser.body_limit(64 * 1024 * 1024);
        http::read(stream, buffer, parser);
        return {static_cast<int>(parser.get().result_int()), parser.get().body()};
    } catch (const boost::system::system_error& e) {
        throw std::runtime_error("cannot reach the admin API at " + t.host + ":" + t.port + ": " +
                                 e.code().message());
    }
}

int report_failure(std::string_view verb, const admin_response& r) {
    std::string message = r.body;
    boost::system::error_code ec;
    const auto v = boost::json::parse(r.body, ec);
    if (!ec && v.is_object() && v.as_object().contains("error") &&
        v.as_object().at("error").is_string()) {
        message = std::string(v.as_object().at("error").as_string());
    }
    std::cerr << "cordon " << verb << ": " << r.status << ": " << message << '\n';
    return 1;
}

}  // namespace cordon::cli
