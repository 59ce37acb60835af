"""The programs test_firewall.py runs inside its network namespaces (via `ip netns exec`).
Standard library only. Each command prints one JSON line and exits 0.

  servers DIR                    the "internet": TCP echo :7000, UDP echo :7001 and :443
                                 (QUIC's port), HTTP :8080 (IPv4 and IPv6); every UDP
                                 datagram's source and text is appended to DIR/udp.log;
                                 writes DIR/ready when listening; runs until killed
  tcp HOST PORT                  connect, send, read the echo -> {"result": ok|refused|
                                 timeout|error, "seconds": t}
  open HOST PORT                 connect only -> {"result": ...}
  udp HOST PORT [MARK]           one datagram (MARK, default udp-ping), wait 1 s for the echo
                                 -> {"result": ok|..., "errno": "EHOSTUNREACH"|..., "seconds"}
  connect PROXY PORT AUTH TARGET CONNECT through the proxy (AUTH user:pass), then echo
  dns HOST PORT NAME             one UDP DNS query -> {"result": ok, "rcode": N} or timeout
  spoof SRC DST PORT MARK [SPORT] a raw UDP datagram with a forged IPv4 source (and source
                                 port, default 40000)
  flow HOST PORT LPORT OTHER SECS  UDP from LPORT to HOST:PORT, wait 1 s for the answer, print
                                 {"ready": answered}; then for SECS print what LPORT and
                                 OTHER (a port with no flow) receive -> {"result": "ok",
                                 "got": [[port, source, sport, text], ...]}
  nd DEV TARGET                  an IPv6 neighbour solicitation for TARGET, multicast on DEV
                                 (from --src, e.g. a link-local address), wait 1 s for the
                                 advertisement -> {"result": ok|timeout}

--src ADDR before tcp, open, udp, connect or dns binds that source address first (an IPv6
link-local one as fe80::2%DEV).
"""

import errno

import base64
import http.server
import json
import os
import socket
import socketserver
import struct
import sys
import threading
import time


def out(**kw):
    print(json.dumps(kw), flush=True)


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def classify(e):
    if isinstance(e, socket.timeout):
        return "timeout"
    if isinstance(e, ConnectionRefusedError):
        return "refused"
    return "error"


def cmd_servers(d):
    def tcp_echo():
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::", 7000))
        s.listen(64)
        while True:
            c, _ = s.accept()
            threading.Thread(target=echo_conn, args=(c,), daemon=True).start()

    def echo_conn(c):
        with c:
            c.settimeout(10)
            try:
                while True:
                    b = c.recv(4096)
                    if not b:
                        return
                    c.sendall(b)
            except OSError:
                return

    def udp_echo(port):
        udp = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        udp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        udp.bind(("::", port))
        return udp

    udps = [udp_echo(7001), udp_echo(443)]

    def udp_serve(udp):
        while True:
            b, peer = udp.recvfrom(4096)
            with open(os.path.join(d, "udp.log"), "a") as f:
                f.write(f"{peer[0]} {b[:64].decode(errors='replace')}\n")
            udp.sendto(b, peer)

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            body = b"hello from the internet\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
        address_family = socket.AF_INET6
        daemon_threads = True

        def server_bind(self):
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            super().server_bind()

    httpd = S(("::", 8080), H)
    threading.Thread(target=tcp_echo, daemon=True).start()
    for u in udps:
        threading.Thread(target=udp_serve, args=(u,), daemon=True).start()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    time.sleep(0.2)
    open(os.path.join(d, "ready"), "w").close()
    while True:
        time.sleep(3600)


SRC = None  # --src


def dial(host, port):
    if not SRC:
        return socket.create_connection((host, int(port)), timeout=2)
    ai = socket.getaddrinfo(host, int(port), family(host), socket.SOCK_STREAM)[0]
    s = socket.socket(ai[0], socket.SOCK_STREAM)
    try:
        s.settimeout(2)
        s.bind(socket.getaddrinfo(SRC, 0, ai[0], socket.SOCK_STREAM)[0][4])  # keeps %DEV
        s.connect(ai[4])
        return s
    except BaseException:
        s.close()
        raise


def cmd_tcp(host, port):
    t0 = time.monotonic()
    try:
        with dial(host, port) as s:
            s.settimeout(2)
            s.sendall(b"ping\n")
            ok = s.recv(16) == b"ping\n"
            out(result="ok" if ok else "error", seconds=time.monotonic() - t0)
    except OSError as e:
        out(result=classify(e), error=str(e), errno=errno.errorcode.get(e.errno or 0, ""),
            seconds=time.monotonic() - t0)


def cmd_open(host, port):
    t0 = time.monotonic()
    try:
        dial(host, port).close()
        out(result="ok", seconds=time.monotonic() - t0)
    except OSError as e:
        out(result=classify(e), error=str(e), seconds=time.monotonic() - t0)


