// Tests of the SQLite state store, in temporary directories under /tmp.
#include "proxy/control/state_store.hpp"
#include "common/time.hpp"

#include <catch2/catch.hpp>

#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proxy/control/sessions.hpp"

namespace {

using namespace cordon::proxy;
using namespace cordon::proxy::control;
using namespace cordon::common;
using namespace std::chrono_literals;
using std::chrono::milliseconds;
namespace fs = std::filesystem;

/// A fresh directory under /tmp, removed with everything in it at the end of the test.
class temp_dir {
public:
    temp_dir() {
        std::string tmpl = "/tmp/cordon-state-test-XXXXXX";
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path_ = tmpl;
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;

    const std::string& path() const { return path_; }
    std::string db() const { return path_ + "/cordon.db"; }

private:
    std::string path_;
};

// 2026-11-29T15:20:18Z: every time in these tests is whole milliseconds (the store's unit).
const wall_clock::time_point t0{milliseconds(1'795'965'618'000)};

std::unique_ptr<state_store> open_ok(const std::string& dir) {
    std::string error;
    auto store = state_store::open(dir, error);
    INFO("error: " << error);
    REQUIRE(store);
    CHECK(error.empty());
    return store;
}

std::string open_error(const std::string& dir) {
    std::string error;
    auto store = state_store::open(dir, error);
    CHECK_FALSE(store);
    CHECK_FALSE(error.empty());
    return error;
}

secret_hash hash_of(std::uint8_t seed) {
    secret_hash h{};
    for (std::size_t i = 0; i < h.size(); ++i) {
        h[i] = static_cast<std::uint8_t>(seed + i * 7);
    }
    return h;
}

stored_token token(std::string id, std::uint8_t seed, milliseconds ttl) {
    stored_token t;
    t.id = std::move(id);
    t.hash = hash_of(seed);
    t.created = t0;
    t.expires_at = t0 + ttl;
    return t;
}

stored_session session(std::string id, std::string job, std::uint64_t seq) {
    stored_session s;
    s.id = std::move(id);
    s.job = std::move(job);
    s.created = t0 + milliseconds(seq);
    s.expires_at = t0 + 1h;
    s.seq = seq;
    s.tokens.push_back(token("t-" + std::to_string(seq) + "a", static_cast<std::uint8_t>(seq), 1h));
    return s;
}

std::int64_t ms(wall_clock::time_point t) {
    return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}

/// Every field, as text, so a mismatch prints both sides.
std::string describe(const stored_session& s) {
    std::ostringstream out;
    out << s.id << " job=" << s.job << " created=" << ms(s.created)
        << " expires=" << ms(s.expires_at) << " state=" << to_string(s.state)
        << " reason=" << s.end_reason << " ended=" << ms(s.ended_at) << " seq=" << s.seq;
    for (const auto& t : s.tokens) {
        out << "\n  " << t.id << " hash=";
        for (const auto b : t.hash) {
            out << static_cast<int>(b) << ',';
        }
        out << " created=" << ms(t.created) << " expires=" << ms(t.expires_at)
            << " revoked=" << t.revoked << " reason=" << t.revoked_reason
            << " reported=" << t.expiry_reported;
    }
    return out.str();
}

std::string describe(const std::vector<stored_session>& all) {
    std::string out;
    for (const auto& s : all) {
        out += describe(s) + "\n";
    }
    return out;
}

std::string describe(const stored_event& e) {
    return std::to_string(e.id) + " " + std::to_string(ms(e.ts)) + " " + e.type + " [" + e.session +
           "] " + e.json;
}

stored_event event(std::string type, std::string session_id, milliseconds at) {
    stored_event e;
    e.ts = t0 + at;
    e.type = std::move(type);
    e.json = R"({"event":")" + e.type + R"(","session":")" + session_id + R"("})";
    e.session = std::move(session_id);
    return e;
}

state_store::loaded load_ok(state_store& store) {
    state_store::loaded out;
    std::string error;
    INFO("error: " << error);
    REQUIRE(store.load(out, error));
    return out;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
    REQUIRE(out.good());
}

/// Runs `sql` on the file with a connection of its own; the first column of the first row.
std::string raw_query(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    std::string out;
    int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const auto* text = sqlite3_column_text(st, 0);
            out = text == nullptr ? "" : reinterpret_cast<const char*>(text);
            rc = SQLITE_DONE;
        }
    }
    INFO(sql << ": " << sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    REQUIRE(rc == SQLITE_DONE);
    return out;
}

/// A store with enough rows to span many pages, closed again.
void fill(const std::string& dir, int sessions) {
    auto store = open_ok(dir);
    std::string error;
    for (int i = 0; i < sessions; ++i) {
        auto s = session("s-" + std::to_string(1000 + i), "job-with-a-longish-name", i);
        s.tokens.push_back(token("t-" + std::to_string(i) + "b", 9, 2h));
        REQUIRE(store->save_session(s, error));
        auto e = event("token.revoke", s.id, milliseconds(i));
        REQUIRE(store->append_event(e, error));
    }
}

}  // namespace

