#pragma once
// The credential broker's checks on what crosses an inspected tunnel (docs/inspect.md
// "Credentials"), pure and unit-tested: a request head judged (the session's placeholder in
// the credentialed header becomes the real secret; a placeholder anywhere else, or another
// session's, is misuse; a credentialed rule without the placeholder is refused; a real
// secret's bytes going out are a leak), and the streaming scans of bodies: placeholders and
// secrets on the way out, the secret replaced by the placeholder on the way back, a match
// split across reads still caught.

#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/decide.hpp"
#include "config/policy.hpp"

namespace cordon::proxy::data {

/// A placeholder the session holds, and the secret it stands for.
struct session_placeholder {
    std::string secret;       ///< a secret name
    std::string placeholder;  ///< "cordon-ph-..."
};

/// A secret value the scans look for (name for the record, value never logged).
struct secret_value {
    std::string_view name;
    std::string_view value;
};

struct head_verdict {
    config::deny_reason reason = config::deny_reason::none;  ///< none: may go on
    /// When the credential is injected: the placeholder to replace (exactly once in the
    /// head, in the credentialed header) and the secret's name and value.
    std::string_view placeholder;
    std::string_view secret_name;
    std::string_view secret_value;
    std::string_view why;  ///< for the client, on a refusal
};

/// Judges a request head inside an inspected tunnel: `target` (origin-form) and `fields`
/// ("name: value\r\n" lines as sent). `cred` is the allowing rule's credential (or null),
/// `mine` the session's placeholders, `secrets` every real value the broker holds.
/// In order: a secret's bytes anywhere -> secret_leak; a placeholder (anything starting
/// "cordon-ph-") anywhere but as the whole credentialed value -> credential_misuse; a
/// credentialed rule whose header is missing, repeated or holds something else ->
/// credential_required (credential_misuse when what it holds is a placeholder that is not
/// this session's for this secret).
head_verdict judge_head(std::string_view target, std::string_view fields,
                        const config::credential_spec* cred,
                        std::span<const session_placeholder> mine,
                        std::span<const secret_value> secrets);

/// The last check, on the head exactly as it goes upstream (`out_head`: request line,
/// fields, blank line; after normalisation, filtering and rewriting): what was judged on the
/// client's bytes must hold on the bytes sent. A secret's bytes anywhere -> secret_leak. With
/// `v.placeholder` set, it must occur exactly once, as the whole value of the one
/// `cred.header` line (prefix + placeholder + suffix), and is replaced there by the secret;
/// otherwise no "cordon-ph-" may occur at all. Anything else -> credential_misuse (a
/// percent-encoded placeholder the path's normal form decoded, a method, a header the
/// client's Connection field removed). Returns none when `out_head` may go.
config::deny_reason splice_credential(std::string& out_head, const config::credential_spec* cred,
                                      const head_verdict& v, std::span<const secret_value> secrets);

/// Finds placeholders (by their prefix; unless told not to) and secret values in a stream of
/// chunks; a match split across chunks is found. Keeps at most the longest needle less one
/// byte. Every needle is looked for in every chunk: a secret is reported (secret_leak) even
/// when a placeholder comes first.
class stream_scanner {
public:
    explicit stream_scanner(std::span<const secret_value> secrets, bool placeholders = true);
    /// Scans the next chunk: none, credential_misuse (a placeholder) or secret_leak.
    config::deny_reason feed(std::string_view chunk);

private:
    std::vector<std::string_view> secrets_;
    bool placeholders_ = true;
    std::string tail_;
    std::size_t keep_ = 0;
};

/// Replaces every occurrence of `from` by `to` in a stream of chunks; a match split across
/// chunks is replaced. Holds back at most from.size() - 1 bytes until the next chunk or
/// finish().
/// What `pump` (stream_pump.hpp) runs a body through on its way: the secret replaced by the
/// placeholder (stream_replacer), an MCP event stream filtered (mcp_flow.hpp).
class body_rewriter {
public:
    virtual ~body_rewriter() = default;
    /// Appends to `out` what can be passed on of `chunk` (with what was held back).
    virtual void feed(std::string_view chunk, std::string& out) = 0;
    /// Appends what is still held back (the stream ended).
    virtual void finish(std::string& out) = 0;
    /// True once nothing more may be passed on: the body is cut there.
    virtual bool failed() const noexcept { return false; }
};

class stream_replacer final : public body_rewriter {
public:
    stream_replacer(std::string_view from, std::string_view to) : from_(from), to_(to) {}
    ~stream_replacer() override;
    stream_replacer(const stream_replacer&) = delete;
    stream_replacer& operator=(const stream_replacer&) = delete;
    void feed(std::string_view chunk, std::string& out) override;
    void finish(std::string& out) override;
    std::size_t replaced() const noexcept { return replaced_; }

private:
    std::string from_;  ///< copies: the caller's strings need not outlive this; wiped at the end
    std::string to_;
    std::string held_;
    std::size_t replaced_ = 0;
};

/// Removes from `head` ("start-line\r\nfields\r\n", no blank line yet) every field line
/// whose name is one of `names` (ASCII case-insensitive); returns how many.
std::size_t drop_fields(std::string& head, std::initializer_list<std::string_view> names);

/// True when every field `name` among `fields` lists only `token` (comma-separated, blanks
/// around an item ignored, ASCII case-insensitive), or there is none: every one is read,
/// since a client joins repeated fields ("identity" then "gzip" is "identity, gzip").
bool field_is_only(std::string_view fields, std::string_view name, std::string_view token);
/// The same test on one field's value.
bool value_is_only(std::string_view value, std::string_view token) noexcept;

/// Replaces every occurrence of `from` in `s` by `to`; returns how many.
std::size_t replace_all(std::string& s, std::string_view from, std::string_view to);

}  // namespace cordon::proxy::data
