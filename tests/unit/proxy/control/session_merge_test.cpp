// Tests of session_registry::merge, forget and expire_now: what a fleet folds in.
#include "proxy/control/sessions.hpp"

#include <catch2/catch.hpp>

using namespace cordon::proxy::control;

TEST_CASE("session merge: monotone", "[fleet]") {
    session_registry a;
    session_registry b;
    const auto m = a.create("agent", std::chrono::minutes(10));
    const auto s = a.stored(m.session_id);
    REQUIRE(s);
    auto r = b.merge(*s);
    CHECK(r.added);
    CHECK(b.authenticate(m.session_id, m.token).ok());  // made on A, used on B
    CHECK(b.active_count() == 1);

    SECTION("a revocation reaches B, and is never undone") {
        a.revoke_token(m.session_id, m.token_id, "leak");
        r = b.merge(*a.stored(m.session_id));
        REQUIRE(r.revoked.size() == 1);
        CHECK(b.authenticate(m.session_id, m.token).status == auth_status::token_revoked);
        r = b.merge(*s);  // the older view changes nothing
        CHECK_FALSE(r.changed());
        CHECK(b.authenticate(m.session_id, m.token).status == auth_status::token_revoked);
    }
    SECTION("a kill reaches B; an end after it does not undo it") {
        a.kill(m.session_id, "rogue");
        r = b.merge(*a.stored(m.session_id));
        CHECK(r.killed);
        CHECK(b.authenticate(m.session_id, m.token).status == auth_status::session_killed);
        CHECK(b.active_count() == 0);
        auto ended = *s;
        ended.state = session_state::ended;
        CHECK_FALSE(b.merge(ended).changed());
        CHECK(b.get(m.session_id)->state == session_state::killed);
    }
    SECTION("the lease running out expires it now, whatever B's clock says") {
        const auto valid = b.expire_now(m.session_id);
        CHECK(valid.size() == 1);
        CHECK(b.authenticate(m.session_id, m.token).status == auth_status::token_expired);
        CHECK(b.active_count() == 0);
    }
    SECTION("forget") {
        CHECK(b.forget(m.session_id));
        CHECK(b.authenticate(m.session_id, m.token).status == auth_status::bad_credentials);
        CHECK(b.active_count() == 0);
    }
}
