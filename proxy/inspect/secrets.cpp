#include "proxy/inspect/secrets.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/percent.hpp"

namespace cordon::proxy::inspect {
namespace {

constexpr std::size_t max_file = 64 * 1024;
constexpr std::size_t min_value = 8;
constexpr std::size_t max_value = 8192;

// Reads a secret file: a regular file that group and others cannot read, bounded.
bool read_secret_file(const std::string& path, std::string& out, std::string& error) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        error = path + ": " + std::strerror(errno);
        return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        error = path + ": not a regular file";
        return false;
    }
    if ((st.st_mode & 077) != 0) {
        ::close(fd);
        error = path + ": readable by group or others (chmod 600 it)";
        return false;
    }
    out.clear();
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            error = path + ": " + std::strerror(errno);
            break;
        }
        if (n == 0) {
            break;
        }
        out.append(buf, static_cast<std::size_t>(n));
        if (out.size() > max_file) {
            error = path + ": larger than 64 KiB";
            break;
        }
    }
    OPENSSL_cleanse(buf, sizeof buf);
    ::close(fd);
    return error.empty();
}

// Why `v` cannot be a secret value, or "".
std::string_view value_refusal(std::string_view v) {
    if (v.size() < min_value) {
        return "shorter than 8 bytes (too short to find safely in what the sandbox sends)";
    }
    if (v.size() > max_value) {
        return "longer than 8192 bytes";
    }
    if (!std::all_of(v.begin(), v.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) {
        return "not printable ASCII (a CR, LF or NUL would split the header it goes into)";
    }
    if (v.find(placeholder_prefix) != std::string_view::npos) {
        return "contains a placeholder";
    }
    return {};
}

void drop_newline(std::string& v) {
    if (!v.empty() && v.back() == '\n') {
        v.pop_back();
        if (!v.empty() && v.back() == '\r') {
            v.pop_back();
        }
    }
}

void wipe(std::string& s) {
    if (!s.empty()) {
        OPENSSL_cleanse(s.data(), s.size());
    }
    s.clear();
}

}  // namespace

std::unique_ptr<credential_broker> credential_broker::load(
    const std::vector<config::secret_spec>& specs, std::string_view placeholder_key,
    std::string& error) {
    std::vector<std::pair<std::string, std::string>> values;
    const auto fail = [&values](std::string& e, std::string msg) {
        for (auto& [n, v] : values) {
            wipe(v);
        }
        e = std::move(msg);
        return nullptr;
    };
    for (const auto& s : specs) {
        std::string v;
        std::string why;
        if (s.file) {
            if (!read_secret_file(*s.file, v, why)) {
                wipe(v);
                return fail(error, "secrets." + s.name + ".file: " + why);
            }
        } else if (s.env) {
            const char* e = std::getenv(s.env->c_str());
            if (e == nullptr) {
                return fail(error, "secrets." + s.name + ".env: " + *s.env +
                                       " is not set in cordon's environment");
            }
            v = e;
        }
        drop_newline(v);
        values.emplace_back(s.name, std::move(v));
    }
    auto out = from_values(values, placeholder_key, error);
    for (auto& [n, v] : values) {
        wipe(v);
    }
    return out;
}

std::unique_ptr<credential_broker> credential_broker::from_values(
    const std::vector<std::pair<std::string, std::string>>& values,
    std::string_view placeholder_key, std::string& error) {
    if (placeholder_key.size() < 32) {
        error = "the placeholder key is shorter than 32 bytes";
        return nullptr;
    }
    std::size_t total = 0;
    for (const auto& [name, v] : values) {
        if (const std::string_view why = value_refusal(v); !why.empty()) {
            error = "secrets." + name + ": the value is " + std::string(why);
            return nullptr;
        }
        total += v.size();
    }
    std::unique_ptr<credential_broker> b(new credential_broker());
    const long page = ::sysconf(_SC_PAGESIZE);
    const std::size_t ps = page > 0 ? static_cast<std::size_t>(page) : 4096;
    b->mapped_ = std::max<std::size_t>(ps, (total + ps - 1) / ps * ps);
    void* p = ::mmap(nullptr, b->mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                     0);
    if (p == MAP_FAILED) {
        error = std::string("secrets: mmap: ") + std::strerror(errno);
        b->mapped_ = 0;
        return nullptr;
    }
    b->base_ = static_cast<char*>(p);
    // Out of core dumps and never swapped; both best effort (the daemon also makes itself
    // non-dumpable when it holds secrets).
    ::madvise(p, b->mapped_, MADV_DONTDUMP);
    b->locked_ = ::mlock(p, b->mapped_) == 0;
    std::size_t at = 0;
    for (const auto& [name, v] : values) {
        std::memcpy(b->base_ + at, v.data(), v.size());
        b->entries_.push_back(entry{name, at, v.size()});
        at += v.size();
    }
    b->key_.assign(placeholder_key.data(), placeholder_key.size());
    return b;
}

