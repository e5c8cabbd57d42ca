#!/usr/bin/env python3
"""The daemon's symbol service (issue 7) against local symbolization in each child.

1. symbols.child_exit_profile_*: spawn -> reap of `workload busy 0.05` (a 50 ms-old child,
   preloaded, connected to a warm fleetprofd), whose exit path writes the exit profile.
   Reported for the service (default: ..._service_with_ms) and for local symbolization
   (FLEETPROF_SYMBOLIZE=local, same daemon, same exit profile: ..._local_with_ms), against a
   run with no exit profile at all (preloaded, no daemon: ..._without_ms). The cost is of the
   order of the noise, so no difference is printed (it came out negative once): each side
   gets its median, and each with/without pair its noise band (..._noise_ms: half the
   interquartile range of the per-round differences; a with - without below it says nothing).
   Plus the child's own symbolization time from profilingLog[pid].runtime.symbolizeUs.
   Interleaved rounds, medians of EXIT_REPS runs.
2. symbols.service_cache_hit_roundtrip_us: round trip of a Symbolize of 64 libc addresses the
   daemon has already resolved (a scripted child over the wire), median of 200; and per
   address. (symbols.in_process_cache_hit_us, bench-symbols.c, is a hit in a process's own
   resolver: no socket.)
3. record.churn_cpu_ratio_symbols_{service,local}: `fleetprof record` of `bench-fleet churn
   64 4 20 fork` (64 short-lived children) vs the same alone, with the service (after) and
   with FLEETPROF_SYMBOLIZE=local (before), reusing tests/bench/bench-gather.py's runner
   (whose record.churn_cpu_ratio is the same churn with default settings, in its own run).

A figure that could not be measured gets a NOT MEASURED line and the benchmark exits 1.
Measures, never asserts on time. Usage: bench-symbols-service.py BUILD_DIR [REPS]
"""
import ctypes
import importlib.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)
from figures import cell, med, paired_noise, print_figures  # noqa: E402
from procs import stop  # noqa: E402
from wire import capture, field, frame, read_frames  # noqa: E402

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
REPS = int(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FLEETPROF_BENCH_REPS", "5"))
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
DAEMON = os.path.join(BUILD, "daemon", "fleetprofd")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
EXIT_REPS = 15


def start_daemon(tmp):
    sock = os.path.join(tmp, "run", "fleetprof.sock")
    p = subprocess.Popen([DAEMON, "--foreground", "--socket", sock, "--log-level", "error"],
                         stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        if p.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("fleetprofd did not start")
        time.sleep(0.02)
    return p, sock


def child_env(**extra):
    e = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1")
    for k in ("FLEETPROF_SOCKET", "FLEETPROF_OUTPUT", "FLEETPROF_DIR", "FLEETPROF_SYMBOLIZE"):
        e.pop(k, None)
    e.update({k: str(v) for k, v in extra.items()})
    return e


def timed_run(env):
    t0 = time.monotonic()
    subprocess.run([WORKLOAD, "busy", "0.05"], env=env, check=True, timeout=60)
    return (time.monotonic() - t0) * 1e3


def bench_exit(tmp):
    d, sock = start_daemon(tmp)
    try:
        configs = {"service": child_env(FLEETPROF_SOCKET=sock),
                   "local": child_env(FLEETPROF_SOCKET=sock, FLEETPROF_SYMBOLIZE="local"),
                   "none": child_env()}
        timed_run(configs["service"])  # warm the daemon's cache and the page cache
        timed_run(configs["local"])
        walls = {c: [] for c in configs}
        for rep in range(EXIT_REPS):
            order = list(configs)[rep % 3:] + list(configs)[:rep % 3]
            for c in order:
                walls[c].append(timed_run(configs[c]))
        out = os.path.join(tmp, "exit.json")
        _, error = capture(sock, out)
        sym_us = {"service": [], "local": []}
        if error is None:
            with open(out) as f:
                doc = json.load(f)
            for p in doc["processes"]:
                (log,) = p["profilingLog"].values()
                rt = log["runtime"]
                key = "service" if rt["symbolServiceBatches"] else "local"
                sym_us[key].append(rt["symbolizeUs"])
        return walls, {c: med(v) for c, v in sym_us.items()}
    finally:
        stop(d)


def libc_mapping():
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and os.path.basename(parts[5]).startswith("libc.so") \
                    and int(parts[2], 16) == 0:
                return parts[5], int(parts[0].split("-")[0], 16)
    raise RuntimeError("libc not mapped")


def bench_cache_hit(tmp):
    d, sock = start_daemon(tmp)
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock)
        s.sendall(frame(1, field(1, 1), field(2, 1), field(3, os.getpid()), field(5, "bench")))
        libc, bias = libc_mapping()
        c = ctypes.CDLL(libc)
        names = ["getpid", "read", "write", "malloc", "free", "memcpy", "strlen", "printf"]
        addrs = [ctypes.cast(getattr(c, n), ctypes.c_void_p).value - bias for n in names]
        addrs = [a + i for a in addrs for i in range(8)]  # 64 addresses
        body = field(2, field(1, libc)) + b"".join(field(3, field(1, 0) + field(2, a))
                                                   for a in addrs)
        frames = read_frames(s, timeout=30)

        def round_trip(req_id):
            t0 = time.perf_counter()
            s.sendall(frame(16, field(1, req_id) + body))
            for num, msg in frames:
                if num == 17 and msg[1][0] == req_id:
                    return (time.perf_counter() - t0) * 1e6
            raise RuntimeError("no Symbols reply")

        cold = round_trip(1000)
        times = [round_trip(1001 + i) for i in range(200)]
        s.close()
        return cold, statistics.median(times), len(addrs)
    finally:
        stop(d)


def bench_churn(tmp):
    spec = importlib.util.spec_from_file_location("bench_gather",
                                                  os.path.join(HERE, "bench-gather.py"))
    bg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bg)
    if not os.path.exists(bg.FLEET):
        return None, [f"{bg.FLEET} not built"]
    churn = [bg.FLEET, "churn", "64", "4", "20", "fork"]
    clean_env = bg.clean_env  # drops FLEETPROF_*: add ours back (`record` passes it on)
    results, errors = {}, []
    try:
        for mode in ("local", "daemon"):
            bg.clean_env = lambda m=mode, **extra: clean_env(FLEETPROF_SYMBOLIZE=m, **extra)
            runs, errs = bg.record_runs(tmp, f"churn-{mode}", {"alone": (churn, "alone"),
                                                               "record": (churn, "record")},
                                        REPS)
            cpu_x, wall_x, failed = bg.ratios(runs, "record", "alone")
            results[mode] = (float("nan") if failed else med(cpu_x),
                             float("nan") if failed else med(wall_x))
            errors += errs
    finally:
        bg.clean_env = clean_env
    return results, errors


