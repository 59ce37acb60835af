"""Integration tests of `cordon run`, the sandbox shim (docs/shim.md).

Needs root (or user namespaces) and mount/PID/network namespaces: every test is skipped with
the reason when `unshare` cannot make them. Everything stays on loopback: cordon, its fake
upstream DNS, an HTTP origin for allowed.test/denied.test, a TCP server and a raw UDP DNS
server on the host's loopback that the sandbox must not reach.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import harness as H

AGENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agents")
PYTHON = shutil.which("python3") or sys.executable
UP = None
ORIGIN = None


def namespaces_unavailable():
    """Why the shim cannot run here, or None."""
    if not shutil.which("unshare"):
        return "unshare(1) not installed"
    try:
        r = subprocess.run(["unshare", "-mpnui", "--fork", "--mount-proc", "true"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare failed: {e}"
    if r.returncode != 0:
        return ("mount/PID/network namespaces unavailable here "
                f"(unshare -mpnui: {r.stderr.decode(errors='replace').strip()})")
    return None


SKIP = namespaces_unavailable()


def setUpModule():
    global UP, ORIGIN
    if SKIP:
        return
    UP = H.FakeDNS({"allowed.test": {"A": ["127.0.0.1"]},
                    "denied.test": {"A": ["127.0.0.1"]}}, ttl=60)
    ORIGIN = H.HTTPOrigin()


def tearDownModule():
    for x in (UP, ORIGIN):
        if x is not None:
            x.stop()


class TCPServer:
    """A TCP server on the host's loopback that counts connections."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind((H.LOOPBACK, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
                self.accepted += 1
                c.close()
            except OSError:
                pass

    def stop(self):
        self.stopping = True
        self.thread.join(timeout=2)
        self.sock.close()


def sandbox_pids(ns_link):
    """PIDs (host view) of every process in the PID namespace `ns_link`."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{d}/ns/pid") == ns_link:
                pids.append(int(d))
        except OSError:
            pass
    return pids


def landlock_abi():
    """The kernel's Landlock ABI version (0 without Landlock)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    v = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, VERSION), x86-64/arm64
    return max(v, 0)


def children_of(pid):
    kids = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


def reap(p):
    """Kills `p` if it still runs and closes its pipes."""
    if p.poll() is None:
        p.kill()
        p.wait()
    for f in (p.stdout, p.stderr):
        if f is not None:
            f.close()


