// Tests of the session and token registry, on a fake clock.
#include "proxy/control/sessions.hpp"
#include "common/time.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::control;
using namespace cordon::common;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

/// A clock the test moves by hand. Thread-safe, as the registry requires.
class fake_clock {
public:
    wall_clock::time_point now() const { return wall_clock::time_point(milliseconds(ms_.load())); }
    void advance(milliseconds d) { ms_ += d.count(); }
    session_registry::clock_fn fn() {
        return [this] { return now(); };
    }

private:
    // 2026-11-29T15:20:18Z, an arbitrary start.
    std::atomic<std::int64_t> ms_{1'795'965'618'000};
};

bool is_lower_hex(std::string_view s) {
    for (const char c : s) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return false;
        }
    }
    return true;
}

bool has_form(std::string_view id, std::string_view prefix, std::size_t hex_chars) {
    return id.size() == prefix.size() + hex_chars && id.substr(0, prefix.size()) == prefix &&
           is_lower_hex(id.substr(prefix.size()));
}

// A token of the same shape as `token` that is not it.
std::string mutated(std::string token) {
    token[10] = token[10] == 'a' ? 'b' : 'a';
    return token;
}

}  // namespace

TEST_CASE("sessions: to_string names", "[sessions]") {
    CHECK(to_string(session_state::active) == "active");
    CHECK(to_string(session_state::ended) == "ended");
    CHECK(to_string(session_state::killed) == "killed");
    CHECK(to_string(auth_status::ok) == "ok");
    CHECK(to_string(auth_status::bad_credentials) == "bad_credentials");
    CHECK(to_string(auth_status::token_expired) == "token_expired");
    CHECK(to_string(auth_status::token_revoked) == "token_revoked");
    CHECK(to_string(auth_status::session_ended) == "session_ended");
    CHECK(to_string(auth_status::session_killed) == "session_killed");
    CHECK(to_string(revoke_result::revoked) == "revoked");
    CHECK(to_string(revoke_result::already_revoked) == "already_revoked");
    CHECK(to_string(revoke_result::unknown) == "unknown");
}

TEST_CASE("sessions: create mints a session and one token", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const auto t0 = clock.now();
    const minted m = reg.create("build", 10min);

    CHECK(has_form(m.session_id, "s-", 16));
    CHECK(has_form(m.token_id, "t-", 12));
    CHECK(m.token.size() == 64);
    CHECK(is_lower_hex(m.token));
    CHECK(m.expires_at == t0 + 10min);
    CHECK(reg.active_count() == 1);

    const auto info = reg.get(m.session_id);
    REQUIRE(info);
    CHECK(info->id == m.session_id);
    CHECK(info->job == "build");
    CHECK(info->created == t0);
    CHECK(info->expires_at == t0 + 10min);
    CHECK(info->state == session_state::active);
    CHECK(info->end_reason.empty());
    REQUIRE(info->tokens.size() == 1);
    CHECK(info->tokens[0].id == m.token_id);
    CHECK(info->tokens[0].created == t0);
    CHECK(info->tokens[0].expires_at == t0 + 10min);
    CHECK_FALSE(info->tokens[0].revoked);

    const auto r = reg.authenticate(m.session_id, m.token);
    CHECK(r.ok());
    CHECK(r.status == auth_status::ok);
    CHECK(r.job == "build");
    CHECK(r.token_id == m.token_id);
}

TEST_CASE("sessions: 1000 minted tokens and ids are distinct and well formed", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    std::set<std::string> tokens;
    std::set<std::string> session_ids;
    for (int i = 0; i < 1000; ++i) {
        const minted m = reg.create("job", 1h);
        REQUIRE(m.token.size() == 64);
        REQUIRE(is_lower_hex(m.token));
        REQUIRE(has_form(m.session_id, "s-", 16));
        tokens.insert(m.token);
        session_ids.insert(m.session_id);
    }
    CHECK(tokens.size() == 1000);
    CHECK(session_ids.size() == 1000);
    CHECK(reg.active_count() == 1000);
}