credential_broker::~credential_broker() {
    if (base_ != nullptr) {
        OPENSSL_cleanse(base_, mapped_);
        if (locked_) {
            ::munlock(base_, mapped_);
        }
        ::munmap(base_, mapped_);
    }
    wipe(key_);
}

std::string_view credential_broker::value(std::string_view name) const noexcept {
    for (const auto& e : entries_) {
        if (e.name == name) {
            return {base_ + e.offset, e.size};
        }
    }
    return {};
}

namespace {

// Whether position `at` of JSON text (scanned from `from`, outside or inside strings alike)
// begins a character rather than falling inside an escape sequence (\" \\ \n ... \uXXXX).
bool starts_character(std::string_view text, std::size_t from, std::size_t at) {
    std::size_t i = from;
    while (i < at) {
        if (text[i] != '\\') {
            ++i;
            continue;
        }
        const std::size_t length = i + 1 < text.size() && text[i + 1] == 'u' ? 6 : 2;
        if (at < i + length) {
            return false;
        }
        i += length;
    }
    return true;
}

void hide_all(std::string& text, std::size_t from, std::string_view needle) {
    constexpr std::string_view mark = "REDACTED";
    std::size_t at = text.find(needle, from);
    while (at != std::string::npos) {
        if (starts_character(text, from, at)) {
            text.replace(at, needle.size(), mark);
            at = text.find(needle, at + mark.size());
        } else {
            at = text.find(needle, at + 1);
        }
    }
}

// The value percent-encoded in any mix (a path keeps "%2B" where the value has '+'): the
// text from `from` with every %XX decoded, each decoded byte mapped to where it began, is
// searched, and a match replaces the original bytes it came from.
void hide_encoded(std::string& text, std::size_t from, std::string_view needle) {
    constexpr std::string_view mark = "REDACTED";
    for (bool again = true; again;) {
        again = false;
        std::string decoded;
        std::vector<std::size_t> origin;  // decoded[i] began at text[origin[i]]
        decoded.reserve(text.size() - from);
        origin.reserve(text.size() - from + 1);
        for (std::size_t i = from; i < text.size();) {
            origin.push_back(i);
            int hi = -1;
            int lo = -1;
            if (text[i] == '%' && i + 2 < text.size()) {
                hi = common::hex_value(text[i + 1]);
                lo = common::hex_value(text[i + 2]);
            }
            if (hi >= 0 && lo >= 0) {
                decoded.push_back(static_cast<char>(hi * 16 + lo));
                i += 3;
            } else {
                decoded.push_back(text[i]);
                ++i;
            }
        }
        origin.push_back(text.size());
        for (std::size_t at = decoded.find(needle); at != std::string::npos;
             at = decoded.find(needle, at + 1)) {
            const std::size_t begin = origin[at];
            const std::size_t end = origin[at + needle.size()];
            if (starts_character(text, from, begin)) {
                text.replace(begin, end - begin, mark);
                again = true;  // positions moved: decode again
                break;
            }
        }
        OPENSSL_cleanse(decoded.data(), decoded.size());
    }
}

}  // namespace

void credential_broker::hide_values(std::string& json, std::size_t from) const {
    if (from >= json.size()) {
        return;
    }
    const bool escapes = json.find('%', from) != std::string::npos;
    for (const auto& e : entries_) {
        const std::string_view value(base_ + e.offset, e.size);
        hide_all(json, from, value);
        if (escapes) {
            hide_encoded(json, from, value);
        }
        if (value.find_first_of("\"\\") != std::string_view::npos) {
            std::string escaped;
            for (const char c : value) {
                if (c == '"' || c == '\\') {
                    escaped.push_back('\\');
                }
                escaped.push_back(c);
            }
            hide_all(json, from, escaped);
            OPENSSL_cleanse(escaped.data(), escaped.size());
        }
    }
}

std::string credential_broker::placeholder(std::string_view session, std::string_view var) const {
    std::string msg(session);
    msg.push_back('\n');
    msg.append(var);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
         reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &len);
    static constexpr char hex[] = "0123456789abcdef";
    std::string out(placeholder_prefix);
    for (unsigned int i = 0; i < 20 && i < len; ++i) {
        out.push_back(hex[mac[i] >> 4]);
        out.push_back(hex[mac[i] & 15]);
    }
    OPENSSL_cleanse(mac, sizeof mac);
    return out;
}

std::string placeholder_key_from(std::string_view ca_key_pem) {
    static constexpr std::string_view label = "cordon placeholder key v1\n";
    unsigned char digest[SHA256_DIGEST_LENGTH];
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
    EVP_DigestUpdate(ctx, label.data(), label.size());
    EVP_DigestUpdate(ctx, ca_key_pem.data(), ca_key_pem.size());
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx, digest, &n);
    EVP_MD_CTX_free(ctx);
    std::string out(reinterpret_cast<const char*>(digest), n);
    OPENSSL_cleanse(digest, sizeof digest);
    return out;
}

}  // namespace cordon::proxy::inspect
