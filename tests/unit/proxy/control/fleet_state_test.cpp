// Tests of a fleet instance's copy of the state in etcd: facts folded in, fail-closed values.
#include "proxy/control/fleet_state.hpp"

#include <catch2/catch.hpp>

#include <string>

namespace {

using namespace cordon::proxy::control;
namespace etcd = cordon::proxy::control::etcd;
const std::string prefix = "/cordon/";

etcd::event put(const std::string& rel, const std::string& value, std::int64_t rev) {
    etcd::event e;
    e.kv.key = prefix + rel;
    e.kv.value = value;
    e.kv.create_revision = rev;
    e.kv.mod_revision = rev;
    return e;
}

etcd::event del(const std::string& rel, std::int64_t rev) {
    etcd::event e;
    e.deleted = true;
    e.kv.key = prefix + rel;
    e.kv.mod_revision = rev;
    return e;
}

stored_token token(const std::string& id, std::int64_t expires_ms) {
    stored_token t;
    t.id = id;
    t.hash.fill(0xab);
    t.created = cordon::common::wall_clock::time_point(std::chrono::milliseconds(1000));
    t.expires_at = cordon::common::wall_clock::time_point(std::chrono::milliseconds(expires_ms));
    return t;
}

stored_session session(const std::string& id) {
    stored_session s;
    s.id = id;
    s.job = "agent";
    s.created = cordon::common::wall_clock::time_point(std::chrono::milliseconds(1000));
    return s;
}

}  // namespace

TEST_CASE("fleet_state: a session from its facts, and each fact's change", "[fleet]") {
    fleet_state f;
    using what = fleet_state::what;
    CHECK(f.apply(put(fleet_keys::session("s-1"), session_value(session("s-1")), 2), prefix).kind ==
          what::session);
    CHECK(f.apply(put(fleet_keys::token("s-1", "t-a"), token_value(token("t-a", 5000)), 2), prefix)
              .kind == what::session);
    auto s = f.session("s-1");
    REQUIRE(s);
    CHECK(s->job == "agent");
    CHECK(s->state == session_state::active);
    REQUIRE(s->tokens.size() == 1);
    CHECK(s->tokens[0].hash[0] == 0xab);
    CHECK_FALSE(s->tokens[0].revoked);
    CHECK(s->expires_at.time_since_epoch() == std::chrono::milliseconds(5000));

    SECTION("the same value again changes nothing (a write's echo)") {
        CHECK(f.apply(put(fleet_keys::token("s-1", "t-a"), token_value(token("t-a", 5000)), 3),
                      prefix)
                  .kind == what::nothing);
    }
    SECTION("a revocation revokes that token") {
        CHECK(f.apply(put(fleet_keys::revoked("s-1", "t-a"), reason_value("leak", "", {}, ""), 3),
                      prefix)
                  .kind == what::session);
        CHECK(f.session("s-1")->tokens[0].revoked);
        CHECK(f.session("s-1")->tokens[0].revoked_reason == "leak");
    }
    SECTION("a kill wins over an end, and names its kill") {
        f.apply(put(fleet_keys::ended("s-1"), reason_value("done", "", {}, ""), 3), prefix);
        CHECK(f.session("s-1")->state == session_state::ended);
        f.apply(put(fleet_keys::killed("s-1"), reason_value("rogue", "ops", {}, "k-1"), 4), prefix);
        CHECK(f.session("s-1")->state == session_state::killed);
        CHECK(f.session("s-1")->tokens[0].revoked);
        CHECK(f.session_kill_id("s-1") == "k-1");
    }
    SECTION("a kill whose value does not parse still kills") {
        f.apply(put(fleet_keys::killed("s-1"), "{not json", 4), prefix);
        CHECK(f.session("s-1")->state == session_state::killed);
        CHECK(f.bad_values() == 1);
    }
    SECTION("a token whose value does not parse is never accepted") {
        f.apply(put(fleet_keys::token("s-1", "t-b"), "{\"hash\":\"zz\"}", 4), prefix);
        const auto v = f.session("s-1");
        REQUIRE(v->tokens.size() == 2);
        CHECK(v->tokens[1].revoked);
    }
    SECTION("the lease running out takes the session") {
        f.apply(del(fleet_keys::token("s-1", "t-a"), 5), prefix);
        CHECK(f.apply(del(fleet_keys::session("s-1"), 5), prefix).kind == what::session_gone);
        CHECK_FALSE(f.session("s-1"));
    }
    CHECK(f.apply(put("elsewhere", "x", 9), "/other/").kind == what::nothing);
}

TEST_CASE("fleet_state: the network kill fails closed", "[fleet]") {
    fleet_state f;
    kill_state k{true, "incident", "ops", {}};
    CHECK(f.apply(put(fleet_keys::network(), network_value(k, "k-9"), 2), prefix).kind ==
          fleet_state::what::network);
    CHECK(f.network().engaged);
    CHECK(f.network_kill_id() == "k-9");
    f.apply(put(fleet_keys::network(), network_value(kill_state{false, "ok", "ops", {}}, ""), 3),
            prefix);
    CHECK_FALSE(f.network().engaged);
    f.apply(put(fleet_keys::network(), "garbage", 4), prefix);
    CHECK(f.network().engaged);
    f.apply(put(fleet_keys::network(), network_value(kill_state{false, "ok", "ops", {}}, ""), 5),
            prefix);
    f.apply(del(fleet_keys::network(), 6), prefix);
    CHECK(f.network().engaged);  // deleted by hand: not a revive
}

TEST_CASE("fleet_state: registry, kill records and confirmations", "[fleet]") {
    fleet_state f;
    fleet_instance a{"cordon-a", "127.0.0.1:9090", "127.0.0.1:3128", 42, {}, 0};
    CHECK(f.apply(put(fleet_keys::instance("cordon-a"), instance_value(a), 2), prefix).kind ==
          fleet_state::what::instance);
    CHECK(f.instances().size() == 1);
    CHECK(f.instances().at("cordon-a").pid == 42);
    f.apply(put(fleet_keys::confirm("k-1", "cordon-a"),
                confirm_value(instance_confirmation{"cordon-a", 7, 1.5}), 3),
            prefix);
    REQUIRE(f.confirms("k-1") != nullptr);
    CHECK(f.confirms("k-1")->at("cordon-a").connections_closed == 7);
    CHECK(f.confirms("k-1")->at("cordon-a").elapsed_ms == Approx(1.5));
    CHECK(f.apply(del(fleet_keys::instance("cordon-a"), 4), prefix).kind ==
          fleet_state::what::instance_gone);
    CHECK(f.instances().empty());
    // Names outside [A-Za-z0-9._-] are no key of cordon's.
    CHECK(f.apply(put("i/../x", instance_value(a), 5), prefix).kind == fleet_state::what::nothing);
    CHECK(f.revision() == 5);
}
