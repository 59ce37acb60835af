#include "shims/run.hpp"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <thread>

#include "shims/admin_answers.hpp"
#include "shims/cgroup.hpp"
#include "shims/env.hpp"
#include "shims/event_poster.hpp"
#include "shims/follow.hpp"
#include "shims/hooks.hpp"
#include "shims/relay.hpp"
#include "shims/sandbox.hpp"
#include "shims/scratch_watch.hpp"
#include "shims/stdio_relay.hpp"

extern char** environ;

namespace cordon::shim {
namespace {

namespace json = boost::json;
namespace net = boost::asio;
using clock = std::chrono::steady_clock;

constexpr auto hook_timeout = std::chrono::seconds(30);
constexpr int exit_killed = 137;

void say(const run_options& o, const std::string& m) {
    if (!o.quiet) {
        std::cerr << "cordon run: " << m << '\n';
    }
}

std::string str(const json::object& o, const char* key) {
    if (const auto* v = o.if_contains(key); v != nullptr && v->is_string()) {
        return std::string(v->as_string());
    }
    return {};
}

// One admin call expecting `want`; the parsed object, or nullopt with `err` set.
std::optional<json::object> call_json(admin_port& a, std::string_view method, std::string_view path,
                                      std::string_view body, int want, std::string& err) {
    admin_reply r;
    try {
        r = a.call(method, path, body);
    } catch (const std::exception& e) {
        err = e.what();
        return std::nullopt;
    }
    boost::system::error_code ec;
    auto v = json::parse(r.body, ec);
    if (r.status != want) {
        err = std::string(method) + " " + std::string(path) + ": " + std::to_string(r.status);
        if (!ec && v.is_object() && !str(v.as_object(), "error").empty()) {
            err += ": " + str(v.as_object(), "error");
        }
        return std::nullopt;
    }
    if (ec || !v.is_object()) {
        err = std::string(path) + ": the admin API answered no JSON object";
        return std::nullopt;
    }
    return std::move(v.as_object());
}

std::map<std::string, std::string, std::less<>> host_environment() {
    std::map<std::string, std::string, std::less<>> m;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
        const std::string_view kv(*e);
        const auto eq = kv.find('=');
        if (eq != std::string_view::npos) {
            m.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
        }
    }
    return m;
}

std::vector<std::string> hook_env(const std::string& session, const std::string& job,
                                  const std::string& expires, std::string_view when) {
    std::vector<std::string> env{
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "CORDON_SESSION=" + session, "CORDON_JOB=" + job, "CORDON_SESSION_EXPIRES=" + expires};
    if (!when.empty()) {
        env.push_back("CORDON_REVOKE_WHEN=" + std::string(when));
    }
    if (const char* h = std::getenv("HOME")) {
        env.push_back(std::string("HOME=") + h);
    }
    return env;
}

// Where Debian (and most distributions) keep the system's roots, and the variables that point
// clients at a bundle: curl, Python (ssl, requests, httpx), Node, git, pip, the AWS SDKs.
constexpr const char* system_bundle = "/etc/ssl/certs/ca-certificates.crt";
constexpr const char* bundle_variables[] = {
    "SSL_CERT_FILE",  "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO", "PIP_CERT",           "AWS_CA_BUNDLE"};

// When cordon inspects TLS (GET /v1/ca.pem answers), the sandbox trusts its CA: the host's
// bundle plus cordon's CA, written to `tmp` and bind-mounted read-only onto the system
// bundle's path, which the variables name. No inspection (404): nothing changes. False (with
// `error`) when cordon inspects but the sandbox cannot be given its CA: it would fail every
// inspected host.
bool add_ca_bundle(admin_port& admin, const std::string& tmp, sandbox_spec& spec,
                   std::vector<std::pair<std::string, std::string>>& extra, std::string& error) {
    admin_reply r;
    try {
        r = admin.call("GET", "/v1/ca.pem", "");
    } catch (const std::exception& e) {
        error = std::string("cannot ask cordon for its CA: ") + e.what();
        return false;
    }
    if (r.status == 404) {
        return true;
    }
    if (r.status != 200 || r.body.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
        error = "GET /v1/ca.pem: " + std::to_string(r.status);
        return false;
    }
    std::ifstream in(system_bundle, std::ios::binary);
    if (!in) {
        error = std::string("cordon inspects TLS but ") + system_bundle +
                " is missing on this host: install ca-certificates";
        return false;
    }
    std::string bundle((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!bundle.empty() && bundle.back() != '\n') {
        bundle.push_back('\n');
    }
    bundle += "# cordon's inspection CA (cordon run)\n" + r.body;
    const std::string path = tmp + "/ca-certificates.crt";
    {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out << bundle;
        if (!out) {
            error = "cannot write " + path;
            return false;
        }
    }
    ::chmod(path.c_str(), 0644);
    spec.ca_bundle = path;
    for (const char* v : bundle_variables) {
        extra.emplace_back(v, system_bundle);
    }
    return true;
}

}  // namespace

bool end_session_call(admin_port& a, const std::string& id, int attempts,
                      std::chrono::milliseconds backoff, std::string& err) {
    for (int i = 0; i < attempts; ++i) {
        if (i > 0) {
            std::this_thread::sleep_for(backoff);
            backoff *= 2;
        }
        try {
            const admin_reply r = a.call("DELETE", "/v1/sessions/" + id, "");
            if (r.status == 200 || r.status == 404) {
                return true;  // ended (404: nothing left to end)
            }
            err = "DELETE /v1/sessions/" + id + ": " + std::to_string(r.status);
            if (r.status < 500) {
                return false;  // refused: trying again changes nothing
            }
        } catch (const std::exception& e) {
            err = e.what();
        }
    }
    return false;
}

int run(const run_options& o, admin_port& admin) {
    std::string err;
    net::io_context ioc;
    // Stop signals are caught from the start: one that arrives while the session is being
    // created or the identity minted still ends the session and runs the revoke hook. The
    // sandbox's command resets them.
    net::signal_set stops(ioc, SIGTERM, SIGINT, SIGHUP);
    std::string stop_signal;
    std::function<void()> on_stop;  // set once the sandbox runs
    stops.async_wait([&](boost::system::error_code ec, int sig) {
        if (!ec) {
            stop_signal = ::strsignal(sig);
            if (on_stop) {
                on_stop();
            }
        }
    });
    const auto stop_requested = [&] {
        ioc.poll();
        ioc.restart();
        return !stop_signal.empty();
    };
    ::signal(SIGPIPE, SIG_IGN);
    // A shim in a terminal's background reading its stdin for the sandbox gets EIO instead
    // of being stopped (its kill follower must keep running).
    ::signal(SIGTTIN, SIG_IGN);
    ::signal(SIGTTOU, SIG_IGN);
    // 1. What the job card says, and where cordon listens.
    const auto card_json = call_json(admin, "GET", "/v1/jobs/" + o.job, "", 200, err);
    if (!card_json) {
        say(o, "cannot read job " + o.job + ": " + err);
        return 1;
    }
    const auto card = parse_job_card(json::serialize(*card_json), err);
    if (!card) {
        say(o, err);
        return 1;
    }
    const auto status = call_json(admin, "GET", "/v1/status", "", 200, err);
    if (!status) {
        say(o, "cannot read the admin API's status: " + err);
        return 1;
    }
    if (const auto* k = status->if_contains("kill"); k && k->is_object()) {
        if (const auto* e = k->as_object().if_contains("engaged");
            e && e->is_bool() && e->as_bool()) {
            say(o, "the network kill is engaged: nothing may run");
            return 1;
        }
    }
    std::optional<relay_target> dns;
    if (o.dns) {
        dns = parse_host_port(*o.dns);
        if (!dns) {
            say(o, "--dns: expected HOST:PORT, got '" + *o.dns + "'");
            return 2;
        }
    } else if (const auto* l = status->if_contains("listen"); l && l->is_object()) {
        if (const std::string d = str(l->as_object(), "dns"); !d.empty()) {
            dns = parse_host_port(d);
        }
    }
    if (!dns) {
        say(o, "warning: cordon has no DNS listener known to the shim (--dns): every name "
               "lookup in the sandbox is refused");
    }

    // 2. The environment, checked before anything is created.
    env_inputs ein;
    ein.job_env = card->env;
    ein.host_env = host_environment();
    ein.session = "check";
    ein.token = "check";
    if (const auto dry = build_env(ein); !dry.refused.empty()) {
        for (const auto& r : dry.refused) {
            say(o, "refused job-card variable " + r);
        }
        return 1;
    }
    if (!card->scratch.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(card->scratch, ec);
        if (!std::filesystem::is_directory(card->scratch, ec)) {
            say(o, "scratch dir " + card->scratch + " is not a directory");
            return 1;
        }
    }
    char tmpl[] = "/tmp/cordon-run-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
        say(o, "cannot create a temp dir");
        return 1;
    }
    const std::string tmp = tmpl;
    const std::string resolv = tmp + "/resolv.conf";
    {
        std::ofstream r(resolv);
        r << "# written by cordon run: the DNS relay to cordon's resolver\n"
             "nameserver 127.0.0.1\noptions timeout:2 attempts:2\n";
    }
    ::chmod(tmp.c_str(), 0755);
    ::chmod(resolv.c_str(), 0644);
    const auto cleanup_tmp = [&] {
        std::error_code ec;
        std::filesystem::remove_all(tmp, ec);
    };

