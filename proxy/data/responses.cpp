#include "proxy/data/responses.hpp"

#include <cstdio>

#include "common/json_string.hpp"

namespace cordon::proxy::data {

std::string_view status_text(int status) {
    switch (status) {
        case 200: return "OK";
        case 201: return "Created";
        case 202: return "Accepted";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 407: return "Proxy Authentication Required";
        case 409: return "Conflict";
        case 411: return "Length Required";
        case 413: return "Content Too Large";
        case 417: return "Expectation Failed";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        default: return "Error";
    }
}

std::string_view explain(config::deny_reason r) {
    using config::deny_reason;
    switch (r) {
        case deny_reason::none: return "allowed";
        case deny_reason::no_rule: return "no rule of this job card allows this host";
        case deny_reason::port: return "a rule names this host, but not this port";
        case deny_reason::protocol:
            return "a rule names this host and port, but for another protocol (tls, tcp, http "
                   "or https)";
        case deny_reason::method: return "this HTTP method is not allowed for this host";
        case deny_reason::private_address:
            return "the target is or resolves to a non-public address this job may not reach";
        case deny_reason::bad_request: return "the request or its target is malformed";
        case deny_reason::unknown_job: return "the session's job is not in the policy";
        case deny_reason::sni_mismatch:
            return "the TLS server name does not match the CONNECT host";
        case deny_reason::kill_switch: return "egress is stopped by the kill switch";
        case deny_reason::session_killed: return "this session was killed";
        case deny_reason::token_expired: return "the proxy token has expired";
        case deny_reason::auth:
            return "proxy credentials are missing or wrong: use "
                   "http://SESSION:TOKEN@proxy:port";
        case deny_reason::limit: return "this session has reached its max_tunnels limit";
        case deny_reason::budget: return "this session has spent its max_bytes_up budget";
        case deny_reason::policy_changed: return "the policy changed and no longer allows this";
        case deny_reason::audit_unavailable:
            return "the audit log cannot be written, so cordon refuses new connections";
        case deny_reason::token_revoked: return "the proxy token was revoked";
        case deny_reason::session_ended: return "this session has ended";
        case deny_reason::http_rule:
            return "no request rule of this job card allows this method and path";
        case deny_reason::upstream_tls:
            return "the upstream's TLS certificate did not verify (chain, name or validity)";
        case deny_reason::credential_misuse:
            return "a credential placeholder was sent where cordon injects no credential";
        case deny_reason::credential_required:
            return "this host takes the credential cordon injects: send the session's "
                   "placeholder";
        case deny_reason::secret_leak:
            return "the request carries a real credential that only cordon may send";
        case deny_reason::mcp_tool: return "this job card's MCP rule does not allow this tool";
        case deny_reason::mcp_tool_changed:
            return "the MCP server changed this tool's definition within the session";
    }
    return "denied";
}

std::string deny_response(int status, std::string_view reason, std::string_view job,
                          std::string_view target, std::string_view message) {
    // Printable ASCII (config::append_json_string_ascii): the body reads the same whatever
    // terminal or log it ends up in.
    // A 5xx with a deny reason is cordon refusing (audit_unavailable: 503), not the
    // upstream failing: "denied", as the X-Cordon-Deny header says.
    std::string body = "{\"error\":\"";
    body += status == 407                     ? "proxy_auth_required"
            : status >= 500 && reason.empty() ? "upstream_error"
                                              : "denied";
    body += '"';
    if (!reason.empty()) {
        body += ",\"reason\":";
        common::append_json_string_ascii(body, reason);
    }
    body += ",\"job\":";
    if (job.empty()) {
        body += "null";
    } else {
        common::append_json_string_ascii(body, job);
    }
    body += ",\"target\":";
    common::append_json_string_ascii(body, target);
    body += ",\"message\":";
    common::append_json_string_ascii(body, message);
    body += "}\n";

    std::string out = "HTTP/1.1 " + std::to_string(status) + " " +
                      std::string(status_text(status)) + "\r\n";
    if (!reason.empty()) {
        out += "X-Cordon-Deny: " + std::string(reason) + "\r\n";
    }
    if (status == 407) {
        out += "Proxy-Authenticate: Basic realm=\"cordon\"\r\n";
    }
    out += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\nConnection: close\r\n\r\n" + body;
    return out;
}

}  // namespace cordon::proxy::data