def main():
    for path in (LIB, DAEMON, WORKLOAD):
        if not os.path.exists(path):
            print(f"bench-symbols-service: {path} not built", file=sys.stderr)
            return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="fleetprof-bench-symbols-")
    figures = {}
    try:
        walls, sym_us = bench_exit(tmp)
        exit_ms = {c: med(v) for c, v in walls.items()}
        noise_ms = {c: paired_noise(walls[c], walls["none"]) for c in ("service", "local")}
        print(f"exit of a 50 ms-old child (`workload busy 0.05`), {EXIT_REPS} interleaved rounds")
        print(f"   {'config':<40} {'spawn->reap ms':>14} {'noise ms':>9} {'symbolize us':>12}")
        labels = {"service": "exit profile, symbols from the daemon",
                  "local": "exit profile, symbolized in the child",
                  "none": "no exit profile (no daemon)"}
        for c in ("service", "local", "none"):
            print(f"   {labels[c]:<40} {cell(exit_ms[c], '14.1f')} "
                  f"{cell(noise_ms.get(c), '9.2f')} {cell(sym_us.get(c), '12.0f')}")
        figures["symbols.child_exit_profile_service_with_ms"] = (exit_ms["service"], "ms")
        figures["symbols.child_exit_profile_local_with_ms"] = (exit_ms["local"], "ms")
        figures["symbols.child_exit_profile_without_ms"] = (exit_ms["none"], "ms")
        figures["symbols.child_exit_profile_service_noise_ms"] = (noise_ms["service"], "ms")
        figures["symbols.child_exit_profile_local_noise_ms"] = (noise_ms["local"], "ms")
        figures["symbols.child_symbolize_service_us"] = (sym_us["service"], "us", 0)
        figures["symbols.child_symbolize_local_us"] = (sym_us["local"], "us", 0)
        cold, hit, n = bench_cache_hit(tmp)
        print(f"\nSymbolize of {n} libc addresses to a warm daemon, over its socket")
        print(f"   {'first (module load)':<40} {cold:14.0f} us")
        print(f"   {'then, median of 200':<40} {hit:14.0f} us")
        figures["symbols.service_cache_hit_roundtrip_us"] = (hit, "us", 1)
        figures["symbols.service_cache_hit_per_address_us"] = (hit / n, "us", 2)
        churn, errors = bench_churn(tmp)
        for e in errors:
            print(f"FAILED {e}")
        if churn:
            print(f"\nchurn (64 children) recorded / alone, medians of {REPS}")
            print(f"   {'symbols':<40} {'cpu x':>7} {'wall x':>7}")
            for mode, label in (("local", "local (before)"), ("daemon", "service (after)")):
                print(f"   {label:<40} {cell(churn[mode][0], '7.3f')} "
                      f"{cell(churn[mode][1], '7.3f')}")
            figures["record.churn_cpu_ratio_symbols_service"] = (churn["daemon"][0], "ratio")
            figures["record.churn_cpu_ratio_symbols_local"] = (churn["local"][0], "ratio")
        print()
        status = print_figures(figures)
        if not churn:
            print("NOT MEASURED record.churn_cpu_ratio_symbols_{service,local}: see FAILED above")
            status = 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
