#!/usr/bin/env python3
"""The layering check: which room may include which, written down once (issue 20).

Every #include "..." of ours in a room's .hpp/.cpp must name a header of the room itself or of
a room it may include (ALLOWED below), and the pure rooms include no Asio, Beast, OpenSSL or
c-ares. Each rule broken is printed as FILE:LINE: ROOM includes HEADER (ROOM may include: ...),
and the exit status is 1. Run by ctest as "layering: rooms include only lower rooms"; by hand:
    python3 tests/layering.py            (from anywhere; checks the tree it lives in)
    python3 tests/layering.py --graph    (prints the rule as a dependency list)
    python3 tests/layering.py --self-test (the check refuses each kind of forbidden include)
    python3 tests/layering.py --readmes  (each room's README names every file of the room)
docs/architecture.md draws the same picture; change both together.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Rooms, most specific prefix first: a file belongs to the first room whose folder holds it.
ROOMS = [
    ("config/learn", "learn"),
    ("config", "config"),
    ("common", "common"),
    ("dns", "dns"),
    ("proxy/audit", "audit"),
    ("proxy/alerts", "alerts"),
    ("proxy/mcp", "mcp"),
    ("proxy/control", "control"),
    ("proxy/report", "report"),
    ("proxy/inspect", "inspect"),
    ("proxy/data", "data"),
    ("proxy/admin", "admin"),
    ("proxy", "proxy"),
    ("shims", "shims"),
    ("cli", "cli"),
]

# Who may include whom: each room lists the rooms below it that it may use. A room may always
# include its own headers. tests/ and bench/ may include every room.
ALLOWED = {
    "common": set(),
    "config": {"common"},
    "learn": {"config", "common"},
    "dns": {"config", "common"},
    "audit": {"learn", "config", "common"},
    "alerts": {"config", "common"},
    "mcp": {"audit", "config", "common"},
    "control": {"inspect", "mcp", "audit", "alerts", "dns", "config", "common"},
    "report": {"control", "inspect", "mcp", "audit", "config", "common"},
    "inspect": {"config", "common"},
    "data": {"inspect", "mcp", "control", "audit", "alerts", "dns", "config", "common"},
    "admin": {"data", "report", "inspect", "mcp", "control", "audit", "alerts", "learn", "config",
              "common"},
    "proxy": {"admin", "data", "report", "inspect", "mcp", "control", "audit", "alerts", "dns", "config",
              "common"},
    "shims": {"dns", "config", "common"},
    "cli": {"proxy", "admin", "data", "report", "inspect", "mcp", "control", "audit", "alerts", "dns",
            "learn", "config", "common", "shims"},
}

# Pure rooms: no sockets, no event loop, no TLS (STYLE 1: "config includes no Asio").
PURE = {"common", "config", "learn"}
# common/asio.hpp is the Asio vocabulary: common holds it, the pure rooms may not use it.
IO_HEADERS_OF_OURS = {"common/asio.hpp", "common/accept_loop.hpp"}
IO_SYSTEM = re.compile(r"#\s*include\s*<(boost/asio|boost/beast|openssl/|ares)")
OURS = re.compile(r'#\s*include\s*"([^"]+)"')


def room_of(path):
    for prefix, name in ROOMS:
        if path == prefix or path.startswith(prefix + "/"):
            return name
    return None


def sources():
    for prefix, _ in ROOMS:
        top = os.path.join(ROOT, prefix)
        for dirpath, _, files in os.walk(top):
            for f in files:
                if f.endswith((".hpp", ".cpp")):
                    yield os.path.relpath(os.path.join(dirpath, f), ROOT)


def read_tree():
    for rel in sorted(set(sources())):
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            yield rel, f.read().splitlines()


def check(files, exists=lambda header: os.path.exists(os.path.join(ROOT, header))):
    problems = []
    seen = set()
    for rel, lines in files:
        seen.add(rel)
        room = room_of(rel)
        if True:
            for n, line in enumerate(lines, 1):
                m = OURS.match(line.strip())
                if m:
                    header = m.group(1)
                    target = room_of(header)
                    if target is None:
                        continue  # not ours (a system header written with quotes)
                    if not exists(header):
                        problems.append(f"{rel}:{n}: includes {header}, which does not exist")
                        continue
                    if target != room and target not in ALLOWED[room]:
                        may = ", ".join(sorted(ALLOWED[room])) or "nothing of ours"
                        problems.append(f"{rel}:{n}: {room} includes {header} "
                                        f"({room} may include: {may})")
                    elif room in PURE and header in IO_HEADERS_OF_OURS and rel != header:
                        if not (room == "common" and rel.startswith("common/accept_loop")):
                            problems.append(f"{rel}:{n}: {room} is pure and includes {header}")
                    continue
                if room in PURE and IO_SYSTEM.match(line.strip()):
                    if rel not in IO_HEADERS_OF_OURS:
                        problems.append(f"{rel}:{n}: {room} is pure and includes "
                                        f"{line.strip()[len('#include '):]}")
    return problems, len(seen)


def acyclic():
    """The rule itself must be a DAG, or 'lower room' means nothing."""
    state = {}

    def visit(r, path):
        if state.get(r) == 1:
            return path + [r]
        if state.get(r) == 2:
            return None
        state[r] = 1
        for d in sorted(ALLOWED[r]):
            cycle = visit(d, path + [r])
            if cycle:
                return cycle
        state[r] = 2
        return None

    for r in ALLOWED:
        cycle = visit(r, [])
        if cycle:
            return cycle
    return None


def readme_gaps():
    """Each room's README names every file of the room (by its stem: `load`, `wire_codec`), so
    a newcomer who reads only the folder names and READMEs finds every file."""
    gaps = []
    for prefix, _ in ROOMS:
        folder = os.path.join(ROOT, prefix)
        readme = os.path.join(folder, "README.md")
        stems = sorted({f.rsplit(".", 1)[0] for f in os.listdir(folder)
                        if f.endswith((".hpp", ".cpp"))})
        if not os.path.exists(readme):
            gaps.append(f"{prefix}/: no README.md")
            continue
        with open(readme, encoding="utf-8") as f:
            text = f.read()
        for stem in stems:
            if not re.search(r"(?<![\w/])" + re.escape(stem) + r"(?![\w])", text):
                gaps.append(f"{prefix}/README.md does not name {stem} ({prefix}/{stem}.*)")
    return gaps


def self_test():
    """The check catches what it is for: each case must be refused, the last one allowed."""
    cases = [
        ("config/x.cpp", '#include "proxy/control/runtime.hpp"', "config includes proxy/"),
        ("proxy/audit/x.cpp", '#include "proxy/data/relay.hpp"', "audit includes data"),
        ("proxy/control/x.hpp", '#include "proxy/admin/admin_api.hpp"', "control includes admin"),
        ("dns/x.cpp", '#include "proxy/control/runtime.hpp"', "dns includes proxy/"),
        ("shims/x.cpp", '#include "proxy/control/tokens.hpp"', "shims include proxy/"),
        ("config/learn/x.cpp", "#include <boost/asio.hpp>", "a pure room includes Asio"),
        ("common/x.cpp", '#include "config/ip.hpp"', "common includes config"),
        ("config/x.cpp", '#include "common/asio.hpp"', "a pure room uses the Asio header"),
    ]
    failed = 0
    for rel, line, what in cases:
        problems, _ = check([(rel, [line])], exists=lambda h: True)
        if not problems:
            print(f"layering self-test: not caught: {what} ({rel}: {line})")
            failed += 1
    ok, _ = check([("proxy/data/x.cpp", ['#include "proxy/control/runtime.hpp"',
                                          '#include "common/asio.hpp"'])], exists=lambda h: True)
    if ok:
        print("layering self-test: an allowed include was refused: " + "; ".join(ok))
        failed += 1
    print(f"layering self-test: {len(cases) + 1 - failed} of {len(cases) + 1} cases right")
    return 1 if failed else 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    if "--readmes" in sys.argv:
        gaps = readme_gaps()
        for g in gaps:
            print(g)
        print(f"layering: {len(gaps)} files missing from their room's README" if gaps else
              f"layering: every file of the {len(ROOMS)} rooms is named in its README")
        return 1 if gaps else 0
    if "--graph" in sys.argv:
        for room in ALLOWED:
            print(f"{room:8} -> {', '.join(sorted(ALLOWED[room])) or '(nothing of ours)'}")
        return 0
    cycle = acyclic()
    if cycle:
        print("layering: the rule has a cycle: " + " -> ".join(cycle))
        return 1
    problems, files = check(read_tree())
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} forbidden includes in {files} files")
        return 1
    print(f"layering: {files} files, every include points to the room itself or a lower room")
    return 0


if __name__ == "__main__":
    sys.exit(main())
