#!/usr/bin/env python3
"""What one short-lived process pays, stage by stage (issue #31), precisely enough to see a
tenth of a millisecond: bench-gather's churn (part 4) measures the same stages inside a
recorded fleet, where the run-to-run noise of a 2-CPU machine (±0.5-1.5 ms per process) hides
most single steps.

One process is `bench-fleet one 2` (about 2 ms of CPU), exec'd directly by this script, in
five configurations, interleaved round after round (order rotated):
  alone      not profiled;
  loaded     the runtime preloaded, not started;
  started    started with a 1 s interval (no sample in its life);
  sampling   started at 1 kHz, no daemon;
  connected  started at 1 kHz with FLEETPROF_SOCKET: a standalone fleetprofd holds its region
             and builds its exit profile from it.
Each run's CPU (user + system) and minor page faults come from RUSAGE_CHILDREN around its
wait; the daemon's CPU from /proc/PID/stat around each connected run. A step's cost is the
median of its per-round differences (one config minus the one before it); a step whose
median falls below zero is reported as NOT MEASURED (noise larger than the step), and the
benchmark then exits 1.

Usage: bench-process-cost.py BUILD_DIR [ROUNDS]   (default 300; FLEETPROF_BENCH_ROUNDS too)
"""
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import cell, med, print_figures  # noqa: E402
from procs import proc_cpu, stop  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
ROUNDS = int(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FLEETPROF_BENCH_ROUNDS", 300))
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
DAEMON = os.path.join(BUILD, "daemon", "fleetprofd")
WORK = [os.path.join(BUILD, "tests", "workloads", "bench-fleet"), "one", "2"]
CONFIGS = ["alone", "loaded", "started", "sampling", "connected"]
TICK_S = os.sysconf("SC_CLK_TCK")


def env_for(config, sock):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLEETPROF_") and k != "LD_PRELOAD"}
    if config != "alone":
        env["LD_PRELOAD"] = LIB
    if config in ("started", "sampling", "connected"):
        env["FLEETPROF_STARTUP"] = "1"
    if config == "started":
        env["FLEETPROF_INTERVAL_MS"] = "1000"
    if config == "connected":
        env["FLEETPROF_SOCKET"] = sock
    return env


def run(config, sock):
    """One process: (CPU ms, minor faults), or None if it failed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(WORK, env=env_for(config, sock), stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        print(f"FAILED {config}: exit {p.returncode}: {p.stderr.decode()[-300:]}")
        return None
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e3
    return cpu, after.ru_minflt - before.ru_minflt


def main():
    tmp = tempfile.mkdtemp(prefix="bench-process-cost-")
    sock = os.path.join(tmp, "run", "fleetprof.sock")
    log = open(os.path.join(tmp, "daemon.log"), "w")
    daemon = subprocess.Popen([DAEMON, "--foreground", "--socket", sock], stderr=log)
    figures = {}
    try:
        for _ in range(200):
            if os.path.exists(sock) or daemon.poll() is not None:
                break
            time.sleep(0.05)
        if not os.path.exists(sock):
            print(f"FAILED: the daemon did not listen at {sock} (exit {daemon.poll()})")
            return 1
        runs = {c: [] for c in CONFIGS}
        daemon_s = 0.0
        t0 = time.monotonic()
        for r in range(ROUNDS):
            order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
            for c in order:
                d0 = proc_cpu(daemon.pid) if c == "connected" else 0.0
                runs[c].append(run(c, sock))
                if c == "connected":
                    daemon_s += proc_cpu(daemon.pid) - d0
        took = time.monotonic() - t0
        failed = {c: sum(1 for x in v if x is None) for c, v in runs.items()}
        print(f"one short-lived process ({' '.join(os.path.basename(w) for w in WORK)}), "
              f"{ROUNDS} interleaved rounds of 5 configurations, {took:.0f} s; "
              f"{os.cpu_count()} CPUs")
        print(f"   {'config':<10} {'cpu ms':>7} {'faults':>7}   {'step':<34} {'ms':>7} "
              f"{'p25..p75':>15}")
        steps = {}
        for i, c in enumerate(CONFIGS):
            ok = [x for x in runs[c] if x]
            cpu = med([x[0] for x in ok])
            faults = statistics.median([x[1] for x in ok]) if ok else float("nan")
            line = f"   {c:<10} {cell(cpu, '7.3f')} {faults:7.0f}"
            if i:
                base = CONFIGS[i - 1]
                d = [a[0] - b[0] for a, b in zip(runs[c], runs[base]) if a and b]
                steps[c] = med(d)
                q = statistics.quantiles(d, n=4) if len(d) >= 4 else [float("nan")] * 3
                line += f"   {base + ' -> ' + c:<34} {cell(steps[c], '7.3f')} " \
                        f"{q[0]:+.3f}..{q[2]:+.3f}"
            print(line)
        n_connected = len([x for x in runs["connected"] if x])
        print(f"   the daemon's CPU per connected process: "
              f"{daemon_s * 1e3 / max(n_connected, 1):.3f} ms (clock ticks of "
              f"{1000 / TICK_S:.0f} ms, summed over {n_connected} processes)")
        bad = any(failed.values())
        figures["process.load_cpu_ms"] = (float("nan") if bad else steps["loaded"], "ms")
        figures["process.start_cpu_ms"] = (float("nan") if bad else steps["started"], "ms")
        figures["process.connection_cpu_ms"] = (float("nan") if bad else steps["connected"], "ms")
        figures["process.daemon_cpu_ms"] = (
            float("nan") if bad or not n_connected else daemon_s * 1e3 / n_connected, "ms")
        ok = [x for x in runs["connected"] if x]
        figures["process.connected_page_faults"] = (
            float("nan") if bad or not ok else statistics.median([x[1] for x in ok]),
            "faults", 0)
        return print_figures(figures)
    finally:
        stop(daemon)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
