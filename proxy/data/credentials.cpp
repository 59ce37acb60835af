// The credential broker's checks (credentials.hpp).

#include "proxy/data/credentials.hpp"

#include <algorithm>
#include <string>

#include "common/percent.hpp"
#include "config/http_rules.hpp"
#include "proxy/data/http_head.hpp"
#include "proxy/inspect/secrets.hpp"

namespace cordon::proxy::data {
namespace {

using config::deny_reason;

bool contains(std::string_view hay, std::string_view needle) {
    return !needle.empty() && hay.find(needle) != std::string_view::npos;
}

head_verdict refuse(deny_reason r, std::string_view why) {
    head_verdict v;
    v.reason = r;
    v.why = why;
    return v;
}

}  // namespace

head_verdict judge_head(std::string_view target, std::string_view fields,
                        const config::credential_spec* cred,
                        std::span<const session_placeholder> mine,
                        std::span<const secret_value> secrets) {
    // The target as sent and as the upstream reads it (one percent-decoding: "%63ordon-ph-"
    // in a query is a placeholder to a server that decodes it).
    const std::string decoded = common::percent_decoded(target);
    for (const secret_value& s : secrets) {
        if (contains(target, s.value) || contains(decoded, s.value) || contains(fields, s.value)) {
            return refuse(deny_reason::secret_leak,
                          "the request carries a real credential cordon holds: only cordon "
                          "may send it, and only where the policy injects it");
        }
    }
    const std::string_view prefix = inspect::placeholder_prefix;
    if (contains(target, prefix) || contains(decoded, prefix)) {
        return refuse(deny_reason::credential_misuse,
                      "a credential placeholder in the request target");
    }
    // The placeholder this rule's credential takes from this session.
    std::string_view ph;
    if (cred != nullptr) {
        for (const auto& m : mine) {
            if (m.secret == cred->secret) {
                ph = m.placeholder;
                break;
            }
        }
    }
    std::size_t placeholders = 0;  // occurrences of the prefix in the fields
    for (std::size_t at = fields.find(prefix); at != std::string_view::npos;
         at = fields.find(prefix, at + 1)) {
        ++placeholders;
    }
    int cred_fields = 0;
    bool exact = false;
    bool foreign = false;  // the credentialed header holds some other placeholder
    if (cred != nullptr) {
        for_each_field(fields, [&](std::string_view name, std::string_view value) {
            if (!ascii_iequals(name, cred->header)) {
                return;
            }
            ++cred_fields;
            const bool shaped = value.size() ==
                                    cred->prefix.size() + ph.size() + cred->suffix.size() &&
                                value.starts_with(cred->prefix) && value.ends_with(cred->suffix);
            if (!ph.empty() && shaped && value.substr(cred->prefix.size(), ph.size()) == ph) {
                exact = true;
            } else if (contains(value, prefix)) {
                foreign = true;
            }
        });
    }
    if (placeholders > (exact ? 1U : 0U) || foreign) {
        return refuse(deny_reason::credential_misuse,
                      cred != nullptr && foreign
                          ? "this header holds a placeholder that is not this session's for "
                            "this host"
                          : "a credential placeholder where no credential is injected (another "
                            "header, host or rule)");
    }
    if (cred == nullptr) {
        return {};
    }
    if (!exact || cred_fields != 1) {
        return refuse(deny_reason::credential_required,
                      "this host takes the credential cordon injects: send the session's "
                      "placeholder in the header the policy names, once, and nothing else "
                      "there");
    }
    head_verdict v;
    v.placeholder = ph;
    v.secret_name = cred->secret;
    for (const secret_value& s : secrets) {
        if (s.name == cred->secret) {
            v.secret_value = s.value;
        }
    }
    if (v.secret_value.empty()) {
        return refuse(deny_reason::credential_required, "the secret is not loaded");
    }
    return v;
}

config::deny_reason splice_credential(std::string& out_head, const config::credential_spec* cred,
                                      const head_verdict& v,
                                      std::span<const secret_value> secrets) {
    for (const secret_value& s : secrets) {
        if (contains(out_head, s.value)) {
            return deny_reason::secret_leak;
        }
    }
    const std::string_view prefix = inspect::placeholder_prefix;
    const std::size_t first = out_head.find(prefix);
    if (v.placeholder.empty() || cred == nullptr) {
        return first == std::string::npos ? deny_reason::none : deny_reason::credential_misuse;
    }
    if (first == std::string::npos || out_head.find(prefix, first + 1) != std::string::npos) {
        return deny_reason::credential_misuse;
    }
    // The line holding it must be the credentialed field, its value exactly the format.
    const std::size_t line = out_head.rfind("\r\n", first);
    if (line == std::string::npos) {
        return deny_reason::credential_misuse;  // in the request line
    }
    const std::size_t start = line + 2;
    const std::size_t end = out_head.find("\r\n", start);
    const std::string_view field(out_head.data() + start, end - start);
    const std::size_t colon = field.find(':');
    if (colon == std::string_view::npos || !ascii_iequals(field.substr(0, colon), cred->header)) {
        return deny_reason::credential_misuse;
    }
    std::string_view value = field.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
        value.remove_prefix(1);
    }
    const std::string want = cred->prefix + std::string(v.placeholder) + cred->suffix;
    if (value != want) {
        return deny_reason::credential_misuse;
    }
    out_head.replace(first, v.placeholder.size(), v.secret_value);
    return deny_reason::none;
}