    // 3. The session.
    json::object create{{"job", o.job}};
    if (o.ttl) {
        create["ttl"] = *o.ttl;
    }
    const std::string create_body = json::serialize(create);
    const auto session = call_json(admin, "POST", "/v1/sessions", create_body, 201, err);
    if (!session) {
        say(o, "cannot create a session: " + err);
        cleanup_tmp();
        return 1;
    }
    const std::string id = str(*session, "id");
    const std::string token = str(*session, "token");
    const std::string expires = str(*session, "expires_at");
    const std::string purl = str(*session, "proxy_url");
    const auto at = purl.rfind('@');
    const auto proxy = parse_host_port(at == std::string::npos ? "" : purl.substr(at + 1));
    event_poster poster(admin, id);
    bool minted = false;
    std::string credential;
    const auto end_session = [&](std::string_view when) {
        if (minted && !card->revoke.empty()) {
            const hook_result h = run_hook(card->revoke, hook_env(id, o.job, expires, when),
                                           credential, hook_timeout);
            poster.post(json::serialize(json::object{{"event", "identity.revoke"},
                                                     {"ok", h.ok()},
                                                     {"exit_code", h.exit_code},
                                                     {"duration_ms", h.duration.count()},
                                                     {"when", when}}));
            if (!h.ok()) {
                say(o, "identity.revoke failed (exit " + std::to_string(h.exit_code) +
                           (h.timed_out ? ", timed out" : "") + ")");
            }
        }
        poster.stop(std::chrono::seconds(5));
        std::string e2;
        if (!end_session_call(admin, id, 4, std::chrono::milliseconds(150), e2)) {
            say(o, "could not end session " + id + " (" + e2 +
                       "); cordon ends it when this shim's event stream has been gone for "
                       "the grace, and its tokens expire by themselves at " +
                       expires);
        }
        cleanup_tmp();
    };
    if (!proxy) {
        say(o, "the admin API gave no usable proxy address");
        end_session("end");
        return 1;
    }