TEST_CASE("state: a new store is made 0700, in WAL mode, with nothing left behind", "[state]") {
    temp_dir tmp;
    const std::string dir = tmp.path() + "/var/lib/cordon";
    auto store = open_ok(dir);
    CHECK(store->path() == dir + "/cordon.db");

    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    REQUIRE(::stat(store->path().c_str(), &st) == 0);
    CHECK((st.st_mode & 0077) == 0);  // 0600: no one else reads the token hashes

    for (const auto& entry : fs::directory_iterator(dir)) {
        const auto name = entry.path().filename().string();
        INFO(name);
        CHECK((name == "cordon.db" || name == "cordon.db-wal" || name == "cordon.db.reserve"));
    }

    // A fresh store loads as empty and not killed.
    const auto loaded = load_ok(*store);
    CHECK_FALSE(loaded.kill.engaged);
    CHECK(loaded.sessions.empty());
    CHECK(loaded.last_event_id == 0);
    CHECK(store->events_after(0, "", 10).empty());

    // Closed (the store holds the file exclusively while open), it reads as WAL mode.
    store.reset();
    CHECK(raw_query(dir + "/cordon.db", "PRAGMA journal_mode") == "wal");
    CHECK(raw_query(dir + "/cordon.db", "SELECT schema_version FROM meta") ==
          std::to_string(state_store::schema_version));

    // A trailing slash names the same directory.
    auto again = open_ok(dir + "/");
    CHECK(again->path() == dir + "/cordon.db");
}

TEST_CASE("state: sessions, tokens, kill and events round trip", "[state]") {
    temp_dir tmp;
    auto store = open_ok(tmp.path());
    std::string error;

    auto live = session("s-live", "build", 0);
    live.tokens.push_back(token("t-second", 42, 2h));
    live.tokens[0].revoked = true;
    live.tokens[0].revoked_reason = "rotated";
    live.tokens[0].expiry_reported = true;
    live.expires_at = t0 + 2h;
    auto killed = session("s-killed", "scrape", 1);
    killed.state = session_state::killed;
    killed.end_reason = "exfiltration";
    killed.ended_at = t0 + 5min;
    killed.tokens[0].revoked = true;
    killed.tokens[0].revoked_reason = "exfiltration";
    auto no_tokens = session("s-empty", "j", 2);
    no_tokens.tokens.clear();
    const std::vector<stored_session> all{live, killed, no_tokens};
    for (const auto& s : all) {
        REQUIRE(store->save_session(s, error));
    }

    kill_state k;
    k.engaged = true;
    k.reason = "agent went rogue";
    k.by = "netops-oncall";
    k.at = t0 + 10min;
    REQUIRE(store->save_kill(k, error));

    auto e1 = event("kill.session", "s-killed", 5min);
    auto e2 = event("kill.network", "", 10min);
    auto e3 = event("token.revoke", "s-live", 11min);
    REQUIRE(store->append_event(e1, error));
    REQUIRE(store->append_event(e2, error));
    REQUIRE(store->append_event(e3, error));
    CHECK(e1.id == 1);
    CHECK(e2.id == 2);
    CHECK(e3.id == 3);

    auto got = load_ok(*store);
    CHECK(describe(got.sessions) == describe(all));
    CHECK(got.kill.engaged);
    CHECK(got.kill.reason == k.reason);
    CHECK(got.kill.by == k.by);
    CHECK(got.kill.at == k.at);
    CHECK(got.last_event_id == 3);
    const auto events = store->events_after(0, "", 10);
    REQUIRE(events.size() == 3);
    CHECK(describe(events[0]) == describe(e1));
    CHECK(describe(events[1]) == describe(e2));
    CHECK(describe(events[2]) == describe(e3));

    SECTION("saving again replaces the session and exactly its tokens") {
        live.state = session_state::ended;
        live.end_reason = "done";
        live.ended_at = t0 + 20min;
        live.tokens.pop_back();  // (the registry never drops tokens; the store mirrors anyway)
        live.tokens.push_back(token("t-third", 7, 3h));
        REQUIRE(store->save_session(live, error));
        got = load_ok(*store);
        CHECK(describe(got.sessions) ==
              describe(std::vector<stored_session>{live, killed, no_tokens}));
        const std::string path = store->path();
        store.reset();
        CHECK(raw_query(path, "SELECT count(*) FROM tokens") == "3");
    }
    SECTION("revive replaces the kill state") {
        k.engaged = false;
        k.reason = "contained";
        k.at = t0 + 30min;
        REQUIRE(store->save_kill(k, error));
        got = load_ok(*store);
        CHECK_FALSE(got.kill.engaged);
        CHECK(got.kill.reason == "contained");
        CHECK(got.kill.at == t0 + 30min);
    }
    SECTION("sub-millisecond parts are floored") {
        auto fine = session("s-fine", "j", 9);
        fine.created = t0 + std::chrono::microseconds(1999);
        REQUIRE(store->save_session(fine, error));
        got = load_ok(*store);
        REQUIRE(got.sessions.size() == 4);
        CHECK(got.sessions[3].created == t0 + 1ms);
    }
    SECTION("times before the epoch and far ahead survive") {
        auto odd = session("s-odd", "j", 9);
        odd.created = wall_clock::time_point(-milliseconds(1));
        odd.expires_at = wall_clock::time_point(milliseconds(7'258'118'400'000));  // 2200-01-01
        REQUIRE(store->save_session(odd, error));
        got = load_ok(*store);
        REQUIRE(got.sessions.size() == 4);
        CHECK(describe(got.sessions[3]) == describe(odd));
    }
}

