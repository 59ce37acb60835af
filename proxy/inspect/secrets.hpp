#pragma once
// The credential broker's state (issue 21, docs/inspect.md "Credentials"): the real values of
// the policy's `secrets`, read by cordon only, held in pages that are locked in memory
// (mlock: never swapped), kept out of core dumps (MADV_DONTDUMP) and wiped when dropped; and
// the placeholders sandboxes hold instead, one per session and variable, derived with an HMAC
// keyed from cordon's CA key (so they survive restarts, differ per session, and cannot be
// forged by whoever holds another one). No sockets: the data plane asks, this answers.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/policy.hpp"

namespace cordon::proxy::inspect {

/// Every placeholder starts so: the data plane finds them in requests by this prefix.
inline constexpr std::string_view placeholder_prefix = "cordon-ph-";
/// The whole length of a placeholder: the prefix and 40 hex digits (160 bits of HMAC).
inline constexpr std::size_t placeholder_size = placeholder_prefix.size() + 40;

class credential_broker {
public:
    /// Reads every secret of `specs` (a file: a regular file, not readable by group or
    /// others, at most 64 KiB; an environment variable of cordon's), one trailing newline
    /// dropped. A value must be 8..8192 bytes of printable ASCII (no CR, LF or NUL: it goes
    /// into a header). `placeholder_key` keys the placeholders (32 bytes or more). nullptr
    /// with `error` naming the secret (never quoting its value) otherwise.
    static std::unique_ptr<credential_broker> load(const std::vector<config::secret_spec>& specs,
                                                   std::string_view placeholder_key,
                                                   std::string& error);
    /// From values directly (tests): name -> value.
    static std::unique_ptr<credential_broker> from_values(
        const std::vector<std::pair<std::string, std::string>>& values,
        std::string_view placeholder_key, std::string& error);
    ~credential_broker();
    credential_broker(const credential_broker&) = delete;
    credential_broker& operator=(const credential_broker&) = delete;

    /// The real value of secret `name`; empty when there is none.
    std::string_view value(std::string_view name) const noexcept;
    /// Calls fn(name, value) for every secret.
    template <class Fn>
    void for_each(Fn&& fn) const {
        for (const auto& e : entries_) {
            fn(std::string_view(e.name), std::string_view(base_ + e.offset, e.size));
        }
    }
    /// Replaces every secret value in `json`, a serialised JSON text from `from` on, by
    /// "REDACTED": as written (a value has no '"' or '\' to escape, the usual case) or
    /// JSON-escaped, where it starts a character of the text (not inside an escape such as
    /// \n or \u0041, whose bytes are not the value's). The audit log's line filter: no
    /// record carries a secret, whatever field an agent put it in.
    void hide_values(std::string& json, std::size_t from = 0) const;

    /// The placeholder of `session` for sandbox variable `var`: "cordon-ph-" and 40 hex
    /// digits of HMAC-SHA256(key, session "\n" var).
    std::string placeholder(std::string_view session, std::string_view var) const;

    /// Whether the pages holding the values are locked in memory (mlock can fail under a low
    /// RLIMIT_MEMLOCK: the values are then still kept out of core dumps and wiped).
    bool locked() const noexcept { return locked_; }

private:
    credential_broker() = default;
    struct entry {
        std::string name;
        std::size_t offset = 0;
        std::size_t size = 0;
    };
    std::vector<entry> entries_;
    char* base_ = nullptr;  ///< mmap'ed pages holding every value
    std::size_t mapped_ = 0;
    bool locked_ = false;
    std::string key_;  ///< the HMAC key (itself derived; wiped too)
};

/// The placeholder key derived from the CA's private key (PEM): SHA-256 of a label and the
/// key's bytes. Stable while the CA is; a new CA gives new placeholders.
std::string placeholder_key_from(std::string_view ca_key_pem);

}  // namespace cordon::proxy::inspect