    if (stop_requested()) {
        say(o, "stopped by signal " + stop_signal + " before the sandbox started");
        end_session("end");
        return exit_killed;
    }
    // 4. Identity: a short-lived credential, minted on the host side.
    std::vector<std::pair<std::string, std::string>> extra;
    sandbox_spec spec;
    // The credential broker's placeholders (never the keys: cordon swaps them in on the way
    // to the hosts that take them), and cordon's CA for inspected hosts: the host's roots
    // plus it, onto the system bundle's path and in the variables clients read.
    if (const auto* c = session->if_contains("credentials"); c != nullptr && c->is_object()) {
        for (const auto& kv : c->as_object()) {
            if (kv.value().is_string()) {
                extra.emplace_back(std::string(kv.key()), std::string(kv.value().as_string()));
            }
        }
    }
    if (std::string ca_error; !add_ca_bundle(admin, tmp, spec, extra, ca_error)) {
        say(o, ca_error);
        end_session("end");
        return 1;
    }
    if (!card->mint.empty()) {
        const hook_result h = run_hook(card->mint, hook_env(id, o.job, expires, ""), "",
                                       hook_timeout);
        const std::string to = card->mint_file.empty()
                                   ? "env:" + (card->mint_env.empty()
                                                   ? std::string("CORDON_IDENTITY")
                                                   : card->mint_env)
                                   : "file:" + card->scratch + "/" + card->mint_file;
        poster.post(json::serialize(json::object{{"event", "identity.mint"},
                                                 {"ok", h.ok()},
                                                 {"exit_code", h.exit_code},
                                                 {"duration_ms", h.duration.count()},
                                                 {"bytes", h.output.size()},
                                                 {"to", to}}));
        if (!h.ok()) {
            say(o, "identity.mint failed (exit " + std::to_string(h.exit_code) +
                       (h.timed_out ? ", timed out" : "") +
                       (h.output_truncated ? ", output above 64 KiB" : "") + "): not starting");
            end_session("end");
            return 1;
        }
        minted = true;
        credential = trim_credential(h.output);
        if (!card->mint_file.empty() && !card->scratch.empty()) {
            spec.scratch_file_name = card->mint_file;
            spec.scratch_file_content = credential + "\n";
        } else {
            extra.emplace_back(card->mint_env.empty() ? "CORDON_IDENTITY" : card->mint_env,
                               credential);
        }
    }