TEST_CASE("sessions: bad credentials do not say which part was wrong", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const minted a = reg.create("a", 1h);
    const minted b = reg.create("b", 1h);

    const std::vector<std::pair<std::string, std::string>> cases{
        {"s-0000000000000000", a.token},  // unknown session, a real token
        {"", a.token},
        {a.session_id, mutated(a.token)},  // right session, wrong token
        {a.session_id, b.token},           // another session's token
        {a.session_id, ""},
        {a.session_id, a.token + "0"},
        {a.session_id, a.token.substr(0, 63)},
        {a.session_id, a.token_id},  // the token id is not the token
        {a.token, a.session_id},
    };
    for (const auto& [session, token] : cases) {
        INFO("session: " << session);
        const auto r = reg.authenticate(session, token);
        CHECK(r.status == auth_status::bad_credentials);
        CHECK_FALSE(r.ok());
        CHECK(r.job.empty());
        CHECK(r.token_id.empty());
    }
}

TEST_CASE("sessions: a token expires exactly at expires_at", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const minted m = reg.create("job", 1000ms);

    clock.advance(999ms);
    CHECK(reg.authenticate(m.session_id, m.token).ok());
    clock.advance(1ms);
    REQUIRE(clock.now() == m.expires_at);
    const auto r = reg.authenticate(m.session_id, m.token);
    CHECK(r.status == auth_status::token_expired);
    CHECK(r.job == "job");  // known session and token: logged with its job
    CHECK(r.token_id == m.token_id);
    clock.advance(1h);
    CHECK(reg.authenticate(m.session_id, m.token).status == auth_status::token_expired);
    // A wrong token stays bad_credentials, expired or not.
    CHECK(reg.authenticate(m.session_id, mutated(m.token)).status == auth_status::bad_credentials);
}

TEST_CASE("sessions: every auth status", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const minted live = reg.create("job", 1h);
    const minted expiring = reg.create("job", 1s);
    const minted revoked = reg.create("job", 1h);
    const minted ended = reg.create("job", 1h);
    const minted killed = reg.create("job", 1h);
    REQUIRE(reg.revoke_token(revoked.session_id, revoked.token_id, "leaked") ==
            revoke_result::revoked);
    REQUIRE(reg.end(ended.session_id, "done"));
    REQUIRE(reg.kill(killed.session_id, "exfiltration"));
    clock.advance(1s);

    CHECK(reg.authenticate(live.session_id, live.token).status == auth_status::ok);
    CHECK(reg.authenticate("s-ffffffffffffffff", live.token).status ==
          auth_status::bad_credentials);
    CHECK(reg.authenticate(expiring.session_id, expiring.token).status ==
          auth_status::token_expired);
    CHECK(reg.authenticate(revoked.session_id, revoked.token).status == auth_status::token_revoked);
    CHECK(reg.authenticate(ended.session_id, ended.token).status == auth_status::session_ended);
    CHECK(reg.authenticate(killed.session_id, killed.token).status == auth_status::session_killed);
}

TEST_CASE("sessions: status precedence when several apply", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());

    SECTION("killed beats expired and revoked") {
        const minted m = reg.create("job", 1s);
        const auto second = reg.add_token(m.session_id, 1h);
        REQUIRE(second);
        REQUIRE(reg.revoke_token(m.session_id, second->token_id, "r") == revoke_result::revoked);
        REQUIRE(reg.kill(m.session_id, "k"));
        clock.advance(2s);
        CHECK(reg.authenticate(m.session_id, m.token).status == auth_status::session_killed);
        CHECK(reg.authenticate(m.session_id, second->token).status == auth_status::session_killed);
    }
    SECTION("ended beats revoked, and a revoked token stays revoked after it expires") {
        const minted m = reg.create("job", 1s);
        const auto second = reg.add_token(m.session_id, 1h);
        REQUIRE(second);
        REQUIRE(reg.revoke_token(m.session_id, m.token_id, "r") == revoke_result::revoked);
        clock.advance(2s);
        CHECK(reg.authenticate(m.session_id, m.token).status == auth_status::token_revoked);
        REQUIRE(reg.end(m.session_id, "done"));
        CHECK(reg.authenticate(m.session_id, m.token).status == auth_status::session_ended);
        CHECK(reg.authenticate(m.session_id, second->token).status == auth_status::session_ended);
    }
    SECTION("a session ended by expiry answers token_expired, swept or not") {
        const minted m = reg.create("job", 1s);
        clock.advance(1s);
        CHECK(reg.authenticate(m.session_id, m.token).status == auth_status::token_expired);
        REQUIRE(reg.sweep_expired().size() == 1);
        REQUIRE(reg.get(m.session_id)->state == session_state::ended);
        CHECK(reg.authenticate(m.session_id, m.token).status == auth_status::token_expired);
    }
}

