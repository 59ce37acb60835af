// Fuzzes MCP's readers of hostile bytes (proxy/mcp/): the first byte picks one.
//   0: a client's POST body (parse_request_body). Checked: every tools/call parsed names a
//      tool; its id, when present, is JSON text that parses back; its arguments are JSON text
//      that a second redaction leaves as it is, and that a fresh redactor fed them from a DOM
//      writes too (its buffers grow from nothing); refusal_answer is JSON.
//   1: a server's message (filter_server_message) against the rule `tools: [search]`.
//      Checked: a rewritten message is JSON and lists no tool but search in any tools array.
//   2: an event stream (sse_filter), its bytes fed whole and then cut at a point the next two
//      bytes pick. Checked: the output is the same however the stream is cut, and every
//      event's data that reached the handler was passed or rewritten, never partly.
// Any violation traps.
#include <boost/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "proxy/audit/tool_event.hpp"
#include "proxy/mcp/jsonrpc.hpp"
#include "proxy/mcp/sse.hpp"
#include "proxy/mcp/tools.hpp"

namespace {

namespace json = boost::json;
using namespace cordon::proxy::mcp;

void check(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s\n", what);
        __builtin_trap();
    }
}

bool parses(std::string_view text) {
    json::error_code ec;
    json::parse(json::string_view(text.data(), text.size()), ec);
    return !ec;
}

// No tools array anywhere lists a tool other than search.
bool only_search(const json::value& v) {
    if (const json::object* o = v.if_object()) {
        if (const json::value* r = o->if_contains("result"); r != nullptr && r->is_object()) {
            if (const json::value* t = r->get_object().if_contains("tools");
                t != nullptr && t->is_array()) {
                for (const json::value& tool : t->get_array()) {
                    const json::value* n = tool.is_object() ? tool.get_object().if_contains("name")
                                                            : nullptr;
                    if (n == nullptr || !n->is_string() || n->get_string() != "search") {
                        return false;
                    }
                }
            }
        }
    } else if (const json::array* a = v.if_array()) {
        for (const json::value& m : *a) {
            if (!only_search(m)) {
                return false;
            }
        }
    }
    return true;
}

// Feeds a fresh redactor (its buffers grow from nothing, as the thread's reused one's seldom
// do) the events of `v`, numbers as Boost writes them.
void feed(cordon::proxy::audit::argument_redactor& r, const json::value& v) {
    if (const json::object* o = v.if_object()) {
        r.begin_object();
        for (const auto& kv : *o) {
            r.key(std::string_view(kv.key()));
            feed(r, kv.value());
        }
        r.end();
    } else if (const json::array* a = v.if_array()) {
        r.begin_array();
        for (const json::value& e : *a) {
            feed(r, e);
        }
        r.end();
    } else if (const json::string* str = v.if_string()) {
        r.string(std::string_view(*str));
    } else if (v.is_null()) {
        r.null();
    } else {
        r.literal(json::serialize(v));  // a number or a boolean
    }
}

// The arguments of the index-th message of a body that parsed, as the DOM reads them.
const json::value* dom_arguments(const json::value& body, std::size_t index) {
    const json::value* m = &body;
    if (const json::array* a = body.if_array()) {
        if (index >= a->size()) {
            return nullptr;
        }
        m = &(*a)[index];
    }
    const json::value* params = m->is_object() ? m->get_object().if_contains("params") : nullptr;
    return params != nullptr && params->is_object() ? params->get_object().if_contains("arguments")
                                                    : nullptr;
}

cordon::config::mcp_spec spec() {
    cordon::config::mcp_spec s;
    s.tools = {"search"};
    return s;
}

std::string run_events(std::string_view in, std::size_t cut) {
    const cordon::config::mcp_spec s = spec();
    const filter_context ctx{s, false, nullptr, "", ""};
    sse_filter f(4096, [&](std::string_view data, std::string& replacement) {
        const filter_result r = filter_server_message(data, ctx, replacement);
        if (!r.ok) {
            return sse_filter::verdict::refuse;
        }
        return r.rewritten ? sse_filter::verdict::rewrite : sse_filter::verdict::pass;
    });
    std::string out;
    if (f.feed(in.substr(0, cut), out)) {
        f.feed(in.substr(cut), out);
    }
    f.finish(out);
    return out + (f.failed() ? "\n<failed>" : "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1 || size > 64 * 1024) {
        return 0;
    }
    const std::uint8_t mode = data[0] % 3;
    std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (mode == 0) {
        request_body body;
        std::string error;
        if (parse_request_body(in, body, error)) {
            check(!body.messages.empty(), "a parsed body has a message");
            std::vector<call_verdict> verdicts(body.messages.size());
            for (std::size_t i = 0; i < body.messages.size(); ++i) {
                const message& m = body.messages[i];
                check(!m.is_call() || !m.tool.empty(), "a call names its tool");
                check(!m.has_id() || parses(m.id), "an id is JSON text");
                check(m.arguments.empty() || parses(m.arguments), "arguments are JSON text");
                // Redacted as read: redacting the text again changes nothing.
                check(m.arguments.empty() ||
                          cordon::proxy::audit::redact_tool_arguments(m.arguments) == m.arguments,
                      "arguments are redacted once and for all");
                // A fresh redactor fed the same arguments from a DOM says the same.
                if (m.is_call() && !m.arguments.empty()) {
                    json::error_code ec;
                    const json::value dom = json::parse(json::string_view(in.data(), in.size()),
                                                        ec);
                    const json::value* args = ec ? nullptr : dom_arguments(dom, i);
                    if (args != nullptr) {
                        cordon::proxy::audit::argument_redactor fresh;
                        feed(fresh, *args);
                        const std::string again = fresh.finish();
                        check(parses(again) && json::parse(again) == json::parse(m.arguments),
                              "a fresh redactor writes what the reader's did");
                    }
                }
                verdicts[i].reason = cordon::config::deny_reason::mcp_tool;
            }
            check(parses(refusal_answer(body, verdicts, "job")), "the refusal is JSON");
        } else {
            check(!error.empty(), "a refusal says why");
        }
    } else if (mode == 1) {
        const cordon::config::mcp_spec s = spec();
        pin_store pins(8);
        const filter_context ctx{s, false, &pins, "session", "server"};
        std::string out;
        const filter_result r = filter_server_message(in, ctx, out);
        if (r.rewritten) {
            json::error_code ec;
            const json::value v = json::parse(out, ec);
            check(!ec, "a rewritten message is JSON");
            check(only_search(v), "a rewritten message lists only allowed tools");
        }
    } else {
        if (in.size() < 2) {
            return 0;
        }
        const std::size_t cut = (static_cast<std::size_t>(static_cast<std::uint8_t>(in[0])) << 8 |
                                 static_cast<std::uint8_t>(in[1])) %
                                (in.size() - 1);
        in.remove_prefix(2);
        const std::string whole = run_events(in, in.size());
        check(whole == run_events(in, std::min(cut, in.size())), "cut anywhere, the same stream");
    }
    return 0;
}