TEST_CASE("state: the registry survives a restart through the store", "[state][sessions]") {
    temp_dir tmp;
    const auto now = [] { return t0; };
    session_registry before(now);
    const minted live = before.create("build", 1h);
    const minted killed = before.create("build", 1h);
    const auto rotated = before.add_token(live.session_id, 1h);
    REQUIRE(rotated);
    REQUIRE(before.revoke_token(live.session_id, rotated->token_id, "leaked") ==
            revoke_result::revoked);
    REQUIRE(before.kill(killed.session_id, "exfiltration"));

    {
        auto store = open_ok(tmp.path());
        std::string error;
        for (const auto& s : before.snapshot()) {
            REQUIRE(store->save_session(s, error));
        }
        // After a change, only that session is saved again.
        REQUIRE(before.end(live.session_id, "done") == true);
        const auto changed = before.stored(live.session_id);
        REQUIRE(changed);
        REQUIRE(store->save_session(*changed, error));
    }

    auto store = open_ok(tmp.path());
    session_registry after(now);
    after.restore(load_ok(*store).sessions);
    CHECK(describe(after.snapshot()) == describe(before.snapshot()));
    CHECK(after.authenticate(live.session_id, live.token).status == auth_status::session_ended);
    CHECK(after.authenticate(live.session_id, rotated->token).status == auth_status::session_ended);
    CHECK(after.authenticate(killed.session_id, killed.token).status ==
          auth_status::session_killed);
    store.reset();
    CHECK(raw_query(tmp.db(), "SELECT count(*) FROM tokens") == "3");
}

TEST_CASE("state: the file never holds a token secret", "[state]") {
    temp_dir tmp;
    session_registry reg;
    const minted m = reg.create("job", 1h);
    {
        auto store = open_ok(tmp.path());
        std::string error;
        REQUIRE(store->save_session(*reg.stored(m.session_id), error));
    }
    const std::string bytes = read_file(tmp.db());
    CHECK(bytes.find(m.session_id) != std::string::npos);  // sanity: the row is in the file
    CHECK(bytes.find(m.token) == std::string::npos);
    CHECK(raw_query(tmp.db(), "SELECT length(hash) FROM tokens") == "32");
}

