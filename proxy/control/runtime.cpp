#include "proxy/control/runtime.hpp"

#include <iostream>

#include "config/classify.hpp"
#include "config/load.hpp"
#include "config/mode.hpp"
#include "proxy/audit/redact.hpp"
#include "proxy/inspect/inspector.hpp"

namespace cordon::proxy::control {
namespace {

std::vector<std::string> job_names(const config::compiled_policy& p) {
    std::vector<std::string> out;
    for (const auto& j : p.source().jobs) {
        out.push_back(j.name);
    }
    return out;
}

}  // namespace

bool self_addresses::is_self(const config::ip_address& a, std::uint16_t port) const {
    // Loopback and the unspecified range (0.0.0.0/8, ::, and their mapped or embedded
    // forms: Linux connects 0.0.0.0 to 127.0.0.1) reach this host: they are refused for
    // every listener port, whatever address that listener is bound to. Conservative: a
    // listener on one interface address is not reached through 127.0.0.1, but nothing on
    // this host is worth that guess.
    const bool this_host = config::reaches_this_host(a);
    for (const auto& l : listeners) {
        if (l.port != port) {
            continue;
        }
        if (this_host || l.address == a) {
            return true;
        }
        const bool wildcard = l.address.bytes() == std::array<std::uint8_t, 16>{};
        if (wildcard) {
            for (const auto& local_addr : local) {
                if (local_addr == a) {
                    return true;
                }
            }
        }
    }
    return false;
}

runtime::runtime(std::string config_path, std::shared_ptr<const config::compiled_policy> p)
    : config_path_(std::move(config_path)), policy_(std::move(p)) {
    stats.add_jobs(job_names(*policy_.load()));
}

void runtime::set_inspection(std::shared_ptr<inspect::inspector> i) {
    if (audit_log_) {
        std::shared_ptr<const audit::audit_log::line_filter> filter;
        if (i && i->broker() != nullptr) {
            filter = std::make_shared<const audit::audit_log::line_filter>(
                [i](std::string& text, std::size_t from) { i->broker()->hide_values(text, from); });
        }
        if (!instance.empty()) {
            // A fleet: every record says which instance wrote it (a name of [A-Za-z0-9._-],
            // nothing to escape), before the closing brace of its line.
            filter = std::make_shared<const audit::audit_log::line_filter>(
                [inner = std::move(filter), field = ",\"instance\":\"" + instance +
                                                    "\""](std::string& text, std::size_t from) {
                    if (inner) {
                        (*inner)(text, from);
                    }
                    const auto close = text.rfind('}');
                    if (close != std::string::npos && close >= from) {
                        text.insert(close, field);
                    }
                });
        }
        audit_log_->set_line_filter(std::move(filter));
    }
    inspection_.store(std::move(i));
}

bool runtime::audit(audit::audit_record&& r) {
    return audit_log_ != nullptr && audit_log_->write(std::move(r));
}

bool runtime::audit_durable(audit::audit_record&& r) {
    // Bounded: a hung disk must not hang the control thread (and with it further kills).
    constexpr std::chrono::seconds max_wait{2};
    return audit_log_ != nullptr && audit_log_->write_durable(std::move(r), max_wait);
}

bool runtime::audit_healthy() const { return audit_log_ != nullptr && audit_log_->healthy(); }

void runtime::denied(const denial& d) {
    // Observers (metrics, the denial table, the webhook) join here. A target is host:port
    // or a name, except where a request is refused before its target is parsed (kill
    // switch, credentials, audit failure): then it is the request-target as sent (absolute,
    // origin or authority form), whose userinfo, query secrets and token shapes never reach
    // the table or the webhook. Anything but a plain host[:port] is redacted.
    std::string cleaned;
    std::string_view target = d.target;
    if (target.find_first_of("/?@;#") != std::string_view::npos) {
        cleaned = audit::redact_text(audit::redact_url(target));
        target = cleaned;
    }
    // A DNS refusal is no connection; a request refused inside an inspected tunnel is one of
    // the tunnel's (counted in cordon_http_requests_total), not a connection of its own.
    stats.count_denied(d.job, d.reason, d.kind != "dns" && d.kind != "https", d.count);
    denials.record(d.job, target, d.reason, d.kind, now(), d.count);
    if (notifier) {
        notifier->submit(d.job, d.session, d.reason, target, d.kind, d.count);
    }
}

std::shared_ptr<session_usage> runtime::usage_for(const std::string& session) {
    std::lock_guard lock(usage_mu_);
    auto& u = usage_[session];
    if (!u) {
        u = std::make_shared<session_usage>();
    }
    return u;
}

void runtime::forget_usage(const std::string& session) {
    {
        std::lock_guard lock(usage_mu_);
        usage_.erase(session);
    }
    mcp_pins.forget(session);
}

awaitable<std::string> runtime::reload(const std::string& by,
                                       std::vector<std::string>* needs_restart) {
    config::load_result r = config::load_policy_file(config_path_);
    if (!r.ok()) {
        std::string errors;
        for (const auto& e : r.errors) {
            errors += e.to_string();
            errors += '\n';
        }
        ++reloads_failed;
        stats.count_config_reload(false);
        auto rec = record("config.reload");
        rec.add("result", "error").add("by", by).add("source", config_path_).add("errors", errors);
        audit(std::move(rec));
        co_return errors;
    }
    // What only a restart applies keeps its running value (and /v1/status reports that):
    // say which changes wait for one, never pretend they took effect.
    const std::vector<std::string> restart_only = config::keep_restart_only(policy()->source(),
                                                                            *r.value);
    for (const auto& name : restart_only) {
        std::cerr << "cordon: reload: " << name << " changed: needs restart (the running "
                  << "value stays in force)\n";
    }
    if (needs_restart != nullptr) {
        *needs_restart = restart_only;
    }
    // The inspection CA and upstream roots are read again (a rotated CA applies now); a file
    // that no longer loads fails the reload and the running policy stays.
    std::shared_ptr<inspect::inspector> inspection;
    if (r.value->inspect) {
        std::string error;
        inspection = inspect::inspector::load(*r.value->inspect, r.value->secrets, error);
        if (!inspection) {
            ++reloads_failed;
            stats.count_config_reload(false);
            auto rec = record("config.reload");
            rec.add("result", "error")
                .add("by", by)
                .add("source", config_path_)
                .add("errors", error);
            audit(std::move(rec));
            co_return error + "\n";
        }
    }
    auto next = config::compile(std::move(*r.value));
    set_inspection(std::move(inspection));
    set_policy(next);
    ++reloads_ok;
    stats.add_jobs(job_names(*next));
    stats.count_config_reload(true);
    if (notifier) {
        notifier->configure(next->source().alerts.webhook);  // new settings apply now
    }
    // Live connections the new policy no longer allows are closed.
    const std::function<bool(const live_connection&)> no_longer_allowed =
        [next](const live_connection& c) {
            if (c.host.empty() || c.job.empty()) {
                return false;
            }
            config::decide_args a;
            a.job = c.job;
            a.host = c.host;
            a.port = c.port;
            a.kind = c.kind;
            a.method = c.method;
            // Report mode's would-deny connections stay: the job still lets them through.
            // A non-public address stays reachable only while the rule that now matches
            // still names it in resolves_to (a reload may have narrowed or removed it).
            return !c.check_connected(config::decide_with_mode(a, *next).effective).allowed();
        };
    const std::string why = "policy_changed";
    const std::size_t closed = co_await connections.close_where(no_longer_allowed, why);
    auto rec = record("config.reload");
    rec.add("result", "ok")
        .add("by", by)
        .add("source", config_path_)
        .add("jobs", static_cast<std::uint64_t>(next->source().jobs.size()))
        .add("rules", static_cast<std::uint64_t>(next->source().rule_count()))
        .add("connections_closed", static_cast<std::uint64_t>(closed));
    if (!restart_only.empty()) {
        std::string names;
        for (const auto& name : restart_only) {
            names += (names.empty() ? "" : ",") + name;
        }
        rec.add("needs_restart", names);
    }
    audit(std::move(rec));
    co_return std::string();
}

}  // namespace cordon::proxy::control
