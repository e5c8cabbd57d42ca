#!/usr/bin/env python3
"""Runtime overhead benchmark: the cost of profiling a CPU-bound program at 1 kHz.

Runs tests/workloads/bench-cpu (4 threads, recursion depth 30, built -O2 WITHOUT frame
pointers, a fixed amount of work) unprofiled and profiled with FLEETPROF_STACKWALK=dwarf,
fp and copy (LD_PRELOAD=libfleetprof.so FLEETPROF_STARTUP=1 FLEETPROF_OUTPUT=... on tmpfs).
Configurations are interleaved, REPS times each (order rotated every repetition), so slow
drift on the shared machine hits all of them alike.

Per run: CPU = user + sys of the whole process from wait4 (sampler, signal handlers and the
exit profile included), wall = spawn to reap. The workload also prints its own CPU and wall
at the end of the work, before exit handlers run; the difference is the exit profile (plus
process teardown). Ratios are medians of per-repetition ratios (profiled run / the same
repetition's unprofiled run). Each profile is parsed to report the sampling rate per worker
thread and the share of worker samples that show the full recursion (>= DEPTH-1 bc_recurse
frames): low overhead with no samples would mean nothing.

Then how long a program takes to end at a 1 s interval (`workload idle 0.05`, and SIGTERM
to a spinning one), against a 1 ms interval: the exit path and the SIGTERM handler wake the
sampler rather than wait up to a second for its next tick.

Last, what an idle thread costs: `workload pool 64 0.3` (64 threads that wait for work that
never comes) alone and preloaded (dwarf, 1 kHz), REPS interleaved runs; the difference in
peak RSS and in CPU, divided by the 64 threads (child.idle_thread_rss_kB,
child.idle_thread_cpu_us): what the runtime makes a thread pay that it never samples.

Output: a table, then `BENCH child.overhead_{cpu,wall}_ratio_{dwarf,fp,copy} <r> ratio`,
`BENCH child.{exit_wall_ms_interval_1ms,exit_wall_ms_interval_1s,sigterm_wall_ms_interval_1s}`
and `BENCH child.idle_thread_{rss_kB,cpu_us}`. A
profiled configuration whose run fails (crash, non-zero exit, no profile) gets a FAILED line
saying why and a `NOT MEASURED` line instead of its figures, and the benchmark exits 1; the
others still run. Measures, never asserts on time.

Usage: bench-runtime.py BUILD_DIR [REPS]     (REPS defaults to 5; FLEETPROF_BENCH_REPS too)
"""
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import cell, div, finite, med, print_figures  # noqa: E402
from procs import proc_cpu  # noqa: E402

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
REPS = int(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FLEETPROF_BENCH_REPS", "5"))
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "bench-cpu")
IDLE_WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
THREADS, DEPTH, ROUNDS, LEAF = 4, 30, 1600, 200000
TIMEOUT_S = 120
MODES = ["dwarf", "fp", "copy"]
CONFIGS = ["none"] + MODES


def run_once(tmp, mode, rep):
    """One run of the workload. Returns a dict of measurements, or {'error': why}."""
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("FLEETPROF_") or key == "LD_PRELOAD":
            del env[key]
    out = None
    if mode != "none":
        out = os.path.join(tmp, f"p-{mode}-{rep}.json")
        env.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_OUTPUT": out,
                    "FLEETPROF_STACKWALK": mode, "FLEETPROF_INTERVAL_MS": "1"})
    argv = [WORKLOAD, str(THREADS), str(DEPTH), str(ROUNDS), str(LEAF)]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    while True:
        pid, status, rusage = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            break
        if time.monotonic() - t0 > TIMEOUT_S:
            p.kill()
            os.wait4(p.pid, 0)
            p.stdout.close()
            p.stderr.close()
            return {"error": f"timed out after {TIMEOUT_S} s"}
        time.sleep(0.002)
    wall = time.monotonic() - t0
    stdout = p.stdout.read().decode(errors="replace")
    stderr = p.stderr.read().decode(errors="replace")
    p.stdout.close()
    p.stderr.close()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return {"error": f"killed by {signal.Signals(sig).name}"
                         + (f"; stderr: {stderr.strip()[:200]}" if stderr.strip() else "")}
    if os.WEXITSTATUS(status) != 0:
        return {"error": f"exit status {os.WEXITSTATUS(status)}; stderr: {stderr.strip()[:200]}"}
    fields = {}
    for word in stdout.split():
        if "=" in word:
            k, v = word.split("=", 1)
            fields[k] = v
    if "work_cpu_s" not in fields:
        return {"error": f"no result line from the workload: {stdout[:200]!r}"}
    r = {"cpu": rusage.ru_utime + rusage.ru_stime, "wall": wall,
         "work_cpu": float(fields["work_cpu_s"]), "work_wall": float(fields["work_wall_s"])}
    if out:
        if not os.path.exists(out):
            return {"error": "no profile written"}
        try:
            r.update(profile_stats(out, r["work_wall"]))
        except (ValueError, KeyError, IndexError) as e:
            return {"error": f"unreadable profile: {e}"}
        os.unlink(out)
    return r


