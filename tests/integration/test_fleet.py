"""Integration tests of the fleet (issue 23): several `cordon serve` instances sharing one state
in a real etcd (Debian's etcd-server) on loopback, data in a temp dir.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_fleet   (from tests/integration)

Covered: a session made on A is used on B; a kill on B closes the tunnels on A and C and answers
the fleet's figures; a revocation on C refuses on A at once; every instance restarted keeps the
kills; etcd unreachable at start (refused, or started killed); etcd stopped and restarted under
load (known sessions served, new ones 503, kills kept and written later, fail_closed's local
kill); an instance SIGKILLed leaves the registry after its lease; a session's lease revoked in
etcd ends it everywhere whatever the clocks say; a 3-member cluster losing a member; an
instance cut off from the store (its member stopped, history compacted) catching up before it
serves new sessions.
"""

import json
import os
import signal
import socket
import threading
import time
import unittest

import etcd_harness as E
import harness as H

ECHO = DNS = None


def setUpModule():
    global ECHO, DNS
    if not E.available():
        raise unittest.SkipTest("etcd not installed (scripts/setup installs etcd-server)")
    ECHO = H.CountingOrigin("echo")
    DNS = H.FakeDNS({"raw.test": {"A": ["127.0.0.1"]}})


def tearDownModule():
    H.stop_all(ECHO, DNS)


def jobs_yaml():
    return H.raw_tcp_job("integration tests of the fleet", ECHO.port)


CLOSE_ERRORS = (EOFError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError,
                socket.timeout, OSError)