    // 5. The sandbox.
    ein.session = id;
    ein.token = token;
    {
        // The binary the sandbox can run for ssh's ProxyCommand: this one (the host's root
        // is the sandbox's, read-only).
        std::error_code ec;
        ein.cordon_binary = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    }
    ein.home = card->scratch.empty() ? "/" : card->scratch;
    ein.tmpdir = card->scratch;
    ein.extra = std::move(extra);
    spec.argv = o.command;
    spec.env = build_env(ein).env;
    spec.scratch = card->scratch;
    spec.scratch_bytes = o.scratch_bytes;
    spec.never_write = card->never_write;
    spec.hide = o.hide;
    // The admin token, wherever it is: the shim's own file and what serve names in
    // hide_from_sandboxes (its token file, TLS key, policy, audit and state dirs), files
    // hidden by inode (bind mounts and hard links too), directories covered.
    if (!o.admin_token_file.empty()) {
        spec.hide.push_back(o.admin_token_file);
    }
    if (const auto* h = status->if_contains("hide_from_sandboxes"); h && h->is_array()) {
        for (const auto& v : h->as_array()) {
            if (v.is_string() && !v.as_string().empty() && v.as_string().front() == '/') {
                spec.hide.emplace_back(v.as_string());
            }
        }
    }
    spec.resolv_conf = resolv;
    spec.landlock_required = card->landlock_required;
    spec.allow_unix_sockets = o.allow_unix_sockets;
    if (o.user) {
        spec.user = std::make_pair(static_cast<uid_t>(o.user->first),
                                   static_cast<gid_t>(o.user->second));
    }

    if (stop_requested()) {
        say(o, "stopped by signal " + stop_signal + " before the sandbox started");
        end_session("end");
        return exit_killed;
    }
    // stdin, stdout and stderr: relayed, never the operator's own (docs/shim.md).
    auto stdio = stdio_relay::create(o.tty, err);
    if (!stdio) {
        say(o, err);
        end_session("end");
        return 1;
    }
    spec.stdio = stdio->sandbox_ends();
    spec.controlling_tty = stdio->tty();
    net::signal_set children(ioc, SIGCHLD);
    auto sb = start_sandbox(spec, err);
    stdio->close_sandbox_ends();
    if (!sb) {
        stdio.reset();  // the terminal back as it was before saying why
        say(o, "cannot start the sandbox: " + err);
        end_session("end");
        return 1;
    }
    stdio->start();
    net::signal_set winch(ioc);
    std::function<void(boost::system::error_code, int)> on_winch = [&](boost::system::error_code ec,
                                                                       int) {
        if (!ec) {
            stdio->resize();
            winch.async_wait(on_winch);
        }
    };
    if (stdio->tty()) {
        winch.add(SIGWINCH);
        winch.async_wait(on_winch);
    }
    poster.start();
    std::string no_cgroup;
    const auto cgroup = kill_cgroup::create(sb->init, no_cgroup);
    if (!sb->warning.empty()) {
        say(o, "warning: " + sb->warning);
    }
    start_proxy_relay(ioc, sb->proxy_listener, *proxy);
    start_dns_relay(ioc, sb->dns_udp, sb->dns_tcp, dns, id + ":" + token);
    std::unique_ptr<scratch_watch> watch;
    if (!card->scratch.empty()) {
        watch = scratch_watch::start(
            "/proc/" + std::to_string(sb->init) + "/root" + card->scratch, card->scratch,
            [&poster](std::string path, std::uint64_t size) {
                poster.post(json::serialize(
                    json::object{{"event", "file.write"}, {"path", path}, {"size", size}}));
            });
    }