def preloaded_env(tmp, interval_ms):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLEETPROF_") and k != "LD_PRELOAD"}
    env.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1",
                "FLEETPROF_OUTPUT": os.path.join(tmp, "exit-%p.json"),
                "FLEETPROF_INTERVAL_MS": interval_ms})
    return env


def exit_latency_once(tmp, interval_ms, sigterm):
    """Wall seconds from the end of a program's work to its reaping: a 0.05 s sleep then
    exit (the time past 0.05 s), or from SIGTERM to reaping (a spinning program, once it used
    0.05 s of CPU). At a 1 s interval the sampler sleeps up to 1 s between ticks: the exit
    path and the SIGTERM handler must wake it. None if the run failed."""
    if sigterm:
        p = subprocess.Popen([IDLE_WORKLOAD, "wait-signal"], env=preloaded_env(tmp, interval_ms))
        deadline = time.monotonic() + TIMEOUT_S
        while proc_cpu(p.pid) < 0.05 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=TIMEOUT_S)
        return time.monotonic() - t0 if rc == -signal.SIGTERM else None
    t0 = time.monotonic()
    r = subprocess.run([IDLE_WORKLOAD, "idle", "0.05"], env=preloaded_env(tmp, interval_ms),
                       timeout=TIMEOUT_S)
    return time.monotonic() - t0 - 0.05 if r.returncode == 0 else None


def exit_latency(tmp):
    """Figures of exit_latency_once, interleaved over REPS rounds: medians in ms."""
    cases = {"exit_wall_ms_interval_1ms": ("1", False), "exit_wall_ms_interval_1s": ("1000", False),
             "sigterm_wall_ms_interval_1s": ("1000", True)}
    times = {k: [] for k in cases}
    for _ in range(REPS):
        for name, (interval, sigterm) in cases.items():
            t = exit_latency_once(tmp, interval, sigterm)
            times[name].append(t * 1e3 if t is not None else math.nan)
    print("exit latency (wall, spawn or SIGTERM to reap, medians in ms): " + ", ".join(
        f"{name} {cell(med(v), '.1f')}" for name, v in times.items()))
    return {f"child.{name}": (med(v) if all(finite(x) for x in v) else math.nan, "ms", 1)
            for name, v in times.items()}


def profile_stats(path, work_wall):
    """Samples per worker thread per second of work, and the share with the full stack."""
    with open(path, "rb") as f:
        doc = json.load(f)
    rates, deep, total = [], 0, 0
    for t in doc["threads"]:
        if t["name"] == "GeckoMain":
            continue
        fs, ss, ts = t["frameTable"]["schema"], t["stackTable"]["schema"], t["samples"]["schema"]
        strings, frames, stacks = t["stringTable"], t["frameTable"]["data"], t["stackTable"]["data"]
        names = [strings[row[fs["location"]]] for row in frames]
        rows = t["samples"]["data"]
        rates.append(div(len(rows), work_wall))
        memo = {}

        def recursion_depth(s):
            if s is None:
                return 0
            if s not in memo:
                prefix, frame = stacks[s][ss["prefix"]], stacks[s][ss["frame"]]
                memo[s] = recursion_depth(prefix) + names[frame].startswith("bc_recurse")
            return memo[s]

        for row in rows:
            total += 1
            if recursion_depth(row[ts["stack"]]) >= DEPTH - 1:
                deep += 1
    return {"rate": med(rates), "deep": div(deep, total), "size": os.path.getsize(path)}


POOL_THREADS = 64


