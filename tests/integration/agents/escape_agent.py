"""The uncooperative agent of test_containment: each subcommand tries one way out of
`cordon run` and prints one JSON object saying what worked. Runs inside the sandbox.

  tiocsti TEXT            push TEXT into the controlling terminal's input (TIOCSTI), also
                          through /dev/tty and every inherited descriptor; TIOCLINUX
  stdio                   overwrite stdin's file and truncate stdout's through /proc/self/fd
  mounts DIR              look for host processes, devices and sysfs below DIR (a chroot
                          with proc, sys and dev mounted) and in the sandbox's own /sys
  node PATH               open a device node PATH (made by the test with mknod)
  families [DGRAM_PATH]   socket(2) with every address family that matters, socketpairs
                          (a datagram pair sending to the host socket DGRAM_PATH)
  dns-drip                hold a DNS-over-TCP connection to the relay with a byte a second
  read PATH...            read each PATH (the admin token, wherever it is; a directory is
                          listed)
"""

import ctypes
import fcntl
import json
import os
import socket
import sys
import termios

out = {}


def attempt(name, fn):
    try:
        out[name] = {"ok": True, "value": fn()}
    except Exception as e:  # noqa: BLE001: every failure is a result here
        out[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}


def tiocsti(text):
    def push(fd):
        for c in text:
            fcntl.ioctl(fd, termios.TIOCSTI, c.encode())
        return "injected"

    for fd in (0, 1, 2):
        attempt(f"tiocsti_fd{fd}", lambda fd=fd: push(fd))

    def via_dev_tty():
        fd = os.open("/dev/tty", os.O_RDWR)
        try:
            return push(fd)
        finally:
            os.close(fd)

    attempt("tiocsti_dev_tty", via_dev_tty)
    TIOCLINUX = 0x541C
    # TIOCLINUX subcode 2 (set selection) / 3 (paste): arg is a buffer whose first byte is
    # the subcode.
    attempt("tioclinux_paste", lambda: fcntl.ioctl(0, TIOCLINUX, bytes([3])) and "pasted")
    attempt("isatty", lambda: [os.isatty(fd) for fd in (0, 1, 2)])
    attempt("sid_is_own", lambda: os.getsid(0) == os.getpid())


def stdio():
    # Read stdin first (what the operator gave), then try to write through it.
    attempt("stdin_text", lambda: sys.stdin.readline().strip())

    def overwrite(path, mode):
        with open(path, mode) as f:
            f.write("AGENT WAS HERE\n")
        return "written"

    attempt("overwrite_stdin", lambda: overwrite("/proc/self/fd/0", "w"))
    attempt("truncate_stdout", lambda: overwrite("/proc/self/fd/1", "w"))
    attempt("truncate_stderr", lambda: overwrite("/proc/self/fd/2", "w"))
    attempt("dev_stdout", lambda: overwrite("/dev/stdout", "w"))
    attempt("stdout_is", lambda: os.readlink("/proc/self/fd/1"))


def mounts(root):
    def host_pids():
        d = os.path.join(root, "proc")
        return sorted(int(x) for x in os.listdir(d) if x.isdigit())

    attempt("chroot_proc_pids", host_pids)
    attempt("own_proc_pids", lambda: sorted(int(x) for x in os.listdir("/proc") if x.isdigit()))
    attempt("chroot_sys", lambda: sorted(os.listdir(os.path.join(root, "sys"))))
    attempt("own_sys", lambda: sorted(os.listdir("/sys")))

    def open_devices():
        opened = []
        dev = os.path.join(root, "dev")
        for name in sorted(os.listdir(dev))[:400]:
            p = os.path.join(dev, name)
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
            except OSError:
                continue
            if not os.path.isdir(p):
                opened.append(name)
            os.close(fd)
        return opened

    attempt("chroot_dev_opened", open_devices)

    def kvm():
        fd = os.open(os.path.join(root, "dev", "kvm"), os.O_RDWR)
        try:
            KVM_CREATE_VM = 0xAE01
            vm = fcntl.ioctl(fd, KVM_CREATE_VM, 0)
            return f"vm fd {vm}"
        finally:
            os.close(fd)

    attempt("kvm_create_vm", kvm)


def node(path):
    def read():
        with open(path, "rb", buffering=0) as f:
            return len(f.read(16))

    attempt("read_node", read)