TEST_CASE("sessions: add_token", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const auto t0 = clock.now();
    const minted m = reg.create("job", 1min);

    SECTION("mints an independent token and extends the session") {
        clock.advance(30s);
        const auto second = reg.add_token(m.session_id, 10min);
        REQUIRE(second);
        CHECK(second->session_id == m.session_id);
        CHECK(has_form(second->token_id, "t-", 12));
        CHECK(second->token_id != m.token_id);
        CHECK(second->token != m.token);
        CHECK(second->expires_at == t0 + 30s + 10min);
        CHECK(reg.get(m.session_id)->expires_at == t0 + 30s + 10min);
        CHECK(reg.get(m.session_id)->tokens.size() == 2);

        const auto r = reg.authenticate(m.session_id, second->token);
        CHECK(r.ok());
        CHECK(r.token_id == second->token_id);
        clock.advance(30s);  // the first token expires, the second lives on
        CHECK(reg.authenticate(m.session_id, m.token).status == auth_status::token_expired);
        CHECK(reg.authenticate(m.session_id, second->token).ok());
    }
    SECTION("a shorter token does not shorten the session") {
        const auto second = reg.add_token(m.session_id, 1s);
        REQUIRE(second);
        CHECK(reg.get(m.session_id)->expires_at == t0 + 1min);
    }
    SECTION("nullopt for an unknown, ended, killed or expired session") {
        CHECK_FALSE(reg.add_token("s-0000000000000000", 1min));
        const minted e = reg.create("job", 1h);
        const minted k = reg.create("job", 1h);
        REQUIRE(reg.end(e.session_id, "done"));
        REQUIRE(reg.kill(k.session_id, "bad"));
        CHECK_FALSE(reg.add_token(e.session_id, 1min));
        CHECK_FALSE(reg.add_token(k.session_id, 1min));
        clock.advance(1min);  // m has expired but is not swept yet: still refused
        REQUIRE(reg.get(m.session_id)->state == session_state::active);
        CHECK_FALSE(reg.add_token(m.session_id, 1min));
    }
    SECTION("still works when every token is revoked but the session is active") {
        REQUIRE(reg.revoke_token(m.session_id, m.token_id, "rotate") == revoke_result::revoked);
        const auto second = reg.add_token(m.session_id, 1min);
        REQUIRE(second);
        CHECK(reg.authenticate(m.session_id, second->token).ok());
    }
    SECTION("at most max_tokens_per_session tokens per session") {
        std::set<std::string> ids{m.token_id};
        for (std::size_t i = 1; i < session_registry::max_tokens_per_session; ++i) {
            const auto t = reg.add_token(m.session_id, 1min);
            REQUIRE(t);
            ids.insert(t->token_id);
        }
        CHECK(ids.size() == session_registry::max_tokens_per_session);
        CHECK_FALSE(reg.add_token(m.session_id, 1min));
        CHECK(reg.get(m.session_id)->tokens.size() == session_registry::max_tokens_per_session);
        CHECK(reg.authenticate(m.session_id, m.token).ok());
    }
}

