"""Fault injection (issue 18): the kill switch and the audit log under a low descriptor limit,
a full disk, immutable files and a state directory removed under a running cordon.

Run: CORDON_BIN=build/cordon python3 -m unittest -v test_faults   (from tests/integration)

Facilities: `prlimit`-style limits come from resource.setrlimit in the child (always there);
a full disk is a small tmpfs mounted over the state or audit directory (needs root and
mount(8)); immutable files need chattr(1) and a filesystem that takes `+i`. A test whose
facility is missing is skipped and says which. Every wait is bounded; all traffic is on
loopback.
"""

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest

import harness as H

ECHO = DNS = None


def setUpModule():
    global ECHO, DNS
    ECHO = H.EchoOrigin("echo")
    DNS = H.FakeDNS({"raw.test": {"A": ["127.0.0.1"]}})


def tearDownModule():
    H.stop_all(ECHO, DNS)


def jobs_yaml():
    return H.raw_tcp_job("fault-injection tests", ECHO.port)


# Slow clients are held long enough that only a reserve can let the kill through.
PROXY_OPTS = {"header_timeout": "30s", "idle_timeout": "60s", "connect_timeout": "5s"}

KILL_BOUND = 2.0  # seconds a kill may take to answer while the data plane is full


def need_root_mount(test):
    if os.geteuid() != 0:
        test.skipTest("needs root to mount a tmpfs (a small disk that fills up)")
    if shutil.which("mount") is None or shutil.which("umount") is None:
        test.skipTest("needs mount(8) and umount(8) for a tmpfs")


def mount_tmpfs(test, path, size):
    """Mounts a tmpfs of `size` (e.g. "2m") on `path`; unmounted (lazily) at cleanup."""
    need_root_mount(test)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=20)
    if r.returncode != 0:
        test.skipTest(f"cannot mount a tmpfs on {path}: {r.stderr.strip()}")
    test.addCleanup(subprocess.run, ["umount", "-l", path], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, timeout=20)


def fill_disk(path, name="filler", limit=1 << 30):
    """Writes `path`/`name` until the filesystem is full (ENOSPC); returns its path."""
    p = os.path.join(path, name)
    chunk = b"\0" * 65536
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        written = 0
        while written < limit:
            try:
                n = os.write(fd, chunk)
            except OSError:
                break
            if n <= 0:
                break
            written += n
        # The last partial chunk: fill byte by byte-ish until nothing fits.
        for size in (4096, 512, 1):
            for _ in range(64):
                try:
                    if os.write(fd, chunk[:size]) <= 0:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    return p


def chattr(test, flag, paths):
    if shutil.which("chattr") is None:
        test.skipTest("needs chattr(1) for immutable files")
    for p in paths:
        r = subprocess.run(["chattr", flag, p], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=20)
        if r.returncode != 0:
            test.skipTest(f"chattr {flag} {p} failed: {r.stderr.strip()}")


def kill_body(reason="fault test"):
    return {"reason": reason, "by": "test_faults"}


class FaultCase(unittest.TestCase):
    def new_cordon(self, start=True, **kw):
        kw.setdefault("proxy_opts", PROXY_OPTS)
        c = H.Cordon(jobs_yaml(), DNS.port, **kw)
        self.addCleanup(c.cleanup)
        if start:
            c.start()
        return c

    def open_tunnel(self, c, auth, timeout=5):
        s = socket.create_connection(c.proxy_addr, timeout=timeout)
        try:
            s.sendall(H.connect_request(f"raw.test:{ECHO.port}", auth))
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                d = s.recv(4096)
                if not d:
                    break
                head += d
        except OSError:
            s.close()
            raise
        return s, head

    def timed_kill(self, c, timeout=30):
        t0 = time.monotonic()
        st, _, raw = c.admin_raw("POST", "/v1/kill", kill_body(), timeout=timeout)
        took = time.monotonic() - t0
        return st, json.loads(raw) if raw else None, took


# --------------------------------------------------------------------------------------
# Item 1: descriptor exhaustion must not block the kill
# --------------------------------------------------------------------------------------

