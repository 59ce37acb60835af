"""The uncooperative agent of test_run: ignores SIGTERM, leaves a marker in scratch,
double-forks a daemon, and forks short-lived children in a loop until it is killed."""

import os
import signal
import sys
import time

scratch = sys.argv[1]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
with open(os.path.join(scratch, "marker"), "w") as f:
    f.write("still here\n")

if os.fork() == 0:  # the double-forked daemon
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(0.05)
    os._exit(0)

print("ready", flush=True)
for _ in range(100000):  # bounded: about 1000 s at worst, killed long before
    try:
        if os.fork() == 0:
            time.sleep(2)
            os._exit(0)
        os.waitpid(-1, os.WNOHANG)
    except OSError:
        pass
    time.sleep(0.01)
