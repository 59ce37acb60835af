"""A real etcd (Debian's etcd-server) for the fleet tests: one member or three, on loopback,
with data in a temp dir; started, stopped, restarted and killed by the tests.

Every wait is bounded; nothing listens beyond 127.0.0.1.
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

import harness as H

ETCD_BIN = os.environ.get("CORDON_ETCD", shutil.which("etcd") or "/usr/bin/etcd")


def available():
    return os.path.exists(ETCD_BIN)


class Member:
    """One etcd member. `cluster` is the --initial-cluster value of every member."""

    def __init__(self, name, tmp, client_port, peer_port, cluster):
        self.name = name
        self.client_port = client_port
        self.peer_port = peer_port
        self.cluster = cluster
        self.data = os.path.join(tmp, name + ".etcd")
        self.log_path = os.path.join(tmp, name + ".log")
        self.proc = None
        self.url = f"http://127.0.0.1:{client_port}"

    def start(self, wait=True):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [ETCD_BIN, "--name", self.name, "--data-dir", self.data,
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
             "--initial-cluster", self.cluster, "--initial-cluster-state", "new",
             "--initial-cluster-token", "cordon-it",
             "--heartbeat-interval", "50", "--election-timeout", "500",
             "--quota-backend-bytes", str(256 * 1024 * 1024)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=20):
        def ok():
            try:
                post(self.url, "/v3/kv/range", {"key": b64("x")}, timeout=1)
                return True
            except OSError:
                return False
        if not H.wait_until(ok, timeout, 0.1):
            raise AssertionError(f"etcd {self.name} not ready in {timeout}s:\n{self.log_tail()}")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def pause(self):
        """SIGSTOP: the member hangs (its kernel still accepts connections; nothing answers)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def log_tail(self, n=3000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-n:]
        except OSError:
            return ""


class Etcd:
    """`members` etcd members on loopback sharing one temp dir."""

    def __init__(self, members=1):
        self.tmp = H.TempDir("cordon-it-etcd-")
        ports = [(H.free_port(), H.free_port()) for _ in range(members)]
        names = [f"m{i}" for i in range(members)]
        cluster = ",".join(f"{n}=http://127.0.0.1:{p[1]}" for n, p in zip(names, ports))
        self.members = [Member(n, self.tmp.path, c, p, cluster) for n, (c, p) in zip(names, ports)]

    def start(self):
        for m in self.members:
            m.start(wait=False)
        for m in self.members:
            m.wait_ready()
        return self

    @property
    def endpoints(self):
        return [m.url for m in self.members]

    @property
    def url(self):
        return self.members[0].url

    def stop(self):
        for m in self.members:
            m.stop()

    def pause(self):
        for m in self.members:
            m.pause()

    def resume(self):
        for m in self.members:
            m.resume()

    def cleanup(self):
        for m in self.members:
            m.kill()  # SIGKILL ends a paused member too
        self.tmp.cleanup()

    # the gateway, from the tests' side
    def put(self, key, value, url=None):
        return post(url or self.live_url(), "/v3/kv/put", {"key": b64(key), "value": b64(value)})

    def get(self, key, url=None):
        r = post(url or self.live_url(), "/v3/kv/range", {"key": b64(key)})
        kvs = r.get("kvs", [])
        return base64.b64decode(kvs[0].get("value", "")).decode() if kvs else None

    def keys(self, prefix, url=None):
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = post(url or self.live_url(), "/v3/kv/range",
                 {"key": b64(prefix), "range_end": b64(end), "keys_only": True})
        return [base64.b64decode(kv["key"]).decode() for kv in r.get("kvs", [])]

    def lease_of(self, key, url=None):
        r = post(url or self.live_url(), "/v3/kv/range", {"key": b64(key)})
        kvs = r.get("kvs", [])
        return int(kvs[0].get("lease", "0")) if kvs else None

    def revoke_lease(self, lease, url=None):
        return post(url or self.live_url(), "/v3/lease/revoke", {"ID": str(lease)})

    def compact(self, url=None):
        r = post(url or self.live_url(), "/v3/kv/range", {"key": b64("x")})
        rev = r["header"]["revision"]
        return post(url or self.live_url(), "/v3/kv/compaction",
                    {"revision": rev, "physical": True})

    def live_url(self):
        for m in self.members:
            if m.proc is not None and m.proc.poll() is None:
                return m.url
        raise AssertionError("no etcd member running")


def b64(s):
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def post(url, path, body, timeout=5):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode() or "{}")


def enable_auth(url, user, password, prefix):
    """etcd's authentication on: a root user (etcd requires one), and `user` with read and
    write on the keys under `prefix` only. From then on every call needs a token."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    root_password = "root-" + password
    post(url, "/v3/auth/role/add", {"name": "root"})
    post(url, "/v3/auth/user/add", {"name": "root", "password": root_password})
    post(url, "/v3/auth/user/grant", {"user": "root", "role": "root"})
    post(url, "/v3/auth/role/add", {"name": "cordon-rw"})
    post(url, "/v3/auth/role/grant", {"name": "cordon-rw", "perm": {
        "permType": "READWRITE", "key": b64(prefix), "range_end": b64(end)}})
    post(url, "/v3/auth/user/add", {"name": user, "password": password})
    post(url, "/v3/auth/user/grant", {"user": user, "role": "cordon-rw"})
    post(url, "/v3/auth/enable", {})
    return root_password


def cluster_yaml(endpoints, instance, prefix="/cordon/", username=None, password_file=None,
                 **opts):
    lines = ["cluster:",
             "  etcd:",
             "    endpoints: [" + ", ".join(endpoints) + "]",
             f"    prefix: {prefix}"]
    if username is not None:
        lines += [f"    username: {username}", f"    password_file: {password_file}"]
    lines.append(f"  instance: {instance}")
    for k, v in opts.items():
        lines.append(f"  {k}: {v}")
    return "\n".join(lines) + "\n"
