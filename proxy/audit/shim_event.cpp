#include "proxy/audit/shim_event.hpp"

#include <boost/json.hpp>

#include <set>

#include "common/time.hpp"
#include "proxy/audit/redact.hpp"

namespace cordon::proxy::audit {
namespace {

namespace json = boost::json;

constexpr std::size_t max_body = 16 * 1024;
constexpr std::size_t max_path = 4096;
constexpr std::size_t max_label = 256;

std::optional<json::object> object_of(std::string_view body) {
    if (body.size() > max_body) {
        return std::nullopt;
    }
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (ec || !v.is_object()) {
        return std::nullopt;
    }
    return std::move(v.as_object());
}

}  // namespace

bool is_shim_event(std::string_view body) {
    const auto o = object_of(body);
    if (!o || !o->contains("event") || !o->at("event").is_string()) {
        return false;
    }
    const std::string_view e = o->at("event").as_string();
    return e == "file.write" || e == "identity.mint" || e == "identity.revoke";
}

std::optional<audit_record> parse_shim_event(std::string_view body, std::string_view session,
                                             std::string_view job,
                                             common::wall_clock::time_point ts,
                                             std::string& error) {
    const auto o = object_of(body);
    if (!o) {
        error = "expected a JSON object of at most 16 KiB";
        return std::nullopt;
    }
    if (!o->contains("event") || !o->at("event").is_string()) {
        error = "missing \"event\"";
        return std::nullopt;
    }
    const std::string event(o->at("event").as_string());
    std::set<std::string> allowed;
    if (event == "file.write") {
        allowed = {"event", "path", "size", "not_audited"};
    } else if (event == "identity.mint") {
        allowed = {"event", "ok", "exit_code", "duration_ms", "bytes", "to"};
    } else if (event == "identity.revoke") {
        allowed = {"event", "ok", "exit_code", "duration_ms", "when"};
    } else {
        error = "unknown event '" + event + "'";
        return std::nullopt;
    }
    for (const auto& kv : *o) {
        if (!allowed.contains(std::string(kv.key()))) {
            error = "unknown key '" + std::string(kv.key()) + "' for " + event;
            return std::nullopt;
        }
    }
    audit_record r(event, ts);
    r.add("session", session).add("job", job).add("by", "cordon-run");
    const auto get_uint = [&](const char* key, bool required) -> bool {
        if (!o->contains(key)) {
            if (required) {
                error = std::string("missing \"") + key + "\"";
            }
            return !required;
        }
        const auto& v = o->at(key);
        if (v.is_uint64()) {
            r.add(key, v.as_uint64());
            return true;
        }
        if (v.is_int64() && v.as_int64() >= 0) {
            r.add(key, static_cast<std::uint64_t>(v.as_int64()));
            return true;
        }
        error = std::string("\"") + key + "\" must be a non-negative integer";
        return false;
    };
    const auto get_label = [&](const char* key) -> bool {
        if (!o->contains(key)) {
            return true;
        }
        const auto& v = o->at(key);
        if (!v.is_string() || v.as_string().size() > max_label) {
            error = std::string("\"") + key + "\" must be a string of at most 256 bytes";
            return false;
        }
        r.add(key, redact_text(std::string_view(v.as_string())));
        return true;
    };
    if (event == "file.write") {
        if (!o->contains("path") || !o->at("path").is_string()) {
            error = "missing \"path\"";
            return std::nullopt;
        }
        const std::string_view path = o->at("path").as_string();
        if (path.empty() || path.front() != '/' || path.size() > max_path) {
            error = "\"path\" must be absolute and at most 4096 bytes";
            return std::nullopt;
        }
        r.add("path", redact_text(path));
        // not_audited: the shim's count of writes it could not report (over its rate, in an
        // unwatched directory), posted once at the end with the scratch dir as path.
        if (!get_uint("size", true) || !get_uint("not_audited", false)) {
            return std::nullopt;
        }
        return r;
    }
    if (!o->contains("ok") || !o->at("ok").is_bool()) {
        error = "missing \"ok\" (true or false)";
        return std::nullopt;
    }
    r.add("ok", o->at("ok").as_bool());
    if (o->contains("exit_code")) {
        const auto& v = o->at("exit_code");
        if (!v.is_int64() && !v.is_uint64()) {
            error = "\"exit_code\" must be an integer";
            return std::nullopt;
        }
        r.add("exit_code", v.is_int64() ? v.as_int64() : static_cast<std::int64_t>(v.as_uint64()));
    }
    if (!get_uint("duration_ms", false) || !get_uint("bytes", false) || !get_label("to") ||
        !get_label("when")) {
        return std::nullopt;
    }
    return r;
}

}  // namespace cordon::proxy::audit