TEST_CASE("state: reopening after close keeps everything", "[state]") {
    temp_dir tmp;
    std::string error;
    auto s = session("s-a", "job", 3);
    s.state = session_state::killed;
    s.end_reason = "k";
    s.ended_at = t0 + 1min;
    kill_state k{true, "why", "who", t0 + 2min};
    {
        auto store = open_ok(tmp.path());
        REQUIRE(store->save_session(s, error));
        REQUIRE(store->save_kill(k, error));
        for (int i = 0; i < 5; ++i) {
            auto e = event("kill.network", "", milliseconds(i));
            REQUIRE(store->append_event(e, error));
        }
    }
    // Closed cleanly: the WAL was checkpointed into the database file.
    CHECK_FALSE(fs::exists(tmp.db() + "-wal"));

    for (int round = 0; round < 2; ++round) {
        auto store = open_ok(tmp.path());
        const auto got = load_ok(*store);
        CHECK(describe(got.sessions) == describe(std::vector<stored_session>{s}));
        CHECK(got.kill.engaged);
        CHECK(got.kill.reason == "why");
        CHECK(got.kill.by == "who");
        CHECK(got.kill.at == t0 + 2min);
        CHECK(got.last_event_id == 5);
        CHECK(store->events_after(0, "", 100).size() == 5);
    }
    auto store = open_ok(tmp.path());
    auto e = event("revive", "", 1h);
    REQUIRE(store->append_event(e, error));
    CHECK(e.id == 6);
}

TEST_CASE("state: a write is in the file when it returns", "[state]") {
    temp_dir tmp;
    auto store = open_ok(tmp.path());
    std::string error;
    REQUIRE(store->save_kill(kill_state{true, "r", "b", t0}, error));
    // Committed (and, with synchronous=FULL, synced) before save_kill returned: a copy of
    // the files taken now (as a crash would leave them) holds it.
    const std::string copy = tmp.path() + "/copy";
    fs::create_directories(copy);
    fs::copy_file(tmp.db(), copy + "/cordon.db");
    fs::copy_file(tmp.db() + "-wal", copy + "/cordon.db-wal");
    CHECK(raw_query(copy + "/cordon.db", "SELECT engaged FROM kill_switch") == "1");
    CHECK(raw_query(copy + "/cordon.db", "PRAGMA journal_mode") == "wal");
}