def families(host_dgram=None):
    libc = ctypes.CDLL(None, use_errno=True)

    def sock(family, type_, proto=0):
        fd = libc.socket(family, type_, proto)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        os.close(fd)
        return "created"

    AF_VSOCK, AF_ALG, AF_PACKET, AF_NETLINK, AF_KEY, AF_TIPC, AF_RDS, AF_XDP = (
        40, 38, 17, 16, 15, 30, 21, 44)
    attempt("inet_tcp", lambda: sock(socket.AF_INET, socket.SOCK_STREAM))
    attempt("inet6_udp", lambda: sock(socket.AF_INET6, socket.SOCK_DGRAM))
    attempt("netlink_route", lambda: sock(AF_NETLINK, socket.SOCK_RAW, 0))
    attempt("netlink_audit", lambda: sock(AF_NETLINK, socket.SOCK_RAW, 9))
    attempt("netlink_uevent", lambda: sock(AF_NETLINK, socket.SOCK_DGRAM, 15))
    attempt("vsock_stream", lambda: sock(AF_VSOCK, socket.SOCK_STREAM))
    attempt("vsock_dgram", lambda: sock(AF_VSOCK, socket.SOCK_DGRAM))
    attempt("alg", lambda: sock(AF_ALG, socket.SOCK_SEQPACKET))
    attempt("packet", lambda: sock(AF_PACKET, socket.SOCK_RAW))
    attempt("key", lambda: sock(AF_KEY, socket.SOCK_RAW, 2))
    attempt("tipc", lambda: sock(AF_TIPC, socket.SOCK_RDM))
    attempt("rds", lambda: sock(AF_RDS, socket.SOCK_SEQPACKET))
    attempt("xdp", lambda: sock(AF_XDP, socket.SOCK_RAW))
    # The high bits of the (int) domain argument must not hide a family from the filter.
    attempt("vsock_high_bits", lambda: sock(AF_VSOCK | (1 << 32), socket.SOCK_STREAM))
    attempt("unix_socket", lambda: sock(socket.AF_UNIX, socket.SOCK_STREAM))

    def pair():
        a, b = socket.socketpair()
        a.sendall(b"x")
        r = b.recv(1)
        a.close()
        b.close()
        return r.decode()

    attempt("unix_socketpair", pair)
    attempt("seqpacket_pair", lambda: [x.close() for x in socket.socketpair(
        socket.AF_UNIX, socket.SOCK_SEQPACKET)] and "made")

    def dgram_pair_to(path):
        # A datagram pair is not bound to its peer: sendto() reaches a host socket by path.
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            a.sendto(b"forged log line", path)
            return "sent"
        finally:
            a.close()
            b.close()

    if host_dgram:
        attempt("dgram_pair_to_host", lambda: dgram_pair_to(host_dgram))

    def userfaultfd():
        fd = libc.syscall(323, 0)  # x86-64 userfaultfd(0)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        os.close(fd)
        return "made"

    attempt("userfaultfd", userfaultfd)


def dns_drip():
    # Holds a DNS-over-TCP connection to the relay open by dripping one byte a second.
    import time
    s = socket.create_connection(("127.0.0.1", 53), timeout=2)
    t0 = time.monotonic()
    s.settimeout(1)
    closed_after = None
    s.send(b"\x00\x64")  # a 100-byte query announced, then never finished
    for _ in range(30):
        try:
            s.send(b"\x00")
            if s.recv(1) == b"":
                closed_after = time.monotonic() - t0
                break
        except socket.timeout:
            continue
        except OSError:
            closed_after = time.monotonic() - t0
            break
    s.close()
    out["dns_drip_closed_after"] = closed_after


def read_paths(paths):
    def read(p):
        if os.path.isdir(p):
            return sorted(os.listdir(p))
        with open(p, "rb") as f:
            return f.read(4096).decode(errors="replace")

    for i, p in enumerate(paths):
        attempt(f"read{i}", lambda p=p: read(p))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "tiocsti":
        tiocsti(args[0])
    elif cmd == "stdio":
        stdio()
    elif cmd == "mounts":
        mounts(args[0])
    elif cmd == "node":
        node(args[0])
    elif cmd == "families":
        families(args[0] if args else None)
    elif cmd == "dns-drip":
        dns_drip()
    elif cmd == "read":
        read_paths(args)
    else:
        print(f"unknown subcommand {cmd}", file=sys.stderr)
        return 2
    # One line, so that a test on a terminal can find it among the echo.
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
