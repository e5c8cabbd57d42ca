#!/usr/bin/env python3
"""Benchmark of the daemon's loop while it recovers a killed fleet (issue #28): 12 children
fill their 64 MiB buffers (`workload flood`, markers as fast as they can), then all are
SIGKILLed at once. Each one's profile is rebuilt from its chunk region; while that goes on, a
user runs `fleetprof status` again and again. Measured: how long each status took to answer
(the CLI's whole run: an upper bound on how long the loop kept it waiting), against the same
command on the same daemon before the kill; the time from the kill until every child's
profile is kept (recovered, or named as evicted); and a capture afterwards, which must hold
all 12 or name the missing.

Prints a table and BENCH daemon.loop_stall_ms_mass_kill (p99 of status's time during the
recovery), daemon.status_ms_before_kill (its median before), daemon.mass_kill_recovery_s and
daemon.mass_kill_in_file (processes in the capture, of 12).

FLEETPROFD=PATH measures another build's daemon (the CLI and workload stay this build's).

Usage: bench-mass-kill.py BUILD_DIR
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import print_figures  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
CLI = os.path.join(BUILD, "tools", "fleetprof")
DAEMON = os.environ.get("FLEETPROFD") or os.path.join(BUILD, "daemon", "fleetprofd")
CHILDREN = 12
FULL_BYTES = 60 << 20  # of a 64 MiB buffer: full, as chunks are whole
FILL_TIMEOUT_S = 300


def status(sock):
    """(ms the command took, its report); the report is None when it got no answer (the
    CLI gives up after 5 s: a daemon that long unresponsive counts that long)."""
    t0 = time.monotonic()
    r = subprocess.run([CLI, "status", "--socket", sock, "--json"], capture_output=True,
                       text=True, timeout=120)
    took = (time.monotonic() - t0) * 1000
    if r.returncode != 0:
        print(f"# status unanswered after {took:.0f} ms: {r.stderr.strip()}")
        return took, None
    return took, json.loads(r.stdout)


def p99(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.99 * (len(values) - 1))))]


def main():
    figures = {}
    with tempfile.TemporaryDirectory(prefix="fpmk-") as tmp:
        os.chmod(tmp, 0o700)
        sock = os.path.join(tmp, "fleetprof.sock")
        log = open(os.path.join(tmp, "daemon.log"), "w")
        daemon = subprocess.Popen([DAEMON, "--foreground", "--socket", sock, "--global-limit",
                                   "1G", "--log-level", "info"], stderr=log)
        kids = []
        try:
            deadline = time.monotonic() + 10
            while not os.path.exists(sock):
                if time.monotonic() > deadline or daemon.poll() is not None:
                    print("bench-mass-kill: the daemon did not start", file=sys.stderr)
                    return 1
                time.sleep(0.02)
            env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
            env.update({"LD_PRELOAD": LIB, "FLEETPROF_SOCKET": sock, "FLEETPROF_STARTUP": "1"})
            for _ in range(CHILDREN):
                kids.append(subprocess.Popen([WORKLOAD, "flood", "600", "1000000"], env=env,
                                             stdout=subprocess.DEVNULL))
            # Full buffers: every child holds most of its 64 MiB.
            deadline = time.monotonic() + FILL_TIMEOUT_S
            while True:
                _, st = status(sock)
                if st is None:
                    continue
                held = {c["pid"]: c["unreleased_bytes"] + c["released_bytes"]
                        for c in st["children"]}
                if len(held) == CHILDREN and min(held.values()) >= FULL_BYTES:
                    break
                if time.monotonic() > deadline or any(k.poll() is not None for k in kids):
                    print(f"bench-mass-kill: the children did not fill their buffers: {held}",
                          file=sys.stderr)
                    return 1
                time.sleep(0.5)
            held_mib = sum(held.values()) / (1 << 20)
            before = [status(sock)[0] for _ in range(15)]

            t_kill = time.monotonic()
            for k in kids:
                k.send_signal(signal.SIGKILL)
            for k in kids:
                k.wait()
            # Done when the daemon said, for each, that it rebuilt the profile or could not.
            during, settled = [], 0
            while settled < CHILDREN:
                during.append(status(sock)[0])
                with open(log.name) as f:
                    text = f.read()
                settled = (text.count("profile recovered from its chunks") +
                           text.count("its chunks could not be read back"))
                if time.monotonic() - t_kill > 600:
                    print(f"bench-mass-kill: {settled} of {CHILDREN} recoveries after 600 s",
                          file=sys.stderr)
                    return 1
            recovery_s = time.monotonic() - t_kill

            out = os.path.join(tmp, "fleet.json")
            r = subprocess.run([CLI, "capture", "--socket", sock, "-o", out], capture_output=True,
                               text=True, timeout=600)
            if r.returncode != 0:
                print(f"bench-mass-kill: capture failed: {r.stderr.strip()}", file=sys.stderr)
                return 1
            with open(out) as f:
                in_file = len(json.load(f).get("processes") or [])
            said = r.stdout + r.stderr
            lost = [line.strip() for line in said.splitlines() if ": lost " in line or line.startswith("lost ")]
        finally:
            for k in kids:
                if k.poll() is None:
                    k.kill()
                    k.wait()
            daemon.terminate()
            daemon.wait(timeout=30)
            log.close()

    print(f"{CHILDREN} children, {held_mib:.0f} MiB of chunks held, SIGKILLed at once "
          f"(daemon {DAEMON})")
    print(f"{'':34} {'median':>8} {'p99':>8} {'max':>8} {'runs':>5}")
    for name, v in (("status before the kill (ms)", before),
                    ("status during the recovery (ms)", during)):
        print(f"{name:34} {statistics.median(v):8.1f} {p99(v):8.1f} {max(v):8.1f} {len(v):5}")
    print(f"all {CHILDREN} profiles kept {recovery_s:.2f} s after the kill; the capture holds "
          f"{in_file} processes{'; ' + '; '.join(lost) if lost else ''}")
    figures["daemon.loop_stall_ms_mass_kill"] = (p99(during), "ms", 1)
    figures["daemon.status_ms_before_kill"] = (statistics.median(before), "ms", 1)
    figures["daemon.mass_kill_recovery_s"] = (recovery_s, "s", 2)
    figures["daemon.mass_kill_in_file"] = (in_file, "processes", 0)
    status_code = print_figures(figures)
    if in_file + len(lost) < CHILDREN:
        print(f"FAILED: {CHILDREN - in_file - len(lost)} children neither in the file nor named; "
              f"capture said:\n{said}")
        return 1
    return status_code


if __name__ == "__main__":
    sys.exit(main())