TEST_CASE("state: events_after filters by id and session, honours the limit", "[state]") {
    temp_dir tmp;
    auto store = open_ok(tmp.path());
    std::string error;
    const std::vector<std::pair<std::string, std::string>> spec{
        {"kill.session", "s-a"}, {"kill.network", ""},     {"token.revoke", "s-b"},
        {"token.revoke", "s-a"}, {"revive", ""},           {"session.end", "s-b"},
        {"session.end", "s-a"},  {"kill.session", "s-ab"},
    };
    for (std::size_t i = 0; i < spec.size(); ++i) {
        auto e = event(spec[i].first, spec[i].second, milliseconds(i));
        REQUIRE(store->append_event(e, error));
        REQUIRE(e.id == i + 1);
    }
    const auto ids = [](const std::vector<stored_event>& events) {
        std::vector<std::uint64_t> out;
        for (const auto& e : events) {
            out.push_back(e.id);
        }
        return out;
    };
    using v = std::vector<std::uint64_t>;
    CHECK(ids(store->events_after(0, "", 100)) == v{1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(ids(store->events_after(0, "s-a", 100)) == v{1, 2, 4, 5, 7});
    CHECK(ids(store->events_after(0, "s-b", 100)) == v{2, 3, 5, 6});
    CHECK(ids(store->events_after(4, "s-a", 100)) == v{5, 7});
    CHECK(ids(store->events_after(0, "s-unknown", 100)) == v{2, 5});
    CHECK(ids(store->events_after(0, "", 3)) == v{1, 2, 3});
    CHECK(ids(store->events_after(3, "", 2)) == v{4, 5});
    CHECK(ids(store->events_after(0, "s-a", 2)) == v{1, 2});
    CHECK(ids(store->events_after(8, "", 100)).empty());
    CHECK(ids(store->events_after(0, "", 0)).empty());
    CHECK(ids(store->events_after(UINT64_MAX, "", 10)).empty());
    CHECK(ids(store->events_after(0, "", SIZE_MAX)).size() == 8);
    const auto one = store->events_after(7, "s-ab", 1);
    REQUIRE(one.size() == 1);
    CHECK(one[0].type == "kill.session");
    CHECK(one[0].session == "s-ab");
    CHECK(one[0].ts == t0 + 7ms);
    CHECK(one[0].json == R"({"event":"kill.session","session":"s-ab"})");
}

TEST_CASE("state: prune drops old finished sessions and old events only", "[state]") {
    temp_dir tmp;
    auto store = open_ok(tmp.path());
    std::string error;

    auto old_ended = session("s-old-ended", "j", 0);
    old_ended.state = session_state::ended;
    old_ended.ended_at = t0 + 1min;
    auto old_killed = session("s-old-killed", "j", 1);
    old_killed.state = session_state::killed;
    old_killed.ended_at = t0 + 2min;
    auto recent_killed = session("s-recent", "j", 2);
    recent_killed.state = session_state::killed;
    recent_killed.ended_at = t0 + 10min;
    auto old_active = session("s-old-active", "j", 3);  // active: never pruned by age
    for (const auto* s : {&old_ended, &old_killed, &recent_killed, &old_active}) {
        REQUIRE(store->save_session(*s, error));
    }
    for (int i = 0; i < 6; ++i) {
        auto e = event("kill.session", "s-x", milliseconds(i) * 60'000);  // minute i
        REQUIRE(store->append_event(e, error));
    }
    REQUIRE(store->save_kill(kill_state{true, "r", "b", t0}, error));

    REQUIRE(store->prune(t0 + 3min, error));
    auto got = load_ok(*store);
    CHECK(describe(got.sessions) ==
          describe(std::vector<stored_session>{recent_killed, old_active}));
    std::uint64_t tokens_left = 0;
    for (const auto& s : got.sessions) {
        tokens_left += s.tokens.size();
    }
    CHECK(tokens_left == 2);  // cascaded
    const auto events = store->events_after(0, "", 100);
    REQUIRE(events.size() == 3);
    CHECK(events[0].id == 4);  // minutes 0, 1, 2 are gone; the boundary one stays
    CHECK(events[0].ts == t0 + 3min);
    CHECK(got.kill.engaged);  // never pruned

    SECTION("ended exactly at the cut-off is kept") {
        REQUIRE(store->prune(t0 + 10min, error));
        CHECK(load_ok(*store).sessions.size() == 2);
    }
    SECTION("event ids are never reused, even after every event is pruned") {
        REQUIRE(store->prune(t0 + 1h, error));
        got = load_ok(*store);
        CHECK(store->events_after(0, "", 100).empty());
        CHECK(got.last_event_id == 6);
        store.reset();
        store = open_ok(tmp.path());
        CHECK(load_ok(*store).last_event_id == 6);
        auto e = event("revive", "", 2h);
        REQUIRE(store->append_event(e, error));
        CHECK(e.id == 7);
    }
}

TEST_CASE("state: concurrent writers each get their own event id", "[state]") {
    temp_dir tmp;
    auto store = open_ok(tmp.path());
    constexpr int threads = 4;
    constexpr int per_thread = 25;
    std::vector<std::vector<std::uint64_t>> ids(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            std::string error;
            for (int i = 0; i < per_thread; ++i) {
                auto e = event("token.revoke", "s-" + std::to_string(t), milliseconds(i));
                if (store->append_event(e, error)) {
                    ids[t].push_back(e.id);
                }
                auto s = session("s-" + std::to_string(t), "j", static_cast<std::uint64_t>(t));
                store->save_session(s, error);
            }
        });
    }
    for (auto& th : pool) {
        th.join();
    }
    std::vector<std::uint64_t> all;
    for (const auto& v : ids) {
        CHECK(v.size() == per_thread);
        CHECK(std::is_sorted(v.begin(), v.end()));
        all.insert(all.end(), v.begin(), v.end());
    }
    std::sort(all.begin(), all.end());
    CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
    CHECK(all.size() == std::size_t{threads * per_thread});
    CHECK(all.back() == std::uint64_t{threads * per_thread});
    CHECK(load_ok(*store).sessions.size() == std::size_t{threads});
}

TEST_CASE("state: a corrupt file is reported, never replaced", "[state]") {
    temp_dir tmp;
    fill(tmp.path(), 400);
    std::string bytes = read_file(tmp.db());
    REQUIRE(bytes.size() >= 16 * 4096);
    // Garbage over whole pages in the middle of the file (the header stays intact).
    const std::size_t page = 4096;
    const std::size_t pages = bytes.size() / page;
    for (std::size_t i = (pages / 3) * page; i < (2 * pages / 3) * page; ++i) {
        bytes[i] = static_cast<char>(0xA5 ^ (i * 31));
    }
    write_file(tmp.db(), bytes);

    const std::string error = open_error(tmp.path());
    CHECK_THAT(error, Catch::Contains("corrupt"));
    CHECK_THAT(error, Catch::Contains(tmp.db()));
    CHECK_THAT(error, Catch::Contains("untouched"));
    CHECK(read_file(tmp.db()) == bytes);

    // Still refused the second time: nothing was reset in between.
    CHECK_THAT(open_error(tmp.path()), Catch::Contains("corrupt"));
    CHECK(read_file(tmp.db()) == bytes);
}

TEST_CASE("state: a file that is not SQLite is reported, never replaced", "[state]") {
    temp_dir tmp;
    const std::string junk = GENERATE(std::string("hello, not a database\n"),
                                      std::string(8192, 'x'), std::string(1, '\0'));
    write_file(tmp.db(), junk);
    const std::string error = open_error(tmp.path());
    CHECK_THAT(error, Catch::Contains("not a SQLite database"));
    CHECK(read_file(tmp.db()) == junk);
}

TEST_CASE("state: a truncated file is reported, never replaced", "[state]") {
    temp_dir tmp;
    fill(tmp.path(), 200);
    const std::string full = read_file(tmp.db());
    REQUIRE(full.size() >= 8 * 4096);
    const std::size_t keep = GENERATE_COPY(std::size_t{0}, std::size_t{50}, std::size_t{4096},
                                           full.size() / 2 + 100, full.size() - 4096);
    INFO("kept " << keep << " of " << full.size() << " bytes");
    const std::string cut = full.substr(0, keep);
    write_file(tmp.db(), cut);
    const std::string error = open_error(tmp.path());
    CHECK_THAT(error, Catch::Contains("truncated"));
    CHECK(read_file(tmp.db()) == cut);
}

TEST_CASE("state: a directory that cannot be made is reported", "[state]") {
    temp_dir tmp;
    write_file(tmp.path() + "/file", "a regular file");
    const std::string error = open_error(tmp.path() + "/file/state");
    CHECK_THAT(error, Catch::Contains("cannot create state directory"));
    CHECK_THAT(open_error(tmp.path() + "/file"), Catch::Contains("not a directory"));
    CHECK_THAT(open_error(""), Catch::Contains("empty"));
}

TEST_CASE("state: cordon.db that is a directory is reported", "[state]") {
    temp_dir tmp;
    fs::create_directory(tmp.db());
    CHECK_THAT(open_error(tmp.path()), Catch::Contains("not a regular file"));
    CHECK(fs::is_directory(tmp.db()));
}

TEST_CASE("state: a newer schema is refused, the file kept", "[state]") {
    temp_dir tmp;
    {
        auto store = open_ok(tmp.path());
        std::string error;
        REQUIRE(store->save_kill(kill_state{true, "r", "b", t0}, error));
    }
    raw_query(tmp.db(), "UPDATE meta SET schema_version = " +
                            std::to_string(state_store::schema_version + 1));
    const std::string before = read_file(tmp.db());
    const std::string error = open_error(tmp.path());
    CHECK_THAT(error, Catch::Contains("newer cordon"));
    const std::string newer = std::to_string(state_store::schema_version + 1);
    CHECK_THAT(error, Catch::Contains("schema version " + newer));
    CHECK(read_file(tmp.db()) == before);
    CHECK(raw_query(tmp.db(), "SELECT schema_version FROM meta") == newer);
    CHECK(raw_query(tmp.db(), "SELECT engaged FROM kill_switch") == "1");
}

TEST_CASE("state: a SQLite database of something else is refused", "[state]") {
    temp_dir tmp;
    {
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open(tmp.db().c_str(), &db) == SQLITE_OK);
        REQUIRE(sqlite3_exec(db, "CREATE TABLE other (x INTEGER)", nullptr, nullptr, nullptr) ==
                SQLITE_OK);
        REQUIRE(sqlite3_close(db) == SQLITE_OK);
    }
    CHECK_THAT(open_error(tmp.path()), Catch::Contains("not a cordon state store"));
    CHECK(raw_query(tmp.db(), "SELECT count(*) FROM other") == "0");

    SECTION("a meta table with no version is corrupt") {
        raw_query(tmp.db(), "CREATE TABLE meta (schema_version INTEGER)");
        CHECK_THAT(open_error(tmp.path()), Catch::Contains("corrupt"));
    }
}

