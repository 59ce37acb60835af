#pragma once
// Reading policy YAML: typed nodes, known keys, and each problem kept at its line and column.

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/ip.hpp"
#include "config/load.hpp"
#include "config/policy.hpp"

namespace cordon::config::detail {

/// How a node reads in an error message: "nothing", "'text'", "a list" or "a mapping".
std::string kind_of(const YAML::Node& n);

/// Reads the nodes of one policy file, collecting every problem as a diagnostic. Each
/// get_* reports what is wrong and returns nothing rather than throwing.
class yaml_reader {
public:
    explicit yaml_reader(std::string file);

    std::vector<diagnostic>& errors() { return errors_; }

    void error(const YAML::Mark& m, const std::string& path, const std::string& msg);
    void error(const YAML::Node& n, const std::string& path, const std::string& msg);

protected:
    using key_list = std::vector<std::pair<std::string, YAML::Node>>;

    static const YAML::Node* find(const key_list& keys, std::string_view name);

    // Returns the entries of a mapping, reporting unknown and duplicate keys. Entries whose
    // value is null count as absent, so `webhook: null` and a missing key read the same.
    key_list check_keys(const YAML::Node& map, const std::string& path,
                        std::initializer_list<std::string_view> allowed, bool keep_null = false);

    bool expect_map(const YAML::Node& n, const std::string& path);
    bool expect_list(const YAML::Node& n, const std::string& path, const std::string& what);
    std::optional<std::string> get_string(const YAML::Node& n, const std::string& path,
                                          bool allow_empty = false);
    std::optional<std::int64_t> get_int(const YAML::Node& n, const std::string& path,
                                        std::int64_t lo, std::int64_t hi, const std::string& what);
    std::vector<std::string> get_strings(const YAML::Node& n, const std::string& path,
                                         const std::string& what);
    std::optional<std::string> get_path(const YAML::Node& n, const std::string& path);
    std::optional<cidr> get_cidr(const YAML::Node& n, const std::string& path);
    std::vector<cidr> get_cidrs(const YAML::Node& n, const std::string& path);
    std::optional<endpoint> get_endpoint(const YAML::Node& n, const std::string& path);
    std::optional<std::chrono::milliseconds> get_duration(const YAML::Node& n,
                                                          const std::string& path,
                                                          std::chrono::milliseconds lo,
                                                          std::chrono::milliseconds hi);

    std::string file_;
    std::vector<diagnostic> errors_;
};

}  // namespace cordon::config::detail