def cmd_udp(host, port, mark="udp-ping"):
    t0 = time.monotonic()
    try:
        ai = socket.getaddrinfo(host, int(port), family(host), socket.SOCK_DGRAM)[0]
        s = socket.socket(ai[0], socket.SOCK_DGRAM)
        s.settimeout(1)
        if SRC:
            s.bind(socket.getaddrinfo(SRC, 0, ai[0], socket.SOCK_DGRAM)[0][4])
        s.connect(ai[4])
        s.send(mark.encode())
        ok = s.recv(64) == mark.encode()
        out(result="ok" if ok else "error", seconds=time.monotonic() - t0)
    except OSError as e:
        out(result=classify(e), error=str(e), errno=errno.errorcode.get(e.errno or 0, ""),
            seconds=time.monotonic() - t0)


def cmd_connect(proxy, port, auth, target):
    t0 = time.monotonic()
    try:
        with dial(proxy, port) as s:
            s.settimeout(3)
            cred = base64.b64encode(auth.encode()).decode()
            s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
                      f"Proxy-Authorization: Basic {cred}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                b = s.recv(4096)
                if not b:
                    break
                head += b
            status = head.split(b" ", 2)[1].decode() if head.count(b" ") >= 2 else ""
            if status != "200":
                out(result="status", status=status)
                return
            s.sendall(b"through cordon\n")
            got = s.recv(64)
            out(result="ok" if got == b"through cordon\n" else "error",
                seconds=time.monotonic() - t0)
    except OSError as e:
        out(result=classify(e), error=str(e), seconds=time.monotonic() - t0)


def cmd_dns(host, port, name):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack(">HH", 1, 1)
    s = socket.socket(family(host), socket.SOCK_DGRAM)
    s.settimeout(1.5)
    try:
        if SRC:
            s.bind(socket.getaddrinfo(SRC, 0, family(host), socket.SOCK_DGRAM)[0][4])
        s.sendto(q, (host, int(port)))
        r, _ = s.recvfrom(4096)
        out(result="ok", rcode=r[3] & 0x0F, id=struct.unpack(">H", r[:2])[0])
    except OSError as e:
        out(result=classify(e), error=str(e))


def checksum(b):
    if len(b) % 2:
        b += b"\x00"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def cmd_spoof(src, dst, port, mark, sport="40000"):
    payload = mark.encode()
    udp = struct.pack("!HHHH", int(sport), int(port), 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0x4242, 0, 64,
                      socket.IPPROTO_UDP, 0, socket.inet_aton(src), socket.inet_aton(dst))
    hdr = hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.sendto(hdr + udp, (dst, 0))
    out(result="sent")


def cmd_nd(dev, target):
    t = socket.inet_pton(socket.AF_INET6, target)
    group = "ff02::1:ff" + t[13:14].hex() + ":" + t[14:16].hex()  # solicited-node
    with open(f"/sys/class/net/{dev}/address") as f:
        mac = bytes.fromhex(f.read().strip().replace(":", ""))
    # type 135, code 0, checksum (the kernel's), reserved, target, source link-layer option
    ns = struct.pack("!BBHI", 135, 0, 0, 0) + t + bytes([1, 1]) + mac
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
    if SRC:
        s.bind(socket.getaddrinfo(SRC, 0, socket.AF_INET6, socket.SOCK_DGRAM)[0][4])
    s.sendto(ns, socket.getaddrinfo(f"{group}%{dev}", 0, socket.AF_INET6,
                                    socket.SOCK_DGRAM)[0][4])
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            b = s.recv(512)
        except socket.timeout:
            break
        if len(b) >= 24 and b[0] == 136 and b[8:24] == t:
            out(result="ok")
            return
    out(result="timeout")


def cmd_flow(host, port, lport, other, secs):
    socks = []
    for p in (lport, other):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", int(p)))
        s.settimeout(0.05)
        socks.append(s)
    socks[0].sendto(b"flow-query", (host, int(port)))
    got = []

    def drain(until):
        while time.monotonic() < until:
            for s in socks:
                try:
                    d, a = s.recvfrom(512)
                    got.append([s.getsockname()[1], a[0], a[1], d.decode(errors="replace")])
                except OSError:
                    pass

    t0 = time.monotonic()
    while not got and time.monotonic() - t0 < 1:
        drain(time.monotonic() + 0.05)
    print(json.dumps({"ready": bool(got)}), flush=True)
    drain(time.monotonic() + float(secs))
    out(result="ok", got=got)


if __name__ == "__main__":
    cmds = {"servers": cmd_servers, "tcp": cmd_tcp, "open": cmd_open, "udp": cmd_udp, "connect": cmd_connect,
            "dns": cmd_dns, "spoof": cmd_spoof, "nd": cmd_nd, "flow": cmd_flow}
    argv = sys.argv[1:]
    if argv[0] == "--src":
        SRC, argv = argv[1], argv[2:]
    cmds[argv[0]](*argv[1:])