TEST_CASE("state: an invalid row fails load instead of being skipped", "[state]") {
    temp_dir tmp;
    auto store = open_ok(tmp.path());
    std::string error;
    REQUIRE(store->save_session(session("s-a", "j", 0), error));
    // Out of the clock's range: the schema allows it, load must not.
    store.reset();
    raw_query(tmp.db(), "UPDATE sessions SET expires_ms = 9223372036854775807");
    store = open_ok(tmp.path());
    state_store::loaded out;
    CHECK_FALSE(store->load(out, error));
    CHECK_THAT(error, Catch::Contains("s-a"));
}

TEST_CASE("state: a WAL left without its database is not replayed into a new one", "[state]") {
    temp_dir tmp;
    { auto store = open_ok(tmp.path()); }
    fs::remove(tmp.db());

    SECTION("one with content is an error, and kept") {
        write_file(tmp.db() + "-wal", std::string(4096, 'w'));
        CHECK_THAT(open_error(tmp.path()), Catch::Contains("cordon.db-wal"));
        CHECK(read_file(tmp.db() + "-wal") == std::string(4096, 'w'));
        CHECK_FALSE(fs::exists(tmp.db()));
    }
    SECTION("empty ones are removed and a new store is made") {
        write_file(tmp.db() + "-wal", "");
        write_file(tmp.db() + "-shm", std::string(32768, 's'));
        auto store = open_ok(tmp.path());
        CHECK(load_ok(*store).sessions.empty());
        std::string error;
        REQUIRE(store->save_kill(kill_state{true, "r", "b", t0}, error));
        CHECK(load_ok(*store).kill.engaged);
    }
}