def idle_pool(tmp):
    """Per idle thread, the runtime's extra peak RSS (kB) and CPU (us): medians over REPS
    interleaved pairs of `workload pool 64 0.3`, alone and preloaded."""
    def once(preload):
        env = preloaded_env(tmp, "1") if preload else {
            k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_") and k != "LD_PRELOAD"}
        env["FLEETPROF_STACKWALK"] = "dwarf"
        r = subprocess.run([IDLE_WORKLOAD, "pool", str(POOL_THREADS), "0.3"], env=env,
                           capture_output=True, text=True, timeout=TIMEOUT_S)
        if r.returncode != 0 or "max_rss_kb=" not in r.stdout:
            return None
        fields = dict(f.split("=") for f in r.stdout.split())
        return int(fields["max_rss_kb"]), int(fields["cpu_us"])

    rss, cpu = [], []
    for _ in range(REPS):
        a, b = once(False), once(True)
        if a is None or b is None:
            rss.append(math.nan)
            cpu.append(math.nan)
            continue
        rss.append((b[0] - a[0]) / POOL_THREADS)
        cpu.append((b[1] - a[1]) / POOL_THREADS)
    ok = all(finite(x) for x in rss + cpu)
    print(f"idle pool ({POOL_THREADS} waiting threads, dwarf, preloaded - alone, per thread, "
          f"medians): peak RSS {cell(med(rss), '.1f')} kB, CPU {cell(med(cpu), '.0f')} us"
          + ("" if ok else " (FAILED: a run did not end well)"))
    return {"child.idle_thread_rss_kB": (med(rss) if ok else math.nan, "kB"),
            "child.idle_thread_cpu_us": (med(cpu) if ok else math.nan, "us")}


def main():
    for path in (LIB, WORKLOAD, IDLE_WORKLOAD):
        if not os.path.exists(path):
            print(f"bench-runtime: {path} not built", file=sys.stderr)
            return 1
    base_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
    tmp = tempfile.mkdtemp(prefix="fleetprof-bench-runtime-", dir=base_dir)
    results = {c: [] for c in CONFIGS}  # per rep: dict or None (failed)
    errors = {c: [] for c in CONFIGS}
    try:
        for rep in range(REPS):
            order = CONFIGS[rep % len(CONFIGS):] + CONFIGS[:rep % len(CONFIGS)]
            for config in order:
                r = run_once(tmp, config, rep)
                if "error" in r:
                    errors[config].append(f"rep {rep}: {r['error']}")
                    results[config].append(None)
                else:
                    results[config].append(r)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    base = results["none"]
    print(f"runtime overhead: bench-cpu {THREADS} threads x depth {DEPTH}, {ROUNDS} rounds x "
          f"{LEAF} leaf iterations, no frame pointers, 1 kHz; {REPS} interleaved reps, medians")
    print(f"{'stackwalk':<10} {'cpu s':>7} {'wall s':>7} {'cpu x':>7} {'wall x':>7} "
          f"{'work cpu x':>10} {'exit s':>7} {'Hz/thr':>7} {'deep %':>7} {'ok':>5}")
    ratios, spreads = {}, []
    for config in CONFIGS:
        runs = results[config]
        good = [r for r in runs if r]
        cpu_x, wall_x, work_x = [], [], []
        for r, b in zip(runs, base):
            if r and b:
                cpu_x.append(div(r["cpu"], b["cpu"]))
                wall_x.append(div(r["wall"], b["wall"]))
                work_x.append(div(r["work_cpu"], b["work_cpu"]))
        # A failed run, or one with nothing to divide by (a zero CPU or wall time), leaves
        # the configuration's figures unmeasured rather than measured on fewer runs.
        failed = len(good) < len(runs) or not all(finite(x) for x in cpu_x + wall_x)
        if config != "none" and cpu_x and not failed:
            spreads.append(f"{config} cpu x {min(cpu_x):.3f}..{max(cpu_x):.3f}, "
                           f"wall x {min(wall_x):.3f}..{max(wall_x):.3f}")
        ratios[config] = (math.nan if failed else med(cpu_x), math.nan if failed else med(wall_x))
        rate = med([r["rate"] for r in good]) if config != "none" else math.nan
        deep = med([r["deep"] for r in good]) * 100 if config != "none" else math.nan
        print(f"{config:<10} {cell(med([r['cpu'] for r in good]), '7.3f')} "
              f"{cell(med([r['wall'] for r in good]), '7.3f')} {cell(med(cpu_x), '7.3f')} "
              f"{cell(med(wall_x), '7.3f')} {cell(med(work_x), '10.3f')} "
              f"{cell(med([r['cpu'] - r['work_cpu'] for r in good]), '7.3f')} "
              f"{cell(rate, '7.0f')} {cell(deep, '7.1f')} {len(good):>2}/{len(runs)}")
    print("cpu x / wall x: whole process vs unprofiled; work cpu x: CPU until the work ended "
          "(before the exit profile); exit s: CPU after it (exit profile, teardown); Hz/thr: "
          "samples per worker thread per second of work; deep %: worker samples showing "
          f">= {DEPTH - 1} bc_recurse frames")
    print("per-rep ratio ranges (noise on this machine): " + "; ".join(spreads))
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for config in CONFIGS:
        for e in errors[config]:
            print(f"FAILED {config}: {e}")
    if errors["none"]:
        print("bench-runtime: the unprofiled workload itself failed", file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="fleetprof-bench-exit-", dir=base_dir)
    try:
        latency = exit_latency(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    figures = {}
    for mode in MODES:
        figures[f"child.overhead_cpu_ratio_{mode}"] = (ratios[mode][0], "ratio")
    for mode in MODES:
        figures[f"child.overhead_wall_ratio_{mode}"] = (ratios[mode][1], "ratio")
    figures.update(latency)
    tmp = tempfile.mkdtemp(prefix="fleetprof-bench-pool-", dir=base_dir)
    try:
        figures.update(idle_pool(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return print_figures(figures)


if __name__ == "__main__":
    sys.exit(main())
