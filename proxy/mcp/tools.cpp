#include "proxy/mcp/tools.hpp"

#include <openssl/evp.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "proxy/mcp/jsonrpc.hpp"

namespace cordon::proxy::mcp {
namespace json = boost::json;
namespace {

// Canonical text: members sorted by name at every depth; "_meta" left out at the top.
void canonical(const json::value& v, std::string& out, bool top) {
    if (const json::object* o = v.if_object()) {
        std::vector<const json::key_value_pair*> members;
        members.reserve(o->size());
        for (const auto& kv : *o) {
            if (!(top && kv.key() == "_meta")) {
                members.push_back(&kv);
            }
        }
        std::sort(members.begin(), members.end(),
                  [](const auto* a, const auto* b) { return a->key() < b->key(); });
        out.push_back('{');
        for (std::size_t i = 0; i < members.size(); ++i) {
            if (i > 0) {
                out.push_back(',');
            }
            out.append(json::serialize(json::string(members[i]->key())));
            out.push_back(':');
            canonical(members[i]->value(), out, false);
        }
        out.push_back('}');
        return;
    }
    if (const json::array* a = v.if_array()) {
        out.push_back('[');
        for (std::size_t i = 0; i < a->size(); ++i) {
            if (i > 0) {
                out.push_back(',');
            }
            canonical((*a)[i], out, false);
        }
        out.push_back(']');
        return;
    }
    out.append(json::serialize(v));
}

tool_digest digest(const json::value& definition) {
    std::string text;
    canonical(definition, text, true);
    tool_digest d{};
    unsigned int len = 0;
    EVP_Digest(text.data(), text.size(), d.data(), &len, EVP_sha256(), nullptr);
    return d;
}

// A tools/list result: {"tools": [{"name": ...}, ...], ...}.
json::array* tools_of(json::value& msg) {
    json::object* o = msg.if_object();
    if (o == nullptr || o->if_contains("method") != nullptr) {
        return nullptr;
    }
    json::value* result = o->if_contains("result");
    if (result == nullptr || !result->is_object()) {
        return nullptr;
    }
    json::value* tools = result->get_object().if_contains("tools");
    return tools != nullptr && tools->is_array() ? &tools->get_array() : nullptr;
}

// A number no JSON text can hold (1e999 parses to infinity): a rewritten message could not
// carry it.
bool finite_numbers(const json::value& v) {
    if (const double* d = v.if_double()) {
        return std::isfinite(*d);
    }
    if (const json::object* o = v.if_object()) {
        return std::all_of(o->begin(), o->end(), [](const json::key_value_pair& kv) {
            return finite_numbers(kv.value());
        });
    }
    if (const json::array* a = v.if_array()) {
        return std::all_of(a->begin(), a->end(),
                           [](const json::value& x) { return finite_numbers(x); });
    }
    return true;
}

std::string_view key_of(const json::key_value_pair& kv) {
    return {kv.key().data(), kv.key().size()};
}

// A message a lenient reader could take differently from cordon where it matters to the
// filter: a member of `result` that case-folds to "tools" (Go's encoding/json would read
// "Tools" or "toolſ" as the list the filter never saw), a tool's member that case-folds to
// "name", or a message that is a request and a response at once (tools_of() skips requests;
// a client that dispatches on `result` would not). Refused, not passed; "" when none.
std::string_view ambiguity(const json::value& msg) {
    const json::object* o = msg.if_object();
    if (o == nullptr) {
        return {};
    }
    const json::value* result = o->if_contains("result");
    if (result == nullptr) {
        return {};
    }
    if (o->contains("method")) {
        return "a message with both method and result";
    }
    const json::object* r = result->if_object();
    if (r == nullptr) {
        return {};
    }
    for (const auto& kv : *r) {
        if (!case_folded_name(key_of(kv), {"tools"}).empty()) {
            return "a result member whose name case-folds to \"tools\"";
        }
    }
    const json::value* tools = r->if_contains("tools");
    if (tools == nullptr || !tools->is_array()) {
        return {};
    }
    for (const json::value& t : tools->get_array()) {
        if (const json::object* def = t.if_object()) {
            for (const auto& kv : *def) {
                if (!case_folded_name(key_of(kv), {"name"}).empty()) {
                    return "a tool member whose name case-folds to \"name\"";
                }
            }
        }
    }
    return {};
}

// Any "tool... member name, in any case: every name that case-folds to "tools" starts so
// ('t', 'o' and 'l' fold to nothing but themselves).
bool may_name_tools(std::string_view text) {
    for (std::size_t at = text.find('"'); at != std::string_view::npos;
         at = text.find('"', at + 1)) {
        if (text.size() - at >= 5) {
            const std::string_view w = text.substr(at + 1, 4);
            if (std::equal(w.begin(), w.end(), "tool", [](char a, char b) {
                    return (a >= 'A' && a <= 'Z' ? static_cast<char>(a - 'A' + 'a') : a) == b;
                })) {
                return true;
            }
        }
    }
    return false;
}

// Filters one message in place; true when it changed. `reported` holds the tools already
// named in r.changes (a list of 40,000 tools costs one pass, not a pass per tool).
bool filter_one(json::value& msg, const filter_context& ctx, filter_result& r,
                std::unordered_set<std::string>& reported) {
    json::array* tools = tools_of(msg);
    if (tools == nullptr) {
        return false;
    }
    json::array kept;
    for (json::value& t : *tools) {
        const json::object* def = t.if_object();
        const json::value* name = def != nullptr ? def->if_contains("name") : nullptr;
        const std::string_view tool = name != nullptr && name->is_string()
                                          ? std::string_view(name->get_string().data(),
                                                             name->get_string().size())
                                          : std::string_view();
        if (!config::valid_mcp_tool_name(tool)) {
            // No policy can name it, so no call of it is ever forwarded: never pinned (its
            // name could be megabytes), never shown.
            if (ctx.report) {
                kept.push_back(std::move(t));
            } else {
                ++r.removed;
            }
            continue;
        }
        bool holds = true;
        if (ctx.pins != nullptr) {
            const pin_store::pin p = ctx.pins->observe(ctx.session, ctx.server, tool, digest(t));
            holds = p == pin_store::pin::first || p == pin_store::pin::same;
            const bool report_it = p == pin_store::pin::changed ||
                                   (p == pin_store::pin::full && !r.full_reported);
            if (report_it && reported.insert(std::string(tool)).second) {
                r.changes.push_back(change{std::string(tool), p == pin_store::pin::full});
                r.full_reported = r.full_reported || p == pin_store::pin::full;
            }
        }
        if (ctx.report || (holds && ctx.spec.allows_tool(tool))) {
            kept.push_back(std::move(t));
        } else {
            ++r.removed;
        }
    }
    if (kept.size() == tools->size()) {
        return false;
    }
    *tools = std::move(kept);
    return true;
}

}  // namespace

pin_store::pin pin_store::observe(std::string_view session, std::string_view server,
                                  std::string_view tool, const tool_digest& d) {
    const std::lock_guard lock(m_);
    server_pins& s = by_session_[std::string(session)][std::string(server)];
    const auto it = s.tools.find(std::string(tool));
    if (it == s.tools.end()) {
        if (s.tools.size() >= max_per_server_) {
            s.full = true;
            return pin::full;
        }
        s.tools.emplace(std::string(tool), entry{d, false});
        return pin::first;
    }
    if (it->second.changed) {
        return pin::was_changed;
    }
    if (it->second.digest != d) {
        it->second.changed = true;
        return pin::changed;
    }
    return pin::same;
}

bool pin_store::changed(std::string_view session, std::string_view server,
                        std::string_view tool) const {
    const std::lock_guard lock(m_);
    const auto s = by_session_.find(std::string(session));
    if (s == by_session_.end()) {
        return false;
    }
    const auto srv = s->second.find(std::string(server));
    if (srv == s->second.end()) {
        return false;
    }
    const auto it = srv->second.tools.find(std::string(tool));
    if (it == srv->second.tools.end()) {
        // Never listed: a call before any tools/list pins nothing; one past the bound is
        // refused, since its definition could not be kept.
        return srv->second.full;
    }
    return it->second.changed;
}

void pin_store::forget(std::string_view session) {
    const std::lock_guard lock(m_);
    by_session_.erase(std::string(session));
}

std::size_t pin_store::sessions() const {
    const std::lock_guard lock(m_);
    return by_session_.size();
}

tool_digest digest_of_definition(std::string_view json_object) {
    json::error_code ec;
    const json::value v = json::parse(json::string_view(json_object.data(), json_object.size()),
                                      ec);
    return digest(ec ? json::value() : v);
}

filter_result filter_server_message(std::string_view text, const filter_context& ctx,
                                    std::string& out) {
    filter_result r;
    // Cheap first look: a message that cannot be a tools/list result is passed on as sent
    // once it is known to be well-formed.
    if (!well_formed_json(text, r.error)) {
        r.ok = false;
        return r;
    }
    if (!may_name_tools(text) && text.find("\\u") == std::string_view::npos) {
        return r;
    }
    json::parse_options opt;
    opt.max_depth = max_depth;
    json::error_code ec;
    json::value v = json::parse(json::string_view(text.data(), text.size()), ec, {}, opt);
    if (ec) {
        r.ok = false;
        r.error = "not a JSON text (" + ec.message() + ")";
        return r;
    }
    if (!finite_numbers(v)) {
        r.ok = false;
        r.error = "a number out of range";
        return r;
    }
    const auto refuse_ambiguous = [&r](const json::value& m) {
        const std::string_view why = ambiguity(m);
        if (!why.empty()) {
            r.ok = false;
            r.error = std::string(why);
        }
        return !why.empty();
    };
    if (json::array* batch = v.if_array()) {
        for (const json::value& m : *batch) {
            if (refuse_ambiguous(m)) {
                return r;
            }
        }
    } else if (refuse_ambiguous(v)) {
        return r;
    }
    bool changed = false;
    std::unordered_set<std::string> reported;
    if (json::array* batch = v.if_array()) {
        for (json::value& m : *batch) {
            changed = filter_one(m, ctx, r, reported) || changed;
        }
    } else {
        changed = filter_one(v, ctx, r, reported);
    }
    if (changed) {
        out = json::serialize(v);
        r.rewritten = true;
    }
    return r;
}

}  // namespace cordon::proxy::mcp
