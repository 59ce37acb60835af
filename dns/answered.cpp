#include "dns/answered.hpp"

#include <algorithm>

#include "dns/wire.hpp"

namespace cordon::dns {

std::vector<answered_address> answer_addresses(std::span<const std::uint8_t> msg) {
    std::vector<answered_address> out;
    const auto view = parse_answer(msg);
    if (!view || rcode_of(view->flags) != 0 || (view->flags & flag_tc) != 0) {
        return out;
    }
    for (const record& r : view->answers) {
        if (r.rclass != class_in) {
            continue;
        }
        if (r.type == type_a && r.rdata.size() == 4) {
            out.push_back(
                {config::ip_address::v4({r.rdata[0], r.rdata[1], r.rdata[2], r.rdata[3]}), r.ttl});
        } else if (r.type == type_aaaa && r.rdata.size() == 16) {
            std::array<std::uint8_t, 16> b{};
            std::copy(r.rdata.begin(), r.rdata.end(), b.begin());
            out.push_back({config::ip_address::v6(b), r.ttl});
        }
    }
    return out;
}

std::string answered_names::key_of(const config::ip_address& a, std::string_view job,
                                   std::string_view session) {
    std::string k;
    k.reserve(17 + job.size() + 1 + session.size());
    k += a.is_v4() ? '4' : '6';
    k.append(reinterpret_cast<const char*>(a.bytes().data()), a.is_v4() ? 4 : 16);
    k += job;
    k += '\0';  // job names have no NUL: "ab"+"c" and "a"+"bc" are different keys
    k += session;
    return k;
}

void answered_names::remember(const config::ip_address& a, std::string_view name,
                              std::string_view job, std::string_view session,
                              clock::time_point until) {
    std::string key = key_of(a, job, session);
    std::lock_guard lock(mu_);
    auto it = names_.find(key);
    if (it == names_.end()) {
        while (names_.size() >= max_keys_ && !order_.empty()) {
            names_.erase(order_.front());
            order_.pop_front();
        }
        if (max_keys_ == 0) {
            return;
        }
        order_.push_back(key);
        it = names_.emplace(std::move(key), std::vector<name_until>{}).first;
    }
    auto& v = it->second;
    const std::uint64_t seq = ++seq_;
    for (auto& e : v) {
        if (e.name == name) {
            e.until = until;
            e.seq = seq;
            return;
        }
    }
    if (v.size() >= names_per_key) {
        // The one expiring first makes room (an expired one, if any).
        v.erase(std::min_element(v.begin(), v.end(), [](const name_until& x, const name_until& y) {
            return x.until < y.until;
        }));
    }
    v.push_back({std::string(name), until, seq});
}

std::vector<std::string> answered_names::lookup(const config::ip_address& a, std::string_view job,
                                                std::string_view session,
                                                clock::time_point now) const {
    std::vector<std::string> out;
    const std::string key = key_of(a, job, session);
    std::lock_guard lock(mu_);
    const auto it = names_.find(key);
    if (it == names_.end()) {
        return out;
    }
    std::vector<const name_until*> live;
    for (const auto& e : it->second) {
        if (now < e.until) {
            live.push_back(&e);
        }
    }
    std::sort(live.begin(), live.end(),
              [](const name_until* x, const name_until* y) { return x->seq > y->seq; });
    for (const auto* e : live) {
        out.push_back(e->name);
    }
    return out;
}

std::size_t answered_names::keys() const {
    std::lock_guard lock(mu_);
    return names_.size();
}

}  // namespace cordon::dns
