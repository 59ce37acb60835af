"""Adversarial tests of `cordon run` (docs/shim.md, threat model): each test is one way out
that an uncooperative agent found, tried again by tests/integration/agents/escape_agent.py.
Each fails if the way out works.

Needs root and mount/PID/network namespaces (skipped with the reason otherwise). Everything
stays on loopback; mounts the tests make are made inside a private mount namespace of their
own (`unshare -m`), so nothing is left on the host if a test dies.
"""

import json
import os
import pty
import select
import shutil
import signal
import socket
import subprocess
import sys
import termios
import time
import unittest

import harness as H
from test_run import SKIP, namespaces_unavailable  # noqa: F401 (one probe for both suites)

AGENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "agents")
AGENT = os.path.join(AGENTS, "escape_agent.py")
PYTHON = shutil.which("python3") or sys.executable
# For --user nobody: a python3 that user may execute (a root-only pyenv is not).
SYSTEM_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else PYTHON
NOT_ROOT = None if os.geteuid() == 0 else "needs root (mounts, mknod, chroot layouts)"
UP = None


def setUpModule():
    global UP
    if SKIP:
        return
    UP = H.FakeDNS({"allowed.test": {"A": ["127.0.0.1"]}}, ttl=60)


def tearDownModule():
    if UP is not None:
        UP.stop()