TEST_CASE("sessions: ttl and job are checked", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    CHECK_THROWS_AS(reg.create("job", 0ms), std::invalid_argument);
    CHECK_THROWS_AS(reg.create("job", -1ms), std::invalid_argument);
    CHECK_THROWS_AS(reg.create("job", session_registry::max_ttl + 1ms), std::invalid_argument);
    CHECK_THROWS_AS(reg.create("job", milliseconds::max()), std::invalid_argument);
    CHECK_THROWS_AS(reg.create("", 1min), std::invalid_argument);
    CHECK(reg.active_count() == 0);
    CHECK(reg.list().empty());

    const minted m = reg.create("job", session_registry::max_ttl);
    CHECK(m.expires_at == clock.now() + session_registry::max_ttl);
    CHECK_THROWS_AS(reg.add_token(m.session_id, 0ms), std::invalid_argument);
    CHECK_THROWS_AS(reg.add_token(m.session_id, milliseconds::max()), std::invalid_argument);
    CHECK(reg.get(m.session_id)->tokens.size() == 1);
}

TEST_CASE("sessions: revoke_token", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const minted m = reg.create("job", 1h);
    const auto second = reg.add_token(m.session_id, 1h);
    REQUIRE(second);

    CHECK(reg.revoke_token(m.session_id, m.token_id, "leaked") == revoke_result::revoked);
    CHECK(reg.revoke_token(m.session_id, m.token_id, "again") == revoke_result::already_revoked);
    CHECK(reg.revoke_token(m.session_id, "t-000000000000", "x") == revoke_result::unknown);
    CHECK(reg.revoke_token("s-0000000000000000", m.token_id, "x") == revoke_result::unknown);
    CHECK(reg.revoke_token(m.session_id, m.token, "x") == revoke_result::unknown);

    const auto info = reg.get(m.session_id);
    REQUIRE(info);
    CHECK(info->state == session_state::active);
    CHECK(info->tokens[0].revoked);
    CHECK(info->tokens[0].revoked_reason == "leaked");  // the first reason stays
    CHECK_FALSE(info->tokens[1].revoked);
    CHECK(reg.authenticate(m.session_id, m.token).status == auth_status::token_revoked);
    CHECK(reg.authenticate(m.session_id, second->token).ok());
    CHECK(reg.active_count() == 1);

    // Tokens of an ended session are already revoked.
    REQUIRE(reg.end(m.session_id, "done"));
    CHECK(reg.revoke_token(m.session_id, second->token_id, "x") == revoke_result::already_revoked);
}

TEST_CASE("sessions: end and kill", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const minted m = reg.create("job", 1h);
    const auto second = reg.add_token(m.session_id, 1h);
    REQUIRE(second);
    REQUIRE(reg.revoke_token(m.session_id, second->token_id, "rotated") == revoke_result::revoked);
    CHECK(reg.active_count() == 1);

    SECTION("end revokes every token and is idempotent") {
        clock.advance(1s);
        const auto t1 = clock.now();
        CHECK(reg.end(m.session_id, "done"));
        auto info = reg.get(m.session_id);
        REQUIRE(info);
        CHECK(info->state == session_state::ended);
        CHECK(info->end_reason == "done");
        CHECK(info->ended_at == t1);
        CHECK(info->tokens[0].revoked);
        CHECK(info->tokens[0].revoked_reason == "done");
        CHECK(info->tokens[1].revoked_reason == "rotated");  // revoked before: kept
        CHECK(reg.active_count() == 0);

        clock.advance(1s);
        CHECK(reg.end(m.session_id, "other"));
        info = reg.get(m.session_id);
        CHECK(info->state == session_state::ended);
        CHECK(info->end_reason == "done");
        CHECK(info->ended_at == t1);

        SECTION("killing an ended session makes it killed") {
            clock.advance(1s);
            CHECK(reg.kill(m.session_id, "too late"));
            info = reg.get(m.session_id);
            CHECK(info->state == session_state::killed);
            CHECK(info->end_reason == "too late");
            CHECK(info->ended_at == clock.now());
            CHECK(reg.authenticate(m.session_id, m.token).status == auth_status::session_killed);
            CHECK(reg.active_count() == 0);
        }
    }
    SECTION("kill is final: ending or killing again changes nothing") {
        CHECK(reg.kill(m.session_id, "exfiltration"));
        CHECK(reg.active_count() == 0);
        CHECK(reg.end(m.session_id, "done"));
        CHECK(reg.kill(m.session_id, "again"));
        const auto info = reg.get(m.session_id);
        REQUIRE(info);
        CHECK(info->state == session_state::killed);
        CHECK(info->end_reason == "exfiltration");
        CHECK(info->tokens[0].revoked);
        CHECK(info->tokens[0].revoked_reason == "exfiltration");
        CHECK(reg.authenticate(m.session_id, m.token).status == auth_status::session_killed);
        CHECK_FALSE(reg.add_token(m.session_id, 1min));
    }
    SECTION("unknown sessions") {
        CHECK_FALSE(reg.end("s-0000000000000000", "x"));
        CHECK_FALSE(reg.kill("s-0000000000000000", "x"));
        CHECK_FALSE(reg.end("", "x"));
        CHECK(reg.active_count() == 1);
    }
}

