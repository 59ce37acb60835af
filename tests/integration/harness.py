"""Integration-test harness for `cordon serve`.

Everything here runs on loopback only (127.0.0.1) and uses the Python 3 standard library
plus the real `curl` and `openssl` binaries:

- TempDir:        a temp dir removed on cleanup.
- test_cert():    one throwaway self-signed certificate (SAN a.test, b.test) per run.
- HTTPOrigin:     a plain HTTP/1.1 origin that records every request it receives.
- TLSOrigin:      a TLS HTTP origin that records every connection (bytes seen, SNI, ...).
- EchoOrigin:     a raw TCP origin (echo / reply-after-EOF / sink) that records connections.
- FakeDNS:        a tiny UDP DNS server answering A/AAAA from a table, NXDOMAIN otherwise.
- Cordon:         writes a policy, starts `cordon serve`, talks to its admin API, reads the
                  audit log, stops it.
- ProxyConn:      a raw client connection to the proxy with a small HTTP/1.1 response reader.
- run_curl():     runs curl with a clean environment (no *_proxy variables, no .curlrc).

Every wait is bounded in time; every loop is bounded in count.
"""

import asyncio
import atexit
import base64
import glob
import hashlib
import http.client
import http.server
import json
import os
import re
import resource
import secrets
import shutil
import signal
import socket
import socketserver
import ssl
import struct
import subprocess
import tempfile
import threading
import time
import urllib.parse

CORDON_BIN = os.environ.get("CORDON_BIN", "/work/main/build/cordon")
LOOPBACK = "127.0.0.1"
KiB = 1024
MiB = 1024 * 1024


# --------------------------------------------------------------------------------------
# Small utilities
# --------------------------------------------------------------------------------------

class TempDir:
    """A temp dir; cleanup() removes it (idempotent)."""

    def __init__(self, prefix="cordon-it-"):
        self.path = tempfile.mkdtemp(prefix=prefix)

    def join(self, *parts):
        return os.path.join(self.path, *parts)

    def cleanup(self):
        if self.path and os.path.isdir(self.path):
            shutil.rmtree(self.path, ignore_errors=True)
        self.path = None


def wait_until(pred, timeout, interval=0.02):
    """Polls pred() until it returns a truthy value or `timeout` seconds pass; returns the
    last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def free_port():
    """A TCP port on 127.0.0.1 with nothing listening (bound, then released)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((LOOPBACK, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


_CERT_DIR = None
_CERT = None
_CERT_LOCK = threading.Lock()


def test_cert():
    """(cert_path, key_path) of a throwaway self-signed cert for a.test and b.test, made once
    per run with openssl and removed at exit."""
    global _CERT_DIR, _CERT
    with _CERT_LOCK:
        if _CERT is None:
            _CERT_DIR = TempDir("cordon-it-cert-")
            atexit.register(_CERT_DIR.cleanup)
            cert, key = _CERT_DIR.join("cert.pem"), _CERT_DIR.join("key.pem")
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                 "-keyout", key, "-out", cert, "-subj", "/CN=a.test",
                 "-addext", "subjectAltName=DNS:a.test,DNS:b.test"],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
            _CERT = (cert, key)
        return _CERT


def client_ssl_context():
    """A client context that trusts only the test cert."""
    cert, _ = test_cert()
    ctx = ssl.create_default_context(cafile=cert)
    return ctx


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, timeout=60)


class TestPKI:
    """A CA for the TLS origins the TLS inspection and MCP suites start (their `upstream_ca`),
    and certificates from it (and self-signed ones)."""

    def __init__(self, prefix="cordon-it-pki-"):
        self.dir = TempDir(prefix)
        self.ca_cert, self.ca_key = self.dir.join("ca.pem"), self.dir.join("ca.key")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-days", "2", "-subj", "/CN=cordon test upstream CA", "-keyout", self.ca_key,
                "-out", self.ca_cert, "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign")

    def leaf(self, name, san, days="2", self_signed=False):
        key, cert = self.dir.join(f"{name}.key"), self.dir.join(f"{name}.pem")
        if self_signed:
            openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-days", days, "-subj", f"/CN={san}", "-keyout", key, "-out",
                    cert, "-addext", f"subjectAltName=DNS:{san}")
            return cert, key
        csr, ext = self.dir.join(f"{name}.csr"), self.dir.join(f"{name}.ext")
        with open(ext, "w") as f:
            f.write(f"subjectAltName=DNS:{san}\nextendedKeyUsage=serverAuth\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-subj", f"/CN={san}", "-keyout", key, "-out", csr)
        openssl("x509", "-req", "-in", csr, "-CA", self.ca_cert, "-CAkey", self.ca_key,
                "-days", days, "-out", cert, "-extfile", ext)
        return cert, key