class DescriptorExhaustion(FaultCase):
    LIMIT = 256

    def test_kill_answers_while_idle_sockets_fill_the_proxy(self):
        c = self.new_cordon(nofile_limit=self.LIMIT)
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for _ in range(400):  # more than the whole descriptor limit: never a byte sent
            try:
                socks.append(socket.create_connection(c.proxy_addr, timeout=2))
            except OSError:
                break
        time.sleep(0.5)  # let cordon accept what it will
        st, body, took = self.timed_kill(c)
        self.assertEqual(st, 200, body)
        self.assertLess(took, KILL_BOUND, f"the kill took {took:.1f} s behind 400 idle sockets")
        st, status = c.admin("GET", "/v1/status")
        self.assertEqual(st, 200)
        self.assertTrue(status["kill"]["engaged"])

    def test_event_streams_leave_admin_connections_for_the_kill(self):
        c = self.new_cordon(nofile_limit=self.LIMIT)
        slots = c.status()["capacity"]["admin_connections"]
        streams = []
        self.addCleanup(lambda: [s.close() for s in streams])
        refused = None
        for _ in range(slots + 2):  # every `cordon run` holds one for good
            s = socket.create_connection(c.admin_addr, timeout=5)
            s.sendall(f"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                      f"{c.admin_token}\r\n\r\n".encode())
            head = s.recv(4096)
            if not head.startswith(b"HTTP/1.1 200"):
                refused = head
                s.close()
                break
            streams.append(s)
        self.assertIsNotNone(refused, f"{slots + 2} streams on {slots} admin connections")
        self.assertIn(b" 503 ", refused.split(b"\r\n")[0])
        self.assertLess(len(streams), slots)
        st, body, took = self.timed_kill(c)
        self.assertEqual(st, 200, body)
        self.assertLess(took, KILL_BOUND)

    def test_kill_answers_and_closes_tunnels_under_a_descriptor_limit(self):
        c = self.new_cordon(nofile_limit=self.LIMIT)
        sid = c.create_session("agent")
        auth = H.basic(sid["id"], sid["token"])
        tunnels = []
        self.addCleanup(lambda: [s.close() for s in tunnels])
        refused = 0
        for _ in range(200):  # each tunnel is two descriptors in cordon: past the limit
            try:
                s, head = self.open_tunnel(c, auth, timeout=3)
            except OSError:
                refused += 1
                continue
            if head.startswith(b"HTTP/1.1 200"):
                tunnels.append(s)
            else:
                refused += 1
                s.close()
        self.assertGreater(len(tunnels), 10, "no tunnel could be opened at all")
        st, body, took = self.timed_kill(c)
        self.assertEqual(st, 200, body)
        self.assertLess(took, KILL_BOUND, f"the kill took {took:.1f} s behind "
                                          f"{len(tunnels)} tunnels")
        self.assertEqual(body["connections_closed"], len(tunnels))
        deadline = time.monotonic() + 2
        still_open = 0
        for s in tunnels:
            s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                if s.recv(1) != b"":
                    still_open += 1
            except socket.timeout:
                still_open += 1
            except OSError:
                pass  # reset: closed
        self.assertEqual(still_open, 0, "tunnels left open after the kill")
        # The budget that made it so: client connections at two descriptors each (their
        # socket and their upstream's; pipes are budgeted apart) plus the reserve fit the
        # limit, and the proxy refused what did not fit instead of running out.
        st, status = c.admin("GET", "/v1/status")
        self.assertEqual(st, 200)
        cap = status["capacity"]
        self.assertEqual(cap["descriptor_limit"], self.LIMIT)
        self.assertLessEqual(cap["max_connections"] * cap["descriptors_per_connection"] +
                             cap["reserved"], self.LIMIT)
        self.assertGreaterEqual(cap["reserved"], cap["admin_connections"])
        self.assertLessEqual(len(tunnels), cap["max_connections"])
        self.assertGreaterEqual(len(tunnels), cap["max_connections"] - 2)


# --------------------------------------------------------------------------------------
# Item 5: a kill is never lost, and never reported as kept when it was not
# --------------------------------------------------------------------------------------

class StateDurability(FaultCase):
    def assert_not_persisted(self, c, body):
        self.assertIs(body.get("persisted"), False, body)
        st, status = c.admin("GET", "/v1/status")
        self.assertEqual(st, 200)
        self.assertIs(status["state"]["healthy"], False, status["state"])
        self.assertTrue(status["state"].get("error"), status["state"])

    def assert_cli_says_not_persisted(self, c, args):
        r = H.cordon_cli(c, args)
        self.assertNotEqual(r.returncode, 0, f"exit 0 for a kill not persisted:\n{r.stdout}")
        self.assertIn("NOT PERSISTED", (r.stdout + r.stderr).upper(), r.stdout + r.stderr)
        return r

    def test_removed_state_dir_is_detected(self):
        c = self.new_cordon()
        sid = c.create_session("agent")
        shutil.rmtree(c.state_dir)
        st, body, _ = self.timed_kill(c)
        self.assertEqual(st, 200, body)
        self.assert_not_persisted(c, body)
        self.assert_cli_says_not_persisted(c, ["kill", "--all", "--reason", "again"])
        r = H.cordon_cli(c, ["status"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("state        NOT DURABLE", r.stdout)
        self.assertIn("is gone", r.stdout)
        for line in r.stdout.splitlines():
            self.assertLessEqual(len(line), 80, f"status line too wide: {line!r}")
        # The kill holds in memory all the same.
        s, head = self.open_tunnel(c, H.basic(sid["id"], sid["token"]))
        s.close()
        self.assertTrue(head.startswith(b"HTTP/1.1 403"), head)
        self.assertIn(b"kill_switch", head)

    def test_replaced_store_is_detected(self):
        c = self.new_cordon()
        db = os.path.join(c.state_dir, "cordon.db")
        # The same path, another file (a restore, a remount): same content, new inode.
        shutil.copy(db, db + ".copy")
        os.replace(db + ".copy", db)
        st, body, _ = self.timed_kill(c)
        self.assertEqual(st, 200, body)
        self.assert_not_persisted(c, body)

    def test_full_state_disk_never_claims_a_lost_kill(self):
        c = self.new_cordon(start=False)
        mount_tmpfs(self, c.state_dir, "4m")
        c.start()
        first = c.create_session("agent")
        second = c.create_session("agent")
        filler = fill_disk(c.state_dir)
        # The disk is full: the store's space reserve makes room for this kill.
        r = H.cordon_cli(c, ["kill", first["id"], "--reason", "disk full"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        state = c.status()["state"]
        self.assertIn("reserve", state.get("warning", ""), state)
        # Full again, and no reserve left: the next kill holds in memory and says it is not
        # persisted, with a non-zero exit.
        filler2 = fill_disk(c.state_dir, "filler2")
        r = self.assert_cli_says_not_persisted(c, ["kill", second["id"], "--reason", "full"])
        self.assertEqual(r.returncode, 3)
        self.assertIn("KILLED", r.stdout)
        state = c.status()["state"]
        self.assertIs(state["healthy"], False, state)
        s, head = self.open_tunnel(c, H.basic(second["id"], second["token"]))
        s.close()
        self.assertTrue(head.startswith(b"HTTP/1.1 403"), head)
        # Space again: what could not be written is, within seconds, and the store is healthy.
        os.unlink(filler)
        os.unlink(filler2)
        self.assertTrue(H.wait_until(lambda: c.status()["state"]["healthy"], 5),
                        c.status()["state"])
        H.cordon_restart(c)
        for sid in (first, second):
            st, got = c.admin("GET", f"/v1/sessions/{sid['id']}")
            self.assertEqual(st, 200)
            self.assertEqual(got["state"], "killed", sid["id"])

    def test_immutable_store_files_do_not_crash_the_kill(self):
        c = self.new_cordon()
        c.create_session("agent")
        files = [p for p in glob.glob(os.path.join(c.state_dir, "*")) if os.path.isfile(p)]
        self.assertTrue(files)
        chattr(self, "+i", files)  # skips (before any cleanup is due) without chattr(1)
        self.addCleanup(subprocess.run, ["chattr", "-i"] + files, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, timeout=20)
        st, body, _ = self.timed_kill(c)
        self.assertEqual(st, 200, body)
        time.sleep(0.3)
        self.assertTrue(c.alive(), f"cordon died:\n{c.stderr_text()}")
        if body.get("persisted") is True:
            # Some filesystems (tmpfs) let a descriptor opened before `+i` write on: then
            # the claim must be true, and the kill survives a restart.
            subprocess.run(["chattr", "-i"] + files, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=20)
            c.stop()
            os.remove(c.ready_path)  # start() waits for the new one
            c.start()
            st, status = c.admin("GET", "/v1/status")
            self.assertEqual(st, 200)
            self.assertIs(status["kill"]["engaged"], True, status["kill"])
            return
        self.assert_not_persisted(c, body)
        self.assertTrue(c.alive(), f"cordon died:\n{c.stderr_text()}")


# --------------------------------------------------------------------------------------
# Item 6: the audit log loses nothing silently
# --------------------------------------------------------------------------------------

class AuditFaults(FaultCase):
    def audit_lines(self, c):
        n = 0
        for p in c.audit_files():
            with open(p, "rb") as f:
                n += f.read().count(b"\n")
        return n

    def metric(self, c, name):
        st, _, raw = c.admin_raw("GET", "/metrics")
        self.assertEqual(st, 200)
        total = None
        for (n, _labels), v in H.prometheus_samples(raw.decode()).items():
            if n == name:
                total = (total or 0) + v
        return total

    def wait_unhealthy(self, c):
        self.assertTrue(H.wait_until(lambda: not c.status()["audit"]["healthy"], 10),
                        "the audit log did not notice the full disk")

    def test_backlog_larger_than_the_free_space_is_written_in_part(self):
        c = self.new_cordon(start=False)
        mount_tmpfs(self, c.audit_dir, "2m")
        c.start()
        small = os.path.join(c.audit_dir, "small-filler")
        with open(small, "wb") as f:
            f.write(b"\0" * (128 * 1024))
        filler = fill_disk(c.audit_dir)
        for _ in range(600):  # session.create + token.mint: about 300 KB of backlog
            c.create_session("agent")
        self.wait_unhealthy(c)
        before = self.audit_lines(c)
        os.unlink(small)  # room for part of the backlog, not all of it
        grew = H.wait_until(lambda: self.audit_lines(c) >= before + 100, 5)
        self.assertTrue(grew, "nothing of the backlog was written into the space freed")
        os.unlink(filler)
        self.assertTrue(H.wait_until(lambda: c.status()["audit"]["healthy"], 10))
        c.admin("POST", "/v1/kill", kill_body())
        events = [e["event"] for e in c.audit_events()]
        self.assertEqual(events.count("session.create"), 600)
        self.assertEqual(events.count("kill.network"), 1)
        for p in c.audit_files():
            with open(p, "rb") as f:
                data = f.read()
            self.assertTrue(data == b"" or data.endswith(b"\n"), p)
        self.assertEqual(self.metric(c, "cordon_audit_dropped_total"), 0)

    def test_sigterm_during_an_outage_is_not_a_clean_exit(self):
        c = self.new_cordon(start=False)
        mount_tmpfs(self, c.audit_dir, "1m")
        c.start()
        fill_disk(c.audit_dir)
        for _ in range(20):
            c.create_session("agent")
        self.wait_unhealthy(c)
        st, body = c.admin("POST", "/v1/kill", kill_body("kill during an audit outage"))
        self.assertEqual(st, 200, body)
        rc, _ = c.stop(timeout=20)
        err = c.stderr_text(tail=200000)
        self.assertNotEqual(rc, 0, "exit 0 with audit records lost")
        self.assertIn("could not be written", err)
        # The kill's record is not lost: it goes to stderr (the service's journal).
        self.assertIn('"event":"kill.network"', err)
        self.assertIn("kill during an audit outage", err)


if __name__ == "__main__":
    unittest.main()