TEST_CASE("sessions: sweep_expired reports each expired token once", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const minted a = reg.create("job", 1min);           // expires at +1min
    const auto a2 = reg.add_token(a.session_id, 3min);  // expires at +3min
    REQUIRE(a2);
    const minted b = reg.create("job", 1min);
    const auto b2 = reg.add_token(b.session_id, 1min);
    REQUIRE(b2);
    const minted revoked = reg.create("job", 1min);
    REQUIRE(reg.revoke_token(revoked.session_id, revoked.token_id, "r") == revoke_result::revoked);
    const minted ended = reg.create("job", 1min);
    REQUIRE(reg.end(ended.session_id, "done"));
    const minted live = reg.create("job", 1h);

    CHECK(reg.sweep_expired().empty());
    clock.advance(1min - 1ms);
    CHECK(reg.sweep_expired().empty());
    clock.advance(1ms);

    using pair = std::pair<std::string, std::string>;
    std::vector<pair> expected{
        {a.session_id, a.token_id}, {b.session_id, b.token_id}, {b.session_id, b2->token_id}};
    std::sort(expected.begin(), expected.end());
    CHECK(reg.sweep_expired() == expected);
    CHECK(reg.sweep_expired().empty());  // once only

    // b and the all-revoked session have no live token left: ended as "expired".
    CHECK(reg.get(b.session_id)->state == session_state::ended);
    CHECK(reg.get(b.session_id)->end_reason == "expired");
    CHECK(reg.get(b.session_id)->ended_at == clock.now());
    CHECK(reg.get(revoked.session_id)->state == session_state::ended);
    CHECK(reg.get(revoked.session_id)->end_reason == "expired");
    CHECK(reg.get(ended.session_id)->end_reason == "done");  // untouched
    CHECK(reg.get(a.session_id)->state == session_state::active);
    CHECK(reg.get(live.session_id)->state == session_state::active);
    CHECK(reg.active_count() == 2);
    CHECK(reg.authenticate(a.session_id, a2->token).ok());

    clock.advance(2min);
    CHECK(reg.sweep_expired() == std::vector<pair>{{a.session_id, a2->token_id}});
    CHECK(reg.get(a.session_id)->state == session_state::ended);
    CHECK(reg.get(a.session_id)->end_reason == "expired");
    CHECK(reg.active_count() == 1);
    CHECK(reg.sweep_expired().empty());

    // An ended-by-expiry session stays ended: kill still works, end changes nothing.
    CHECK(reg.end(a.session_id, "done"));
    CHECK(reg.get(a.session_id)->end_reason == "expired");
    CHECK(reg.kill(a.session_id, "k"));
    CHECK(reg.get(a.session_id)->state == session_state::killed);
}

