#!/usr/bin/env python3
"""Benchmark of recovery: the time to turn the chunks a killed process left into its
profile (read, validate, rebuild with the exit profile's writer, symbolize), per MiB of
chunks. A workload profiled at 10 kHz without a daemon (FLEETPROF_DIR) fills its chunk
file and is SIGKILLed; `fleetprof recover` (the daemon's recovery code, on a file) runs on it
several times. Prints a table and `BENCH recover.ms_per_MiB`.

Usage: bench-recover.py BUILD_DIR
"""
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import figures  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
FLEETPROF = os.path.join(BUILD, "tools", "fleetprof")
TARGET_MIB = 16
RUNS = 5


def used_bytes(path):
    return os.stat(path).st_blocks * 512


def main():
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
        env.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_DIR": tmp,
                    "FLEETPROF_INTERVAL_MS": "0.1"})
        p = subprocess.Popen([WORKLOAD, "threads", "3", "600"], env=env,
                             stdout=subprocess.DEVNULL)
        chunks = os.path.join(tmp, f"fleetprof-{p.pid}.chunks")
        deadline = time.monotonic() + 300
        while not os.path.exists(chunks) or used_bytes(chunks) < TARGET_MIB << 20:
            if time.monotonic() > deadline or p.poll() is not None:
                p.kill()
                print(f"bench-recover: the workload did not fill {TARGET_MIB} MiB of chunks "
                      f"(status {p.poll()})", file=sys.stderr)
                return 1
            time.sleep(0.1)
        p.send_signal(signal.SIGKILL)
        p.wait()

        times, chunk_count, entries = [], None, None
        for i in range(RUNS):
            out = os.path.join(tmp, f"r{i}.json")
            t0 = time.monotonic()
            r = subprocess.run([FLEETPROF, "recover", "-o", out, chunks], capture_output=True,
                               text=True, timeout=600)
            took = time.monotonic() - t0
            if r.returncode != 0:
                print(f"bench-recover: recover failed: {r.stderr}", file=sys.stderr)
                return 1
            m = re.search(r"(\d+) entries in (\d+) chunks", r.stderr)
            if not m:
                print(f"bench-recover: no counts in {r.stderr!r}", file=sys.stderr)
                return 1
            entries, chunk_count = int(m.group(1)), int(m.group(2))
            times.append(took)
        chunk_bytes = 256 << 10  # the runtime's default chunk (FLEETPROF_CHUNK_KB unset)
        mib = chunk_count * chunk_bytes / (1 << 20)
        med = statistics.median(times)
        print(f"{'recovery of a killed process':36} {'value':>12} {'unit':>8}")
        print(f"{'chunks read back':36} {chunk_count:12d} {'chunks':>8}")
        print(f"{'entries':36} {entries:12d} {'entries':>8}")
        print(f"{'chunk data':36} {mib:12.1f} {'MiB':>8}")
        print(f"{'fleetprof recover, median of ' + str(RUNS):36} {med * 1e3:12.0f} {'ms':>8}")
        print(f"{'best':36} {min(times) * 1e3:12.0f} {'ms':>8}")
        return figures.print_figures({"recover.ms_per_MiB": (figures.div(med * 1e3, mib), "ms", 1)})


sys.exit(main())
