#!/usr/bin/env python3
"""Gathering and whole-fleet benchmark: real fleetprofd, real children, real `fleetprof record`.

1. gather.64x8MiB_s: a fleetprofd (--global-limit 1G --process-limit 8M) and 64 children
   (`bench-fleet fill`: markers through fleetprof_marker until their 8 MiB buffer has wrapped,
   then asleep, still sampled at 1 kHz; FLEETPROF_BUFFER_MB=8 FLEETPROF_CHUNK_KB=256). Once
   `fleetprof status --json` shows every child at >= 7.5 MiB (unreleased + released; the local
   limit keeps one chunk short of 8 MiB), CAPTURES captures (wire.py `capture()`) are timed from
   request to result. Also: bytes, processes, where the CPU went during a capture (daemon,
   children, and the children's minor page faults), the daemon's peak RSS, and the CPU the
   idle 64 use just sampling.
2. gather.exit_profile_ms: the child-side cost of an exit profile of a 1-second-old process.
   `bench-fleet spin 1` (the shape of `workload busy 1`: 10 frames of recursion, 1 s by the
   clock) prints a CLOCK_MONOTONIC stamp just before exit(); the benchmark stamps the reap.
   exit->reap of a preloaded child connected to a daemon (gather.exit_profile_with_ms) against
   that of a preloaded child with no daemon and no FLEETPROF_OUTPUT, which writes no exit
   profile at all (gather.exit_profile_without_ms), with the noise band of their difference
   (gather.exit_profile_noise_ms: half the interquartile range of the per-round differences);
   spawn->reap wall (gather.exit_profile_wall_*) and whole-process CPU (rusage,
   gather.exit_profile_cpu_*) likewise. The cost is near the noise, so it is never printed as
   a difference that could come out negative. An unprofiled run shows the rest of the
   runtime's cost. EXIT_REPS interleaved runs each.
3. record.overhead_cpu_ratio_fleet: `bench-fleet fleet 4 ROUNDS` (a master and 4 CPU-bound
   workers doing a FIXED amount of work: demo-fleet only runs for a time, which makes a CPU
   ratio meaningless) under `fleetprof record --no-summary` vs alone; and preloaded without a
   daemon (sampling only, no exit profile), to split the overhead. Two references in the same
   run: `floor`, the workers not profiled but signalled every ms of their CPU by the kernel
   (a perf_event task clock, BENCH_FLEET_SIGNAL_FLOOR) into a handler that only counts, the
   cost of timer interrupts and signals that any in-process signal sampler pays; and
   `perf-record`, the peer `perf record -F 1000 -g` (when perf is installed and allowed).
4. record.churn_cpu_ratio: `bench-fleet churn 64 4 20` (64 short-lived children of ~20 ms of
   CPU each, fork+exec'd 4 at a time) recorded vs alone; also preloaded only, and recorded
   with posix_spawn instead of fork+exec (no runtime restart in a forked child about to exec);
   and the same two references as in 3. Two more steps split a child's cost by stage: the
   library preloaded but not started (`loaded`), and started with a 1 s interval, so that a
   10 ms child takes no sample (`started`); a table gives each stage's CPU per process. The
   daemon stage is split by the workload's own count of its tree's CPU (bench-fleet's
   tree_cpu_s): what the children pay, and what the daemon and `record` pay
   (record.churn_daemon_cpu_ms_per_process, their fixed cost spread over the run's processes).
   record.churn_page_faults_per_process: the minor page faults the recorded run adds per
   process (wait4's ru_minflt of the trees), the largest kernel cost of a short-lived child;
   record.churn_context_switches_per_process: the context switches it adds (ru_nvcsw +
   ru_nivcsw), its wake-ups: both counts move little from run to run, where the CPU ratios
   move by a few percent.

CPU = user + sys of the whole process tree: every process in these trees is waited for by its
parent, so rusage from wait4 (Linux: the child plus its reaped descendants) covers them all;
it is checked against the RUSAGE_CHILDREN delta of this process. Configurations of parts 2-4
are interleaved (order rotated every repetition); ratios are medians of per-repetition
ratios (profiled run / the same repetition's unprofiled run). Runs that fail (non-zero exit,
missing profile) leave that configuration's figures unmeasured: a FAILED line says why, a
NOT MEASURED line replaces each BENCH line, and the benchmark exits 1. Measures, never asserts
on time. Every process started here is killed by pid on the way out.

Usage: bench-gather.py BUILD_DIR [REPS]   (REPS for parts 3-4, default 5;
                                           FLEETPROF_BENCH_REPS too)
FLEETPROF_BENCH_GATHER_ONLY=1 runs part 1 alone (while working on the gather path);
FLEETPROF_BENCH_CHURN_ONLY=1 runs part 4 alone (while working on short-lived children).
"""
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import cell, div, finite, med, paired_noise, print_figures  # noqa: E402
from procs import proc_cpu, stop  # noqa: E402
from wire import capture  # noqa: E402

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
REPS = int(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FLEETPROF_BENCH_REPS", "5"))
GATHER_ONLY = os.environ.get("FLEETPROF_BENCH_GATHER_ONLY", "") not in ("", "0")
CHURN_ONLY = os.environ.get("FLEETPROF_BENCH_CHURN_ONLY", "") not in ("", "0")
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
DAEMON = os.path.join(BUILD, "daemon", "fleetprofd")
CLI = os.path.join(BUILD, "tools", "fleetprof")
FLEET = os.path.join(BUILD, "tests", "workloads", "bench-fleet")

GATHER_CHILDREN, GATHER_MIB, CHUNK_KIB, CAPTURES = 64, 8, 256, 3
FILL_MARKERS = 700000  # about twice what 8 MiB holds: every buffer wraps
FULL_BYTES = (GATHER_MIB << 20) - 2 * (CHUNK_KIB << 10)
EXIT_REPS = 10


def perf_record_usable():
    """True if `perf record` is installed and allowed to sample here (perf_event_paranoid)."""
    if not shutil.which("perf"):
        return False
    try:
        with tempfile.NamedTemporaryFile(suffix=".data") as f:
            return subprocess.run(["perf", "record", "-q", "-F", "1000", "-o", f.name, "--",
                                   "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


PERF = perf_record_usable()
PEER = [("perf-record", "alone")] if PERF else []
FLEET_WORKERS, FLEET_ROUNDS = 4, 1500  # ~1 ms a round: ~6 CPU-s in all
CHURN_CHILDREN, CHURN_PARALLEL, CHURN_ROUNDS = 64, 4, 20
TIMEOUT_S = 120

started = []  # Popen objects of long-running processes (daemons, fill children)


def load():
    return os.getloadavg()[0]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FLEETPROF_") and k != "LD_PRELOAD"}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def cpu_of(ru):
    return ru.ru_utime + ru.ru_stime


def children_cpu():
    return cpu_of(resource.getrusage(resource.RUSAGE_CHILDREN))


def kill_group(pgid):
    """Timeout: the whole tree of one run (its own session and process group) goes."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_tree(argv, env, timeout=TIMEOUT_S):
    """Runs argv in a session of its own and waits for it. Returns (status, wall s, CPU s of
    the whole reaped tree, stdout, stderr, reap time from time.monotonic_ns, the tree's
    resource usage from wait4: its minor page faults, its context switches)."""
    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    cpu0 = children_cpu()
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=out, stderr=err, start_new_session=True)
    timer = threading.Timer(timeout, kill_group, (p.pid,))
    timer.start()
    try:
        _, status, ru = os.wait4(p.pid, 0)
        reaped_ns = time.monotonic_ns()
    except BaseException:  # SIGTERM from meson's timeout, Ctrl-C: the whole tree goes
        kill_group(p.pid)
        os.waitpid(p.pid, 0)
        raise
    finally:
        timer.cancel()
    p.returncode = 0  # reaped above: keep Popen from waiting on it again
    wall = time.monotonic() - t0
    cpu = cpu_of(ru)
    delta = children_cpu() - cpu0
    if abs(delta - cpu) > 0.02 + 0.01 * cpu:
        print(f"note: {os.path.basename(argv[0])}: wait4 CPU {cpu:.3f} s vs RUSAGE_CHILDREN "
              f"delta {delta:.3f} s", file=sys.stderr)
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    out.close()
    err.close()
    return status, wall, cpu, stdout, stderr, reaped_ns, ru


def failure(status, stderr):
    """None for exit status 0, else why."""
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    if os.WEXITSTATUS(status):
        return f"exit status {os.WEXITSTATUS(status)}: {stderr.strip()[-300:]}"
    return None


def fields(text):
    out = {}
    for word in text.split():
        if "=" in word:
            k, v = word.split("=", 1)
            out[k] = v
    return out


def start_daemon(tmp, name, *args):
    sock = os.path.join(tmp, name, "fleetprof.sock")
    log = open(os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen([DAEMON, "--foreground", "--socket", sock, *args], stderr=log,
                         env=clean_env())
    log.close()
    started.append(p)
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        if p.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"fleetprofd did not start: see {tmp}/{name}.log")
        time.sleep(0.02)
    return p, sock


def proc_minflt(pid):
    """Minor page faults of a live process so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[7])
    except (OSError, IndexError, ValueError):
        return 0


def peak_rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def status_json(sock):
    r = subprocess.run([CLI, "status", "--socket", sock, "--json"], capture_output=True,
                       timeout=30, env=clean_env())
    if r.returncode != 0:
        raise RuntimeError(f"fleetprof status failed: {r.stderr.decode(errors='replace')}")
    return json.loads(r.stdout)


# ---- 1. gathering 64 full buffers ------------------------------------------------------------

def bench_gather(tmp):
    res = {"load_before": load()}
    daemon, sock = start_daemon(tmp, "gather", "--global-limit", "1G", "--process-limit",
                                f"{GATHER_MIB}M", "--log-level", "warning")
    kids = []
    try:
        env = clean_env(LD_PRELOAD=LIB, FLEETPROF_STARTUP=1, FLEETPROF_SOCKET=sock,
                        FLEETPROF_BUFFER_MB=GATHER_MIB, FLEETPROF_CHUNK_KB=CHUNK_KIB)
        t0 = time.monotonic()
        for i in range(GATHER_CHILDREN):
            out = open(os.path.join(tmp, f"fill-{i}.out"), "w")
            kids.append(subprocess.Popen([FLEET, "fill", str(FILL_MARKERS), "600"], env=env,
                                         stdout=out, stderr=subprocess.STDOUT))
            out.close()
        started.extend(kids)
        # Full: every child wrote all its markers, and the daemon sees >= 7.5 MiB for each.
        deadline = time.monotonic() + 180
        while True:
            dead = [k.pid for k in kids if k.poll() is not None]
            if dead:
                raise RuntimeError(f"fill children {dead[:5]} exited early")
            filled = sum(1 for i in range(GATHER_CHILDREN)
                         if "filled" in open(os.path.join(tmp, f"fill-{i}.out")).read())
            st = status_json(sock)
            sizes = {c["pid"]: c["unreleased_bytes"] + c["released_bytes"]
                     for c in st["children"]}
            full = [k.pid for k in kids if sizes.get(k.pid, 0) >= FULL_BYTES]
            if filled == GATHER_CHILDREN and len(full) == GATHER_CHILDREN:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"after 180 s: {filled} children done writing, {len(full)} "
                                   f"at >= {FULL_BYTES} bytes")
            time.sleep(0.5)
        res["fill_s"] = time.monotonic() - t0
        per_child = sorted(sizes[k.pid] for k in kids)
        res["child_min_mib"], res["child_max_mib"] = per_child[0] / 2**20, per_child[-1] / 2**20
        res["fleet_mib"] = (st["unreleased_bytes"] + st["released_bytes"]) / 2**20
        # What an idle fleet of 64 costs, just sampling at 1 kHz.
        time.sleep(1.0)
        c0, t1 = sum(proc_cpu(k.pid) for k in kids), time.monotonic()
        d0 = proc_cpu(daemon.pid)
        time.sleep(2.0)
        res["idle_cpu_pct"] = 100 * (sum(proc_cpu(k.pid) for k in kids) - c0) / (
            time.monotonic() - t1)
        res["idle_daemon_pct"] = 100 * (proc_cpu(daemon.pid) - d0) / (time.monotonic() - t1)

        caps = []
        for n in range(CAPTURES):
            out = os.path.join(tmp, f"gather-{n}.json")
            kc0, dc0, l0 = sum(proc_cpu(k.pid) for k in kids), proc_cpu(daemon.pid), load()
            kf0 = sum(proc_minflt(k.pid) for k in kids)
            start = time.monotonic()
            result, error = capture(sock, out, timeout=TIMEOUT_S)
            elapsed = time.monotonic() - start
            kc1, dc1 = sum(proc_cpu(k.pid) for k in kids), proc_cpu(daemon.pid)
            kf1 = sum(proc_minflt(k.pid) for k in kids)
            if error is not None:
                caps.append({"error": f"capture {n}: {error}"})
                continue
            err = result.get(5, [b""])[0].decode(errors="replace")
            size = os.path.getsize(out) if os.path.exists(out) else 0
            cap = {"s": elapsed, "bytes": result.get(3, [0])[0],
                   "processes": result.get(4, [0])[0], "given_up": result.get(6, [0])[0],
                   "file_bytes": size, "children_cpu": kc1 - kc0, "daemon_cpu": dc1 - dc0,
                   "children_faults": kf1 - kf0,
                   "load": l0}
            if err:
                cap["error"] = f"capture {n}: {err}"
            elif cap["processes"] != GATHER_CHILDREN or cap["given_up"]:
                cap["error"] = (f"capture {n}: {cap['processes']} processes, "
                                f"{cap['given_up']} given up")
            elif size != cap["bytes"]:
                cap["error"] = f"capture {n}: file has {size} bytes, result says {cap['bytes']}"
            else:
                with open(out, "rb") as f:
                    head = f.read(1)
                    f.seek(-2, os.SEEK_END)
                    tail = f.read().strip()
                if head != b"{" or not tail.endswith(b"}"):
                    cap["error"] = f"capture {n}: the file is not one JSON object"
            caps.append(cap)
            if os.path.exists(out):
                os.unlink(out)
            time.sleep(1.0)
        res["captures"] = caps
        res["daemon_peak_rss_mib"] = peak_rss_mib(daemon.pid)
        if daemon.poll() is not None:
            res["error"] = f"fleetprofd exited ({daemon.returncode}) during the captures"
    finally:
        # SIGKILL: 64 exit profiles of 14 MB each are not what this part measures.
        for k in kids:
            stop(k, signal.SIGKILL)
        stop(daemon)
    res["load_after"] = load()
    return res


# ---- 2. the exit profile's cost --------------------------------------------------------------

def bench_exit(tmp):
    res = {"load_before": load()}
    daemon, sock = start_daemon(tmp, "exit", "--log-level", "warning")
    configs = ["plain", "preload", "daemon"]
    runs = {c: [] for c in configs}
    errors = []
    try:
        envs = {"plain": clean_env(),
                "preload": clean_env(LD_PRELOAD=LIB, FLEETPROF_STARTUP=1),
                "daemon": clean_env(LD_PRELOAD=LIB, FLEETPROF_STARTUP=1,
                                    FLEETPROF_SOCKET=sock)}
        for rep in range(EXIT_REPS):
            order = configs[rep % 3:] + configs[:rep % 3]
            for c in order:
                status, wall, cpu, out, err, reaped, _ = run_tree([FLEET, "spin", "1"], envs[c])
                why = failure(status, err)
                f = fields(out)
                if why is None and "exit_call_ns" not in f:
                    why = f"no exit stamp: {out[:100]!r}"
                if why:
                    errors.append(f"{c} rep {rep}: {why}")
                    runs[c].append(None)
                    continue
                runs[c].append({"wall": wall, "cpu": cpu,
                                "exit_ms": (reaped - int(f["exit_call_ns"])) / 1e6,
                                "exit_cpu_ms": (cpu - float(f["cpu_s"])) * 1e3})
        st = status_json(sock)
        res["daemon_children_left"] = len(st["children"])
    finally:
        stop(daemon)
    res.update(runs=runs, errors=errors, load_after=load())
    return res


# ---- 3 and 4. `fleetprof record` overhead ----------------------------------------------------

def profile_stats(path):
    """Processes in a recorded profile, and samples per CPU-second of the bf_ work."""
    with open(path, "rb") as f:
        doc = json.load(f)
    samples = 0
    for proc in doc.get("processes", []):
        for t in proc.get("threads", []):
            samples += len(t["samples"]["data"])
    return {"processes": len(doc.get("processes", [])), "samples": samples}


def record_runs(tmp, name, commands, reps):
    """commands: {config: (argv, how)}, how = "alone" (not profiled), "preload" (the runtime
    preloaded and sampling, no daemon, no exit profile) or "record" (`fleetprof record`).
    Returns ({config: [dict|None]}, [errors])."""
    configs = list(commands)
    runs = {c: [] for c in configs}
    errors = []
    for rep in range(reps):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        for c in order:
            argv, how = commands[c]
            out = os.path.join(tmp, f"{name}-{c}-{rep}.json")
            recorded = how == "record"
            env = clean_env()
            if recorded:
                argv = [CLI, "record", "--no-summary", "-o", out, "--", *argv]
            elif how == "preload":
                env = clean_env(LD_PRELOAD=LIB, FLEETPROF_STARTUP=1)
            elif how == "loaded":
                env = clean_env(LD_PRELOAD=LIB)
            elif how == "started":
                env = clean_env(LD_PRELOAD=LIB, FLEETPROF_STARTUP=1, FLEETPROF_INTERVAL_MS="1000")
            elif how == "floor":
                env = clean_env(BENCH_FLEET_SIGNAL_FLOOR=1)
            elif how == "perf":
                argv = ["perf", "record", "-q", "-F", "1000", "-g", "-o", out + ".data", "--",
                        *argv]
            status, wall, cpu, stdout, stderr, _, ru = run_tree(argv, env)
            why = failure(status, stderr)
            f = fields(stdout)
            if why is None and "work_wall_s" not in f:
                why = f"no result line: {stdout[:100]!r}"
            r = {"wall": wall, "cpu": cpu, "sigprof": int(f.get("killed_by_sigprof", 0)),
                 "faults": ru.ru_minflt, "switches": ru.ru_nvcsw + ru.ru_nivcsw}
            if "tree_cpu_s" in f:  # the workload's own tree, without the daemon and record
                r["tree_cpu"] = float(f["tree_cpu_s"])
            if why is None and recorded:
                if not os.path.exists(out):
                    why = "no profile written"
                else:
                    try:
                        r.update(profile_stats(out))
                    except (ValueError, KeyError) as e:
                        why = f"unreadable profile: {e}"
                    os.unlink(out)
            if how == "perf" and os.path.exists(out + ".data"):
                os.unlink(out + ".data")
            if why:
                errors.append(f"{name} {c} rep {rep}: {why}")
                runs[c].append(None)
            else:
                runs[c].append(r)
    return runs, errors


def ratios(runs, config, base):
    """Per-rep CPU and wall ratios of config against base, and whether any run of either
    failed or had nothing to divide by (a zero CPU or wall time): then it measured nothing."""
    cpu_x, wall_x = [], []
    for r, b in zip(runs[config], runs[base]):
        if r and b:
            cpu_x.append(div(r["cpu"], b["cpu"]))
            wall_x.append(div(r["wall"], b["wall"]))
    failed = any(r is None for r in runs[config]) or any(b is None for b in runs[base]) or \
        not all(finite(x) for x in cpu_x + wall_x)
    return cpu_x, wall_x, failed


# ---- output ----------------------------------------------------------------------------------

def main():
    for path in (LIB, DAEMON, CLI, FLEET):
        if not os.path.exists(path):
            print(f"bench-gather: {path} not built", file=sys.stderr)
            return 1
    # meson's timeout sends SIGTERM: turn it into an exception so that finally blocks run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
    tmp = tempfile.mkdtemp(prefix="fleetprof-bench-gather-", dir=base_dir)
    t_start = time.monotonic()
    bench = {"load_start": load()}
    try:
        if not CHURN_ONLY:
            try:
                bench["gather"] = bench_gather(tmp)
            except (RuntimeError, AssertionError, OSError, ValueError) as e:
                bench["gather"] = {"error": f"{type(e).__name__}: {e}"}
            if GATHER_ONLY:
                return report(bench, time.monotonic() - t_start)
            bench["exit"] = bench_exit(tmp)
            fleet_cmd = [FLEET, "fleet", str(FLEET_WORKERS), str(FLEET_ROUNDS)]
            bench["fleet"] = record_runs(tmp, "fleet", dict({
                "alone": (fleet_cmd, "alone"), "preload": (fleet_cmd, "preload"),
                "record": (fleet_cmd, "record"), "floor": (fleet_cmd, "floor")},
                **({"perf-record": (fleet_cmd, "perf")} if PERF else {})), REPS)
            bench["fleet_load"] = load()
        churn = [FLEET, "churn", str(CHURN_CHILDREN), str(CHURN_PARALLEL), str(CHURN_ROUNDS)]
        bench["churn"] = record_runs(tmp, "churn", {
            "alone": (churn + ["fork"], "alone"), "loaded": (churn + ["fork"], "loaded"),
            "started": (churn + ["fork"], "started"), "preload": (churn + ["fork"], "preload"),
            "record": (churn + ["fork"], "record"),
            "alone-spawn": (churn + ["spawn"], "alone"),
            "record-spawn": (churn + ["spawn"], "record"),
            "floor": (churn + ["fork"], "floor"),
            **({"perf-record": (churn + ["fork"], "perf")} if PERF else {}),
        }, REPS)
        bench["churn_load"] = load()
    finally:
        for p in started:
            stop(p, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    return report(bench, time.monotonic() - t_start)


def churn_stages(runs):
    """Where a short-lived child's cost goes: CPU per process (the children and the master)
    of each step from one configuration to the next, as the median of per-repetition
    differences with their range (a step near the noise may show below zero)."""
    steps = [("library load (LD_PRELOAD, not started)", "loaded", "alone"),
             ("runtime start, no sample (interval 1 s)", "started", "loaded"),
             ("sampling at 1 kHz", "preload", "started"),
             ("daemon: connection, exit profile, daemon CPU", "record", "preload"),
             ("  of which in the children (connection, exit)", "record-tree", "preload"),
             ("  of which in the daemon and `record`", "record-outside", None)]
    procs = CHURN_CHILDREN + 1
    print(f"   per process (cpu ms, {procs} processes a run: median of per-rep differences)")
    print(f"   {'step':<48} {'ms':>7} {'range':>15}")
    for label, config, base in steps + [("restart in the forked child before exec "
                                         "(fork - spawn)", "record", "record-spawn")]:
        if config == "record-tree":
            d = [(r["tree_cpu"] - b.get("tree_cpu", b["cpu"])) * 1e3 / procs
                 for r, b in zip(runs["record"], runs[base]) if r and b and "tree_cpu" in r]
        elif config == "record-outside":
            # With its fixed cost (starting the daemon, writing the file) spread over the run.
            d = [(r["cpu"] - r["tree_cpu"]) * 1e3 / procs
                 for r in runs["record"] if r and "tree_cpu" in r]
        elif config == "record" and base == "record-spawn":
            d = [((r["cpu"] - a["cpu"]) - (s["cpu"] - b["cpu"])) * 1e3 / procs
                 for r, a, s, b in zip(runs["record"], runs["alone"], runs["record-spawn"],
                                       runs["alone-spawn"]) if r and a and s and b]
        else:
            d = [(r["cpu"] - b["cpu"]) * 1e3 / procs
                 for r, b in zip(runs[config], runs[base]) if r and b]
        rng = f"{min(d):+.3f}..{max(d):+.3f}" if d else "-"
        print(f"   {label:<48} {cell(med(d) if d else math.nan, '7.3f')} {rng:>15}")


def report(bench, total_s):
    figures = {}
    print(f"gathering and whole-fleet overhead; {os.cpu_count()} CPUs, load average "
          f"{bench['load_start']:.2f} at the start (other users), {load():.2f} at the end; "
          f"took {total_s:.0f} s")

    if not CHURN_ONLY:
        # 1.
        g = bench["gather"]
        print(f"\n1. gather {GATHER_CHILDREN} children x {GATHER_MIB} MiB buffers "
              f"({CHUNK_KIB} KiB chunks, markers then idle at 1 kHz), {CAPTURES} captures")
        caps = [c for c in g.get("captures", []) if "error" not in c]
        failed = "error" in g or len(caps) < CAPTURES
        if "error" in g:
            print(f"FAILED gather: {g['error']}")
        else:
            print(f"   filled in {g['fill_s']:.1f} s: {g['fleet_mib']:.0f} MiB in the fleet, "
                  f"{g['child_min_mib']:.2f}..{g['child_max_mib']:.2f} MiB per child; load "
                  f"{g['load_before']:.2f} before, {g['load_after']:.2f} after")
            print(f"   idle fleet (sampling only): children {g['idle_cpu_pct']:.0f} % of a CPU, "
                  f"daemon {g['idle_daemon_pct']:.1f} %")
            print(f"   {'capture':<8} {'s':>7} {'procs':>6} {'MB':>8} {'MB/s':>7} {'kids cpu s':>10} "
                  f"{'daemon cpu s':>12} {'kids MB/cpu-s':>13} {'kids faults':>11}")
            for n, c in enumerate(g["captures"]):
                if "error" in c:
                    print(f"   FAILED {c['error']}")
                    continue
                mb = c["bytes"] / 1e6
                print(f"   {n:<8} {c['s']:7.2f} {c['processes']:>6} {mb:8.1f} "
                      f"{cell(div(mb, c['s']), '7.1f')} {c['children_cpu']:10.2f} "
                      f"{c['daemon_cpu']:12.2f} {cell(div(mb, c['children_cpu']), '13.1f')} "
                      f"{c['children_faults']:11d}")
            print(f"   daemon peak RSS {cell(g['daemon_peak_rss_mib'], '.0f')} MiB; goal <= 2 s. (The "
                  f"load average during a capture, {cell(med([c['load'] for c in caps]), '.0f')}, "
                  f"counts our own {GATHER_CHILDREN} children.)")
        figures["gather.64x8MiB_s"] = (math.nan if failed else med([c["s"] for c in caps]), "s")
        figures["gather.64x8MiB_MB"] = (
            math.nan if failed else med([c["bytes"] for c in caps]) / 1e6, "MB")
        figures["gather.64x8MiB_children_cpu_s"] = (
            math.nan if failed else med([c["children_cpu"] for c in caps]), "s")
        figures["gather.64x8MiB_children_page_faults"] = (
            math.nan if failed else med([c["children_faults"] for c in caps]), "faults")
        figures["gather.64x8MiB_daemon_cpu_s"] = (
            math.nan if failed else med([c["daemon_cpu"] for c in caps]), "s")
        per_cpu_s = [div(c["bytes"] / 1e6, c["children_cpu"]) for c in caps]
        figures["gather.child_json_MB_per_cpu_s"] = (
            math.nan if failed or not all(finite(v) for v in per_cpu_s) else med(per_cpu_s), "MB/s")
        figures["gather.64x8MiB_daemon_peak_rss_MiB"] = (
            math.nan if failed else g["daemon_peak_rss_mib"], "MiB")
        if GATHER_ONLY:
            print()
            return print_figures(figures)

        # 2.
        e = bench["exit"]
        runs = e["runs"]
        print(f"\n2. exit profile of `bench-fleet spin 1` (10 frames, 1 s old), {EXIT_REPS} "
              f"interleaved runs; load {e['load_before']:.2f} before, {e['load_after']:.2f} after")
        print(f"   {'config':<34} {'wall s':>7} {'cpu s':>7} {'exit->reap ms':>13} "
              f"{'cpu after exit ms':>17} {'ok':>5}")
        labels = {"plain": "not profiled", "preload": "preloaded, no daemon, no output",
                  "daemon": "preloaded, connected (exit profile)"}
        for c in ("plain", "preload", "daemon"):
            good = [r for r in runs[c] if r]
            print(f"   {labels[c]:<34} {cell(med([r['wall'] for r in good]), '7.3f')} "
                  f"{cell(med([r['cpu'] for r in good]), '7.3f')} "
                  f"{cell(med([r['exit_ms'] for r in good]), '13.2f')} "
                  f"{cell(med([r['exit_cpu_ms'] for r in good]), '17.2f')} "
                  f"{len(good):>2}/{len(runs[c])}")

        def diff(key, a, b, scale=1.0):
            d = [(x[key] - y[key]) * scale for x, y in zip(runs[a], runs[b]) if x and y]
            failed = any(r is None for r in runs[a] + runs[b])
            return (math.nan if failed else med(d)), d

        def sides(key, a, b, scale=1.0):
            """Medians of each side and the noise band of their per-round differences, all nan if
            a run of either side failed. Never the difference itself: it may fall below zero."""
            failed = any(r is None for r in runs[a] + runs[b])
            va = [r[key] * scale if r else None for r in runs[a]]
            vb = [r[key] * scale if r else None for r in runs[b]]
            if failed:
                return math.nan, math.nan, math.nan
            return med(va), med(vb), paired_noise(va, vb)

        exit_ms, exit_d = diff("exit_ms", "daemon", "preload")
        wall_ms, wall_d = diff("wall", "daemon", "preload", 1e3)
        cpu_ms, cpu_d = diff("cpu", "daemon", "preload", 1e3)
        rt_cpu_ms, _ = diff("cpu", "preload", "plain", 1e3)
        print(f"   exit profile (connected - preloaded alone, median of per-rep differences): "
              f"exit->reap {cell(exit_ms, '+.1f')} ms, spawn->reap {cell(wall_ms, '+.1f')} ms, "
              f"CPU {cell(cpu_ms, '+.1f')} ms")
        if exit_d:
            print(f"   per-rep exit->reap differences {min(exit_d):+.1f}..{max(exit_d):+.1f} ms, "
                  f"spawn->reap {min(wall_d):+.1f}..{max(wall_d):+.1f} ms, "
                  f"CPU {min(cpu_d):+.1f}..{max(cpu_d):+.1f} ms")
        if runs["daemon"] and runs["daemon"][0]:
            print(f"   the first connected run (a fresh daemon: cold caches) took "
                  f"{runs['daemon'][0]['exit_ms']:.1f} ms from exit() to its end")
        print(f"   the runtime alone (preloaded - not profiled): CPU {cell(rt_cpu_ms, '+.1f')} ms; the "
              f"daemon still listed {e.get('daemon_children_left', '?')} children at the end")
        with_ms, without_ms, noise_ms = sides("exit_ms", "daemon", "preload")
        figures["gather.exit_profile_with_ms"] = (with_ms, "ms")
        figures["gather.exit_profile_without_ms"] = (without_ms, "ms")
        figures["gather.exit_profile_noise_ms"] = (noise_ms, "ms")
        with_ms, without_ms, noise_ms = sides("wall", "daemon", "preload", 1e3)
        figures["gather.exit_profile_wall_with_ms"] = (with_ms, "ms")
        figures["gather.exit_profile_wall_without_ms"] = (without_ms, "ms")
        figures["gather.exit_profile_wall_noise_ms"] = (noise_ms, "ms")
        with_ms, without_ms, noise_ms = sides("cpu", "daemon", "preload", 1e3)
        figures["gather.exit_profile_cpu_with_ms"] = (with_ms, "ms")
        figures["gather.exit_profile_cpu_without_ms"] = (without_ms, "ms")
        figures["gather.exit_profile_cpu_noise_ms"] = (noise_ms, "ms")
        for err in e["errors"]:
            print(f"   FAILED {err}")

    # 3. and 4.
    def overhead_table(title, runs, pairs, load_after):
        print(title)
        print(f"   {'config':<14} {'cpu s':>7} {'wall s':>7} {'cpu x':>7} {'wall x':>7} "
              f"{'cpu x range':>13} {'procs':>6} {'samples':>8} {'SIGPROF':>8} {'ok':>5}")
        out = {}
        for config, base in pairs:
            good = [r for r in runs[config] if r]
            line = (f"   {config:<14} {cell(med([r['cpu'] for r in good]), '7.3f')} "
                    f"{cell(med([r['wall'] for r in good]), '7.3f')}")
            if base:
                cpu_x, wall_x, failed = ratios(runs, config, base)
                rng = f"{min(cpu_x):.3f}..{max(cpu_x):.3f}" if cpu_x and not failed else "-"
                line += f" {cell(med(cpu_x), '7.3f')} {cell(med(wall_x), '7.3f')} {rng:>13}"
                out[config] = (math.nan if failed else med(cpu_x),
                               math.nan if failed else med(wall_x))
                if good and "processes" in good[0]:
                    line += (f" {med([r['processes'] for r in good]):6.0f} "
                             f"{med([r['samples'] for r in good]):8.0f}")
                else:
                    line += f" {'-':>6} {'-':>8}"
            else:
                line += f" {'':>7} {'':>7} {'':>13} {'':>6} {'':>8}"
            line += (f" {sum(r['sigprof'] for r in good):>8}"
                     f" {len(good):>2}/{len(runs[config])}")
            print(line)
        print(f"   load average after: {load_after:.2f}")
        return out

    fleet_runs = {}
    if not CHURN_ONLY:
        fleet_runs, fleet_errors = bench["fleet"]
        f = overhead_table(f"\n3. `fleetprof record` of bench-fleet fleet {FLEET_WORKERS} x "
                           f"{FLEET_ROUNDS} rounds (fixed work, ~1 ms a round), 1 kHz, {REPS} "
                           f"interleaved reps, medians; goal cpu x <= 1.03",
                           fleet_runs, [("alone", None), ("preload", "alone"), ("record", "alone"),
                                        ("floor", "alone")] + PEER, bench["fleet_load"])
        print("   preload: the runtime preloaded and sampling (no daemon, no exit profile); "
              "record: `fleetprof record --no-summary` (sampling, exit profiles, the in-process "
              "daemon, the gather and the file). wall x is not an overhead figure on a shared "
              "machine: with another user's CPU-bound process running, the unprofiled fleet once "
              "got ~1 CPU and the profiled one (1 kHz wake-ups) ~2, for a wall x of 0.6.")
        print("   floor: not profiled, but every worker takes a kernel timer signal each ms of its "
              "CPU into a handler that only counts it: what 1 kHz of timer interrupts and signals "
              "costs on this machine, under any in-process signal sampler. perf-record: the peer "
              + ("`perf record -F 1000 -g`." if PERF else "(perf not installed or not allowed)."))
        figures["record.overhead_cpu_ratio_fleet"] = (f["record"][0], "ratio")
        figures["record.overhead_cpu_ratio_fleet_sampling_only"] = (f["preload"][0], "ratio")
        figures["record.overhead_wall_ratio_fleet"] = (f["record"][1], "ratio")
        figures["record.overhead_cpu_ratio_fleet_signal_floor"] = (f["floor"][0], "ratio")
        if PERF:
            figures["record.overhead_cpu_ratio_fleet_perf_record"] = (f["perf-record"][0], "ratio")
        for err in fleet_errors:
            print(f"   FAILED {err}")

    churn_runs, churn_errors = bench["churn"]
    c = overhead_table(f"\n4. `fleetprof record` of bench-fleet churn: {CHURN_CHILDREN} "
                       f"children x {CHURN_ROUNDS} rounds, {CHURN_PARALLEL} at a time, 1 kHz, "
                       f"{REPS} interleaved reps, medians; goal cpu x <= 1.10",
                       churn_runs, [("alone", None), ("loaded", "alone"), ("started", "alone"),
                                    ("preload", "alone"), ("record", "alone"),
                                    ("alone-spawn", None), ("record-spawn", "alone-spawn"),
                                    ("floor", "alone")] + PEER, bench["churn_load"])
    print("   fork: fork+exec (the forked child restarts the runtime, then execs); spawn: "
          "posix_spawn. preload: as in 3. SIGPROF: children killed by the sampling signal, and "
          "started again by the master (their cost stays in the figure).")
    churn_stages(churn_runs)
    figures["record.churn_cpu_ratio"] = (c["record"][0], "ratio")
    figures["record.churn_wall_ratio"] = (c["record"][1], "ratio")
    figures["record.churn_cpu_ratio_spawn"] = (c["record-spawn"][0], "ratio")
    figures["record.churn_cpu_ratio_sampling_only"] = (c["preload"][0], "ratio")
    figures["record.churn_cpu_ratio_loaded"] = (c["loaded"][0], "ratio")
    figures["record.churn_cpu_ratio_started"] = (c["started"][0], "ratio")
    figures["record.churn_cpu_ratio_signal_floor"] = (c["floor"][0], "ratio")
    if PERF:
        figures["record.churn_cpu_ratio_perf_record"] = (c["perf-record"][0], "ratio")
    # The daemon's and `record`'s own CPU per process of the run (the fixed cost of starting
    # and of writing the file included): the part of the daemon stage outside the children.
    outside = [(r["cpu"] - r["tree_cpu"]) * 1e3 / (CHURN_CHILDREN + 1)
               for r in churn_runs["record"] if r and "tree_cpu" in r]
    figures["record.churn_daemon_cpu_ms_per_process"] = (
        med(outside) if len(outside) == len(churn_runs["record"]) else math.nan, "ms", 3)
    # The page faults a recorded process adds (its runtime's pages, the daemon's and
    # `record`'s spread over the run): at 3-5 us each on a VM, the largest kernel cost of a
    # short-lived process.
    faults = [(r["faults"] - a["faults"]) / (CHURN_CHILDREN + 1)
              for r, a in zip(churn_runs["record"], churn_runs["alone"]) if r and a]
    figures["record.churn_page_faults_per_process"] = (
        med(faults) if len(faults) == len(churn_runs["record"]) else math.nan, "faults", 0)
    # The context switches it adds (voluntary and not, of the whole tree, the daemon's and
    # `record`'s included): the wake-ups a process costs, each a few microseconds of the
    # kernel's and the caches', which no CPU figure above shows apart.
    switches = [(r["switches"] - a["switches"]) / (CHURN_CHILDREN + 1)
                for r, a in zip(churn_runs["record"], churn_runs["alone"]) if r and a]
    figures["record.churn_context_switches_per_process"] = (
        med(switches) if len(switches) == len(churn_runs["record"]) else math.nan, "switches", 1)
    for err in churn_errors:
        print(f"   FAILED {err}")
    sigprof = sum(r["sigprof"] for runs in (fleet_runs, churn_runs) for rs in runs.values()
                  for r in rs if r)
    if sigprof:
        print(f"\nNOTE: {sigprof} children died of SIGPROF (see tests/workloads/bench-fleet.c)")

    print()
    return print_figures(figures)


if __name__ == "__main__":
    sys.exit(main())
