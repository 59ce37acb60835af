// Reading policy YAML: typed nodes, known keys, and each problem kept at its line and column.
#include "config/yaml_read.hpp"

#include <algorithm>
#include <charconv>
#include <set>
#include <system_error>

#include "config/units.hpp"

namespace cordon::config::detail {

namespace {

bool absolute_path(std::string_view s) {
    return !s.empty() && s.front() == '/' && s.find('\0') == std::string_view::npos;
}

}  // namespace

std::string kind_of(const YAML::Node& n) {
    switch (n.Type()) {
        case YAML::NodeType::Null: return "nothing";
        case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
        case YAML::NodeType::Sequence: return "a list";
        case YAML::NodeType::Map: return "a mapping";
        case YAML::NodeType::Undefined: return "nothing";
    }
    return "something else";
}

yaml_reader::yaml_reader(std::string file) : file_(std::move(file)) {}

void yaml_reader::error(const YAML::Mark& m, const std::string& path, const std::string& msg) {
    diagnostic d;
    d.file = file_;
    d.line = m.is_null() ? 0 : m.line + 1;
    d.column = m.is_null() ? 0 : m.column + 1;
    d.message = path.empty() ? msg : path + ": " + msg;
    errors_.push_back(std::move(d));
}
void yaml_reader::error(const YAML::Node& n, const std::string& path, const std::string& msg) {
    error(n.Mark(), path, msg);
}

const YAML::Node* yaml_reader::find(const key_list& keys, std::string_view name) {
    for (const auto& [k, v] : keys) {
        if (k == name) {
            return &v;
        }
    }
    return nullptr;
}

// Returns the entries of a mapping, reporting unknown and duplicate keys. Entries whose
// value is null count as absent, so `webhook: null` and a missing key read the same.
yaml_reader::key_list yaml_reader::check_keys(const YAML::Node& map, const std::string& path,
                                              std::initializer_list<std::string_view> allowed,
                                              bool keep_null) {
    key_list out;
    std::set<std::string> seen;
    // Range-for binds each entry to a named reference: yaml-cpp's `it->first` refers to
    // a temporary that dies at the end of the expression.
    for (const auto& entry : map) {
        const YAML::Node& key = entry.first;
        if (!key.IsScalar()) {
            error(key, path, "keys must be plain words, got " + kind_of(key));
            continue;
        }
        const std::string& k = key.Scalar();
        const std::string where = path.empty() ? k : path + "." + k;
        if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
            std::string list;
            for (const auto& a : allowed) {
                list += list.empty() ? "" : ", ";
                list += a;
            }
            error(key, path.empty() ? std::string("policy") : path,
                  "unknown key '" + k + "' (expected one of: " + list + ")");
            continue;
        }
        if (!seen.insert(k).second) {
            error(key, where, "key given twice");
            continue;
        }
        if (!keep_null && entry.second.IsNull()) {
            continue;
        }
        out.emplace_back(k, entry.second);
    }
    return out;
}

bool yaml_reader::expect_map(const YAML::Node& n, const std::string& path) {
    if (!n.IsMap()) {
        error(n, path, "expected a mapping, got " + kind_of(n));
        return false;
    }
    return true;
}

bool yaml_reader::expect_list(const YAML::Node& n, const std::string& path,
                              const std::string& what) {
    if (!n.IsSequence()) {
        error(n, path, "expected a list of " + what + ", got " + kind_of(n));
        return false;
    }
    return true;
}

std::optional<std::string> yaml_reader::get_string(const YAML::Node& n, const std::string& path,
                                                   bool allow_empty) {
    if (!n.IsScalar()) {
        error(n, path, "expected a string, got " + kind_of(n));
        return std::nullopt;
    }
    if (!allow_empty && n.Scalar().empty()) {
        error(n, path, "must not be empty");
        return std::nullopt;
    }
    if (n.Scalar().find('\0') != std::string::npos) {
        error(n, path, "contains a NUL byte");
        return std::nullopt;
    }
    return n.Scalar();
}

std::optional<std::int64_t> yaml_reader::get_int(const YAML::Node& n, const std::string& path,
                                                 std::int64_t lo, std::int64_t hi,
                                                 const std::string& what) {
    const std::string expected = "expected " + what + " " + std::to_string(lo) + ".." +
                                 std::to_string(hi);
    if (!n.IsScalar()) {
        error(n, path, expected + ", got " + kind_of(n));
        return std::nullopt;
    }
    const std::string& s = n.Scalar();
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() ||
        (s.size() > 1 && s[0] == '0')) {
        error(n, path, expected + ", got " + kind_of(n));
        return std::nullopt;
    }
    if (v < lo || v > hi) {
        error(n, path, s + " is out of range; " + expected);
        return std::nullopt;
    }
    return v;
}

std::vector<std::string> yaml_reader::get_strings(const YAML::Node& n, const std::string& path,
                                                  const std::string& what) {
    std::vector<std::string> out;
    if (!expect_list(n, path, what)) {
        return out;
    }
    for (std::size_t i = 0; i < n.size(); ++i) {
        if (auto s = get_string(n[i], path + "[" + std::to_string(i) + "]")) {
            out.push_back(std::move(*s));
        }
    }
    return out;
}

std::optional<std::string> yaml_reader::get_path(const YAML::Node& n, const std::string& path) {
    auto s = get_string(n, path);
    if (s && !absolute_path(*s)) {
        error(n, path, "'" + *s + "' is not an absolute path");
        return std::nullopt;
    }
    return s;
}

std::optional<cidr> yaml_reader::get_cidr(const YAML::Node& n, const std::string& path) {
    auto s = get_string(n, path);
    if (!s) {
        return std::nullopt;
    }
    cidr_result r = parse_cidr(*s);
    if (!r.value) {
        error(n, path, r.error);
        return std::nullopt;
    }
    return r.value;
}

std::vector<cidr> yaml_reader::get_cidrs(const YAML::Node& n, const std::string& path) {
    std::vector<cidr> out;
    if (!expect_list(n, path, "CIDR prefixes")) {
        return out;
    }
    for (std::size_t i = 0; i < n.size(); ++i) {
        if (auto c = get_cidr(n[i], path + "[" + std::to_string(i) + "]")) {
            out.push_back(*c);
        }
    }
    return out;
}

std::optional<endpoint> yaml_reader::get_endpoint(const YAML::Node& n, const std::string& path) {
    auto s = get_string(n, path);
    if (!s) {
        return std::nullopt;
    }
    endpoint_result r = parse_endpoint(*s);
    if (!r.value) {
        error(n, path, r.error);
    }
    return r.value;
}

std::optional<std::chrono::milliseconds> yaml_reader::get_duration(const YAML::Node& n,
                                                                   const std::string& path,
                                                                   std::chrono::milliseconds lo,
                                                                   std::chrono::milliseconds hi) {
    auto s = get_string(n, path);
    if (!s) {
        return std::nullopt;
    }
    auto d = parse_duration(*s);
    if (!d) {
        error(n, path, "expected a duration such as 500ms, 10s or 5m, got '" + *s + "'");
        return std::nullopt;
    }
    if (*d < lo || *d > hi) {
        error(n, path,
              "'" + *s + "' is outside " + format_duration(lo) + ".." + format_duration(hi));
        return std::nullopt;
    }
    return d;
}

}  // namespace cordon::config::detail