class FleetCase(unittest.TestCase):
    """An etcd and `names` cordon instances, fresh per test (each test stops and starts
    things)."""

    members = 1
    names = ("a", "b", "c")
    cluster_opts = {"instance_ttl": "3s", "kill_wait": "2s"}

    def setUp(self):
        self.etcd = E.Etcd(self.members)
        self.cordons = {}
        self._conns = []
        # tearDown does not run when setUp fails: nothing started here may outlive the test.
        self.addCleanup(self.etcd.cleanup)
        self.addCleanup(lambda: [c.cleanup() for c in self.cordons.values()])
        self.etcd.start()
        self.prefix = f"/cordon-it-{os.getpid()}-{int(time.monotonic() * 1000)}/"
        for n in self.names:
            self.cordons[n] = self.make(n, endpoints=self.endpoints_for(n))
        for c in self.cordons.values():
            c.start(timeout=20)
        if self.names:
            self.wait_registry(len(self.names))

    def tearDown(self):
        for c in self._conns:
            c.close()
        errs = []
        for n, c in self.cordons.items():
            if c.alive():
                rc, _ = c.stop()
                if rc not in (0, None):
                    errs.append(f"{n}: exit {rc}\n{c.stderr_text()}")
            c.cleanup()
        self.etcd.cleanup()
        if errs:
            raise AssertionError("\n".join(errs))

    def endpoints_for(self, name):
        """The etcd members instance `name` is given (every member unless a case says)."""
        return self.etcd.endpoints

    def make(self, name, endpoints=None, **opts):
        o = dict(self.cluster_opts)
        o.update(opts)
        extra = E.cluster_yaml(endpoints or self.etcd.endpoints, name, self.prefix, **o)
        return H.Cordon(jobs_yaml(), DNS.port, {"idle_timeout": "60s"}, extra_yaml=extra)

    # helpers ------------------------------------------------------------------------

    def restart(self, name):
        c = self.cordons[name]
        if os.path.exists(c.ready_path):
            os.remove(c.ready_path)  # the new process writes its own
        c.start(timeout=20)

    def knows(self, name, session, timeout=2.0):
        """Waits (bounded) until instance `name` has the session (it travels by watch)."""
        return H.wait_until(lambda: self.cordons[name].admin(
            "GET", f"/v1/sessions/{session['id']}")[0] == 200, timeout, 0.005)

    def wait_registry(self, n, on="a", timeout=10):
        def ok():
            st = self.cordons[on].status() or {}
            return len((st.get("cluster") or {}).get("instances", [])) == n
        self.assertTrue(H.wait_until(ok, timeout, 0.05),
                        f"registry never held {n}: {self.cordons[on].status()}")

    def tunnel(self, name, session, token=None):
        c = self.cordons[name].conn(10)
        self._conns.append(c)
        c.send(H.connect_request(f"raw.test:{ECHO.port}",
                                 H.basic(session["id"], token or session["token"])))
        return c, c.read_response(10, method="CONNECT")

    def refused_on(self, name, session):
        """True when a CONNECT with the session's token is refused (407) on `name`. A tunnel the
        revocation cut as it was set up (a reset: the watch's news arrived mid-CONNECT) is not
        an answer yet: the next try is."""
        try:
            return self.tunnel(name, session)[1].status == 407
        except ConnectionResetError:
            return False

    def open_tunnel(self, name, session, token=None):
        self.knows(name, session)  # made on another instance, it arrives by watch
        c, r = self.tunnel(name, session, token)
        self.assertEqual(r.status, 200, f"CONNECT through {name}: {r}")
        c.send(b"ping")
        self.assertEqual(c.recv_exact(4, 5), b"ping")
        return c

    def closed_within(self, c, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                c.send(b"x")
                c.recv_exact(1, 0.1)
            except CLOSE_ERRORS:
                return True
        return False

    def post(self, name, path, body):
        return self.cordons[name].admin("POST", path, body)

    def metric(self, name, metric):
        st, _, raw = self.cordons[name].admin_raw("GET", "/metrics")
        for line in raw.decode().splitlines():
            if line.startswith(metric + " ") or line.startswith(metric + "{}"):
                return float(line.split()[-1])
        return None


class SessionsTests(FleetCase):

    def test_session_made_on_a_used_on_b_and_c(self):
        # The others learn of it by watch: milliseconds, bounded here at 1 s.
        s = self.cordons["a"].create_session("agent")
        for n in ("b", "c"):
            self.assertTrue(H.wait_until(lambda: self.tunnel(n, s)[1].status == 200, 1.0, 0.005),
                            f"{n} never accepted the session made on a")
            self.open_tunnel(n, s)

    def test_kill_on_b_closes_tunnels_on_a_and_c_and_answers_the_fleet(self):
        s = self.cordons["a"].create_session("agent")
        on_a = self.open_tunnel("a", s)
        on_c = self.open_tunnel("c", s)
        self.assertTrue(self.knows("b", s))
        t0 = time.monotonic()
        st, js = self.post("b", f"/v1/sessions/{s['id']}/kill",
                           {"reason": "test: fleet kill", "by": "tests"})
        dt = time.monotonic() - t0
        self.assertEqual(st, 200, js)
        self.assertEqual(sorted(i["instance"] for i in js["instances"]), ["a", "b", "c"], js)
        self.assertEqual(js["missing"], [], js)
        self.assertEqual(js["connections_closed"], 2, js)
        self.assertLess(js["elapsed_ms"], 1000, js)
        self.assertLess(dt, 2.0)
        self.assertTrue(js["persisted"])
        self.assertTrue(self.closed_within(on_a, 1.0), "tunnel on a still open")
        self.assertTrue(self.closed_within(on_c, 1.0), "tunnel on c still open")
        # Refused everywhere from then on.
        for n in ("a", "b", "c"):
            _, r = self.tunnel(n, s)
            self.assertEqual(r.status, 403, n)
        # Each instance's audit says which instance wrote it.
        def closes():
            recs = [json.loads(x) for x in self.cordons["a"].audit_raw().decode().splitlines()
                    if x]
            return [r for r in recs if r.get("event") == "conn.close"]
        self.assertTrue(H.wait_until(
            lambda: any(r.get("reason") == "session_killed" for r in closes()), 3, 0.05))
        self.assertTrue(all(r.get("instance") == "a" for r in closes()), closes())
        self.assertIsNotNone(self.metric("b", "cordon_kill_propagation_seconds_count"))
        # What the dashboard's Fleet row and the alerts query of a fleet is served here
        # (test_dashboards scrapes a cordon without `cluster`: FLEET_ONLY is checked here).
        import test_dashboards as TD
        _, _, raw = self.cordons["b"].admin_raw("GET", "/metrics")
        samples, _ = TD.exposition(raw.decode())
        used = set()
        for _, expr in TD.dashboard_exprs(TD.load_dashboard()) + TD.alert_exprs():
            used |= TD.promql_metric_names(expr) & TD.FLEET_ONLY
        self.assertTrue(used, "the dashboard and alerts name no fleet metric")
        self.assertEqual(used - samples, set(), "fleet metrics named by dashboards/ not served")

    def test_network_kill_on_a_cuts_every_instance_and_revive_lifts_it(self):
        s = self.cordons["b"].create_session("agent")
        tunnels = [self.open_tunnel(n, s) for n in ("a", "b", "c")]
        st, js = self.post("a", "/v1/kill", {"reason": "test: incident", "by": "tests"})
        self.assertEqual(st, 200, js)
        self.assertEqual(js["missing"], [], js)
        self.assertEqual(js["connections_closed"], 3, js)
        for c in tunnels:
            self.assertTrue(self.closed_within(c, 1.0))
        for n in ("a", "b", "c"):
            self.assertTrue(self.cordons[n].status()["kill"]["engaged"], n)
        st, js = self.post("c", "/v1/revive", {"reason": "test: over", "by": "tests"})
        self.assertEqual(st, 200, js)
        for n in ("a", "b", "c"):
            self.assertTrue(H.wait_until(
                lambda: not self.cordons[n].status()["kill"]["engaged"], 2, 0.02), n)
        self.open_tunnel("a", s)

    def test_kill_and_revoke_at_once_on_an_instance_that_has_not_seen_the_session(self):
        # Given the moment the session is made elsewhere: the instance reads it from etcd.
        for _ in range(5):
            s = self.cordons["a"].create_session("agent")
            st, js = self.post("b", f"/v1/sessions/{s['id']}/kill", {"reason": "t", "by": "t"})
            self.assertEqual(st, 200, js)
            s = self.cordons["a"].create_session("agent")
            st, js = self.cordons["c"].admin(
                "DELETE", f"/v1/sessions/{s['id']}/tokens/{s['token_id']}")
            self.assertEqual(st, 200, js)
            self.assertTrue(H.wait_until(lambda: self.refused_on("a", s), 1.0, 0.01))

    def test_revoke_on_c_refuses_on_a_at_once(self):
        s = self.cordons["a"].create_session("agent")
        on_a = self.open_tunnel("a", s)
        self.assertTrue(self.knows("c", s))
        st, js = self.cordons["c"].admin("DELETE",
                                         f"/v1/sessions/{s['id']}/tokens/{s['token_id']}")
        self.assertEqual(st, 200, js)
        t0 = time.monotonic()
        self.assertTrue(self.closed_within(on_a, 1.0), "the revoked token's tunnel on a")

        def refused():
            _, r = self.tunnel("a", s)
            return r.status == 407
        self.assertTrue(H.wait_until(refused, 1.0, 0.01))
        self.assertLess(time.monotonic() - t0, 1.0)

    def test_restart_of_every_instance_keeps_kills(self):
        s = self.cordons["a"].create_session("agent")
        s2 = self.cordons["a"].create_session("agent")
        self.assertTrue(self.knows("b", s))
        self.assertEqual(self.post("b", f"/v1/sessions/{s['id']}/kill",
                                   {"reason": "test: keep", "by": "tests"})[0], 200)
        self.assertEqual(self.post("c", "/v1/kill", {"reason": "test: keep", "by": "tests"})[0],
                         200)
        for c in self.cordons.values():
            c.stop()
        for n in self.names:
            self.restart(n)
        for n in self.names:
            st = self.cordons[n].status()
            self.assertTrue(st["kill"]["engaged"], n)
        self.post("a", "/v1/revive", {"reason": "test: over", "by": "tests"})
        for n in self.names:
            self.assertTrue(H.wait_until(
                lambda: not self.cordons[n].status()["kill"]["engaged"], 2, 0.02), n)
            _, r = self.tunnel(n, s)
            self.assertEqual(r.status, 403, f"{n}: the killed session")
            self.open_tunnel(n, s2)

    def test_status_lists_instances_and_timeline_merges_audit_dirs(self):
        import subprocess
        s = self.cordons["a"].create_session("agent")
        self.open_tunnel("a", s).close()
        self.open_tunnel("b", s).close()
        self.assertTrue(self.knows("c", s))
        st, js = self.post("c", f"/v1/sessions/{s['id']}/kill", {"reason": "t", "by": "tests"})
        self.assertEqual(st, 200, js)
        a = self.cordons["a"]
        env = dict(os.environ, CORDON_ADMIN=f"http://{a.admin_addr[0]}:{a.admin_addr[1]}",
                   CORDON_ADMIN_TOKEN_FILE=a.token_file)
        out = subprocess.run([H.CORDON_BIN, "status"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=30).stdout
        self.assertIn("fleet        instance a, etcd up", out)
        for n in ("a", "b", "c"):
            self.assertIn(f"  {n}  admin ", out)

        def timeline():
            args = [H.CORDON_BIN, "audit", "timeline", s["id"], "--json"]
            for n in ("a", "b", "c"):
                args += ["--audit", self.cordons[n].audit_dir]
            p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=30)
            return [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
        self.assertTrue(H.wait_until(
            lambda: {"a", "b", "c"} <= {r.get("instance") for r in timeline()}, 5, 0.1),
            timeline())
        recs = timeline()
        self.assertEqual([r["ts"] for r in recs], sorted(r["ts"] for r in recs))
        self.assertTrue(any(r["event"] == "kill.session" and r["instance"] == "c" for r in recs))

    def test_sigkilled_instance_leaves_the_registry_after_its_lease(self):
        self.cordons["c"].kill()
        self.wait_registry(2, timeout=3 + 5)
        st = self.cordons["a"].status()
        self.assertEqual(sorted(i["instance"] for i in st["cluster"]["instances"]), ["a", "b"])
        # A kill now names nobody missing: c is gone, not silent.
        s = self.cordons["a"].create_session("agent")
        _, js = self.post("a", f"/v1/sessions/{s['id']}/kill", {"reason": "t", "by": "tests"})
        self.assertEqual(js["missing"], [], js)

    def test_a_second_instance_of_one_name_is_refused_a_dead_ones_name_taken_over(self):
        # Two live instances of one name would overwrite each other's registry entry and
        # confirmations: the second refuses to start, saying who holds the name.
        twin = self.make("b")
        try:
            with self.assertRaises(H.CordonError) as e:
                twin.start(timeout=20)
            self.assertIn("instance name b is in use by a live instance", str(e.exception))
            host, port = self.cordons["b"].admin_addr
            self.assertIn(f"admin {host}:{port}", str(e.exception))
        finally:
            twin.cleanup()
        self.wait_registry(3)
        # A predecessor SIGKILLed (its lease not yet run out) is no holder: its successor
        # starts, on other ports, once the lease is seen not renewed, and serves.
        self.cordons["c"].kill()
        heir = self.make("c")
        self.cordons["c"] = heir
        heir.start(timeout=20)
        s = self.cordons["a"].create_session("agent")
        self.open_tunnel("c", s)
        st = self.cordons["a"].status()
        self.assertEqual(sorted(i["instance"] for i in st["cluster"]["instances"]),
                         ["a", "b", "c"], st)

    def test_session_lease_revoked_in_etcd_ends_it_everywhere(self):
        # Expiry follows etcd's lease (its clock), not only each host's wall clock.
        s = self.cordons["a"].create_session("agent")
        on_b = self.open_tunnel("b", s)
        lease = self.etcd.lease_of(self.prefix + "s/" + s["id"])
        self.assertTrue(lease)
        self.etcd.revoke_lease(lease)
        self.assertTrue(self.closed_within(on_b, 1.0))
        for n in self.names:
            _, r = self.tunnel(n, s)
            self.assertEqual(r.status, 407, n)


class AuthTests(FleetCase):
    """etcd with authentication on: cordon logs in with cluster.etcd.username and
    password_file (a user allowed the prefix only) for its writes, leases and the watch."""

    names = ()

    def setUp(self):
        super().setUp()  # etcd, no cordon yet
        self.secret_dir = H.TempDir("cordon-it-etcd-auth-")
        self.addCleanup(self.secret_dir.cleanup)
        self.password = "pw-" + os.urandom(8).hex()
        E.enable_auth(self.etcd.url, "cordon", self.password, self.prefix)
        for n in ("a", "b"):
            self.cordons[n] = self.make_with_password(n, self.password)
            self.cordons[n].start(timeout=20)

    def make_with_password(self, name, password):
        path = self.secret_dir.join(f"{name}.password")
        with open(path, "w") as f:
            f.write(password + "\n")
        os.chmod(path, 0o600)
        o = dict(self.cluster_opts)
        extra = E.cluster_yaml(self.etcd.endpoints, name, self.prefix, username="cordon",
                               password_file=path, **o)
        return H.Cordon(jobs_yaml(), DNS.port, {"idle_timeout": "60s"}, extra_yaml=extra)

    def test_sessions_and_kills_through_an_etcd_with_authentication(self):
        self.wait_registry(2)
        s = self.cordons["a"].create_session("agent")
        on_a = self.open_tunnel("a", s)
        self.open_tunnel("b", s)  # learnt by b's watch, which logged in too
        st, js = self.post("b", f"/v1/sessions/{s['id']}/kill", {"reason": "t", "by": "tests"})
        self.assertEqual(st, 200, js)
        self.assertTrue(js["persisted"], js)
        self.assertEqual(js["missing"], [], js)
        self.assertTrue(self.closed_within(on_a, 1.0))
        # Without the credentials etcd refuses cordon: it refuses to start, and says why.
        wrong = self.make_with_password("x", "not-the-password")
        try:
            with self.assertRaises(H.CordonError) as e:
                wrong.start(timeout=20)
            self.assertIn("refusing to start", str(e.exception))
            self.assertIn("authentication failed", str(e.exception))
            self.assertNotIn("not-the-password", str(e.exception))
        finally:
            wrong.cleanup()
        for c in self.cordons.values():
            self.assertNotIn(self.password, c.stderr_text())


class StoreFaultTests(FleetCase):
    names = ("a", "b")

    def test_unreachable_at_start_refuses_or_starts_killed(self):
        dead = f"http://127.0.0.1:{H.free_port()}"
        c = self.make("x", endpoints=[dead])
        try:
            with self.assertRaises(H.CordonError) as e:
                c.start(timeout=15)
            self.assertIn("refusing to start", str(e.exception))
        finally:
            c.cleanup()
        c = self.make("y", endpoints=[dead], start_without_store="true")
        try:
            c.start(timeout=15)
            st = c.status()
            self.assertTrue(st["kill"]["engaged"], st)
            self.assertEqual(c.admin("POST", "/v1/sessions", {"job": "agent"})[0], 503)
        finally:
            c.stop()
            c.cleanup()

    def test_etcd_stopped_and_restarted_under_load(self):
        s = self.cordons["a"].create_session("agent")
        on_b = self.open_tunnel("b", s)
        stop_at = time.monotonic()
        self.etcd.stop()
        self.assertTrue(H.wait_until(lambda: self.metric("a", "cordon_cluster_store_up") == 0,
                                     5, 0.1))
        # Known sessions are served; new ones are refused; the open tunnel carries on.
        self.open_tunnel("a", s)
        on_b.send(b"more")
        self.assertEqual(on_b.recv_exact(4, 5), b"more")
        st, js = self.cordons["a"].admin("POST", "/v1/sessions", {"job": "agent"})
        self.assertEqual(st, 503, js)
        # A kill while etcd is away works here at once, answers not persisted, is kept.
        st, js = self.post("a", f"/v1/sessions/{s['id']}/kill", {"reason": "t", "by": "tests"})
        self.assertEqual(st, 200, js)
        self.assertFalse(js["persisted"], js)
        self.assertEqual(js["missing"], ["b"], js)
        _, r = self.tunnel("a", s)
        self.assertEqual(r.status, 403)
        self.assertGreater(time.monotonic() - stop_at, 0)
        # etcd back: the kill is written, b learns of it, sessions are made again.
        for m in self.etcd.members:
            m.start()
        self.assertTrue(H.wait_until(lambda: self.closed_within(on_b, 0.2), 10, 0.1),
                        "b never learnt of the kill made while etcd was away")
        self.assertTrue(H.wait_until(
            lambda: self.cordons["b"].admin("POST", "/v1/sessions", {"job": "agent"})[0] == 201,
            10, 0.2))
        self.assertTrue(H.wait_until(lambda: self.metric("a", "cordon_cluster_store_up") == 1,
                                     10, 0.1))

    def test_hung_etcd_and_a_flood_of_creates_do_not_delay_a_kill(self):
        """The attacker's case: etcd hangs (SIGSTOP: connections are accepted, nothing answers)
        while creates keep coming to a (a runaway orchestrator, shims retrying). A network kill
        on a must still cut a's tunnels at once: no write to the hung etcd may hold the control
        thread (which reads the kill call) meanwhile. The kill is kept and reaches b once etcd
        answers again."""
        s = self.cordons["a"].create_session("agent")
        tunnels = [self.open_tunnel("a", s) for _ in range(4)]
        self.etcd.pause()
        self.addCleanup(self.etcd.resume)
        stop = threading.Event()
        answers = []

        def flood():
            for _ in range(100):  # bounded; each create waits at most 5 s
                if stop.is_set():
                    return
                try:
                    answers.append(self.cordons["a"].admin_raw(
                        "POST", "/v1/sessions", {"job": "agent"}, timeout=5)[0])
                except OSError:
                    answers.append(None)

        floods = [threading.Thread(target=flood) for _ in range(4)]
        for t in floods:
            t.start()
        try:
            time.sleep(0.3)  # the creates are waiting on the hung etcd now
            kill_answer = []
            t0 = time.monotonic()
            killer = threading.Thread(target=lambda: kill_answer.append(self.cordons["a"].admin(
                "POST", "/v1/kill", {"reason": "t: hung etcd", "by": "tests"})))
            killer.start()
            for c in tunnels:
                self.assertTrue(self.closed_within(c, max(0.05, t0 + 0.5 - time.monotonic())),
                                f"a tunnel on a still open {time.monotonic() - t0:.2f} s after "
                                "the kill call (the control thread waits on the hung etcd)")
            killer.join(10)
            self.assertEqual(kill_answer[0][0], 200, kill_answer)
        finally:
            stop.set()
            for t in floods:
                t.join(15)
        # No create was answered as made while etcd hung.
        self.assertNotIn(201, answers, answers)
        # Back: the kill is written and reaches b.
        self.etcd.resume()
        self.assertTrue(H.wait_until(lambda: self.cordons["b"].status()["kill"]["engaged"],
                                     15, 0.1), "b never learnt of the kill given on a")

    def test_fail_closed_engages_the_local_kill_after_store_timeout(self):
        c = self.make("fc", fail_closed="true", store_timeout="1s")
        self.cordons["fc"] = c
        c.start(timeout=20)
        s = self.cordons["a"].create_session("agent")
        self.assertTrue(H.wait_until(lambda: self.tunnel("fc", s)[1].status == 200, 3, 0.05))
        t = self.open_tunnel("fc", s)
        self.etcd.stop()
        self.assertTrue(self.closed_within(t, 6.0), "fail_closed did not cut the tunnel")
        st = c.status()
        self.assertTrue(st["kill"]["engaged"] and st["kill"].get("local"), st)
        _, r = self.tunnel("fc", s)
        self.assertEqual(r.status, 403)
        # Without fail_closed, a keeps serving the known session.
        self.open_tunnel("a", s)
        for m in self.etcd.members:
            m.start()
        self.assertTrue(H.wait_until(lambda: not c.status()["kill"]["engaged"], 10, 0.1))
        self.open_tunnel("fc", s)


class ThreeMemberTests(FleetCase):
    members = 3
    names = ("a", "b")
    # A cut-off instance stays in the registry through a kill's wait (it is missing, not
    # gone): its lease outlives the time to see it cut off plus kill_wait.
    cluster_opts = {"instance_ttl": "10s", "kill_wait": "2s"}

    def endpoints_for(self, name):
        # a talks to members 0 and 1, b to member 2 only: stopping member 2 cuts b off the
        # store while the cluster keeps its quorum.
        eps = self.etcd.endpoints
        return eps[:2] if name == "a" else eps[2:]

    def test_member_loss_changes_nothing(self):
        self.etcd.members[0].kill()
        st, js = self.cordons["a"].admin("POST", "/v1/sessions", {"job": "agent"})
        self.assertEqual(st, 201, f"{js}\n{self.cordons['a'].stderr_text()}")
        s = js
        on_b = self.open_tunnel("b", s)
        st, js = self.post("a", f"/v1/sessions/{s['id']}/kill", {"reason": "t", "by": "tests"})
        self.assertEqual(st, 200, js)
        self.assertTrue(js["persisted"], js)
        self.assertEqual(js["missing"], [], js)
        self.assertTrue(self.closed_within(on_b, 1.0))

    def test_cut_off_instance_catches_up_before_serving(self):
        s = self.cordons["a"].create_session("agent")
        on_b = self.open_tunnel("b", s)
        self.etcd.members[2].stop()
        self.assertTrue(H.wait_until(
            lambda: not self.cordons["b"].status()["cluster"]["serving"], 5, 0.1))
        self.assertEqual(self.cordons["b"].admin("POST", "/v1/sessions", {"job": "agent"})[0], 503)
        # Meanwhile, on the rest of the fleet: a kill, a new session, and history compacted.
        _, js = self.post("a", f"/v1/sessions/{s['id']}/kill", {"reason": "t", "by": "tests"})
        self.assertEqual(js["missing"], ["b"], js)
        s2 = self.cordons["a"].create_session("agent")
        self.etcd.compact(url=self.etcd.members[1].url)
        self.etcd.members[2].start()
        # b catches up: the kill closes its tunnel, the new session works, then it serves.
        self.assertTrue(self.closed_within(on_b, 10.0), "b never applied the kill")
        self.assertTrue(H.wait_until(lambda: self.cordons["b"].status()["cluster"]["serving"],
                                     10, 0.1))
        self.open_tunnel("b", s2)
        self.assertEqual(self.cordons["b"].admin("POST", "/v1/sessions", {"job": "agent"})[0], 201)


if __name__ == "__main__":
    unittest.main()
