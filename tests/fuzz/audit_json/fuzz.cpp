// Fuzzes what the audit log writes from hostile bytes (proxy/audit/audit.hpp,
// common/json_string.hpp): request targets, host names, SNI and tool arguments reach these as they
// came. The input is split (first byte) into a field name and a value. Checked, any violation
// traps:
//  - both escaper forms are valid JSON strings; they decode to the same text; that text is
//    the input when the input is valid UTF-8; the ASCII form is printable ASCII;
//  - an audit record with the name and value (added twice, then beside a url field, an
//    integer and a null) is one line, parses as a JSON object, keeps "ts" and "event" first
//    and has one member per distinct name; a secret-looking name's value is never the input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "common/json_string.hpp"
#include "common/time.hpp"
#include "common/utf8.hpp"
#include "proxy/audit/audit.hpp"
#include "proxy/audit/redact.hpp"

namespace {

void check(bool ok, const char* what, std::size_t size) {
    if (!ok) {
        std::fprintf(stderr, "invariant violated: %s (input %zu bytes)\n", what, size);
        __builtin_trap();
    }
}

std::string decoded(const std::string& json, std::size_t size) {
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(json, ec);
    check(!ec && v.is_string(), "escaped string parses as a JSON string", size);
    return std::string(v.as_string());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    const std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
    const std::size_t split = std::min<std::size_t>(data[0] % 32, all.size());
    const std::string_view key = all.substr(0, split);
    const std::string_view value = all.substr(split);

    std::string utf8_form;
    std::string ascii_form;
    cordon::common::append_json_string(utf8_form, all);
    cordon::common::append_json_string_ascii(ascii_form, all);
    const std::string a = decoded(utf8_form, size);
    check(a == decoded(ascii_form, size), "both forms decode to the same text", size);
    if (std::vector<std::uint32_t> cps; cordon::common::utf8::decode(all, cps)) {
        check(a == all, "valid UTF-8 round-trips", size);
    }
    for (const char c : ascii_form) {
        check(c >= 0x20 && c < 0x7f, "the ASCII form is printable ASCII", size);
    }

    using namespace cordon::proxy::audit;
    using cordon::common::wall_clock;
    audit_record r("e", wall_clock::time_point{});
    r.add(key, value).add(key, value).add("target", value).add("n", 5).add_null("z");
    const std::string line = r.to_json_line();
    check(!line.empty() && line.back() == '\n', "a record ends with its newline", size);
    check(line.find('\n') == line.size() - 1, "a record is one line", size);
    boost::system::error_code ec;
    const std::string_view body = std::string_view(line).substr(0, line.size() - 1);
    const boost::json::value v = boost::json::parse(body, ec);
    check(!ec && v.is_object(), "a record parses as a JSON object", size);
    const boost::json::object& o = v.as_object();
    check(o.begin() != o.end() && o.begin()->key() == "ts", "ts comes first", size);
    check(o.contains("event") && o.at("event") == "e", "event is kept", size);
    const std::string k = decoded(
        [&] {
            std::string q;
            cordon::common::append_json_string(q, key);
            return q;
        }(),
        size);
    const bool reserved = key == "ts" || key == "event";
    std::size_t want = 5;  // ts, event, target, n, z
    if (!reserved && k != "target" && k != "n" && k != "z") {
        ++want;
    }
    check(o.size() == want, "one member per distinct name", size);
    check(r.size() == want - 2, "a name added again replaces its field", size);
    if (!reserved && cordon::proxy::audit::secret_field_name(key) && !value.empty() &&
        value != redacted) {
        const boost::json::value* got = o.if_contains(k);
        check(got != nullptr && got->is_string() && got->as_string() != value,
              "a secret-looking name's value is not written", size);
    }
    return 0;
}
