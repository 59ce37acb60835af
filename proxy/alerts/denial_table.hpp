#pragma once
// The denied targets of each job, as a bounded top-N kept in memory (GET /v1/denials,
// `cordon status`). Targets are unbounded (any name an agent tries), so each job keeps a
// fixed number of counters with the Space-Saving algorithm (Metwally et al. 2005): a new
// target takes the place of the least counted one. Pure: no I/O; time is passed in.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cordon::proxy::alerts {

/// The fixed set of deny-reason labels (metrics and this table): the names of
/// config::deny_reason but `none`, the resolver's own (`no_session`, `qtype`), and `other`.
std::span<const std::string_view> deny_reason_labels() noexcept;
/// The index of `reason` in deny_reason_labels(); the index of `other` for an unknown name.
std::size_t deny_reason_label(std::string_view reason) noexcept;

/// Label value for a denial no job could be attributed to. Job names are [A-Za-z0-9._-],
/// so it never collides with one.
inline constexpr std::string_view unattributed_job = "(none)";

/// Top denied targets per job. Thread-safe: record() takes a shared lock on the job map and
/// the job's own mutex, and is O(per_job); memory is bounded by max_jobs * per_job entries
/// of at most max_target bytes each.
class denial_table {
public:
    using time_point = std::chrono::system_clock::time_point;

    struct limits {
        std::size_t max_jobs = 1024;   ///< jobs beyond this are counted in dropped() only
        std::size_t per_job = 32;      ///< counters per job
        std::size_t max_target = 255;  ///< longer targets are cut (bytes)
    };

    struct entry {
        std::string target;           ///< printable ASCII: other bytes become '?'
        std::uint64_t count = 0;      ///< an upper bound of the target's denials
        std::uint64_t error = 0;      ///< overestimate: count - error is a lower bound
        std::uint32_t reasons = 0;    ///< bit i: deny_reason_labels()[i] was seen
        std::size_t last_reason = 0;  ///< index into deny_reason_labels()
        std::uint8_t kinds = 0;       ///< bit 0 connect, 1 http, 2 dns, 3 other
        time_point first_seen{};      ///< since this counter holds this target
        time_point last_seen{};
    };

    struct job_denials {
        std::string job;          ///< unattributed_job for ""
        std::uint64_t total = 0;  ///< every denial of the job, listed or not
        std::vector<entry> top;   ///< by count, highest first, then target
    };

    denial_table();
    explicit denial_table(limits l);
    denial_table(const denial_table&) = delete;
    denial_table& operator=(const denial_table&) = delete;
    ~denial_table();

    /// `n` identical denials (one, or repeats the DNS server reports at once). `kind` is
    /// "connect", "http" or "dns".
    void record(std::string_view job, std::string_view target, std::string_view reason,
                std::string_view kind, time_point now, std::uint64_t n = 1);

    /// The jobs (all, or only `job`) with their top `n` targets, jobs in name order. A job
    /// not seen yet is absent.
    std::vector<job_denials> snapshot(std::optional<std::string_view> job = std::nullopt,
                                      std::size_t n = SIZE_MAX) const;

    /// Denials not recorded because max_jobs jobs were already tracked.
    std::uint64_t dropped() const noexcept;
    const limits& bounds() const noexcept { return limits_; }

    /// The names of kinds bits, in bit order.
    static std::span<const std::string_view> kind_names() noexcept;

private:
    struct job_slot;
    job_slot* find_or_add(std::string_view job);

    limits limits_;
    mutable std::shared_mutex jobs_mu_;
    struct name_hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view s) const noexcept {
            return std::hash<std::string_view>{}(s);
        }
    };
    std::unordered_map<std::string, std::unique_ptr<job_slot>, name_hash, std::equal_to<>> jobs_;
    std::atomic<std::uint64_t> dropped_{0};
};

}  // namespace cordon::proxy::alerts