TEST_CASE("state: the last kill of each scope is kept, across reopen", "[state]") {
    temp_dir tmp;
    {
        auto store = open_ok(tmp.path());
        std::vector<kill_timing> got;
        std::string error;
        REQUIRE(store->kill_timings(got, error));
        CHECK(got.empty());  // never measured
        REQUIRE(store->save_kill_timing(kill_timing{"network", 61.25, 9873, t0}, error));
        REQUIRE(store->save_kill_timing(kill_timing{"session", 3.5, 2, t0}, error));
        REQUIRE(store->save_kill_timing(
            kill_timing{"network", 7.125, 4, t0 + std::chrono::seconds(5)}, error));
        CHECK_FALSE(store->save_kill_timing(kill_timing{"bogus", 1, 1, t0}, error));
    }
    auto store = open_ok(tmp.path());
    std::vector<kill_timing> got;
    std::string error;
    REQUIRE(store->kill_timings(got, error));
    REQUIRE(got.size() == 2);
    CHECK(got[0].scope == "network");
    CHECK(got[0].elapsed_ms == Approx(7.125));
    CHECK(got[0].connections_closed == 4);
    CHECK(got[0].at == t0 + std::chrono::seconds(5));
    CHECK(got[1].scope == "session");
    CHECK(got[1].elapsed_ms == Approx(3.5));
}

TEST_CASE("state: a version 1 store is upgraded in place, its content kept", "[state]") {
    temp_dir tmp;
    {
        auto store = open_ok(tmp.path());
        std::string error;
        REQUIRE(store->save_kill(kill_state{true, "r", "b", t0}, error));
    }
    // What a version 1 build wrote: no kill_timings table.
    raw_query(tmp.db(), "DROP TABLE kill_timings");
    raw_query(tmp.db(), "UPDATE meta SET schema_version = 1");
    auto store = open_ok(tmp.path());
    store.reset();
    CHECK(raw_query(tmp.db(), "SELECT schema_version FROM meta") == "2");
    CHECK(raw_query(tmp.db(), "SELECT engaged FROM kill_switch") == "1");
    store = open_ok(tmp.path());
    std::string error;
    CHECK(store->save_kill_timing(kill_timing{"session", 1.5, 1, t0}, error));
}

