#pragma once
// Redaction of secrets before anything is logged: URL query values and userinfo, header values,
// JSON field names, and well-known token shapes in free text. Pure: no I/O, no state; every
// function is thread-safe. Redaction errs on the side of hiding too much: a harmless value
// whose name merely contains a secret-looking word ("author", "zipcode") is hidden too.
// Every scanner here runs in time linear in its input (no regex, no backtracking).

#include <string>
#include <string_view>

namespace cordon::proxy::audit {

/// What a redacted value becomes.
inline constexpr std::string_view redacted = "REDACTED";

/// True when a URL query (or path ';' / fragment) parameter name looks secret. The name is
/// percent-decoded ('+' as space), lower-cased and stripped of '-', '_', '.' and spaces, then
/// searched for any of these roots: token, secret, password, passwd, passphrase, pwd, pass,
/// key, auth, credential, signature, sig, session, sessid, code, jwt, bearer, cookie, saml,
/// ticket, assertion, otp. The roots cover, among others: access_token, refresh_token,
/// id_token, client_secret, apikey, api_key, api-key, X-Amz-Signature, X-Amz-Credential,
/// X-Amz-Security-Token, AWSAccessKeyId, sessionid, JSESSIONID, PHPSESSID, oauth_token,
/// oauth_signature, code (the OAuth authorisation code), SAMLResponse.
bool secret_query_name(std::string_view name);

/// True when a JSON field or header name looks secret. Stricter than secret_query_name, so
/// that audit fields such as `session`, `token_id`, `author` or `exit_code` stay readable.
/// The name is lower-cased and stripped of '-', '_', '.' and spaces; it is secret when it
/// contains password, passwd, passphrase, secret, credential, authorization, cookie,
/// signature or bearer; or ends with token, tokens, key, keys or auth; or is exactly pwd,
/// pass or sig. Covers token, secret, authorization, proxy-authorization, password,
/// credential(s), cookie, set-cookie, api_key, x-api-key, access_token, accessToken,
/// x-amz-security-token, private_key, client_secret.
bool secret_field_name(std::string_view name);

/// Hides the secrets in a URL or request target (absolute-form "http://u:p@h/p?q#f",
/// origin-form "/p?q", authority-form "u:p@h:443", network-path "//u:p@h/p"):
/// - any userinfo ("user:pass@", "user@") in the authority becomes "REDACTED@";
/// - the value of every query parameter (separated by '&' or ';'), path parameter
///   ("/app;jsessionid=X") and fragment parameter ("#access_token=X") whose name passes
///   secret_query_name becomes "REDACTED". Names keep their original spelling; repeated
///   parameters are each redacted; empty values stay empty; a name without '=' is kept.
/// Does not mask token shapes elsewhere in the URL: callers that log a URL also run
/// redact_text() on the result (audit_record does).
std::string redact_url(std::string_view url);

/// Hides the secret part of an HTTP header value:
/// - Authorization, Proxy-Authorization (any name ending in "authorization"): the scheme is
///   kept and the credentials hidden ("Bearer abc" -> "Bearer REDACTED", "Basic x" ->
///   "Basic REDACTED"); a value without a scheme becomes "REDACTED";
/// - other names passing secret_field_name (Cookie, Set-Cookie, X-Api-Key, X-Auth-Token,
///   X-Amz-Security-Token, ...): "REDACTED";
/// - Referer, Location, Content-Location: redact_url() then redact_text();
/// - anything else: redact_text().
/// An empty value stays empty.
std::string redact_header_value(std::string_view header_name, std::string_view value);

/// Masks well-known secret shapes anywhere in free text, replacing each with "REDACTED":
/// - AWS access key ids: AKIA or ASIA followed by at least 16 of [A-Z0-9];
/// - GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_ + at least 20 of [A-Za-z0-9_], and
///   github_pat_ + at least 20 of [A-Za-z0-9_];
/// - Slack tokens: xoxa-, xoxb-, xoxp-, xoxr-, xoxs- + at least 10 of [A-Za-z0-9-];
/// - OpenAI and Anthropic keys: sk- (and so sk-ant-, sk-proj-) + at least 20 of
///   [A-Za-z0-9_-];
/// - JWTs: eyJ... '.' eyJ... with an optional third '.' segment (base64url segments);
/// - PEM private keys: from "-----BEGIN ...PRIVATE KEY-----" through the matching
///   "-----END ...-----" line, or to the end of the text when the END line is missing;
/// - cordon's own proxy tokens: exactly 64 lower-case hex digits standing alone;
/// - cordon's credential placeholders: "cordon-ph-" + at least 16 lower-case hex digits;
/// - "Bearer <at least 8 token68 chars>" (any case): the credentials;
/// - userinfo in URLs ("scheme://user:pass@"): becomes "scheme://REDACTED@";
/// - name=value and name: value pairs (also quoted, as in JSON or escaped JSON) whose name
///   passes secret_field_name: the value (up to the closing quote, or the next space, '&',
///   ',', ';', quote or bracket; for Authorization and Cookie names the rest of the line,
///   keeping an Authorization scheme).
/// Each shape must start at a boundary (the preceding character cannot continue it), so
/// "task-..." is not an OpenAI key. Idempotent: redacting twice changes nothing more.
std::string redact_text(std::string_view text);

/// False only when redact_text(text) would return `text` unchanged: a quick test (one pass,
/// a table lookup per byte) that lets a caller keep a clean string without copying it. True
/// means "may change", not "will".
bool may_redact_text(std::string_view text) noexcept;

}  // namespace cordon::proxy::audit