def run_curl(args, timeout=60, env_extra=None):
    """Runs curl (never reading ~/.curlrc, never honouring proxy variables from the
    environment unless given in env_extra) and returns CompletedProcess with bytes
    stdout/stderr."""
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    env.update(env_extra or {})
    pre = ["curl", "-q"] if env_extra else ["curl", "-q", "--noproxy", ""]
    return subprocess.run(pre + list(args), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


# --------------------------------------------------------------------------------------
# Plain HTTP origin
# --------------------------------------------------------------------------------------

class _OriginHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "it-origin/1"
    timeout = 30

    def log_message(self, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        with self.server.origin.lock:
            self.server.origin.connections += 1

    def _record(self, body_len=0, body_head=b"", sha=None):
        rec = {
            "method": self.command,
            "path": self.path,
            "version": self.request_version,
            "requestline": self.requestline,
            "headers": list(self.headers.items()),
            "body_len": body_len,
            "body_head": body_head,
            "sha256": sha,
            "time": time.monotonic(),
        }
        with self.server.origin.lock:
            self.server.origin.requests.append(rec)
        return rec

    def _read_body(self):
        """Reads the request body (Content-Length or chunked), counting and hashing it,
        keeping only its first 64 KiB. Returns (length, head, sha256-hex)."""
        h = hashlib.sha256()
        n = 0
        head = bytearray()

        def take(b):
            nonlocal n
            n += len(b)
            h.update(b)
            if len(head) < 64 * KiB:
                head.extend(b[:64 * KiB - len(head)])

        te = self.headers.get("Transfer-Encoding")
        if te is not None and te.strip().lower() == "chunked":
            for _ in range(10_000_000):
                line = self.rfile.readline(1024)
                if not line:
                    raise ConnectionError("EOF in chunked body")
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    # trailers until blank line
                    for _ in range(100):
                        t = self.rfile.readline(8192)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                left = size
                while left:
                    b = self.rfile.read(min(left, 256 * KiB))
                    if not b:
                        raise ConnectionError("EOF in chunk")
                    take(b)
                    left -= len(b)
                self.rfile.readline(16)
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left:
                b = self.rfile.read(min(left, 256 * KiB))
                if not b:
                    raise ConnectionError("EOF in body")
                take(b)
                left -= len(b)
        return n, bytes(head), h.hexdigest()

    def _send(self, status, body, ctype="text/plain", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query)
        if (self.headers.get("Upgrade", "").lower() == "websocket"
                and url.path == "/ws"):
            self._record()
            self._websocket()
            return
        n, head, sha = self._read_body()
        self._record(n, head, sha)
        if url.path == "/big":
            size = int(q.get("n", ["0"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            block = (b"0123456789abcdef" * 4096)  # 64 KiB
            left = size
            while left:
                k = min(left, len(block))
                self.wfile.write(block[:k])
                left -= k
            return
        if url.path == "/early-hints":
            # Two interim answers before the final one (RFC 8297 103 Early Hints).
            for _ in range(2):
                self.wfile.write(b"HTTP/1.1 103 Early Hints\r\n"
                                 b"Link: </style.css>; rel=preload\r\n\r\n")
            self.wfile.flush()
            self._send(200, b"final\n", "text/plain")
            return
        if url.path == "/chunked":
            parts = int(q.get("parts", ["5"])[0])
            size = int(q.get("size", ["1000"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(parts):
                chunk = bytes([65 + i % 26]) * size
                self.wfile.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        body = json.dumps({"origin": "http", "method": self.command,
                           "path": self.path}).encode() + b"\n"
        self._send(200, body, "application/json")

    def do_HEAD(self):
        self._record()
        if urllib.parse.urlsplit(self.path).path == "/chunked":
            # The head a GET would get, announcing chunked framing, and no body.
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            return
        body = b'{"origin": "http"}\n'
        self._send(200, body, "application/json")

    def do_POST(self):
        try:
            n, head, sha = self._read_body()
        except (ValueError, ConnectionError) as e:
            rec = self._record()
            rec["body_error"] = repr(e)
            self.close_connection = True
            self._send(400, b"bad body\n", extra=[("Connection", "close")])
            return
        self._record(n, head, sha)
        body = json.dumps({"bytes": n, "sha256": sha}).encode() + b"\n"
        self._send(200, body, "application/json")

    do_PUT = do_POST

    def do_DELETE(self):
        n, head, sha = self._read_body()
        self._record(n, head, sha)
        self._send(200, b'{"deleted": true}\n', "application/json")

    def _websocket(self):
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1(
            (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        self.connection.settimeout(30)
        for _ in range(100_000):
            try:
                data = self.rfile.read1(65536)  # buffered bytes first, then the socket
            except OSError:
                break
            if not data:
                break
            self.wfile.write(data)
            self.wfile.flush()
        self.close_connection = True


class _ThreadingHTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 512

    def handle_error(self, request, client_address):  # clients vanish mid-request: quiet
        pass


class HTTPOrigin:
    """A plain HTTP/1.1 origin on 127.0.0.1:<ephemeral>. Records each request as a dict
    (method, path, headers [(name, value)...], body_len, body_head, sha256) in .requests and
    counts accepted connections in .connections.

    Endpoints: GET / (JSON), GET /big?n=BYTES (streamed), GET /chunked?parts=&size=
    (chunked response), POST/PUT any path (reads the body, answers {"bytes", "sha256"}),
    HEAD, DELETE (answers 200: tests assert it is never reached), GET /ws with
    Upgrade: websocket (101, then echoes bytes)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.connections = 0
        self.server = _ThreadingHTTPServer((LOOPBACK, 0), _OriginHandler)
        self.server.origin = self
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def requests_matching(self, substring):
        with self.lock:
            return [r for r in self.requests if substring in r["path"]]

    def snapshot(self):
        with self.lock:
            return len(self.requests), self.connections

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def header_values(rec_headers, name):
    """All values of header `name` (case-insensitive) in a recorded header list."""
    return [v for k, v in rec_headers if k.lower() == name.lower()]


# --------------------------------------------------------------------------------------
# TLS origin
# --------------------------------------------------------------------------------------

class TLSOrigin:
    """A TLS HTTP origin on 127.0.0.1:<ephemeral> with the test cert. Records every accepted
    connection in .conns as {got_bytes, sni, handshake_ok, request} and answers one request
    per connection with body b"tls-origin sni=<sni> path=<path>\\n"."""

    def __init__(self):
        cert, key = test_cert()
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.ctx.sni_callback = self._sni
        self.lock = threading.Lock()
        self.conns = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((LOOPBACK, 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self._stop = False
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    def _sni(self, sslobj, name, ctx):
        rec = getattr(sslobj, "_it_rec", None)
        if rec is not None:
            rec["sni"] = name

    def _accept_loop(self):
        for _ in range(1_000_000):
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self._stop:
                c.close()
                return
            rec = {"got_bytes": False, "sni": None, "handshake_ok": False, "request": None,
                   "error": None}
            with self.lock:
                self.conns.append(rec)
            threading.Thread(target=self._serve, args=(c, rec), daemon=True).start()

    def _serve(self, c, rec):
        s = None
        try:
            c.settimeout(15)
            try:
                first = c.recv(1, socket.MSG_PEEK)
            except OSError as e:
                rec["error"] = f"peek: {e}"
                return
            if not first:
                return
            rec["got_bytes"] = True
            s = self.ctx.wrap_socket(c, server_side=True, do_handshake_on_connect=False)
            s._it_rec = rec  # lets the SNI callback find the record
            try:
                s.do_handshake()
            except (ssl.SSLError, OSError) as e:
                rec["error"] = f"handshake: {e}"
                return
            rec["handshake_ok"] = True
            buf = b""
            for _ in range(1000):
                if b"\r\n\r\n" in buf:
                    break
                d = s.recv(65536)
                if not d:
                    break
                buf += d
            line = buf.split(b"\r\n", 1)[0].decode("latin-1")
            rec["request"] = line
            parts = line.split(" ")
            path = parts[1] if len(parts) > 1 else "?"
            body = f"tls-origin sni={rec['sni']} path={path}\n".encode()
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            try:
                s.unwrap()
            except (ssl.SSLError, OSError):
                pass
        except Exception as e:  # recorded, never raised into the test thread
            rec["error"] = repr(e)
        finally:
            for sock in (s, c):
                try:
                    if sock is not None:
                        sock.close()
                except OSError:
                    pass

    def snapshot(self):
        with self.lock:
            return len(self.conns)

    def conns_since(self, n):
        with self.lock:
            return list(self.conns[n:])

    def stop(self):
        self._stop = True
        try:
            self.sock.close()
        except OSError:
            pass


# --------------------------------------------------------------------------------------
# Raw TCP origin (asyncio in a thread: scales to thousands of connections)
# --------------------------------------------------------------------------------------

class EchoOrigin:
    """A raw TCP origin on 127.0.0.1:<ephemeral>. mode:
      "echo":      echoes every byte at once; half-closes back after the client's EOF.
      "eof_reply": reads until EOF, then sends b"got N bytes\\n" and closes.
      "sink":      reads and counts, never writes.
    Records each connection in .conns as {bytes_in, bytes_out, eof, closed}."""

    def __init__(self, mode="echo"):
        self.mode = mode
        self.lock = threading.Lock()
        self.conns = []
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("echo origin did not start")

    def _run(self):
        asyncio.set_event_loop(self.loop)

        async def start():
            self.server = await asyncio.start_server(self._handle, LOOPBACK, 0, backlog=2048)
            self.port = self.server.sockets[0].getsockname()[1]
            self._ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    async def _handle(self, reader, writer):
        rec = {"bytes_in": 0, "bytes_out": 0, "eof": False, "closed": False,
               "opened": time.monotonic()}
        with self.lock:
            self.conns.append(rec)
        try:
            for _ in range(10_000_000):
                data = await reader.read(65536)
                if not data:
                    rec["eof"] = True
                    break
                rec["bytes_in"] += len(data)
                if self.mode == "echo":
                    writer.write(data)
                    await writer.drain()
                    rec["bytes_out"] += len(data)
            if self.mode == "eof_reply":
                msg = f"got {rec['bytes_in']} bytes\n".encode()
                writer.write(msg)
                await writer.drain()
                rec["bytes_out"] += len(msg)
        except (ConnectionError, OSError):
            pass
        finally:
            rec["closed"] = True
            try:
                writer.close()
            except Exception:
                pass

    def snapshot(self):
        with self.lock:
            return len(self.conns)

    def conns_since(self, n):
        with self.lock:
            return list(self.conns[n:])

    def stop(self):
        def _close():
            self.server.close()
            self.loop.stop()
        self.loop.call_soon_threadsafe(_close)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


# --------------------------------------------------------------------------------------
# Fake DNS (UDP)
# --------------------------------------------------------------------------------------

class FakeDNS:
    """A UDP DNS server on 127.0.0.1:<ephemeral>. `table` maps a lower-case name to
    {"A": [...], "AAAA": [...]}. A known name gets its records of the asked type (NOERROR,
    possibly no answers); an unknown name gets NXDOMAIN. Records (name, qtype) in .queries.

    Additions (defaults keep the original behaviour):
    - `ttl`: the TTL of every record (default 30).
    - a table key "*.suffix" answers every name strictly below `suffix` (an exact key wins);
    - an entry {"CNAME": "target"} answers any type with that CNAME record, followed by the
      target's records of the asked type (chains followed through the table, at most 8);
    - UDP answers larger than the client's size (512, or the EDNS size of the query) are
      truncated to header + question with TC set; a query with EDNS gets an OPT back;
    - `tcp=True` also serves DNS over TCP on the same port (no size limit);
    - .log holds one dict per query: {name, qtype, transport ("udp"/"tcp"), edns, raw, t}."""

    def __init__(self, table, ttl=30, tcp=False):
        self.table = {k.lower().rstrip("."): v for k, v in table.items()}
        self.ttl = ttl
        self.queries = []
        self.log = []
        self.lock = threading.Lock()
        self.tcp_sock = None
        # With tcp, TCP must get the port UDP got; that number may be taken for TCP (even a
        # TIME_WAIT socket blocks the bind on some kernels): then try another port.
        for attempt in range(50):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.bind((LOOPBACK, 0))
            self.port = self.sock.getsockname()[1]
            if not tcp:
                break
            t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                t.bind((LOOPBACK, self.port))
            except OSError:
                t.close()
                self.sock.close()
                if attempt == 49:
                    raise
                continue
            t.listen(64)
            self.tcp_sock = t
            threading.Thread(target=self._tcp_accept, daemon=True).start()
            break
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        for _ in range(10_000_000):
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            try:
                resp = self._answer(data, "udp")
            except Exception:
                continue
            if resp:
                try:
                    self.sock.sendto(resp, peer)
                except OSError:
                    pass

    def _tcp_accept(self):
        for _ in range(1_000_000):
            try:
                c, _ = self.tcp_sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tcp_serve, args=(c,), daemon=True).start()

    def _tcp_serve(self, c):
        c.settimeout(10)
        buf = b""
        try:
            for _ in range(10_000):
                while len(buf) < 2 or len(buf) < 2 + struct.unpack("!H", buf[:2])[0]:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                n = struct.unpack("!H", buf[:2])[0]
                msg, buf = buf[2:2 + n], buf[2 + n:]
                try:
                    resp = self._answer(msg, "tcp")
                except Exception:
                    resp = None
                if resp:
                    c.sendall(struct.pack("!H", len(resp)) + resp)
        except OSError:
            pass
        finally:
            c.close()

    def _lookup(self, name):
        entry = self.table.get(name)
        if entry is not None:
            return entry
        labels = name.split(".")
        for i in range(1, len(labels)):
            entry = self.table.get("*." + ".".join(labels[i:]))
            if entry is not None:
                return entry
        return None

    @staticmethod
    def _encode_name(name):
        out = b""
        for label in name.rstrip(".").split("."):
            if label:
                b = label.encode("ascii")
                out += bytes([len(b)]) + b
        return out + b"\0"

    def _records(self, owner_wire, entry, qtype):
        if qtype == 1:
            return [owner_wire + struct.pack("!HHIH", 1, 1, self.ttl, 4)
                    + socket.inet_pton(socket.AF_INET, a) for a in entry.get("A", [])]
        if qtype == 28:
            return [owner_wire + struct.pack("!HHIH", 28, 1, self.ttl, 16)
                    + socket.inet_pton(socket.AF_INET6, a) for a in entry.get("AAAA", [])]
        return []

    def _answer(self, q, transport="udp"):
        if len(q) < 12:
            return None
        qid, flags, qd, _, _, ar = struct.unpack("!HHHHHH", q[:12])
        if qd != 1:
            return None
        i = 12
        labels = []
        for _ in range(128):
            n = q[i]
            i += 1
            if n == 0:
                break
            labels.append(q[i:i + n].decode("ascii", "replace"))
            i += n
        qtype, qclass = struct.unpack("!HH", q[i:i + 4])
        question = q[12:i + 4]
        name = ".".join(labels).lower()
        edns = None
        rest = q[i + 4:]
        if ar >= 1 and len(rest) >= 11 and rest[0] == 0 and rest[1:3] == b"\x00\x29":
            edns = struct.unpack("!H", rest[3:5])[0]
        with self.lock:
            self.queries.append((name, qtype))
            self.log.append({"name": name, "qtype": qtype, "transport": transport,
                             "edns": edns, "raw": bytes(q), "t": time.monotonic()})
        rd = flags & 0x0100
        entry = self._lookup(name)
        answers = []
        rcode = 0
        if entry is None:
            rcode = 3
        elif qclass == 1:
            owner, cur = b"\xc0\x0c", entry
            for _ in range(8):
                target = cur.get("CNAME") if cur is not None else None
                if target is None:
                    break
                answers.append(owner + struct.pack("!HHIH", 5, 1, self.ttl,
                                                   len(self._encode_name(target)))
                               + self._encode_name(target))
                if qtype == 5:
                    cur = None
                    break
                owner, cur = self._encode_name(target), self._lookup(target.lower().rstrip("."))
            if cur is not None:
                answers += self._records(owner, cur, qtype)
        rflags = 0x8000 | 0x0400 | rd | 0x0080 | rcode  # QR AA RD RA rcode
        opt = b""
        if edns is not None:
            opt = b"\x00" + struct.pack("!HHIH", 41, 1232, 0, 0)
        header = struct.pack("!HHHHHH", qid, rflags, 1, len(answers), 0, 1 if opt else 0)
        resp = header + question + b"".join(answers) + opt
        limit = max(512, edns or 0)
        if transport == "udp" and len(resp) > limit:
            header = struct.pack("!HHHHHH", qid, rflags | 0x0200, 1, 0, 0, 1 if opt else 0)
            resp = header + question + opt
        return resp

    def names_queried(self):
        with self.lock:
            return {n for n, _ in self.queries}

    def queries_for(self, name, qtype=None):
        """The recorded queries (log dicts) for `name` (case and trailing dot ignored), of
        `qtype` if given."""
        name = name.lower().rstrip(".")
        with self.lock:
            return [r for r in self.log
                    if r["name"] == name and (qtype is None or r["qtype"] == qtype)]

    def stop(self):
        for s in (self.sock, self.tcp_sock):
            if s is None:
                continue
            try:
                s.close()
            except OSError:
                pass


# --------------------------------------------------------------------------------------
# Raw proxy client
# --------------------------------------------------------------------------------------

class Response:
    def __init__(self, status, reason, headers, body, raw_head):
        self.status = status
        self.reason = reason
        self.headers = headers  # [(name, value)]
        self.body = body
        self.raw_head = raw_head

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def header_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return f"<Response {self.status} {self.reason} {self.headers} {self.body[:300]!r}>"


class ProxyConn:
    """One TCP connection to the proxy with a buffered reader."""

    def __init__(self, addr, timeout=10):
        self.sock = socket.create_connection(addr, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise EOFError("connection closed by peer")
        self.buf += d

    def recv(self, n=65536):
        """Bytes from the buffer first, then the socket; b"" on EOF."""
        if self.buf:
            out, self.buf = self.buf[:n], self.buf[n:]
            return out
        return self.sock.recv(n)

    def recv_exact(self, n, timeout=10):
        self.sock.settimeout(timeout)
        out = bytearray()
        for _ in range(10_000_000):
            if len(out) >= n:
                break
            d = self.recv(min(65536, n - len(out)))
            if not d:
                raise EOFError(f"EOF after {len(out)} of {n} bytes")
            out.extend(d)
        return bytes(out)

    def read_head(self, timeout=10, limit=256 * KiB):
        self.sock.settimeout(timeout)
        for _ in range(100_000):
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                head, self.buf = self.buf[:i + 4], self.buf[i + 4:]
                return head
            if len(self.buf) > limit:
                raise ValueError("response head too large")
            self._fill()
        raise ValueError("no response head")

    def read_response(self, timeout=10, method="GET", body_limit=16 * MiB):
        """Reads one response (head and body). For CONNECT 2xx and 101 the body is empty and
        the remaining bytes stay in the buffer."""
        head = self.read_head(timeout)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        status = int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers = []
        for line in lines[1:]:
            if not line:
                continue
            k, _, v = line.partition(":")
            headers.append((k.strip(), v.strip()))
        r = Response(status, reason, headers, b"", head)
        if (method == "CONNECT" and 200 <= status < 300) or status == 101 \
                or method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return r
        te = r.header("Transfer-Encoding")
        cl = r.header("Content-Length")
        if te and "chunked" in te.lower():
            body = bytearray()
            for _ in range(1_000_000):
                while b"\r\n" not in self.buf:
                    self._fill()
                line, self.buf = self.buf.split(b"\r\n", 1)
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    for _ in range(100):
                        while b"\r\n" not in self.buf:
                            self._fill()
                        t, self.buf = self.buf.split(b"\r\n", 1)
                        if t == b"":
                            break
                    break
                while len(self.buf) < size + 2:
                    self._fill()
                body.extend(self.buf[:size])
                self.buf = self.buf[size + 2:]
                if len(body) > body_limit:
                    raise ValueError("body too large")
            r.body = bytes(body)
        elif cl is not None:
            n = int(cl)
            while len(self.buf) < n:
                self._fill()
            r.body, self.buf = self.buf[:n], self.buf[n:]
        else:
            # until close
            for _ in range(1_000_000):
                try:
                    self._fill()
                except EOFError:
                    break
                if len(self.buf) > body_limit:
                    raise ValueError("body too large")
            r.body, self.buf = self.buf, b""
        return r

    def wait_closed(self, timeout=5):
        """Reads until EOF or a reset within `timeout`; returns (closed, bytes_read)."""
        deadline = time.monotonic() + timeout
        got = bytearray(self.buf)
        self.buf = b""
        for _ in range(1_000_000):
            left = deadline - time.monotonic()
            if left <= 0:
                return False, bytes(got)
            self.sock.settimeout(left)
            try:
                d = self.sock.recv(65536)
            except socket.timeout:
                return False, bytes(got)
            except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
                return True, bytes(got)
            if not d:
                return True, bytes(got)
            got.extend(d)
        return False, bytes(got)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def connect_request(host_port, auth=None, extra=b""):
    req = f"CONNECT {host_port} HTTP/1.1\r\nHost: {host_port}\r\n".encode()
    if auth is not None:
        req += f"Proxy-Authorization: {auth}\r\n".encode()
    return req + extra + b"\r\n"


# --------------------------------------------------------------------------------------
# cordon itself
# --------------------------------------------------------------------------------------

RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$")


def raw_tcp_job(task, port):
    """The policy's jobs: one job `agent` allowed raw TCP to raw.test:PORT, which the tests'
    FakeDNS answers with 127.0.0.1 (resolves_to lets it be loopback)."""
    return ("  agent:\n"
            f"    task: {task}\n"
            "    egress:\n"
            f"      - {{ host: raw.test, ports: [{port}], protocol: tcp, "
            "resolves_to: [127.0.0.0/8] }\n"
            "    identity: { ttl: 30m }\n")


def stop_all(*servers):
    """Stops the module's helper servers that were started (None: never started)."""
    for o in servers:
        if o is not None:
            o.stop()


class CordonError(AssertionError):
    pass


class Cordon:
    """One `cordon serve` in its own temp dir. `jobs_yaml` is the text of the `jobs:` mapping
    (indented by two spaces, without the `jobs:` line); `proxy_opts` the `proxy:` section."""

    def __init__(self, jobs_yaml, dns_port, proxy_opts=None, binary=None, fsize_limit=None,
                 listen_dns=None, dns_yaml=None, nofile_limit=None, extra_yaml=None,
                 listen_socks=None):
        self.bin = binary or CORDON_BIN
        # extra_yaml: more top-level sections (e.g. "inspect:\n  ca: ...\n"), before jobs.
        self.extra_yaml = extra_yaml or ""
        # With nofile_limit, cordon runs with RLIMIT_NOFILE soft = hard = that many
        # descriptors (`ulimit -n`), for the descriptor-exhaustion tests.
        self.nofile_limit = nofile_limit
        # listen_dns: the `listen.dns` value (e.g. "127.0.0.1:0"); dns_yaml: more keys of the
        # `dns:` section, as YAML lines indented by two spaces (e.g. "  default_job: web\n").
        self.listen_dns = listen_dns
        # listen_socks: the `listen.socks` value (e.g. "127.0.0.1:0"): SOCKS5 only.
        self.listen_socks = listen_socks
        self.socks_addr = None
        self.dns_yaml = dns_yaml or ""
        self.dns_addr = None
        # With fsize_limit, cordon runs under RLIMIT_FSIZE (SIGXFSZ ignored): once a file it
        # writes reaches that size, further writes fail with EFBIG. That breaks the audit
        # log under a running daemon without mounts or root tricks.
        self.fsize_limit = fsize_limit
        self.tmp = TempDir("cordon-it-serve-")
        self.dns_port = dns_port
        self.proxy_opts = dict(proxy_opts or {})
        self.admin_token = secrets.token_hex(32)
        self.token_file = self.tmp.join("admin.token")
        with open(self.token_file, "w") as f:
            f.write(self.admin_token + "\n")
        os.chmod(self.token_file, 0o600)
        self.state_dir = self.tmp.join("state")
        self.audit_dir = self.tmp.join("audit")
        os.makedirs(self.state_dir, mode=0o700)
        os.makedirs(self.audit_dir, mode=0o700)
        self.config_path = self.tmp.join("policy.yaml")
        self.ready_path = self.tmp.join("ready.json")
        self.secrets = [self.admin_token]  # every secret this instance handed out
        self.proc = None
        self.write_policy(jobs_yaml)

    # policy -------------------------------------------------------------------------

    def policy_text(self, jobs_yaml):
        proxy = ""
        if self.proxy_opts:
            proxy = "proxy:\n" + "".join(f"  {k}: {v}\n" for k, v in self.proxy_opts.items())
        return (
            "# written by tests/integration/harness.py\n"
            "listen:\n"
            "  proxy: 127.0.0.1:0\n"
            "  admin: 127.0.0.1:0\n"
            + (f"  dns: {self.listen_dns}\n" if self.listen_dns else "")
            + (f"  socks: {self.listen_socks}\n" if self.listen_socks else "") +
            "admin:\n"
            f"  token_file: {self.token_file}\n"
            "state:\n"
            f"  path: {self.state_dir}\n"
            "audit:\n"
            f"  path: {self.audit_dir}\n"
            "dns:\n"
            f"  upstream: [\"127.0.0.1:{self.dns_port}\"]\n"
            + self.dns_yaml + proxy + self.extra_yaml +
            "jobs:\n" + jobs_yaml)

    def write_policy(self, jobs_yaml=None, raw_text=None):
        """Replaces the policy file atomically (rename)."""
        text = raw_text if raw_text is not None else self.policy_text(jobs_yaml)
        tmp = self.config_path + ".new"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.config_path)

    # process ------------------------------------------------------------------------

    def start(self, timeout=10):
        if not os.path.exists(self.bin):
            raise CordonError(f"cordon binary not found at {self.bin} (set CORDON_BIN)")
        self.stdout = open(self.tmp.join("stdout.log"), "wb")
        self.stderr = open(self.tmp.join("stderr.log"), "wb")
        fsize = None if self.fsize_limit is None else int(self.fsize_limit)
        nofile = None if self.nofile_limit is None else int(self.nofile_limit)

        def preexec():
            if fsize is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        self.proc = subprocess.Popen(
            [self.bin, "serve", "--config", self.config_path, "--ready-file", self.ready_path],
            stdin=subprocess.DEVNULL, stdout=self.stdout, stderr=self.stderr,
            preexec_fn=preexec if fsize is not None or nofile is not None else None)
        deadline = time.monotonic() + timeout
        ready = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CordonError(f"cordon serve exited with {self.proc.returncode} before "
                                  f"ready:\n{self.stderr_text()}")
            if os.path.exists(self.ready_path):
                try:
                    with open(self.ready_path) as f:
                        ready = json.load(f)
                    break
                except (ValueError, OSError):
                    pass  # partially written
            time.sleep(0.02)
        if ready is None:
            self.kill()
            raise CordonError(f"cordon serve wrote no ready file within {timeout}s:\n"
                              f"{self.stderr_text()}")
        self.ready = ready
        self.proxy_addr = self._addr(ready["proxy"])
        self.admin_addr = self._addr(ready["admin"])
        self.dns_addr = self._addr(ready["dns"]) if ready.get("dns") else None
        self.socks_addr = self._addr(ready["socks"]) if ready.get("socks") else None
        return self

    @staticmethod
    def _addr(text):
        host, _, port = text.rpartition(":")
        return host.strip("[]"), int(port)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stderr_text(self, tail=4000):
        try:
            self.stderr.flush()
            with open(self.tmp.join("stderr.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")[-tail:]
        except (OSError, AttributeError, TypeError):
            return ""

    def rss_kb(self):
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=10):
        """SIGTERM, wait (bounded); returns (exit code, seconds taken). Kills on timeout."""
        if self.proc is None or self.proc.poll() is not None:
            return (self.proc.returncode if self.proc else None), 0.0
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None, time.monotonic() - t0
        return rc, time.monotonic() - t0

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def cleanup(self):
        self.kill()
        for f in (getattr(self, "stdout", None), getattr(self, "stderr", None)):
            if f:
                f.close()
        self.tmp.cleanup()

    # admin API ----------------------------------------------------------------------

    def admin_raw(self, method, path, body=None, token="default", headers=None,
                  timeout=10):
        """(status, headers dict lower-case, raw body bytes)."""
        conn = http.client.HTTPConnection(*self.admin_addr, timeout=timeout)
        h = dict(headers or {})
        if token == "default":
            token = self.admin_token
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            if isinstance(data, str):
                data = data.encode()
            h.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            raw = r.read()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
            return r.status, hdrs, raw
        finally:
            conn.close()

    def admin(self, method, path, body=None, token="default", headers=None):
        """(status, parsed JSON or None if the body is not JSON)."""
        status, _, raw = self.admin_raw(method, path, body, token, headers)
        try:
            js = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            js = None
        return status, js

    def create_session(self, job="web", ttl=None):
        body = {"job": job}
        if ttl is not None:
            body["ttl"] = ttl
        status, js = self.admin("POST", "/v1/sessions", body)
        if status != 201 or not isinstance(js, dict):
            raise CordonError(f"POST /v1/sessions {body} -> {status} {js}")
        self.secrets.append(js.get("token", ""))
        return js

    def mint_token(self, session_id, ttl=None):
        body = {} if ttl is None else {"ttl": ttl}
        status, js = self.admin("POST", f"/v1/sessions/{session_id}/tokens", body)
        if status != 201 or not isinstance(js, dict):
            raise CordonError(f"POST /v1/sessions/{session_id}/tokens -> {status} {js}")
        self.secrets.append(js.get("token", ""))
        return js

    def status(self):
        return self.admin("GET", "/v1/status")[1]

    def fill_audit_until_unhealthy(self, send_one, count, check_every=10, seconds=40):
        """Calls send_one(i) (something cordon audits) until the audit log says it is
        unhealthy (asked every `check_every` calls), `count` calls or `seconds` pass, then
        gives the background writer 5 s to notice. True when the log went unhealthy."""
        deadline = time.monotonic() + seconds
        for i in range(count):
            if time.monotonic() > deadline:
                break
            send_one(i)
            if i % check_every == check_every - 1 and not self.status()["audit"]["healthy"]:
                return True
        return bool(wait_until(lambda: not self.status()["audit"]["healthy"], 5, 0.1))

    def fill_audit_with_denials(self, auth, seconds=40):
        """fill_audit_until_unhealthy() with denied CONNECTs (denied.test:443)."""
        def send(_):
            c = self.conn(5)
            try:
                c.send(connect_request("denied.test:443", auth))
                c.read_response(5, method="CONNECT")
            except (OSError, EOFError, ValueError):
                pass
            finally:
                c.close()
        return self.fill_audit_until_unhealthy(send, 4000, 10, seconds)

    # proxy helpers ------------------------------------------------------------------

    def conn(self, timeout=10):
        return ProxyConn(self.proxy_addr, timeout)

    def tunnel(self, session, host_port, token=None, timeout=10):
        """CONNECT host_port with the session's credentials; returns (ProxyConn, Response).
        The caller checks the status."""
        c = self.conn(timeout)
        auth = basic(session["id"], token or session["token"])
        c.send(connect_request(host_port, auth))
        r = c.read_response(timeout, method="CONNECT")
        return c, r

    def proxy_url(self, session, token=None):
        h, p = self.proxy_addr
        return f"http://{session['id']}:{token or session['token']}@{h}:{p}"

    # audit ------------------------------------------------------------------------

    def audit_files(self):
        return sorted(glob.glob(os.path.join(self.audit_dir, "cordon-*.jsonl")))

    def audit_raw(self):
        out = b""
        for p in self.audit_files():
            with open(p, "rb") as f:
                out += f.read()
        return out

    def audit_events(self):
        """Every event of every audit file, in file order. Raises on a line that is not a
        JSON object with `ts` and `event`."""
        events = []
        for p in self.audit_files():
            with open(p, "rb") as f:
                data = f.read()
            # A line being written may be incomplete: ignore only a trailing partial line.
            lines = data.split(b"\n")
            if lines and lines[-1] != b"":
                lines = lines[:-1]
            for n, line in enumerate(lines, 1):
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError as e:
                    raise CordonError(f"{p}:{n}: not JSON ({e}): {line[:200]!r}")
                if not isinstance(ev, dict) or "ts" not in ev or "event" not in ev:
                    raise CordonError(f"{p}:{n}: no ts/event: {line[:200]!r}")
                events.append(ev)
        return events

    def wait_events(self, pred, count=1, timeout=5):
        """Polls the audit log until at least `count` events satisfy pred; returns them
        (possibly fewer on timeout)."""
        found = []

        def check():
            nonlocal found
            found = [e for e in self.audit_events() if pred(e)]
            return len(found) >= count

        wait_until(check, timeout, 0.05)
        return found


# --------------------------------------------------------------------------------------
# RSS sampler
# --------------------------------------------------------------------------------------

class RssSampler:
    """Samples a process's VmRSS every 50 ms while active; .max_kb afterwards."""

    def __init__(self, cordon):
        self.cordon = cordon
        self.max_kb = 0
        self._stop = threading.Event()

    def __enter__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        for _ in range(100_000):
            v = self.cordon.rss_kb()
            if v:
                self.max_kb = max(self.max_kb, v)
            if self._stop.wait(0.05):
                return

    def __exit__(self, *exc):
        self._stop.set()
        self.thread.join(2)
        v = self.cordon.rss_kb()
        if v:
            self.max_kb = max(self.max_kb, v)
        return False


# --------------------------------------------------------------------------------------
# Counting origin (kill-switch tests): proves what reached the origin, and when
# --------------------------------------------------------------------------------------

_FLOOD_BLOCK = b"F" * (64 * KiB)


class _CountingProtocol(asyncio.Protocol):
    def __init__(self, origin):
        self.origin = origin
        self.transport = None
        self.rec = None
        self.paused = False

    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        self.rec = {"bytes_in": 0, "bytes_out": 0, "opened": time.monotonic(), "last_in": None,
                    "eof": False, "closed": False, "closed_at": None, "error": None,
                    "paused": False, "fd": sock.fileno() if sock is not None else -1,
                    "peer": transport.get_extra_info("peername")}
        with self.origin.lock:
            self.origin.conns.append(self.rec)
        if self.origin.mode == "flood":
            transport.set_write_buffer_limits(high=256 * KiB, low=64 * KiB)
            self._flood()

    def _flood(self):
        for _ in range(16):
            if self.paused or self.transport.is_closing():
                return
            self.transport.write(_FLOOD_BLOCK)
            self.rec["bytes_out"] += len(_FLOOD_BLOCK)
        # Not blocked yet (the peer reads): go on after other callbacks had their turn.
        self.origin.loop.call_soon(self._flood)

    def pause_writing(self):
        self.paused = True
        self.rec["paused"] = True

    def resume_writing(self):
        self.paused = False
        self.rec["paused"] = False
        if self.origin.mode == "flood":  # an echo origin only answers what it reads
            self._flood()

    def data_received(self, data):
        now = time.monotonic()
        self.rec["bytes_in"] += len(data)
        self.rec["last_in"] = now
        if self.origin.mode == "echo":
            self.transport.write(data)
            self.rec["bytes_out"] += len(data)
        rate = self.origin.read_rate
        if rate:
            # Ahead of the rate: stop reading until the average is back at it.
            ahead = self.rec["bytes_in"] / rate - (now - self.rec["opened"])
            if ahead > 0.005:
                self.transport.pause_reading()
                self.origin.loop.call_later(ahead, self._resume_reading)

    def _resume_reading(self):
        if not self.transport.is_closing():
            try:
                self.transport.resume_reading()
            except (RuntimeError, AttributeError):
                pass

    def eof_received(self):
        self.rec["eof"] = True
        return False  # close our side too

    def connection_lost(self, exc):
        self.rec["closed"] = True
        self.rec["closed_at"] = time.monotonic()
        if exc is not None:
            self.rec["error"] = repr(exc)


class CountingOrigin:
    """A raw TCP origin on 127.0.0.1:<ephemeral> (asyncio protocol in a thread) that counts
    every byte that reaches it, for tests that must prove no byte arrives after a moment.
    mode:
      "sink":  reads and counts, never writes.
      "echo":  echoes every byte.
      "flood": writes 64 KiB blocks as fast as the peer takes them, until it goes away; reads
               and counts what it gets.
    Each connection is recorded in .conns as {bytes_in, bytes_out, opened, last_in, eof,
    closed, closed_at, error, paused} (times from time.monotonic()). With read_rate
    (bytes/s), each connection reads no faster than that on average: a slow upstream, so that
    whatever cordon has relayed but the origin has not read yet waits in cordon's sockets.

    received(n) counts, on the origin's own loop thread (so atomically with respect to its
    reads), the bytes of connections n.. that reached this host: read by the origin plus still
    queued unread in its sockets (FIONREAD)."""

    def __init__(self, mode="sink", read_rate=None):
        if mode not in ("sink", "echo", "flood"):
            raise ValueError(mode)
        self.mode = mode
        self.read_rate = read_rate
        self.lock = threading.Lock()
        self.conns = []
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("counting origin did not start")

    def _run(self):
        asyncio.set_event_loop(self.loop)

        async def start():
            self.server = await self.loop.create_server(
                lambda: _CountingProtocol(self), LOOPBACK, 0, backlog=2048)
            self.port = self.server.sockets[0].getsockname()[1]
            self._ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def snapshot(self):
        with self.lock:
            return len(self.conns)

    def conns_since(self, n):
        with self.lock:
            return list(self.conns[n:])

    def _received_now(self, n):
        import fcntl
        import termios
        total = 0
        with self.lock:
            recs = list(self.conns[n:])
        for r in recs:
            total += r["bytes_in"]
            if not r["closed"] and r["fd"] >= 0:
                try:
                    q = fcntl.ioctl(r["fd"], termios.FIONREAD, b"\0\0\0\0")
                    total += struct.unpack("i", q)[0]
                except OSError:
                    pass
        return total

    def received(self, n=0, timeout=5):
        """Bytes of connections n.. that reached this host (read + queued unread), counted on
        the loop thread."""
        async def snap():
            return self._received_now(n)
        return asyncio.run_coroutine_threadsafe(snap(), self.loop).result(timeout)

    def bytes_read(self, n=0):
        return sum(r["bytes_in"] for r in self.conns_since(n))

    def stop(self):
        def _close():
            self.server.close()
            self.loop.stop()
        self.loop.call_soon_threadsafe(_close)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


# --------------------------------------------------------------------------------------
# Server-Sent Events client (GET /v1/events)
# --------------------------------------------------------------------------------------

class SSEClient:
    """Follows a Server-Sent Events stream in a background thread. After construction,
    .status and .headers (lower-case dict) are set; for a 200 each complete event is appended
    to .events as {"id", "event", "data", "json", "t"} (t: time.monotonic() when parsed) and
    each comment line counts in .comments. Handles a raw body or chunked transfer coding, and
    \\n, \\r\\n or \\r line ends. close() stops it (bounded)."""

    def __init__(self, addr, path, token, last_event_id=None, timeout=5):
        self.events = []
        self.last_id = None  # the last id: field seen, dispatched or not
        self.comments = 0
        self.error = None
        self.eof = False
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self.sock = socket.create_connection(addr, timeout=timeout)
        req = (f"GET {path} HTTP/1.1\r\nHost: {addr[0]}:{addr[1]}\r\n"
               f"Accept: text/event-stream\r\n")
        if token is not None:
            req += f"Authorization: Bearer {token}\r\n"
        if last_event_id is not None:
            req += f"Last-Event-ID: {last_event_id}\r\n"
        self.sock.sendall((req + "\r\n").encode())
        buf = b""
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in buf:
            if time.monotonic() > deadline or len(buf) > 64 * KiB:
                raise CordonError(f"no response head on {path}: {buf[:300]!r}")
            d = self.sock.recv(65536)
            if not d:
                raise CordonError(f"EOF before the response head on {path}: {buf[:300]!r}")
            buf += d
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split(" ")[1])
        self.headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self._raw = rest          # undecoded bytes (chunked framing)
        self._text = b""          # decoded body bytes not yet parsed into lines
        self._cur = {"id": None, "event": None, "data": []}
        self.body = b""           # for a non-200: whatever body arrived within the timeout
        if self.status != 200:
            self.sock.settimeout(1)
            try:
                for _ in range(100):
                    d = self.sock.recv(65536)
                    if not d:
                        break
                    rest += d
            except OSError:
                pass
            self.body = rest
            self.sock.close()
            self.thread = None
            return
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _decode(self):
        if not self.chunked:
            self._text += self._raw
            self._raw = b""
            return
        for _ in range(100_000):
            i = self._raw.find(b"\r\n")
            if i < 0:
                return
            size = int(self._raw[:i].split(b";")[0] or b"0", 16)
            if size == 0:
                self.eof = True
                self._raw = b""
                return
            if len(self._raw) < i + 2 + size + 2:
                return
            self._text += self._raw[i + 2:i + 2 + size]
            self._raw = self._raw[i + 2 + size + 2:]

    def _parse(self):
        for _ in range(1_000_000):
            m = re.search(rb"\r\n|\r|\n", self._text)
            if m is None:
                return
            if m.group() == b"\r" and m.end() == len(self._text):
                return  # maybe the \r of a \r\n still on its way
            line = self._text[:m.start()].decode("utf-8", "replace")
            self._text = self._text[m.end():]
            if line == "":
                self._dispatch()
            elif line.startswith(":"):
                with self.lock:
                    self.comments += 1
            else:
                field, _, value = line.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if field == "data":
                    self._cur["data"].append(value)
                elif field in ("id", "event"):
                    self._cur[field] = value

    def _dispatch(self):
        cur, self._cur = self._cur, {"id": None, "event": None, "data": []}
        if cur["id"] is not None:
            self.last_id = cur["id"]  # an id-only block moves it too (the SSE spec)
        if not cur["data"] and cur["event"] is None:
            return
        data = "\n".join(cur["data"])
        try:
            js = json.loads(data) if data else None
        except ValueError:
            js = None
        ev = {"id": cur["id"], "event": cur["event"] or "message", "data": data, "json": js,
              "t": time.monotonic()}
        with self.lock:
            self.events.append(ev)

    def _run(self):
        self.sock.settimeout(0.2)
        self._decode()
        self._parse()
        for _ in range(10_000_000):
            if self._stop.is_set():
                return
            try:
                d = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError as e:
                self.error = repr(e)
                return
            if not d:
                self.eof = True
                return
            self._raw += d
            self._decode()
            self._parse()

    def snapshot(self):
        with self.lock:
            return list(self.events)

    def wait_for(self, pred, timeout=5, count=1):
        """Waits until `count` events satisfy pred; returns them (fewer on timeout)."""
        found = []

        def check():
            nonlocal found
            found = [e for e in self.snapshot() if pred(e)]
            return len(found) >= count
        wait_until(check, timeout, 0.01)
        return found

    def close(self):
        self._stop.set()
        if self.thread is not None:
            self.thread.join(2)
        try:
            self.sock.close()
        except OSError:
            pass


# --------------------------------------------------------------------------------------
# cordon helpers for kill-switch tests (additive: test_proxy.py does not use them)
# --------------------------------------------------------------------------------------

def cordon_restart(cordon, sig=signal.SIGKILL, timeout=10):
    """Stops `cordon` with `sig` (default SIGKILL: no clean shutdown), then starts it again
    on the same config, state and audit dirs. The previous run's logs are kept as *.log.N.
    Returns the exit status of the stopped process."""
    rc = None
    if cordon.proc is not None and cordon.proc.poll() is None:
        cordon.proc.send_signal(sig)
        try:
            rc = cordon.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            cordon.kill()
    elif cordon.proc is not None:
        rc = cordon.proc.returncode
    for f in (getattr(cordon, "stdout", None), getattr(cordon, "stderr", None)):
        if f:
            f.close()
    n = getattr(cordon, "_restarts", 0) + 1
    cordon._restarts = n
    for name in ("stdout.log", "stderr.log"):
        p = cordon.tmp.join(name)
        if os.path.exists(p):
            os.replace(p, f"{p}.{n}")
    if os.path.exists(cordon.ready_path):
        os.unlink(cordon.ready_path)
    cordon.start(timeout)
    return rc


def cordon_cli(cordon, args, timeout=20, env_extra=None):
    """Runs `cordon ARGS` against this instance's admin API (CORDON_ADMIN and
    CORDON_ADMIN_TOKEN_FILE in the environment). Returns CompletedProcess with text output."""
    env = dict(os.environ)
    host, port = cordon.admin_addr
    env["CORDON_ADMIN"] = f"http://{host}:{port}"
    env["CORDON_ADMIN_TOKEN_FILE"] = cordon.token_file
    env.update(env_extra or {})
    return subprocess.run([cordon.bin] + list(args), env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def prometheus_samples(text):
    """{(name, frozenset(labels.items())): value} from Prometheus text exposition."""
    out = {}
    pat = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
    lab = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = pat.match(line)
        if not m:
            continue
        labels = frozenset(lab.findall(m.group(2) or ""))
        try:
            out[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            pass
    return out


def tcp_states(local_port, remote_port=None):
    """[(state name, tx_queue, rx_queue, local port, remote port)] of the IPv4 TCP sockets in
    /proc/net/tcp with this local port (and remote port): a diagnostic for half-closed
    sockets."""
    names = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
             6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
             11: "CLOSING"}
    out = []
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                p = line.split()
                lp = int(p[1].split(":")[1], 16)
                rp = int(p[2].split(":")[1], 16)
                if lp != local_port or (remote_port is not None and rp != remote_port):
                    continue
                tx, rx = (int(x, 16) for x in p[4].split(":"))
                out.append((names.get(int(p[3], 16), p[3]), tx, rx, lp, rp))
    except OSError:
        pass
    return out


def tcp_states_to(remote_port):
    """[(state name, tx_queue, rx_queue, local port, remote port)] of the IPv4 TCP sockets in
    /proc/net/tcp connected to this remote port (e.g. cordon's upstream sockets to an
    origin): shows data still queued in a closed socket."""
    names = {1: "ESTABLISHED", 2: "SYN_SENT", 3: "SYN_RECV", 4: "FIN_WAIT1", 5: "FIN_WAIT2",
             6: "TIME_WAIT", 7: "CLOSE", 8: "CLOSE_WAIT", 9: "LAST_ACK", 10: "LISTEN",
             11: "CLOSING"}
    out = []
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                p = line.split()
                lp = int(p[1].split(":")[1], 16)
                rp = int(p[2].split(":")[1], 16)
                if rp != remote_port:
                    continue
                tx, rx = (int(x, 16) for x in p[4].split(":"))
                out.append((names.get(int(p[3], 16), p[3]), tx, rx, lp, rp))
    except OSError:
        pass
    return out