TEST_CASE("sessions: list is newest first, prune forgets old finished sessions", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const minted s1 = reg.create("one", 1h);
    const minted s2 = reg.create("two", 1h);  // same instant as s1: creation order decides
    clock.advance(1s);
    const minted s3 = reg.create("three", 1h);

    auto all = reg.list();
    REQUIRE(all.size() == 3);
    CHECK(all[0].id == s3.session_id);
    CHECK(all[1].id == s2.session_id);
    CHECK(all[2].id == s1.session_id);
    CHECK(all[0].job == "three");

    REQUIRE(reg.end(s1.session_id, "done"));
    clock.advance(10min);
    REQUIRE(reg.kill(s2.session_id, "bad"));
    clock.advance(5min);

    CHECK(reg.prune(16min) == 0);
    CHECK(reg.prune(15min) == 1);  // s1 ended 15 min ago
    CHECK_FALSE(reg.get(s1.session_id));
    CHECK(reg.authenticate(s1.session_id, s1.token).status == auth_status::bad_credentials);
    CHECK(reg.end(s1.session_id, "x") == false);
    CHECK(reg.prune(5min) == 1);  // s2 killed 5 min ago
    CHECK(reg.prune(0ms) == 0);   // s3 is active: never pruned
    all = reg.list();
    REQUIRE(all.size() == 1);
    CHECK(all[0].id == s3.session_id);
    CHECK(reg.active_count() == 1);
}

TEST_CASE("sessions: the number of active sessions is bounded", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn(), 2);
    const minted a = reg.create("job", 1min);
    reg.create("job", 1h);
    CHECK_THROWS_AS(reg.create("job", 1h), session_limit_error);
    CHECK(reg.list().size() == 2);

    // An expired session counts until a sweep ends it.
    clock.advance(1min);
    CHECK_THROWS_AS(reg.create("job", 1h), session_limit_error);
    reg.sweep_expired();
    CHECK(reg.active_count() == 1);
    const minted c = reg.create("job", 1h);
    CHECK_THROWS_AS(reg.create("job", 1h), session_limit_error);

    REQUIRE(reg.end(c.session_id, "done"));
    CHECK_NOTHROW(reg.create("job", 1h));
    CHECK(reg.active_count() == 2);
    CHECK(reg.list().size() == 4);  // finished sessions stay until pruned
    CHECK(reg.get(a.session_id)->state == session_state::ended);
}

TEST_CASE("sessions: an empty clock function means the system clock", "[sessions]") {
    session_registry reg(session_registry::clock_fn{});
    const auto before = wall_clock::now();
    const minted m = reg.create("job", 1min);
    CHECK(m.expires_at >= before + 1min);
    CHECK(m.expires_at <= wall_clock::now() + 1min);
    CHECK(reg.authenticate(m.session_id, m.token).ok());
}

