#include "proxy/control/tokens.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <climits>
#include <cstdio>
#include <stdexcept>
#include <vector>

namespace cordon::proxy::control {

std::string random_hex(std::size_t bytes) {
    if (bytes > static_cast<std::size_t>(INT_MAX)) {
        throw std::length_error("random_hex: too many bytes requested");
    }
    std::vector<unsigned char> raw(bytes);
    if (bytes > 0 && RAND_bytes(raw.data(), static_cast<int>(bytes)) != 1) {
        throw std::runtime_error("random_hex: the OS random generator failed (RAND_bytes)");
    }
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes * 2);
    for (const unsigned char b : raw) {
        out.push_back(digits[b >> 4]);
        out.push_back(digits[b & 0x0f]);
    }
    // The raw bytes may become a secret: do not leave them in freed memory.
    OPENSSL_cleanse(raw.data(), raw.size());
    return out;
}

secret_hash hash_secret(std::string_view secret) {
    secret_hash out{};
    unsigned int size = 0;
    if (EVP_Digest(secret.data(), secret.size(), out.data(), &size, EVP_sha256(), nullptr) != 1 ||
        size != out.size()) {
        throw std::runtime_error("hash_secret: SHA-256 failed (EVP_Digest)");
    }
    return out;
}

bool equal_constant_time(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) {
        return false;
    }
    if (a.empty()) {
        return true;
    }
    return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool equal_constant_time(const secret_hash& a, const secret_hash& b) noexcept {
    return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace cordon::proxy::control
