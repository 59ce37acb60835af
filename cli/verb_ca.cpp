// `cordon ca init DIR`: makes the inspection CA (proxy/inspect/ca.hpp) that `protocol: https`
// rules terminate TLS with: DIR/ca.pem (what sandboxes trust) and DIR/ca.key (mode 0600,
// read by cordon only). Refuses to overwrite an existing CA.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "cli/verbs.hpp"
#include "proxy/inspect/ca.hpp"

namespace cordon::cli {
namespace {

constexpr std::string_view usage =
    R"(usage: cordon ca init DIR [--name NAME] [--days N]

Makes cordon's inspection CA for `protocol: https` rules (TLS terminated by cordon): an
ECDSA P-256 key and a self-signed CA certificate (basicConstraints CA:TRUE, pathlen 0,
keyCertSign), written as DIR/ca.pem and DIR/ca.key (mode 0600). DIR is created (mode 0700)
when missing; an existing ca.pem or ca.key is never overwritten.

options:
  --name NAME   the CA's common name (default: "cordon inspection CA")
  --days N      how long the CA is valid, 1..3650 days (default: 825)
  -h, --help    show this help

Then, in the policy:
  inspect: { ca: { cert: DIR/ca.pem, key: DIR/ca.key } }
and give sandboxes DIR/ca.pem to trust (`cordon run` does; GET /v1/ca.pem serves it).
)";

// Writes `data` to a new file `path` with `mode`; refuses an existing one.
bool write_new(const std::string& path, const std::string& data, mode_t mode, std::string& error) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) {
        error = path + ": " +
                (errno == EEXIST ? std::string("exists (not overwritten)")
                                 : std::string(std::strerror(errno)));
        return false;
    }
    ::fchmod(fd, mode);  // whatever the umask
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            error = path + ": " + std::strerror(errno);
            ::close(fd);
            ::unlink(path.c_str());
            return false;
        }
        done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        error = path + ": " + std::strerror(errno);
        ::unlink(path.c_str());
        return false;
    }
    return true;
}

int ca_init(args a) {
    std::string dir;
    std::string name = "cordon inspection CA";
    long days = 825;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const std::string_view s = a[i];
        if ((s == "--name" || s == "--days") && i + 1 >= a.size()) {
            std::cerr << "cordon ca init: " << s << " needs a value\n\n" << usage;
            return 2;
        }
        if (s == "--name") {
            name = std::string(a[++i]);
            if (name.empty() || name.size() > 64) {
                std::cerr << "cordon ca init: --name: 1-64 characters\n";
                return 2;
            }
        } else if (s == "--days") {
            const std::string v(a[++i]);
            char* end = nullptr;
            days = std::strtol(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || days < 1 || days > 3650) {
                std::cerr << "cordon ca init: --days: a number of days 1..3650, got '" << v
                          << "'\n";
                return 2;
            }
        } else if (s.starts_with("-")) {
            std::cerr << "cordon ca init: unknown option '" << s << "'\n\n" << usage;
            return 2;
        } else if (dir.empty()) {
            dir = std::string(s);
        } else {
            std::cerr << "cordon ca init: one DIR only\n\n" << usage;
            return 2;
        }
    }
    if (dir.empty()) {
        std::cerr << "cordon ca init: missing DIR\n\n" << usage;
        return 2;
    }
    while (dir.size() > 1 && dir.back() == '/') {
        dir.pop_back();
    }
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        std::cerr << "cordon ca init: " << dir << ": " << std::strerror(errno) << '\n';
        return 1;
    }
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        std::cerr << "cordon ca init: " << dir << ": not a directory\n";
        return 1;
    }
    const std::string cert_path = dir + "/ca.pem";
    const std::string key_path = dir + "/ca.key";
    for (const std::string& p : {cert_path, key_path}) {
        if (::access(p.c_str(), F_OK) == 0) {
            std::cerr << "cordon ca init: " << p
                      << " exists: not overwritten (a new CA means every sandbox must trust "
                         "it again; remove the old files first if that is what you want)\n";
            return 1;
        }
    }
    std::string error;
    const auto ca = proxy::inspect::make_ca(name, std::chrono::hours(24 * days), error);
    if (!ca) {
        std::cerr << "cordon ca init: " << error << '\n';
        return 1;
    }
    // The key first: a certificate without its key is useless, a key alone is refused by
    // the next run (ca.key exists).
    if (!write_new(key_path, ca->key, 0600, error) ||
        !write_new(cert_path, ca->cert, 0644, error)) {
        std::cerr << "cordon ca init: " << error << '\n';
        return 1;
    }
    const auto loaded = proxy::inspect::authority::load(ca->cert, ca->key, error);
    std::cout << "cordon ca init: wrote " << cert_path << " (certificate) and " << key_path
              << " (private key, mode 0600)\n";
    if (loaded) {
        std::cout << "  " << proxy::inspect::describe(loaded->certificate()) << '\n';
    }
    std::cout << "next:\n"
              << "  1. in the policy:  inspect: { ca: { cert: " << cert_path
              << ", key: " << key_path << " } }\n"
              << "     and `protocol: https` on the rules whose requests cordon should see\n"
              << "  2. keep " << key_path
              << " readable by cordon only (it can mint certificates any sandbox trusts)\n"
              << "  3. sandboxes trust " << cert_path
              << ": `cordon run` sets this up; others fetch GET /v1/ca.pem\n";
    return 0;
}

}  // namespace

int ca(args a) {
    if (a.empty() || wants_help(a)) {
        std::cout << usage;
        return a.empty() ? 2 : 0;
    }
    if (a[0] == "init") {
        return ca_init(a.subspan(1));
    }
    std::cerr << "cordon ca: unknown command '" << a[0] << "' (expected init)\n\n" << usage;
    return 2;
}

}  // namespace cordon::cli