stream_scanner::stream_scanner(std::span<const secret_value> secrets, bool placeholders)
    : placeholders_(placeholders) {
    keep_ = placeholders ? inspect::placeholder_prefix.size() : 1;
    for (const auto& s : secrets) {
        secrets_.push_back(s.value);
        keep_ = std::max(keep_, s.value.size());
    }
    keep_ -= 1;
}

config::deny_reason stream_scanner::feed(std::string_view chunk) {
    // The held tail and the new chunk's start, where a split match would be; then the chunk.
    const std::string joint = tail_ + std::string(chunk.substr(0, std::min(chunk.size(), keep_)));
    deny_reason found = deny_reason::none;
    for (const std::string_view hay : {std::string_view(joint), chunk}) {
        for (const auto s : secrets_) {
            if (contains(hay, s)) {
                found = deny_reason::secret_leak;
            }
        }
        if (found == deny_reason::none && placeholders_ &&
            contains(hay, inspect::placeholder_prefix)) {
            found = deny_reason::credential_misuse;
        }
    }
    if (chunk.size() >= keep_) {
        tail_.assign(chunk.substr(chunk.size() - keep_));
    } else {
        tail_.append(chunk);
        if (tail_.size() > keep_) {
            tail_.erase(0, tail_.size() - keep_);
        }
    }
    return found;
}

void stream_replacer::feed(std::string_view chunk, std::string& out) {
    if (from_.empty()) {
        out.append(chunk);
        return;
    }
    held_.append(chunk);
    std::size_t start = 0;
    for (std::size_t at = held_.find(from_); at != std::string::npos;
         at = held_.find(from_, start)) {
        out.append(held_, start, at - start);
        out.append(to_);
        ++replaced_;
        start = at + from_.size();
    }
    // Keep what could still begin a match: at most from_.size() - 1 bytes.
    const std::size_t rest = held_.size() - start;
    const std::size_t keep = std::min(rest, from_.size() - 1);
    out.append(held_, start, rest - keep);
    held_.erase(0, held_.size() - keep);
}

stream_replacer::~stream_replacer() {
    // What it held may be part of a secret.
    for (std::string* s : {&from_, &held_}) {
        std::fill(s->begin(), s->end(), '\0');
    }
}

void stream_replacer::finish(std::string& out) {
    out.append(held_);
    held_.clear();
}

std::size_t drop_fields(std::string& head, std::initializer_list<std::string_view> names) {
    std::size_t dropped = 0;
    std::size_t start = head.find("\r\n");
    while (start != std::string::npos && start + 2 < head.size()) {
        const std::size_t line = start + 2;
        const std::size_t end = head.find("\r\n", line);
        if (end == std::string::npos) {
            break;
        }
        const std::string_view text(head.data() + line, end - line);
        const std::size_t colon = text.find(':');
        bool drop = false;
        if (colon != std::string_view::npos) {
            for (const auto n : names) {
                drop = drop || ascii_iequals(text.substr(0, colon), n);
            }
        }
        if (drop) {
            head.erase(line, end + 2 - line);
            ++dropped;
        } else {
            start = end;
        }
    }
    return dropped;
}

bool value_is_only(std::string_view v, std::string_view token) noexcept {
    while (true) {
        const std::size_t comma = v.find(',');
        std::string_view item = v.substr(0, comma);
        while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) {
            item.remove_prefix(1);
        }
        while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) {
            item.remove_suffix(1);
        }
        if (!item.empty() && !ascii_iequals(item, token)) {
            return false;
        }
        if (comma == std::string_view::npos) {
            return true;
        }
        v.remove_prefix(comma + 1);
    }
}

bool field_is_only(std::string_view fields, std::string_view name, std::string_view token) {
    bool only = true;
    for_each_field(fields, [&](std::string_view n, std::string_view v) {
        if (only && ascii_iequals(n, name)) {
            only = value_is_only(v, token);
        }
    });
    return only;
}

std::size_t replace_all(std::string& s, std::string_view from, std::string_view to) {
    if (from.empty()) {
        return 0;
    }
    std::size_t n = 0;
    for (std::size_t at = s.find(from); at != std::string::npos;
         at = s.find(from, at + to.size())) {
        s.replace(at, from.size(), to);
        ++n;
    }
    return n;
}

}  // namespace cordon::proxy::data
