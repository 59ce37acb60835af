// Loading `upstream_proxy`: the parent HTTP proxy cordon reaches allowed targets through
// (docs/policy.md "Parent proxy"), and reading its credentials file. The only file the loader
// reads besides the policy: a parent's password has no place in the policy itself.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <string>

#include "config/host.hpp"
#include "config/http_url.hpp"
#include "config/load_internal.hpp"

namespace cordon::config {

std::string upstream_proxy_spec::display() const {
    return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
           std::to_string(port);
}

bool upstream_proxy_spec::direct(std::string_view name, const ip_address& address) const {
    for (const auto& n : no_proxy_nets) {
        if (n.contains(address)) {
            return true;
        }
    }
    for (const auto& s : no_proxy_names) {
        if (s.front() == '.' ? name.size() > s.size() && name.ends_with(s) : name == s) {
            return true;
        }
    }
    return false;
}

namespace detail {
namespace {

constexpr std::size_t max_credentials = 1024;

/// The file's first line ("user:password"), or an error. Regular files only, read without
/// blocking on a FIFO; at most 1 KiB.
std::string read_credentials(const std::string& path, std::string& error) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        error = "cannot read the credentials file";
        return {};
    }
    struct stat st {};
    std::string out;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        error = "the credentials file is not a regular file";
    } else if ((st.st_mode & 0077) != 0) {
        error = "the credentials file is readable by others (chmod 600 it)";
    } else {
        std::array<char, max_credentials + 1> buf{};
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0) {
            error = "cannot read the credentials file";
        } else if (static_cast<std::size_t>(n) > max_credentials) {
            error = "the credentials file is over 1 KiB";
        } else {
            out.assign(buf.data(), static_cast<std::size_t>(n));
            out = out.substr(0, out.find_first_of("\r\n"));
            if (out.find(':') == std::string::npos || out.front() == ':') {
                error = "the credentials file must hold one line user:password";
                out.clear();
            }
        }
    }
    ::close(fd);
    return out;
}

}  // namespace

void loader::load_upstream_proxy(const YAML::Node& n, policy& p) {
    if (!expect_map(n, "upstream_proxy")) {
        return;
    }
    const auto keys = check_keys(n, "upstream_proxy", {"url", "no_proxy", "credentials_file"});
    upstream_proxy_spec up;
    bool ok = true;
    if (const auto* v = find(keys, "url")) {
        if (auto s = get_string(*v, "upstream_proxy.url")) {
            const http_url_result u = parse_http_url(*s);
            if (!u.value) {
                error(*v, "upstream_proxy.url", u.error);
                ok = false;
            } else if (u.value->tls) {
                error(*v, "upstream_proxy.url",
                      "the parent proxy is spoken to in plain HTTP (http://host:port); its "
                      "tunnels carry the clients' own TLS");
                ok = false;
            } else if (u.value->target != "/") {
                error(*v, "upstream_proxy.url", "a parent proxy's URL has no path");
                ok = false;
            } else {
                up.host = u.value->host;
                up.port = u.value->port;
            }
        } else {
            ok = false;
        }
    } else {
        error(n, "upstream_proxy", "missing 'url' (e.g. `url: http://proxy.corp.example:8080`)");
        ok = false;
    }
    if (const auto* v = find(keys, "no_proxy")) {
        if (expect_list(*v, "upstream_proxy.no_proxy", "CIDRs and names")) {
            for (std::size_t i = 0; i < v->size(); ++i) {
                const YAML::Node item = (*v)[i];
                const std::string path = "upstream_proxy.no_proxy[" + std::to_string(i) + "]";
                const auto s = get_string(item, path);
                if (!s) {
                    ok = false;
                    continue;
                }
                if (s->find('/') != std::string::npos) {
                    if (auto c = get_cidr(item, path)) {
                        up.no_proxy_nets.push_back(*c);
                    } else {
                        ok = false;
                    }
                    continue;
                }
                // ".corp.example" or "*.corp.example": every name below; else the name.
                std::string_view name = *s;
                const bool below = name.starts_with(".") || name.starts_with("*.");
                if (below) {
                    name.remove_prefix(name.front() == '*' ? 2 : 1);
                }
                const host_result h = normalise_host(name);
                if (!h.ok()) {
                    error(item, path, "not a CIDR or a host name: " + h.error);
                    ok = false;
                    continue;
                }
                up.no_proxy_names.push_back(below ? "." + h.value : h.value);
            }
        } else {
            ok = false;
        }
    }
    if (const auto* v = find(keys, "credentials_file")) {
        up.credentials_file = get_path(*v, "upstream_proxy.credentials_file");
        if (!up.credentials_file) {
            ok = false;
        } else {
            std::string why;
            up.credentials = read_credentials(*up.credentials_file, why);
            if (!why.empty()) {
                error(*v, "upstream_proxy.credentials_file", why);
                ok = false;
            }
        }
    }
    if (ok) {
        p.upstream_proxy = std::move(up);
    }
}

}  // namespace detail
}  // namespace cordon::config
