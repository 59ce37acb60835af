#include "config/decide.hpp"

#include <algorithm>

#include "config/tables.hpp"

namespace cordon::config {
namespace {

void add_prefix(std::vector<prefix_level>& levels, const cidr& net, std::uint32_t rule) {
    auto it = std::find_if(levels.begin(), levels.end(),
                           [&](const prefix_level& l) { return l.len == net.prefix_len; });
    if (it == levels.end()) {
        levels.push_back(prefix_level{net.prefix_len, {}});
        it = levels.end() - 1;
    }
    it->nets[net.network.bytes()].push_back(rule);
}

int label_count(std::string_view name) {
    return static_cast<int>(std::count(name.begin(), name.end(), '.')) + 1;
}

job_tables build(const job& j) {
    job_tables t;
    std::unordered_map<std::string, rule_list> exact;
    std::unordered_map<std::string, rule_list> wildcard;
    for (std::uint32_t i = 0; i < j.egress.size(); ++i) {
        const egress_rule& r = j.egress[i];
        if (r.host) {
            (r.host->wildcard ? wildcard : exact)[r.host->name].push_back(i);
            if (r.host->wildcard) {
                t.wildcard_depths |= std::uint64_t{1} << std::min(label_count(r.host->name), 63);
            }
        } else if (r.net) {
            add_prefix(r.net->network.is_v4() ? t.v4 : t.v6, *r.net, i);
        }
    }
    auto longest_first = [](const prefix_level& a, const prefix_level& b) { return a.len > b.len; };
    std::sort(t.v4.begin(), t.v4.end(), longest_first);
    std::sort(t.v6.begin(), t.v6.end(), longest_first);
    t.exact.build(exact);
    t.wildcard.build(wildcard);
    return t;
}

}  // namespace

void name_table::build(const std::unordered_map<std::string, rule_list>& entries) {
    count_ = entries.size();
    std::size_t size = 16;
    while (size < entries.size() * 2) {
        size *= 2;
    }
    slots_.assign(size, slot{});
    for (const auto& [name, rules] : entries) {
        const std::uint64_t h = string_hash{}(name);
        std::size_t i = h & (size - 1);
        while (slots_[i].rules_count != 0) {
            i = (i + 1) & (size - 1);
        }
        slots_[i] = slot{
            h, static_cast<std::uint32_t>(keys_.size()), static_cast<std::uint32_t>(name.size()),
            static_cast<std::uint32_t>(rules_.size()), static_cast<std::uint32_t>(rules.size())};
        keys_ += name;
        rules_.insert(rules_.end(), rules.begin(), rules.end());
    }
}

compiled_policy::compiled_policy(config::policy p)
    : policy_(std::move(p)), tables_(std::make_unique<tables>()) {
    tables_->per_job.reserve(policy_.jobs.size());
    for (std::size_t i = 0; i < policy_.jobs.size(); ++i) {
        tables_->jobs.emplace(policy_.jobs[i].name, static_cast<int>(i));
        tables_->per_job.push_back(build(policy_.jobs[i]));
        for (const egress_rule& r : policy_.jobs[i].egress) {
            request_rules_ = request_rules_ || !r.http.empty();
        }
    }
}

compiled_policy::~compiled_policy() = default;

int compiled_policy::job_index(std::string_view name) const noexcept {
    const auto it = tables_->jobs.find(name);
    return it == tables_->jobs.end() ? -1 : it->second;
}

std::shared_ptr<const compiled_policy> compile(policy p) {
    return std::make_shared<const compiled_policy>(std::move(p));
}

}  // namespace cordon::config
