// A rule's `mcp:` part (docs/mcp.md): the tools a tools/call may name, the message bound.

#include <algorithm>

#include "config/load_internal.hpp"
#include "config/units.hpp"

namespace cordon::config::detail {
namespace {

// Large enough for any tool call or tools/list seen in practice, small enough that a
// connection holding one whole message (cordon decides on the whole) costs little.
constexpr std::uint64_t max_mcp_body = 16ull * 1024 * 1024;

}  // namespace

void loader::load_mcp(const YAML::Node& n, const std::string& path, egress_rule& r) {
    if (!r.per_request()) {
        error(n, path,
              "'mcp' applies only to protocol: http and https (cordon must see the requests; "
              "for an MCP server over TLS, use protocol: https and the inspect section)");
        return;
    }
    if (!expect_map(n, path)) {
        return;
    }
    const auto keys = check_keys(n, path, {"tools", "max_body"});
    mcp_spec m;
    const auto* tools = find(keys, "tools");
    if (tools == nullptr) {
        error(n, path,
              "missing 'tools': the tools a tools/call may name (e.g. `tools: [search]`; "
              "`tools: []` allows none)");
    } else if (expect_list(*tools, path + ".tools", "tool names")) {
        for (std::size_t i = 0; i < tools->size(); ++i) {
            const std::string tp = path + ".tools[" + std::to_string(i) + "]";
            auto s = get_string((*tools)[i], tp);
            if (!s) {
                continue;
            }
            if (!valid_mcp_tool_name(*s)) {
                error((*tools)[i], tp,
                      "'" + *s +
                          "' is not a tool name (1-128 letters, digits, '_', '-', '.', "
                          "'/'; names are exact, no patterns)");
            } else if (std::find(m.tools.begin(), m.tools.end(), *s) != m.tools.end()) {
                error((*tools)[i], tp, "'" + *s + "' listed twice");
            } else {
                m.tools.push_back(std::move(*s));
            }
        }
        std::sort(m.tools.begin(), m.tools.end());
    }
    if (const auto* v = find(keys, "max_body")) {
        if (auto s = get_string(*v, path + ".max_body")) {
            const auto size = parse_size(*s);
            if (!size || *size < 1024 || *size > max_mcp_body) {
                error(*v, path + ".max_body",
                      "expected a size from 1KiB to 16MiB such as 1MiB, got '" + *s + "'");
            } else {
                m.max_body = *size;
            }
        }
    }
    r.mcp = std::move(m);
}

}  // namespace cordon::config::detail
