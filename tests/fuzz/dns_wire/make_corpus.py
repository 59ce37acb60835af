#!/usr/bin/env python3
"""Writes the dns_wire seed corpus (corpus/): real queries and answers built by hand as
dig sends and upstreams return them (EDNS OPT with a cookie, compression, CNAME chains),
and malformed ones (loops, bad pointers, long labels and names, lying counts, truncation).
Run from this directory; the files are committed, this only documents how they were made."""
import os
import struct

T = dict(A=1, NS=2, CNAME=5, SOA=6, TXT=16, AAAA=28, OPT=41, SVCB=64, HTTPS=65, ANY=255)


def name(n):
    out = b""
    for label in [l for l in n.split(".") if l]:
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def header(id_, flags, qd=1, an=0, ns=0, ar=0):
    return struct.pack("!HHHHHH", id_, flags, qd, an, ns, ar)


def question(n, t, c=1):
    return name(n) + struct.pack("!HH", T.get(t, t) if isinstance(t, str) else t, c)


def opt(size=1232, do=False, options=b"", version=0):
    ttl = (version << 16) | (0x8000 if do else 0)
    return b"\0" + struct.pack("!HHIH", 41, size, ttl, len(options)) + options


def option(code, data):
    return struct.pack("!HH", code, len(data)) + data


def rr(nm, t, ttl, rdata, c=1):
    nb = nm if isinstance(nm, bytes) else name(nm)
    return nb + struct.pack("!HHIH", T[t], c, ttl, len(rdata)) + rdata


COOKIE = option(10, bytes.fromhex("a1b2c3d4e5f60718"))
RD = 0x0100
RESP = 0x8180  # QR RD RA

files = {}


def query(fname, n, t, edns=True, flags=RD, **kw):
    files[fname] = header(0x1234, flags, ar=1 if edns else 0) + question(n, t) + (
        opt(**kw) if edns else b"")


query("q_a_dig_cookie", "example.com", "A", options=COOKIE)
query("q_aaaa_no_edns", "www.example.org", "AAAA", edns=False)
query("q_https_do", "example.com", "HTTPS", do=True, options=COOKIE)
query("q_svcb_underscore", "_dns.resolver.arpa", "SVCB")
query("q_txt_dmarc", "_dmarc.example.com", "TXT")
query("q_any", "example.com", "ANY")
query("q_root_ns", "", "NS")
query("q_mixed_case", "WwW.ExAmPlE.CoM", "A")
query("q_idn_alabel", "xn--bcher-kva.example", "A")
query("q_session_option", "pypi.org", "A", options=option(65001, b"tok_0123456789abcdef"))

# Answers (compression: 0xc00c is the question name at offset 12).
q = question("www.example.com", "A")
cdn = name("cdn.example.net")
off_cdn = 12 + len(q) + 12  # rdata of the first CNAME
edge_rdata = b"\x04edge" + struct.pack("!H", 0xC000 | (off_cdn + 4))  # edge.example.net
chain = rr(b"\xc0\x0c", "CNAME", 300, cdn)
off_edge = 12 + len(q) + len(chain) + 12
chain += rr(struct.pack("!H", 0xC000 | off_cdn), "CNAME", 60, edge_rdata)
chain += rr(struct.pack("!H", 0xC000 | off_edge), "A", 20, bytes([93, 184, 216, 34]))
files["a_cname_chain_compressed"] = header(0x1234, RESP, an=3, ar=1) + q + chain + opt()
q6 = question("example.com", "AAAA")
soa = name("ns1.example.com") + name("hostmaster.example.com") + struct.pack(
    "!IIIII", 2024010101, 7200, 3600, 1209600, 300)
files["a_aaaa_and_soa"] = header(7, RESP, an=1, ns=1) + q6 + rr(
    b"\xc0\x0c", "AAAA", 3600, bytes(15) + b"\x01") + rr(b"\xc0\x0c", "SOA", 300, soa)
qh = question("example.com", "HTTPS")
files["a_https"] = header(8, RESP, an=1, ar=1) + qh + rr(
    b"\xc0\x0c", "HTTPS", 300, b"\x00\x01\x00" + b"\x00\x01\x00\x03\x02h2") + opt(do=True)

# Malformed.
base = header(1, RD)
files["m_compression_loop_question"] = base + b"\xc0\x0c" + struct.pack("!HH", 1, 1)
a_loop = header(2, RESP, an=1) + q
x = len(a_loop)
files["m_compression_loop_answer"] = a_loop + b"\x01a" + struct.pack("!H", 0xC000 | x) + \
    struct.pack("!HHIH", 1, 1, 60, 4) + bytes(4)
files["m_pointer_past_end"] = header(3, RESP, an=1) + q + b"\xc3\xff" + struct.pack(
    "!HHIH", 1, 1, 60, 4) + bytes(4)
files["m_pointer_forward"] = base + b"\x03www\xc0\x20" + b"\x00" * 16 + b"\x07example\x00"
files["m_pointer_into_header"] = base + b"\xc0\x02" + struct.pack("!HH", 1, 1)
files["m_label_64"] = base + b"\x40" + b"a" * 64 + b"\x00" + struct.pack("!HH", 1, 1)
files["m_name_256"] = base + (b"\x3f" + b"a" * 63) * 4 + b"\x00" + struct.pack("!HH", 1, 1)
files["m_counts_lie_answer"] = header(4, RESP, an=65535) + q + rr(b"\xc0\x0c", "A", 1, bytes(4))
files["m_truncated_header"] = header(6, RD)[:7]
files["m_truncated_question"] = header(6, RD) + name("example.com")[:-2]
files["m_two_opt"] = header(10, RD, ar=2) + question("example.com", "A") + opt() + opt()
files["m_opt_option_overrun"] = header(11, RD, ar=1) + question("example.com", "A") + \
    b"\0" + struct.pack("!HHIH", 41, 1232, 0, 6) + struct.pack("!HH", 10, 40) + b"ab"
files["m_trailing_garbage"] = files["q_a_dig_cookie"] + b"\xde\xad"
files["m_qr_set_query"] = header(12, 0x8100) + question("example.com", "A")
files["m_bad_byte_in_name"] = base + b"\x04a*b.\x03com\x00" + struct.pack("!HH", 1, 1)
files["m_edns_version_1"] = header(14, RD, ar=1) + question("example.com", "A") + opt(version=1)

os.makedirs("corpus", exist_ok=True)
for fname, data in files.items():
    with open(os.path.join("corpus", fname), "wb") as f:
        f.write(data)
print(len(files), "files")
# Crashes found by fuzzing join the corpus beside these: crash-* files are kept as found.