TEST_CASE("state: a version 1 meta without the tables is refused, not upgraded", "[state]") {
    temp_dir tmp;
    {
        sqlite3* db = nullptr;
        REQUIRE(sqlite3_open(tmp.db().c_str(), &db) == SQLITE_OK);
        REQUIRE(sqlite3_exec(db,
                             "CREATE TABLE meta (schema_version INTEGER NOT NULL) STRICT; "
                             "INSERT INTO meta VALUES (1)",
                             nullptr, nullptr, nullptr) == SQLITE_OK);
        REQUIRE(sqlite3_close(db) == SQLITE_OK);
    }
    CHECK_THAT(open_error(tmp.path()), Catch::Contains("expected schema"));
    CHECK(raw_query(tmp.db(), "SELECT schema_version FROM meta") == "1");
    CHECK(raw_query(tmp.db(), "SELECT count(*) FROM sqlite_schema WHERE name = 'kill_timings'") ==
          "0");
}

TEST_CASE("state: no -shm file, nothing mapped, one process at a time", "[state][faults]") {
    temp_dir tmp;
    auto store = open_ok(tmp.path());
    std::string error;
    REQUIRE(store->save_kill(kill_state{true, "r", "b", t0}, error));
    // The WAL index lives in the process's memory: no -shm to be made immutable, truncated
    // or filled under a mapping (a SIGBUS, not an error).
    CHECK_FALSE(fs::exists(tmp.db() + "-shm"));
    // Another connection cannot read or write it while the store is open.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open_v2(tmp.db().c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
    sqlite3_busy_timeout(db, 0);
    CHECK(sqlite3_exec(db, "SELECT count(*) FROM sessions", nullptr, nullptr, nullptr) ==
          SQLITE_BUSY);
    sqlite3_close(db);
    CHECK(store->check(error));
}

TEST_CASE("state: a removed or replaced store is never reported as persisted", "[state][faults]") {
    temp_dir tmp;
    auto store = open_ok(tmp.path());
    std::string error;
    REQUIRE(store->save_session(session("s-a", "j", 0), error));
    REQUIRE(store->check(error));

    SECTION("the directory removed") {
        fs::remove_all(tmp.path());
        CHECK_FALSE(store->check(error));
        CHECK_THAT(error, Catch::Contains("is gone"));
        CHECK_FALSE(store->save_kill(kill_state{true, "r", "b", t0}, error));
        CHECK_THAT(error, Catch::Contains("nothing is persisted"));
        // Made again at the same path: still not the file this store writes to.
        fs::create_directories(tmp.path());
        write_file(tmp.db(), "");
        CHECK_FALSE(store->save_kill(kill_state{true, "r", "b", t0}, error));
        CHECK_FALSE(store->check(error));
    }
    SECTION("the file replaced by a copy (same name, same content, another inode)") {
        fs::copy_file(tmp.db(), tmp.db() + ".copy");
        fs::rename(tmp.db() + ".copy", tmp.db());
        CHECK_FALSE(store->save_kill(kill_state{true, "r", "b", t0}, error));
        CHECK_THAT(error, Catch::Contains("replaced"));
        CHECK_FALSE(store->check(error));
    }
    SECTION("the WAL removed") {
        REQUIRE(fs::exists(tmp.db() + "-wal"));
        REQUIRE(store->check(error));  // its identity is known from the first write
        fs::remove(tmp.db() + "-wal");
        CHECK_FALSE(store->save_kill(kill_state{true, "r", "b", t0}, error));
        CHECK_THAT(error, Catch::Contains("-wal is gone"));
    }
}

TEST_CASE("state: a failed write is reported until one succeeds; the reserve is made",
          "[state][faults]") {
    temp_dir tmp;
    auto store = open_ok(tmp.path());
    const std::string reserve = tmp.db() + ".reserve";
    REQUIRE(fs::exists(reserve));
    CHECK(fs::file_size(reserve) == 1u << 20);
    CHECK_FALSE(store->reserve_used());
    std::string error;
    // The process may write no file past its current size (EFBIG, an I/O error to SQLite,
    // not SQLITE_FULL: the reserve is for full disks, tested on a tmpfs in test_faults).
    REQUIRE(store->save_session(session("s-a", "j", 0), error));
    const auto wal_size = fs::file_size(tmp.db() + "-wal");
    rlimit saved{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = saved;
    r.rlim_cur = wal_size;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &r) == 0);
    bool failed = false;
    for (int i = 0; i < 200 && !failed; ++i) {
        failed = !store->save_session(session("s-" + std::to_string(i), "j", i), error);
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, old_handler);
    REQUIRE(failed);
    CHECK_FALSE(store->check(error));
    REQUIRE(store->save_kill(kill_state{true, "r", "b", t0}, error));
    CHECK(store->check(error));
}