@unittest.skipIf(SKIP, SKIP or "")
class RunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = H.TempDir("cordon-it-run-")
        os.chmod(cls.tmp.path, 0o711)  # --user nobody must reach scratch below it
        cls.scratch = cls.tmp.join("scratch")
        cls.outside = cls.tmp.join("outside")
        os.makedirs(cls.outside)
        os.makedirs(cls.scratch)  # an unprivileged shim could not create it
        cls.hooks_log = cls.tmp.join("hooks.log")
        mint = f"echo mint $CORDON_SESSION >> {cls.hooks_log}; echo short-lived-$CORDON_SESSION"
        revoke = (f"read cred; echo revoke $CORDON_SESSION $CORDON_REVOKE_WHEN $cred "
                  f">> {cls.hooks_log}")
        port = ORIGIN.port
        jobs = (
            "  agent:\n"
            "    task: integration tests of cordon run\n"
            "    egress:\n"
            f"      - {{ host: allowed.test, ports: [{port}], protocol: http, "
            "resolves_to: [127.0.0.0/8] }\n"
            "    filesystem:\n"
            f"      scratch: {cls.scratch}\n"
            "      never_write: [/etc, /usr]\n"
            "    identity:\n"
            f"      mint: {{ command: {json.dumps(mint)}, file: identity.token }}\n"
            f"      revoke: {json.dumps(revoke)}\n"
            "    env: [LANG, AGENT_REPO]\n"
            "  slowmint:\n"
            "    task: an identity hook that takes its time\n"
            "    identity:\n"
            f"      mint: {json.dumps('sleep 1; echo slow-cred')}\n"
            f"      revoke: {json.dumps(revoke)}\n"
            "  keyed:\n"
            "    task: a job card variable that holds a long-lived key\n"
            "    env: [AWS_ACCESS_KEY_ID]\n"
            "  keyed-ok:\n"
            "    task: the same, explicitly allowed\n"
            "    env: [{ name: AWS_ACCESS_KEY_ID, allow_long_lived: true }]\n")
        cls.cordon = H.Cordon(jobs, UP.port, listen_dns="127.0.0.1:0",
                              dns_yaml="  rate_limit: { qps: 10000, burst: 10000 }\n")
        try:
            cls.cordon.start()
        except BaseException:
            cls.cordon.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cordon.cleanup()
        cls.tmp.cleanup()

    def run_env(self, extra=None):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "CORDON_ADMIN": "http://%s:%d" % self.cordon.admin_addr,
               "CORDON_ADMIN_TOKEN_FILE": self.cordon.token_file,
               # Secrets of the host that must not reach the sandbox:
               "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
               "GITHUB_TOKEN": "ghp_" + "a" * 36,
               "AGENT_REPO": "cordon", "LANG": "C.UTF-8"}
        env.update(extra or {})
        return env

    def shim_args(self, job, *cmd, opts=()):
        return [self.cordon.bin, "run", "--job", job,
                "--dns", "%s:%d" % self.cordon.dns_addr] + list(opts) + ["--"] + list(cmd)

    def run_shim(self, job, *cmd, extra_env=None, timeout=60, opts=()):
        return subprocess.run(self.shim_args(job, *cmd, opts=opts), env=self.run_env(extra_env),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)

    def session_of(self, stdout_json):
        return stdout_json["env"]["CORDON_SESSION"]

    # ---------------------------------------------------------------------------------

    def test_probe_agent_is_contained(self):
        host = TCPServer()
        raw_dns = H.FakeDNS({"allowed.test": {"A": ["127.0.0.1"]}})
        sockdir = tempfile.mkdtemp(prefix="cordon-it-run-sock-")
        os.chmod(sockdir, 0o755)
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(os.path.join(sockdir, "host.sock"))
        os.chmod(os.path.join(sockdir, "host.sock"), 0o777)
        unix.listen(4)
        try:
            r = self.run_shim("agent", PYTHON, os.path.join(AGENTS, "probe_agent.py"),
                              str(host.port), str(raw_dns.port), str(ORIGIN.port),
                              self.outside, self.scratch, os.path.join(sockdir, "host.sock"))
        finally:
            host.stop()
            raw_dns.stop()
            unix.close()
            shutil.rmtree(sockdir, ignore_errors=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        res = json.loads(r.stdout)
        # Filesystem: read-only everywhere but scratch.
        for k in ("write_etc", "write_outside", "write_tmp"):
            self.assertFalse(res[k]["ok"], (k, res[k]))
            self.assertIn("Read-only file system", res[k]["error"])
        self.assertFalse(os.path.exists(os.path.join(self.outside, "escaped")))
        # /proc is the sandbox's own and writable by mounts: only Landlock refuses this.
        if landlock_abi() > 0:
            self.assertFalse(res["write_proc_comm"]["ok"], res["write_proc_comm"])
            self.assertIn("Permission denied", res["write_proc_comm"]["error"])
        self.assertTrue(res["write_scratch"]["ok"], res["write_scratch"])
        self.assertTrue(res["mkdir_scratch"]["ok"], res["mkdir_scratch"])
        # ... and scratch is gone afterwards.
        self.assertEqual(os.listdir(self.scratch), [])
        # Network: no direct way out, even to the host's loopback.
        self.assertFalse(res["tcp_host_loopback"]["ok"], res["tcp_host_loopback"])
        self.assertEqual(host.accepted, 0)
        self.assertFalse(res["udp_dns_direct"]["ok"], res["udp_dns_direct"])
        self.assertFalse(raw_dns.names_queried())
        # A host Unix socket (docker.sock, say) is not reachable either: seccomp refuses
        # AF_UNIX sockets. New namespaces are refused too.
        self.assertFalse(res["unix_host_socket"]["ok"], res["unix_host_socket"])
        self.assertIn("Permission denied", res["unix_host_socket"]["error"])
        self.assertFalse(res["unshare_user"]["ok"], res["unshare_user"])
        # The proxy: allowed works, denied is 403.
        self.assertEqual(res["proxy_allowed"], {"ok": True, "value": 200})
        self.assertEqual(res["proxy_denied"], {"ok": True, "value": 403})
        # DNS through the relay: the job's name resolves, another is refused.
        self.assertEqual(res["resolve_allowed"], {"ok": True, "value": ["127.0.0.1"]})
        self.assertFalse(res["resolve_denied"]["ok"], res["resolve_denied"])
        self.assertEqual(res["dns_tcp_allowed"], {"ok": True, "value": [0, 1]})  # over TCP
        self.assertEqual(res["dns_tcp_denied"], {"ok": True, "value": [5, 0]})  # REFUSED
        # Namespaces and privileges.
        self.assertEqual(res["hostname"]["value"], "cordon-sandbox")
        self.assertEqual(res["pid"]["value"], 2)  # PID 1 is the sandbox's init
        self.assertEqual(res["no_new_privs"]["value"], "1")
        self.assertEqual(set(res["caps"]["value"]), {"0000000000000000"})
        # Environment: built from nothing; the only secret is the session's own token.
        env = res["env"]
        session = env["CORDON_SESSION"]
        self.assertEqual(env["AGENT_REPO"], "cordon")
        self.assertNotIn("AWS_SECRET_ACCESS_KEY", env)
        self.assertNotIn("GITHUB_TOKEN", env)
        self.assertNotIn("CORDON_ADMIN_TOKEN_FILE", env)
        url = env["HTTPS_PROXY"]
        m = re.fullmatch(r"http://([^:]+):([^@]+)@127\.0\.0\.1:3128", url)
        self.assertIsNotNone(m, url)
        self.assertEqual(m.group(1), session)
        token = m.group(2)
        for k in ("HTTP_PROXY", "https_proxy", "http_proxy"):
            self.assertEqual(env[k], url)
        for k in ("ALL_PROXY", "all_proxy"):  # SOCKS5 clients, on the same port
            self.assertEqual(env[k], "socks5h://" + url[len("http://"):])
        self.assertRegex(env["GIT_SSH_COMMAND"], r"^ssh -o 'ProxyCommand=/\S+ connect %h %p'$")
        self.assertEqual(env["NO_PROXY"], "")
        expected = {"PATH", "HOME", "LANG", "TMPDIR", "CORDON_SESSION", "HTTPS_PROXY",
                    "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy",
                    "NO_PROXY", "no_proxy", "AGENT_REPO", "GIT_SSH_COMMAND"}
        self.assertEqual(set(env) - {"PWD", "SHLVL", "_", "LC_CTYPE"}, expected)
        secrets_seen = [k for k, v in env.items()
                        if self.cordon.admin_token in v or
                        (len(v) >= 32 and token not in v and re.search(r"[A-Za-z0-9]{32}", v))]
        self.assertEqual(secrets_seen, [])
        # Identity: minted to a scratch file, revoked at the end.
        self.assertEqual(res["identity_file"]["value"], f"short-lived-{session}")
        with open(self.hooks_log) as f:
            log = f.read()
        self.assertIn(f"mint {session}", log)
        self.assertIn(f"revoke {session} end short-lived-{session}", log)
        # The session ended with CMD: its token no longer works.
        status, js = self.cordon.admin("GET", f"/v1/sessions/{session}")
        self.assertEqual(status, 200)
        self.assertTrue(all(t["revoked"] for t in js["tokens"]), js)
        # Audited: the scratch writes, the identity hooks, the proxy decisions.
        evs = self.cordon.wait_events(
            lambda e: e.get("session") == session and e.get("event") == "identity.revoke")
        self.assertTrue(evs)
        events = [e for e in self.cordon.audit_events() if e.get("session") == session]
        writes = {e["path"]: e["size"] for e in events if e["event"] == "file.write"}
        self.assertEqual(writes.get(os.path.join(self.scratch, "out.txt")), 15)
        self.assertIn(os.path.join(self.scratch, "sub/dir/deep.txt"), writes)
        kinds = {e["event"] for e in events}
        self.assertTrue({"session.create", "token.mint", "identity.mint", "conn.open",
                         "conn.deny", "dns.query", "file.write", "identity.revoke"} <= kinds,
                        kinds)
        for e in events:
            self.assertNotIn(f"short-lived-{session}", json.dumps(e))

    def test_shim_events_need_the_admin_token(self):
        s = self.cordon.create_session("agent")
        body = {"event": "file.write", "path": "/x", "size": 1}
        status, js = self.cordon.admin("POST", f"/v1/sessions/{s['id']}/events", body,
                                       token=s["token"])
        self.assertEqual(status, 403, js)
        self.assertIn("admin token", js["error"])
        status, js = self.cordon.admin("POST", f"/v1/sessions/{s['id']}/events", body)
        self.assertEqual(status, 202, js)
        status, js = self.cordon.admin("POST", f"/v1/sessions/{s['id']}/events",
                                       {"event": "file.write", "path": "x", "size": 1})
        self.assertEqual(status, 400, js)
        self.cordon.admin("DELETE", f"/v1/sessions/{s['id']}")

    def test_exit_status_is_the_commands(self):
        r = self.run_shim("agent", "sh", "-c", "exit 7")
        self.assertEqual(r.returncode, 7, r.stderr)
        r = self.run_shim("agent", "/nonexistent/binary")
        self.assertEqual(r.returncode, 127, r.stderr)

    def test_user_and_hide(self):
        pub = tempfile.mkdtemp(prefix="cordon-it-run-pub-")
        try:
            os.chmod(pub, 0o755)
            files = {"root-only": ("s3cret\n", 0o600), "public": ("hello\n", 0o644),
                     "hidden": ("visible?\n", 0o644)}
            for name, (text, mode) in files.items():
                with open(os.path.join(pub, name), "w") as f:
                    f.write(text)
                os.chmod(os.path.join(pub, name), mode)
            script = (f"cat {pub}/public; cat {pub}/root-only 2>/dev/null || echo no-secret; "
                      f"cat {pub}/hidden | wc -c; id -u; "
                      "echo x > $HOME/w && echo scratch-ok")
            r = self.run_shim("agent", "sh", "-c", script,
                              opts=["--user", "65534:65534", "--hide", f"{pub}/hidden"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split(), ["hello", "no-secret", "0", "65534",
                                                "scratch-ok"])
            # Without --user: uid 0 (no capabilities) still owns root's files.
            r = self.run_shim("agent", "sh", "-c", script)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split(), ["hello", "s3cret", "9", "0", "scratch-ok"])
        finally:
            shutil.rmtree(pub, ignore_errors=True)

    def test_unprivileged_shim_uses_a_user_namespace(self):
        if not shutil.which("setpriv"):
            self.skipTest("setpriv(1) not installed")
        probe = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534",
                                "--clear-groups", "unshare", "-Ur", "true"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
        if probe.returncode != 0:
            self.skipTest("unprivileged user namespaces unavailable: " +
                          probe.stderr.decode(errors="replace").strip())
        pub = tempfile.mkdtemp(prefix="cordon-it-run-nobody-")
        try:
            os.chmod(pub, 0o755)
            token = os.path.join(pub, "admin.token")
            shutil.copy(self.cordon.token_file, token)
            os.chmod(token, 0o644)
            env = self.run_env({"CORDON_ADMIN_TOKEN_FILE": token})
            r = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534",
                                "--clear-groups"] +
                               self.shim_args("agent", "sh", "-c",
                                              "id -u; echo hi > $HOME/x && cat $HOME/x; "
                                              "echo y > /etc/z 2>/dev/null || echo ro"),
                               env=env, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.split(), ["0", "hi", "ro"])
        finally:
            shutil.rmtree(pub, ignore_errors=True)

    def test_long_lived_key_in_job_env_is_refused(self):
        key = {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE"}
        r = self.run_shim("keyed", "env", extra_env=key)
        self.assertEqual(r.returncode, 1)
        self.assertIn("AWS_ACCESS_KEY_ID", r.stderr)
        self.assertIn("long-lived key", r.stderr)
        self.assertNotIn("AKIAIOSFODNN7EXAMPLE", r.stderr + r.stdout)
        r = self.run_shim("keyed-ok", "env", extra_env=key)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", r.stdout)

    def start_stubborn(self):
        p = subprocess.Popen(self.shim_args("agent", PYTHON,
                                            os.path.join(AGENTS, "stubborn_agent.py"),
                                            self.scratch),
                             env=self.run_env(), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline().strip(), "ready")
        kids = H.wait_until(lambda: children_of(p.pid), 5)
        self.assertEqual(len(kids), 1, kids)
        init = kids[0]
        ns = os.readlink(f"/proc/{init}/ns/pid")
        self.assertTrue(os.path.exists(f"/proc/{init}/root{self.scratch}/marker"))
        sessions = self.cordon.admin("GET", "/v1/sessions")[1]["sessions"]
        session = [s for s in sessions if s["state"] == "active" and s["job"] == "agent"][0]
        # Let the fork loop run for a moment.
        self.assertTrue(H.wait_until(lambda: len(sandbox_pids(ns)) >= 20, 5))
        return p, init, ns, session["id"]

    def test_session_kill_kills_the_whole_tree_within_a_second(self):
        p, init, ns, session = self.start_stubborn()
        token_url = None
        try:
            r = H.cordon_cli(self.cordon, ["kill", session, "--reason", "test: runaway"])
            t0 = time.monotonic()
            self.assertEqual(r.returncode, 0, r.stderr)
            gone = H.wait_until(lambda: not sandbox_pids(ns), 1.0, interval=0.01)
            elapsed = time.monotonic() - t0
            self.assertTrue(gone, f"{len(sandbox_pids(ns))} processes left after 1 s")
            self.assertLess(elapsed, 1.0)
            p.wait(timeout=10)
            self.assertEqual(p.returncode, 137)
            err = p.stderr.read()
            self.assertIn("session killed", err)
        finally:
            reap(p)
        # Scratch is gone with the sandbox, the tokens are revoked, and the timeline tells it.
        self.assertFalse(os.path.exists(f"/proc/{init}"))
        self.assertEqual(os.listdir(self.scratch), [])
        status, js = self.cordon.admin("GET", f"/v1/sessions/{session}")
        self.assertTrue(all(t["revoked"] for t in js["tokens"]), js)
        self.assertEqual(js["state"], "killed")
        del token_url
        self.cordon.wait_events(lambda e: e.get("session") == session and
                                e.get("event") == "identity.revoke")
        with open(self.hooks_log) as f:
            self.assertIn(f"revoke {session} kill", f.read())
        tl = H.cordon_cli(self.cordon, ["audit", "timeline", session, "--audit",
                                        self.cordon.audit_dir])
        self.assertEqual(tl.returncode, 0, tl.stderr)
        for word in ("session.create", "token.mint", "identity.mint", "file.write",
                     "kill.session", "test: runaway", "identity.revoke"):
            self.assertIn(word, tl.stdout)

    def test_sigterm_to_the_shim_kills_the_tree_and_ends_the_session(self):
        p, init, ns, session = self.start_stubborn()
        try:
            t0 = time.monotonic()
            p.terminate()
            gone = H.wait_until(lambda: not sandbox_pids(ns), 1.0, interval=0.01)
            self.assertTrue(gone, f"{len(sandbox_pids(ns))} processes left after 1 s")
            self.assertLess(time.monotonic() - t0, 1.0)
            p.wait(timeout=10)
            self.assertEqual(p.returncode, 137)
        finally:
            reap(p)
        status, js = self.cordon.admin("GET", f"/v1/sessions/{session}")
        self.assertEqual(js["state"], "ended")
        self.assertTrue(all(t["revoked"] for t in js["tokens"]), js)

    def test_sigterm_during_the_mint_ends_the_session_and_revokes(self):
        p = subprocess.Popen(self.shim_args("slowmint", "sh", "-c", "echo started"),
                             env=self.run_env(), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            session = H.wait_until(
                lambda: [s["id"] for s in self.cordon.admin("GET", "/v1/sessions")[1]["sessions"]
                         if s["job"] == "slowmint" and s["state"] == "active"], 5)
            self.assertTrue(session)
            p.terminate()
            p.wait(timeout=10)
            self.assertEqual(p.returncode, 137)
            self.assertEqual(p.stdout.read(), "")  # the command never ran
        finally:
            reap(p)
        status, js = self.cordon.admin("GET", f"/v1/sessions/{session[0]}")
        self.assertEqual(js["state"], "ended")
        with open(self.hooks_log) as f:
            self.assertIn(f"revoke {session[0]} end slow-cred", f.read())

    def test_losing_the_admin_api_kills_after_the_grace(self):
        # A private cordon: this test stops it.
        c = H.Cordon("  a:\n    task: grace\n", UP.port)
        c.start()
        try:
            env = self.run_env()
            env["CORDON_ADMIN"] = "http://%s:%d" % c.admin_addr
            env["CORDON_ADMIN_TOKEN_FILE"] = c.token_file
            p = subprocess.Popen([c.bin, "run", "--job", "a", "--admin-grace", "500ms", "--",
                                  "sh", "-c", "echo ready; exec sleep 60"],
                                 env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            try:
                self.assertEqual(p.stdout.readline().strip(), "ready")
                c.kill()
                t0 = time.monotonic()
                p.wait(timeout=10)
                self.assertEqual(p.returncode, 137)
                self.assertLess(time.monotonic() - t0, 3.0)
                self.assertIn("lost the admin API", p.stderr.read())
            finally:
                reap(p)
        finally:
            c.cleanup()

    def test_a_reset_store_behind_the_stream_kills_the_sandbox(self):
        # cordon restarts on the same admin address with its state store reset: the shim's
        # Last-Event-ID is beyond cordon's last, and cordon no longer knows the session. The
        # follower used to resume deaf (and miss any kill from then on); now cordon answers
        # resume.lost and the shim, unable to rule out a kill in the gap, kills (issue 18).
        c = H.Cordon("  a:\n    task: reset\n", UP.port)
        text = c.policy_text("  a:\n    task: reset\n").replace(
            "  admin: 127.0.0.1:0\n", f"  admin: 127.0.0.1:{H.free_port()}\n")
        c.write_policy(raw_text=text)
        c.start()
        try:
            other = c.create_session("a")
            st, js = c.admin("POST", f"/v1/sessions/{other['id']}/kill", {"reason": "ids"})
            self.assertEqual(st, 200, js)
            env = self.run_env()
            env["CORDON_ADMIN"] = "http://%s:%d" % c.admin_addr
            env["CORDON_ADMIN_TOKEN_FILE"] = c.token_file
            p = subprocess.Popen([c.bin, "run", "--job", "a", "--admin-grace", "30s", "--",
                                  "sh", "-c", "echo ready; exec sleep 60"],
                                 env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            try:
                self.assertEqual(p.stdout.readline().strip(), "ready")
                time.sleep(0.3)  # the shim's stream is open (it follows before the agent runs)
                c.proc.send_signal(signal.SIGTERM)
                c.proc.wait(10)
                for name in os.listdir(c.state_dir):
                    os.unlink(os.path.join(c.state_dir, name))
                H.cordon_restart(c)
                t0 = time.monotonic()
                p.wait(timeout=10)
                self.assertEqual(p.returncode, 137)
                self.assertLess(time.monotonic() - t0, 3.0)
                self.assertIn("while the event stream was down", p.stderr.read())
            finally:
                reap(p)
        finally:
            c.cleanup()

    def test_network_kill_kills_the_sandbox(self):
        p = subprocess.Popen(self.shim_args("agent", "sh", "-c", "echo ready; exec sleep 60"),
                             env=self.run_env(), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(p.stdout.readline().strip(), "ready")
            r = H.cordon_cli(self.cordon, ["kill", "--all", "--reason", "test: all stop"])
            self.assertEqual(r.returncode, 0, r.stderr)
            p.wait(timeout=5)
            self.assertEqual(p.returncode, 137)
            self.assertIn("network kill", p.stderr.read())
        finally:
            H.cordon_cli(self.cordon, ["revive", "--reason", "test done"])
            reap(p)


if __name__ == "__main__":
    unittest.main()