TEST_CASE("sessions: concurrent authenticate while sessions change", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    constexpr int stable_count = 8;
    constexpr int victim_count = 64;
    constexpr int reader_count = 4;
    constexpr int reader_rounds = 300;

    std::vector<minted> stable;
    std::vector<minted> victims;
    for (int i = 0; i < stable_count; ++i) {
        stable.push_back(reg.create("stable-" + std::to_string(i), 1h));
    }
    for (int i = 0; i < victim_count; ++i) {
        victims.push_back(reg.create("victim", 1h));
    }

    std::atomic<bool> writer_done{false};
    std::atomic<int> stable_failures{0};
    std::atomic<int> victim_bad_status{0};
    std::atomic<int> victim_came_back{0};
    std::atomic<int> auths{0};

    std::vector<std::thread> readers;
    for (int r = 0; r < reader_count; ++r) {
        readers.emplace_back([&] {
            // Per victim: once this thread saw it refused, it must never be accepted again.
            std::vector<bool> refused(victim_count, false);
            for (int round = 0; round < reader_rounds; ++round) {
                for (int i = 0; i < stable_count; ++i) {
                    const auto res = reg.authenticate(stable[i].session_id, stable[i].token);
                    if (!res.ok() || res.job != "stable-" + std::to_string(i) ||
                        res.token_id != stable[i].token_id) {
                        ++stable_failures;
                    }
                }
                for (int i = round % 4; i < victim_count; i += 4) {
                    const auto res = reg.authenticate(victims[i].session_id, victims[i].token);
                    switch (res.status) {
                        case auth_status::ok:
                            if (refused[i]) {
                                ++victim_came_back;
                            }
                            break;
                        case auth_status::token_revoked:
                        case auth_status::session_ended:
                        case auth_status::session_killed: refused[i] = true; break;
                        default: ++victim_bad_status; break;
                    }
                }
                auths += stable_count + victim_count / 4;
            }
        });
    }

    std::thread writer([&] {
        for (int i = 0; i < victim_count; ++i) {
            const auto& v = victims[i];
            reg.create("churn", 1h);
            reg.add_token(v.session_id, 1h);
            switch (i % 3) {
                case 0: reg.revoke_token(v.session_id, v.token_id, "revoked"); break;
                case 1: reg.end(v.session_id, "ended"); break;
                default: reg.kill(v.session_id, "killed"); break;
            }
            reg.list();
            reg.sweep_expired();
            std::this_thread::yield();
        }
        writer_done = true;
    });

    writer.join();
    for (auto& t : readers) {
        t.join();
    }

    CHECK(writer_done);
    CHECK(auths == reader_count * reader_rounds * (stable_count + victim_count / 4));
    CHECK(stable_failures == 0);
    CHECK(victim_bad_status == 0);
    CHECK(victim_came_back == 0);
    for (int i = 0; i < victim_count; ++i) {
        const auto status = reg.authenticate(victims[i].session_id, victims[i].token).status;
        const auto expected = i % 3 == 0   ? auth_status::token_revoked
                              : i % 3 == 1 ? auth_status::session_ended
                                           : auth_status::session_killed;
        CHECK(status == expected);
    }
    // stable + churn + victims only revoked (i % 3 == 0) stay active.
    CHECK(reg.active_count() ==
          static_cast<std::size_t>(stable_count + victim_count + (victim_count + 2) / 3));
}

TEST_CASE("sessions: snapshot and restore keep kills, revocations and expiry", "[sessions]") {
    fake_clock clock;
    session_registry before(clock.fn());
    const minted live = before.create("build", 1h);
    const minted rotated = before.create("build", 1h);
    const auto rotated2 = before.add_token(rotated.session_id, 1h);
    REQUIRE(rotated2);
    REQUIRE(before.revoke_token(rotated.session_id, rotated.token_id, "leaked") ==
            revoke_result::revoked);
    const minted killed = before.create("scrape", 1h);
    REQUIRE(before.kill(killed.session_id, "exfiltration"));
    const minted ended = before.create("build", 1h);
    REQUIRE(before.end(ended.session_id, "done"));
    const minted expiring = before.create("build", 1min);
    const minted swept = before.create("build", 1s);
    clock.advance(1s);
    REQUIRE(before.sweep_expired().size() == 1);  // `swept`: reported and ended

    const auto snap = before.snapshot();
    REQUIRE(snap.size() == 6);
    CHECK(snap[0].id == live.session_id);  // creation order
    CHECK(snap[5].id == swept.session_id);
    CHECK(snap[1].tokens.size() == 2);
    CHECK(snap[1].tokens[0].hash == hash_secret(rotated.token));  // the hash, never the token
    CHECK(snap[1].tokens[0].revoked);
    CHECK(snap[1].tokens[0].revoked_reason == "leaked");
    CHECK(snap[5].tokens[0].expiry_reported);

    // A registry with contents of its own: restore replaces them.
    session_registry after(clock.fn());
    const minted stale = after.create("other", 1h);
    after.restore(snap);
    CHECK_FALSE(after.get(stale.session_id));
    CHECK(after.authenticate(stale.session_id, stale.token).status == auth_status::bad_credentials);

    const auto r = after.authenticate(live.session_id, live.token);
    CHECK(r.ok());
    CHECK(r.job == "build");
    CHECK(r.token_id == live.token_id);
    CHECK(after.authenticate(rotated.session_id, rotated.token).status ==
          auth_status::token_revoked);
    CHECK(after.authenticate(rotated.session_id, rotated2->token).ok());
    CHECK(after.authenticate(killed.session_id, killed.token).status ==
          auth_status::session_killed);
    CHECK(after.authenticate(ended.session_id, ended.token).status == auth_status::session_ended);
    CHECK(after.authenticate(swept.session_id, swept.token).status == auth_status::token_expired);
    CHECK(after.active_count() == 3);  // live, rotated, expiring
    CHECK_FALSE(after.add_token(killed.session_id, 1min));

    // The restored registry carries on as the old one would have.
    CHECK(after.sweep_expired().empty());  // `swept` was reported before the snapshot
    clock.advance(1min);
    CHECK(after.authenticate(expiring.session_id, expiring.token).status ==
          auth_status::token_expired);
    using pair = std::pair<std::string, std::string>;
    CHECK(after.sweep_expired() == std::vector<pair>{{expiring.session_id, expiring.token_id}});
    CHECK(after.get(expiring.session_id)->state == session_state::ended);
    CHECK(after.active_count() == 2);
    CHECK(after.kill(killed.session_id, "again"));
    CHECK(after.get(killed.session_id)->end_reason == "exfiltration");
    CHECK(after.revoke_token(rotated.session_id, rotated.token_id, "x") ==
          revoke_result::already_revoked);

    // New sessions sort after the restored ones.
    const minted fresh = after.create("new", 1h);
    const auto all = after.list();
    REQUIRE(all.size() == 7);
    CHECK(all[0].id == fresh.session_id);
    CHECK(all[1].id == swept.session_id);
    CHECK(all[6].id == live.session_id);
}

