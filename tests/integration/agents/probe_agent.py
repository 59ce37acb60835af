"""The cooperative-but-curious agent of test_run: tries everything a sandboxed agent might
try and prints one JSON object of what worked. Runs inside `cordon run`.

argv: HOST_PORT (a TCP server on the host's loopback), DNS_PORT (a raw UDP DNS server on
the host's loopback), ORIGIN_PORT (allowed.test / denied.test are served there), an
outside path (a writable directory of the host), the scratch dir."""

import json
import os
import socket
import struct
import sys
import urllib.error
import urllib.request

host_port, dns_port, origin_port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
outside, scratch, unix_path = sys.argv[4], sys.argv[5], sys.argv[6]
out = {}


def attempt(name, fn):
    try:
        out[name] = {"ok": True, "value": fn()}
    except Exception as e:  # noqa: BLE001: every failure is a result here
        out[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}


def write(path):
    with open(path, "w") as f:
        f.write("agent was here\n")
    return path


attempt("write_etc", lambda: write("/etc/cordon-run-test"))
attempt("write_outside", lambda: write(os.path.join(outside, "escaped")))
attempt("write_tmp", lambda: write("/tmp/cordon-run-test"))
attempt("write_proc_comm", lambda: write("/proc/self/comm"))  # writable proc: Landlock's
attempt("write_scratch", lambda: write(os.path.join(scratch, "out.txt")))
attempt("mkdir_scratch", lambda: os.makedirs(os.path.join(scratch, "sub/dir")) or
        write(os.path.join(scratch, "sub/dir/deep.txt")))


def tcp_direct():
    s = socket.create_connection(("127.0.0.1", host_port), timeout=2)
    s.close()
    return "connected"


attempt("tcp_host_loopback", tcp_direct)


def udp_dns():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.5)
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in "allowed.test".split(".")) + b"\0"
    q += struct.pack(">HH", 1, 1)
    s.sendto(q, ("127.0.0.1", dns_port))
    data, _ = s.recvfrom(4096)
    return len(data)


attempt("udp_dns_direct", udp_dns)


def unix_connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(unix_path)
    s.close()
    return "connected"


attempt("unix_host_socket", unix_connect)


def unshare_user():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return "unshared"


attempt("unshare_user", unshare_user)


def fetch(host):
    try:
        with urllib.request.urlopen(f"http://{host}:{origin_port}/hello", timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


attempt("proxy_allowed", lambda: fetch("allowed.test"))
attempt("proxy_denied", lambda: fetch("denied.test"))
attempt("resolve_allowed",
        lambda: sorted({a[4][0] for a in socket.getaddrinfo("allowed.test", 80,
                                                            socket.AF_INET)}))
attempt("resolve_denied",
        lambda: sorted({a[4][0] for a in socket.getaddrinfo("denied.test", 80,
                                                            socket.AF_INET)}))


def dns_tcp(name):
    """(rcode, answer count) of an A query over TCP to the sandbox's resolver."""
    q = struct.pack(">HHHHHH", 0x4321, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    q += struct.pack(">HH", 1, 1)
    s = socket.create_connection(("127.0.0.1", 53), timeout=5)
    s.sendall(struct.pack(">H", len(q)) + q)
    data = b""
    while len(data) < 2 or len(data) < 2 + struct.unpack(">H", data[:2])[0]:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    flags, _, ancount = struct.unpack(">HHH", data[4:10])
    return [flags & 0xF, ancount]


attempt("dns_tcp_allowed", lambda: dns_tcp("allowed.test"))
attempt("dns_tcp_denied", lambda: dns_tcp("denied.test"))
attempt("identity_file", lambda: open(os.path.join(scratch, "identity.token")).read().strip())
attempt("hostname", socket.gethostname)
attempt("pid", os.getpid)
attempt("caps", lambda: [l.split()[1] for l in open("/proc/self/status")
                         if l.startswith(("CapEff", "CapPrm", "CapBnd"))])
attempt("no_new_privs", lambda: [l.split()[1] for l in open("/proc/self/status")
                                 if l.startswith("NoNewPrivs")][0])
out["env"] = dict(os.environ)
print(json.dumps(out))