    std::optional<int> exit_status;
    std::string kill_why;
    const auto reap = [&](bool block) {
        int st = 0;
        pid_t p = 0;
        do {
            p = ::waitpid(sb->init, &st, block ? 0 : WNOHANG);
        } while (p < 0 && errno == EINTR);
        if (p == sb->init) {
            exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            ioc.stop();
        } else if (p < 0 && block) {
            exit_status = exit_killed;  // not ours to wait for any more: it is gone
            ioc.stop();
        }
    };
    const auto kill_all = [&](std::string why) {
        if (exit_status || !kill_why.empty()) {
            return;
        }
        kill_why = std::move(why);
        const auto t0 = clock::now();
        const bool by_cgroup = cgroup && cgroup->kill();
        ::kill(sb->init, SIGKILL);  // PID 1 of the namespace: the kernel kills the rest
        reap(true);
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t0);
        say(o, kill_why + ": sandbox killed in " + std::to_string(ms.count()) + " ms (" +
                   (by_cgroup ? "cgroup.kill and " : "") + "the PID namespace's init)");
    };

    // Follow the session; the command starts once the stream is open (no kill is missed),
    // then the session's state is checked once (a kill before the stream opened).
    bool released = false;
    follow_options fo{o.admin_host, o.admin_port, o.admin_token, id, o.admin_grace};
    start_follow(
        ioc, fo, [&](std::string why) { kill_all(std::move(why)); },
        [&] {
            if (released) {
                return;
            }
            released = true;
            std::string e2;
            const auto s = call_json(admin, "GET", "/v1/sessions/" + id, "", 200, e2);
            const std::string state = s ? str(*s, "state") : "";
            if (!s || (state != "active" && !state.empty())) {
                kill_all("session " + id + " is " + (s ? state : "unknown (" + e2 + ")"));
                return;
            }
            release_sandbox(*sb);
        });
    on_stop = [&] { kill_all("stopped by signal " + stop_signal); };
    if (!stop_signal.empty()) {
        on_stop();
    }
    std::function<void(boost::system::error_code, int)> on_child = [&](boost::system::error_code ec,
                                                                       int) {
        if (ec) {
            return;
        }
        reap(false);
        if (!exit_status) {
            children.async_wait(on_child);
        }
    };
    children.async_wait(on_child);
    reap(false);
    // The follower must open the stream within the grace, or nothing runs.
    net::steady_timer start_deadline(ioc, o.admin_grace);
    start_deadline.async_wait([&](boost::system::error_code ec) {
        if (!ec && !released) {
            kill_all("could not follow the admin API's events");
        }
    });
    if (!exit_status) {
        ioc.run();
    }
    if (!exit_status) {
        kill_all("the shim's event loop ended");
    }
    ::close(sb->lifeline);
    if (sb->control >= 0) {
        ::close(sb->control);
    }
    stdio->finish();  // the sandbox's last output out; the terminal as it was
    if (watch) {
        watch->stop();
        // Everything that did not reach the audit: what the watcher left out, and events
        // the poster could not deliver (a full queue, refused, cordon unreachable).
        if (const std::uint64_t lost = watch->not_audited() + poster.lost(); lost > 0) {
            say(o, std::to_string(lost) + " writes in scratch were not audited (rate, "
                                          "directory or path limits, or undelivered events)");
            poster.post(json::serialize(json::object{{"event", "file.write"},
                                                     {"path", printable_path(card->scratch)},
                                                     {"size", 0},
                                                     {"not_audited", lost}}));
        }
    }
    int code = *exit_status;
    if (!kill_why.empty()) {
        code = exit_killed;
    } else if (code == 125) {
        say(o, "the sandbox could not start the command");
    }
    end_session(kill_why.empty() ? "end" : "kill");
    return code;
}

}  // namespace cordon::shim