TEST_CASE("sessions: stored() is one session of the snapshot", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const minted a = reg.create("a", 1h);
    const minted b = reg.create("b", 1h);
    REQUIRE(reg.kill(b.session_id, "k"));
    CHECK_FALSE(reg.stored("s-0000000000000000"));
    const auto s = reg.stored(b.session_id);
    REQUIRE(s);
    CHECK(s->id == b.session_id);
    CHECK(s->job == "b");
    CHECK(s->state == session_state::killed);
    CHECK(s->end_reason == "k");
    CHECK(s->ended_at == clock.now());
    CHECK(s->seq == 1);
    REQUIRE(s->tokens.size() == 1);
    CHECK(s->tokens[0].id == b.token_id);
    CHECK(s->tokens[0].hash == hash_secret(b.token));
    CHECK(s->tokens[0].revoked);
    CHECK(s->tokens[0].revoked_reason == "k");
    CHECK(s->tokens[0].expires_at == clock.now() + 1h);
    CHECK(reg.stored(a.session_id)->seq == 0);
}

TEST_CASE("sessions: restore refuses inconsistent input and changes nothing", "[sessions]") {
    fake_clock clock;
    session_registry reg(clock.fn());
    const minted m = reg.create("job", 1h);
    auto good = reg.snapshot();
    REQUIRE(good.size() == 1);

    auto dup_session = good;
    dup_session.push_back(good[0]);
    auto dup_token = good;
    dup_token[0].tokens.push_back(good[0].tokens[0]);
    auto no_id = good;
    no_id[0].id.clear();
    auto no_job = good;
    no_job[0].job.clear();
    for (auto* bad : {&dup_session, &dup_token, &no_id, &no_job}) {
        CHECK_THROWS_AS(reg.restore(*bad), std::invalid_argument);
    }
    CHECK(reg.authenticate(m.session_id, m.token).ok());
    CHECK(reg.list().size() == 1);

    // Restoring nothing empties the registry; restore ignores the active bound.
    reg.restore({});
    CHECK(reg.list().empty());
    CHECK(reg.active_count() == 0);
    session_registry two(clock.fn());
    two.create("x", 1h);
    two.create("y", 1h);
    session_registry small(clock.fn(), 1);
    small.restore(two.snapshot());
    CHECK(small.active_count() == 2);
    CHECK_THROWS_AS(small.create("z", 1h), session_limit_error);
}