def result_of(text):
    """The agent's JSON result line ("RESULT {...}") in `text`."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"no RESULT line in output: {text[-2000:]!r}")


def host_socket_works(family, type_, proto=0):
    try:
        s = socket.socket(family, type_, proto)
    except OSError:
        return False
    s.close()
    return True


@unittest.skipIf(SKIP, SKIP or "")
class ContainmentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = H.TempDir("cordon-it-contain-")
        os.chmod(cls.tmp.path, 0o711)  # --user nobody must reach scratch below it
        cls.scratch = cls.tmp.join("scratch")
        os.makedirs(cls.scratch)
        jobs = (
            "  agent:\n"
            "    task: adversarial tests of cordon run\n"
            "    filesystem:\n"
            f"      scratch: {cls.scratch}\n"
            "      never_write: [/etc, /usr]\n"
            "  keyed:\n"
            "    task: a job card variable that holds an AWS secret access key\n"
            "    env: [AWS_SECRET_ACCESS_KEY]\n")
        # The agent, where --user nobody can read it (a clone under /root is not readable).
        global AGENT
        AGENT = cls.tmp.join("escape_agent.py")
        shutil.copy(os.path.join(AGENTS, "escape_agent.py"), AGENT)
        os.chmod(AGENT, 0o644)
        cls.cordon = H.Cordon(jobs, UP.port, listen_dns="127.0.0.1:0")
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
               "LANG": "C.UTF-8"}
        env.update(extra or {})
        return env

    def shim_args(self, *cmd, job="agent", opts=()):
        return [self.cordon.bin, "run", "--job", job,
                "--dns", "%s:%d" % self.cordon.dns_addr] + list(opts) + ["--"] + list(cmd)

    def run_shim(self, *cmd, opts=(), env=None, prefix=(), stdin=subprocess.DEVNULL,
                 stdout=subprocess.PIPE, timeout=60, job="agent"):
        return subprocess.run(list(prefix) + self.shim_args(*cmd, job=job, opts=opts),
                              env=env or self.run_env(), stdin=stdin, stdout=stdout,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)

    def agent(self, *args, **kw):
        r = self.run_shim(PYTHON, AGENT, *args, **kw)
        self.assertEqual(r.returncode, 0, r.stderr)
        return result_of(r.stdout), r

    # -- 1. terminal injection ---------------------------------------------------------

    def on_a_terminal(self, shim_cmd, answer=None, shim_stdin="", delay=0.0):
        """Runs `shim_cmd` the way an operator does: in a shell on a terminal that is the
        shell's controlling tty, then lets the shell read one line from that terminal. What
        the shell reads is what the agent could make the operator's shell run. Returns
        (the line the shell read, everything the terminal showed). `answer`: (query, reply)
        bytes: the terminal answers the query when it is shown, as terminals answer status and
        title reports, `delay` seconds later (a terminal at the end of an ssh link); it also
        answers device-attribute queries (ESC [ c), after the same delay and in order."""
        master, slave = pty.openpty()
        quoted = " ".join("'" + a.replace("'", "'\\''") + "'" for a in shim_cmd)
        script = f"{quoted}{shim_stdin}; echo SHIM-DONE; read line; echo \"GOT:$line:END\""

        def ctty():
            os.setsid()
            import fcntl
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        p = subprocess.Popen(["sh", "-c", script], stdin=slave, stdout=slave, stderr=slave,
                             env=self.run_env(), preexec_fn=ctty, close_fds=True)
        os.close(slave)
        seen = b""
        sent = False
        pending = []  # (when, reply): a terminal answers in order
        queries = [(b"\x1b[c", b"\x1b[?1;2c")] + ([answer] if answer else [])
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline and b":END" not in seen:
                now = time.monotonic()
                while pending and pending[0][0] <= now:
                    os.write(master, pending.pop(0)[1])
                r, _, _ = select.select([master], [], [], 0.02)
                if r:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    seen += chunk
                    hits = sorted((chunk.find(q), reply) for q, reply in queries if q in chunk)
                    for _, reply in hits:
                        pending.append((time.monotonic() + delay, reply))
                if not sent and b"SHIM-DONE" in seen:
                    time.sleep(0.2)  # what the agent queued is read first, if anything
                    os.write(master, b"operator-typed\n")
                    sent = True
        finally:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
            os.close(master)
        text = seen.decode(errors="replace")
        got = text.split("GOT:")[-1].split(":END")[0] if "GOT:" in text else None
        return got, text

    def test_tiocsti_cannot_type_into_the_operators_shell(self):
        for opts, python in (([], PYTHON), (["--user", "65534:65534"], SYSTEM_PYTHON)):
            with self.subTest(opts=opts):
                got, text = self.on_a_terminal(
                    self.shim_args(python, AGENT, "tiocsti", "touch /tmp/pwned\n",
                                   opts=opts))
                self.assertEqual(got, "operator-typed", text[-3000:])
                res = result_of(text)
                for k in ("tiocsti_fd0", "tiocsti_fd1", "tiocsti_fd2", "tiocsti_dev_tty",
                          "tioclinux_paste"):
                    self.assertFalse(res[k]["ok"], (k, res[k]))
                # No controlling terminal at all: stdio are pipes the shim relays.
                self.assertEqual(res["isatty"]["value"], [False, False, False])

    def test_a_terminals_answer_to_the_last_output_never_reaches_the_shell(self):
        # The agent's last words query the terminal (a window title report); a terminal that
        # answers types the answer, and after the shim exits the operator's shell would read
        # it as a command.
        query = "printf 'bye\\033[21t'"
        # ... also when only the output is the terminal (stdin a file or /dev/null), and when
        # the terminal answers late (over ssh, say).
        for opts, stdin, delay in (([], "", 0), (["--tty"], "", 0), ([], " </dev/null", 0),
                                   ([], " </etc/hostname", 0), ([], "", 0.3),
                                   (["--tty"], "", 0.3)):
            with self.subTest(opts=opts, stdin=stdin, delay=delay):
                got, text = self.on_a_terminal(self.shim_args("sh", "-c", query, opts=opts),
                                               answer=(b"\x1b[21t", b"touch /tmp/pwned\n"),
                                               shim_stdin=stdin, delay=delay)
                self.assertEqual(got, "operator-typed", text[-3000:])

    def test_tty_mode_gives_a_terminal_of_the_sandboxs_own(self):
        got, text = self.on_a_terminal(
            self.shim_args(PYTHON, AGENT, "tiocsti", "touch /tmp/pwned\n", opts=["--tty"]))
        self.assertEqual(got, "operator-typed", text[-3000:])
        res = result_of(text)
        self.assertEqual(res["isatty"]["value"], [True, True, True], res)
        self.assertTrue(res["sid_is_own"]["value"], res)
        # seccomp refuses TIOCSTI even on the sandbox's own terminal.
        self.assertFalse(res["tiocsti_fd0"]["ok"], res)
        self.assertFalse(res["tiocsti_dev_tty"]["ok"], res)

    def test_tty_mode_needs_a_terminal(self):
        r = self.run_shim("true", opts=["--tty"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--tty", r.stderr)

    # -- 2. host files given for reading -----------------------------------------------

    def test_stdio_files_of_the_host_are_not_writable_through_proc(self):
        src = self.tmp.join("input.txt")
        log = self.tmp.join("agent.log")
        with open(src, "w") as f:
            f.write("original input\n")
        with open(log, "w") as f:
            f.write("operator log\n")
        with open(src, "r") as fin, open(log, "a") as fout:
            r = self.run_shim(PYTHON, AGENT, "stdio", stdin=fin, stdout=fout)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(src) as f:
            self.assertEqual(f.read(), "original input\n")
        with open(log) as f:
            text = f.read()
        # Not truncated: what the agent wrote through its stdout pipe was appended after it.
        self.assertTrue(text.startswith("operator log\n"), text)
        res = result_of(text)
        self.assertEqual(res["stdin_text"]["value"], "original input")
        self.assertTrue(res["stdout_is"]["value"].startswith("pipe:"), res["stdout_is"])

    def test_stdin_and_exit_status_pass_through_the_relay(self):
        r = subprocess.run(self.shim_args("sh", "-c", "tr a-z A-Z; echo err >&2; exit 3"),
                           env=self.run_env(), input="hello relay\n", capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertEqual(r.stdout, "HELLO RELAY\n")
        self.assertIn("err", r.stderr)
        # Output larger than a pipe's buffer, and a command that never reads its stdin.
        r = subprocess.run(self.shim_args("sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x"),
                           env=self.run_env(), capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(r.stdout), 3000000)

    # -- 3. host devices and processes through other mounts ----------------------------

    @unittest.skipIf(NOT_ROOT, NOT_ROOT or "")
    def test_a_chroot_with_proc_sys_dev_shows_no_host_processes_or_devices(self):
        root = self.tmp.join("chroot")
        nodes = self.tmp.join("nodes")
        for d in ("proc", "sys", "dev"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        os.makedirs(nodes, exist_ok=True)
        zero = os.path.join(nodes, "zero")
        if not os.path.exists(zero):
            os.mknod(zero, 0o666 | 0o020000, os.makedev(1, 5))  # a char device, like /dev/zero
        # The build-host layout: proc, sysfs and the host's /dev inside a chroot. Made in a
        # private mount namespace of this test's own.
        mount = (f"mount -t proc proc {root}/proc && mount -t sysfs sysfs {root}/sys && "
                 f"mount --rbind /dev {root}/dev && exec \"$@\"")
        prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c", mount, "sh"]
        res, _ = self.agent("mounts", root, prefix=prefix)
        own = res["own_proc_pids"]["value"]
        self.assertLessEqual(len(own), 4, own)
        chroot_pids = res["chroot_proc_pids"]
        self.assertTrue(not chroot_pids["ok"] or chroot_pids["value"] == [], chroot_pids)
        self.assertEqual(res["chroot_dev_opened"].get("value", []), [], res["chroot_dev_opened"])
        self.assertFalse(res["kvm_create_vm"]["ok"], res["kvm_create_vm"])
        sys_seen = res["chroot_sys"]
        self.assertTrue(not sys_seen["ok"] or sys_seen["value"] == [], sys_seen)
        self.assertEqual(res["own_sys"].get("value", []), [], res["own_sys"])
        # A device node on an ordinary filesystem (mknod by the host) opens nothing either.
        res, _ = self.agent("node", zero)
        self.assertFalse(res["read_node"]["ok"], res)
        self.assertIn("Permission denied", res["read_node"]["error"])
        # ... while the sandbox's own /dev/zero works.
        res, _ = self.agent("node", "/dev/zero")
        self.assertEqual(res["read_node"], {"ok": True, "value": 16})

    # -- 4. socket families ---------------------------------------------------------------

    def test_only_inet_inet6_and_unix_pairs_are_allowed(self):
        # A host datagram socket (journald, syslog, systemd's notify socket are such).
        d = self.tmp.join("dgram")
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
        path = os.path.join(d, "host.sock")
        if os.path.exists(path):
            os.unlink(path)
        host = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        host.bind(path)
        os.chmod(path, 0o777)
        host.settimeout(0.5)
        try:
            res, _ = self.agent("families", path)
            try:
                got = host.recv(100)
            except socket.timeout:
                got = None
        finally:
            host.close()
        self.assertIsNone(got, "a datagram from the sandbox reached a host socket")
        for k in ("inet_tcp", "inet6_udp", "netlink_route", "unix_socketpair",
                  "seqpacket_pair"):
            self.assertTrue(res[k]["ok"], (k, res[k]))
        for k in ("netlink_audit", "netlink_uevent", "vsock_stream", "vsock_dgram", "alg",
                  "packet", "key", "tipc", "rds", "xdp", "vsock_high_bits", "unix_socket",
                  "dgram_pair_to_host", "userfaultfd"):
            self.assertFalse(res[k]["ok"], (k, res[k]))
        # A positive control: the host could make the ones that matter, so the refusals
        # above are the filter's and not a kernel without the family.
        if host_socket_works(38, socket.SOCK_SEQPACKET):  # AF_ALG
            self.assertIn("not supported", res["alg"]["error"])
        if host_socket_works(40, socket.SOCK_STREAM):  # AF_VSOCK
            self.assertIn("not supported", res["vsock_stream"]["error"])

    def test_a_dripping_dns_tcp_client_is_cut_at_the_relays_deadline(self):
        res, _ = self.agent("dns-drip")
        after = res["dns_drip_closed_after"]
        self.assertIsNotNone(after, "the relay kept a dripping DNS-over-TCP connection 30 s")
        self.assertLess(after, 13, res)

    # -- 5. the admin token, wherever it is ------------------------------------------------

    def test_admin_token_is_hidden_by_inode(self):
        token = self.cordon.admin_token
        d = self.tmp.join("tokens")
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
        link = os.path.join(d, "hard-link")
        if os.path.exists(link):
            os.unlink(link)
        os.link(self.cordon.token_file, link)
        copy = os.path.join(d, "copy")
        shutil.copy(self.cordon.token_file, copy)
        # (a) the shim reads serve's own file; a hard link to it is elsewhere.
        res, r = self.agent("read", self.cordon.token_file, link)
        for k in ("read0", "read1"):
            self.assertNotIn(token, json.dumps(res[k]), k)
        # (b) the shim uses a copy: serve's own file (named in the readable policy) and the
        # link to it are hidden too.
        res, r = self.agent("read", copy, self.cordon.token_file, link,
                            env=self.run_env({"CORDON_ADMIN_TOKEN_FILE": copy}))
        for k in ("read0", "read1", "read2"):
            self.assertNotIn(token, json.dumps(res[k]), k)
        self.assertNotIn(token, r.stdout + r.stderr)
        os.unlink(link)

    def test_cordons_policy_records_and_keys_are_hidden(self):
        # The policy may hold the webhook's secret URL and headers; the audit log and the
        # state store are cordon's records of every session.
        res, _ = self.agent("read", self.cordon.config_path, self.cordon.audit_dir,
                            self.cordon.state_dir)
        self.assertEqual(res["read0"], {"ok": True, "value": ""}, res["read0"])
        self.assertEqual(res["read1"], {"ok": True, "value": []}, res["read1"])
        self.assertEqual(res["read2"], {"ok": True, "value": []}, res["read2"])
        self.assertTrue(os.listdir(self.cordon.audit_dir))  # on the host they are there

    @unittest.skipIf(NOT_ROOT, NOT_ROOT or "")
    def test_admin_token_is_hidden_behind_a_bind_mount_too(self):
        token = self.cordon.admin_token
        other = self.tmp.join("other-view")
        os.makedirs(other, exist_ok=True)
        tdir = os.path.dirname(self.cordon.token_file)
        name = os.path.basename(self.cordon.token_file)
        prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                  f"mount --bind {tdir} {other} && exec \"$@\"", "sh"]
        res, _ = self.agent("read", os.path.join(other, name), prefix=prefix)
        self.assertNotIn(token, json.dumps(res["read0"]))

    # -- 6. the session outlives a dead shim; key guard ------------------------------------

    def test_a_dead_shims_session_is_ended_by_serve(self):
        p = subprocess.Popen(self.shim_args("sh", "-c", "echo ready; exec sleep 60",
                                            opts=["--admin-grace", "1s"]),
                             env=self.run_env(), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(p.stdout.readline().strip(), "ready")
            sessions = self.cordon.admin("GET", "/v1/sessions")[1]["sessions"]
            mine = [s["id"] for s in sessions if s["state"] == "active" and s["job"] == "agent"]
            self.assertEqual(len(mine), 1, sessions)
            p.send_signal(signal.SIGKILL)  # no chance to end its session
            p.wait(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
        t0 = time.monotonic()
        state = H.wait_until(
            lambda: self.cordon.admin("GET", f"/v1/sessions/{mine[0]}")[1]["state"] != "active",
            10, interval=0.1)
        self.assertTrue(state, "the session stayed active after its shim died")
        self.assertLess(time.monotonic() - t0, 5)
        st, js = self.cordon.admin("GET", f"/v1/sessions/{mine[0]}")
        self.assertEqual(js["state"], "ended", js)
        self.assertTrue(all(t["revoked"] for t in js["tokens"]), js)
        evs = self.cordon.wait_events(lambda e: e.get("session") == mine[0] and
                                      e.get("event") == "session.end")
        self.assertTrue(evs)
        self.assertIn("lifeline", json.dumps(evs[-1]))
        # ... and cordon is still there to serve the next one.
        time.sleep(0.2)
        self.assertTrue(self.cordon.alive(), self.cordon.stderr_text())
        self.assertEqual(self.cordon.admin("GET", "/v1/status")[0], 200)

    def test_aws_secret_access_key_in_job_env_is_refused(self):
        secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        r = self.run_shim("env", job="keyed",
                          env=self.run_env({"AWS_SECRET_ACCESS_KEY": secret}))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("AWS secret access key", r.stderr)
        self.assertNotIn(secret, r.stderr + r.stdout)


if __name__ == "__main__":
    unittest.main()
