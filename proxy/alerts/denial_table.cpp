#include "proxy/alerts/denial_table.hpp"

#include <algorithm>
#include <array>

#include "config/decide.hpp"

namespace cordon::proxy::alerts {
namespace {

// config::deny_reason but none, then the resolver's own reasons, then the catch-all.
constexpr std::size_t extra_labels = 3;
using label_array = std::array<std::string_view, config::deny_reason_count - 1 + extra_labels>;

const label_array& labels() {
    static const label_array all = [] {
        label_array a{};
        for (std::size_t i = 1; i < config::deny_reason_count; ++i) {
            a[i - 1] = config::to_string(static_cast<config::deny_reason>(i));
        }
        a[a.size() - 3] = "no_session";  // DNS: the query could not be tied to a job
        a[a.size() - 2] = "qtype";       // DNS: a query type the resolver refuses
        a[a.size() - 1] = "other";
        return a;
    }();
    return all;
}

// "https": a request refused inside an inspected tunnel.
constexpr std::array<std::string_view, 5> kinds{"connect", "http", "dns", "https", "other"};

std::uint8_t kind_bit(std::string_view kind) {
    for (std::size_t i = 0; i + 1 < kinds.size(); ++i) {
        if (kinds[i] == kind) {
            return static_cast<std::uint8_t>(1U << i);
        }
    }
    return static_cast<std::uint8_t>(1U << (kinds.size() - 1));
}

// Targets come from clients: cut to `max` bytes and keep them printable ASCII, so neither
// the JSON nor a terminal showing it can be fed control sequences.
std::string clean_target(std::string_view t, std::size_t max) {
    std::string out(t.substr(0, max));
    for (char& c : out) {
        if (c < 0x21 || c > 0x7e) {
            c = '?';
        }
    }
    return out;
}

}  // namespace

std::span<const std::string_view> deny_reason_labels() noexcept { return labels(); }

std::size_t deny_reason_label(std::string_view reason) noexcept {
    const auto& all = labels();
    for (std::size_t i = 0; i + 1 < all.size(); ++i) {
        if (all[i] == reason) {
            return i;
        }
    }
    return all.size() - 1;
}

std::span<const std::string_view> denial_table::kind_names() noexcept { return kinds; }

struct denial_table::job_slot {
    std::mutex mu;
    std::uint64_t total = 0;
    std::vector<entry> entries;  // at most limits_.per_job
};

denial_table::denial_table() : denial_table(limits{}) {}
denial_table::denial_table(limits l) : limits_(l) {
    limits_.per_job = std::max<std::size_t>(limits_.per_job, 1);
}
denial_table::~denial_table() = default;

denial_table::job_slot* denial_table::find_or_add(std::string_view job) {
    {
        std::shared_lock lock(jobs_mu_);
        const auto it = jobs_.find(job);
        if (it != jobs_.end()) {
            return it->second.get();
        }
    }
    std::unique_lock lock(jobs_mu_);
    auto it = jobs_.find(job);
    if (it != jobs_.end()) {
        return it->second.get();
    }
    if (jobs_.size() >= limits_.max_jobs) {
        return nullptr;
    }
    it = jobs_.emplace(std::string(job), std::make_unique<job_slot>()).first;
    return it->second.get();
}

void denial_table::record(std::string_view job, std::string_view target, std::string_view reason,
                          std::string_view kind, time_point now, std::uint64_t n) {
    job_slot* slot = find_or_add(job.empty() ? unattributed_job : job);
    if (slot == nullptr) {
        ++dropped_;
        return;
    }
    const std::string t = clean_target(target, limits_.max_target);
    const std::size_t r = deny_reason_label(reason);
    const std::uint8_t k = kind_bit(kind);
    std::lock_guard lock(slot->mu);
    slot->total += n;
    auto& es = slot->entries;
    entry* hit = nullptr;
    for (auto& e : es) {
        if (e.target == t) {
            hit = &e;
            break;
        }
    }
    if (hit == nullptr && es.size() < limits_.per_job) {
        hit = &es.emplace_back();
        hit->target = t;
        hit->first_seen = now;
    } else if (hit == nullptr) {
        // Space-Saving: the least counted target gives its counter to the new one, which
        // inherits its count as the possible overestimate.
        hit = &*std::min_element(es.begin(), es.end(), [](const entry& a, const entry& b) {
            return a.count < b.count || (a.count == b.count && a.last_seen < b.last_seen);
        });
        hit->target = t;
        hit->error = hit->count;
        hit->reasons = 0;
        hit->kinds = 0;
        hit->first_seen = now;
    }
    hit->count += n;
    hit->reasons |= 1U << r;
    hit->last_reason = r;
    hit->kinds |= k;
    hit->last_seen = std::max(hit->last_seen, now);
}

std::vector<denial_table::job_denials> denial_table::snapshot(std::optional<std::string_view> job,
                                                              std::size_t n) const {
    std::vector<job_denials> out;
    std::shared_lock lock(jobs_mu_);
    for (const auto& [name, slot] : jobs_) {
        if (job && *job != name) {
            continue;
        }
        job_denials j;
        j.job = name;
        {
            std::lock_guard slot_lock(slot->mu);
            j.total = slot->total;
            j.top = slot->entries;
        }
        std::sort(j.top.begin(), j.top.end(), [](const entry& a, const entry& b) {
            return a.count != b.count ? a.count > b.count : a.target < b.target;
        });
        if (j.top.size() > n) {
            j.top.resize(n);
        }
        out.push_back(std::move(j));
    }
    std::sort(out.begin(), out.end(),
              [](const job_denials& a, const job_denials& b) { return a.job < b.job; });
    return out;
}

std::uint64_t denial_table::dropped() const noexcept { return dropped_.load(); }

}  // namespace cordon::proxy::alerts
