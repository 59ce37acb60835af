#pragma once
// Secrets and their hashes: random ids and tokens from the OS CSPRNG, SHA-256, constant-time
// comparison. OpenSSL, no sockets.
// Every function here is thread-safe (no shared state of its own; OpenSSL 3 is thread-safe).

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cordon::proxy::control {

/// `bytes` random bytes from the OS CSPRNG (OpenSSL RAND_bytes), as lower-case hex
/// (2 * bytes characters). Throws std::runtime_error if the CSPRNG fails (never falls back
/// to a weak source) and std::length_error if `bytes` exceeds INT_MAX.
std::string random_hex(std::size_t bytes);

/// A SHA-256 digest. Only hashes of secrets are ever stored.
using secret_hash = std::array<std::uint8_t, 32>;

/// SHA-256 of a secret (OpenSSL EVP). Throws std::runtime_error (without the secret in the
/// message) if OpenSSL fails, which only happens when it cannot allocate.
secret_hash hash_secret(std::string_view secret);

/// Constant-time equality (CRYPTO_memcmp). Strings of different sizes compare false at once
/// (the size is not secret); for equal sizes the time does not depend on the content.
bool equal_constant_time(std::string_view a, std::string_view b) noexcept;
bool equal_constant_time(const secret_hash& a, const secret_hash& b) noexcept;

}  // namespace cordon::proxy::control
