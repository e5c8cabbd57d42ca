#!/usr/bin/env python3
"""Short-lived children, every one of them (issue #31): `fleetprof record` around a master
that starts 200 children, 4 at a time, each working 20 ms of its own thread's CPU in
wl_short_task (tests/workloads/wl-shortlived.c), started by fork, by fork+exec and by
posix_spawn. Each child prints `child PID cpu_ns=NS`, NS its thread's CPU clock once its work
is done. For every child printed, the file must hold:

- its pid: for fork+exec and posix_spawn, the image after the exec (the entry of that pid
  without meta.fleetprof.execdInto; a life before the exec, when the file keeps one, is an
  entry of its own under the same pid, docs/user-guide.md);
- its function: samples of that image with wl_short_task on the stack;
- its CPU: the threadCPUDelta of its main thread's samples (the thread whose tid is the
  pid, in every entry of that pid: its clock runs on across the exec), within 10 % of the
  NS it printed. The thread's own CPU against the profile's CPU of that thread: the
  runtime's own threads, when they show, are neither in NS nor compared. The child's
  exit after its line (the runtime writing its exit profile) is in the profile and not in
  NS; a 20 ms child leaves room for it. An image started by an exec (fork+exec, posix_spawn)
  also has, at most a rounding short of it, all of NS in the profile: its first sample holds
  the CPU before the profiler's start was done (the exec, the loader, the runtime's start),
  and each later one the CPU since the one before.

And the master exited 0 (record's status is its command's) and the file counts the 200
children. What is asserted is what the programs did, never a wall-clock rate: the work is
an amount of CPU, so the test holds beside CPU hogs (`./run stress`).

Usage: test-short-lived.py BUILD_DIR   (meson passes it; output is TAP)
"""
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import gathering_events  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
CLI = os.path.join(BUILD, "tools", "fleetprof")
SHORTLIVED = os.path.join(BUILD, "tests", "workloads", "wl-shortlived")

CHILDREN, CPU_MS, PARALLEL = 200, 20, 4
TOLERANCE = 0.10
# How much of its printed CPU a child's profile may lack (forked, exec'd or spawned: its CPU
# since the fork or exec is all charged): the rounding of its samples' threadCPUDelta to the
# file's unit (25 samples, half a microsecond each at most).
SHORT_MAX_MS = 0.05
RECORD_TIMEOUT_S = 90  # each record takes 2-3 s here, 5-7 s beside two CPU hogs
FUNCTION = "wl_short_task"
CHILD_LINE = re.compile(r"^child (\d+) cpu_ns=(\d+)$")
# The master's, with WL_SHORTLIVED_REAPED: all the CPU a child used (wait4), its exit and
# every thread included: the most any of its threads' profiles can hold.
REAPED_LINE = re.compile(r"^reaped (\d+) cpu_ns=(\d+)$")
# threadCPUDelta units (meta.sampleUnits.threadCPUDelta) -> milliseconds per unit.
MS_PER_UNIT = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0}


def clean_env(tmp):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("FLEETPROF_") and k != "LD_PRELOAD"}
    e["XDG_RUNTIME_DIR"] = os.path.join(tmp, "xdg")
    os.makedirs(e["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    return e


def note(text):
    print(f"# {text}", flush=True)


def fleetprof_meta(p):
    return (p.get("meta") or {}).get("fleetprof") or {}


def thread_cpu_ms(t, scale):
    sms = t["samples"]["schema"]
    assert "threadCPUDelta" in sms, f"thread {t.get('name')}: samples have no threadCPUDelta"
    return sum((row[sms["threadCPUDelta"]] or 0) for row in t["samples"]["data"]) * scale


def samples_text(ps, scale):
    """A process's samples for a failure: (time, CPU ms, leaf-first frames) of each thread's."""
    out = []
    for p in ps:
        for t in p["threads"]:
            sms = t["samples"]["schema"]
            names = pc.frame_names(t)
            st, ss = t["stackTable"]["data"], t["stackTable"]["schema"]
            rows = []
            for row in t["samples"]["data"]:
                frames, idx = [], row[sms["stack"]]
                while idx is not None and len(frames) < 4:
                    frames.append(names[st[idx][ss["frame"]]])
                    idx = st[idx][ss["prefix"]]
                rows.append((round(row[sms["time"]], 2),
                             round((row[sms.get("threadCPUDelta", -1)] or 0) * scale, 3)
                             if "threadCPUDelta" in sms else None, frames))
            out.append((t.get("name"), t.get("tid"), rows[:40]))
    return out


def fleetprof_log(p):
    """The runtime's own counters for a process (profilingLog), for a failure."""
    logs = list((p.get("profilingLog") or {}).values())
    return (logs[0].get("runtime") if logs else None, fleetprof_meta(p))


def has_function(p, function):
    return any(function in stack for t in p.get("threads") or [] for stack in pc.sample_stacks(t))


def record(tmp, how):
    """Runs the 200 children under `fleetprof record`; returns (result, doc, seconds)."""
    out = os.path.join(tmp, f"{how}.json")
    argv = [CLI, "record", "--no-summary", "-o", out, "--", SHORTLIVED, str(CHILDREN),
            str(CPU_MS), how, str(PARALLEL)]
    env = clean_env(tmp)
    env["WL_SHORTLIVED_REAPED"] = "1"
    start = time.monotonic()
    r = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True,
                       timeout=RECORD_TIMEOUT_S)
    took = time.monotonic() - start
    assert r.returncode == 0, \
        f"{' '.join(argv[6:])}: status {r.returncode} (the master's, or record's own)\n" \
        f"{r.stderr[-3000:]}"
    return r, pc.load_valid(out), took


def printed_children(r):
    """{pid: the CPU its thread printed (ms)}, {pid: all the CPU the master reaped (ms)}."""
    printed, reaped, other = {}, {}, []
    for line in r.stdout.splitlines():
        m = CHILD_LINE.match(line)
        got = REAPED_LINE.match(line)
        if m:
            assert int(m[1]) not in printed, f"pid {m[1]} printed twice"
            printed[int(m[1])] = int(m[2]) / 1e6
        elif got:
            reaped[int(got[1])] = int(got[2]) / 1e6
        else:
            other.append(line)
    assert not other, f"lines that are not a child's: {other[:5]}"
    assert len(printed) == CHILDREN, \
        f"{len(printed)} children printed their line, expected {CHILDREN}; the master exited 0"
    assert set(reaped) >= set(printed), \
        f"the master reaped {len(reaped)} children, not all of the {CHILDREN} that printed"
    return printed, reaped


def events_of(doc, pids):
    """The gathering log's events that name one of pids (rendered), for a failure."""
    return [e for e in gathering_events(doc) if len(e) > 2 and e[2] in pids]


def check_children(tmp, how):
    r, doc, took = record(tmp, how)
    printed, reaped = printed_children(r)
    unit = (doc["meta"].get("sampleUnits") or {}).get("threadCPUDelta")
    assert unit in MS_PER_UNIT, f"meta.sampleUnits.threadCPUDelta is {unit!r}"
    scale = MS_PER_UNIT[unit]

    entries = {}  # pid -> its entries (two for a pid that exec'd, when the life before is kept)
    for p in pc.all_processes(doc):
        if p.get("threads") and fleetprof_meta(p).get("pid") is not None:
            entries.setdefault(int(fleetprof_meta(p)["pid"]), []).append(p)
    masters = {pid for pid, ps in entries.items()
               if all(fleetprof_meta(p).get("ppid") not in entries for p in ps)}
    assert len(masters) == 1, \
        f"{len(masters)} processes whose parent is not in the file, expected the master: " \
        f"{sorted(masters)[:10]}"
    master = masters.pop()
    children = {pid for pid, ps in entries.items()
                if pid != master and any(fleetprof_meta(p).get("ppid") == master for p in ps)}

    problems, ratios, befores = [], [], 0
    missing = sorted(set(printed) - set(entries))
    if missing:
        problems.append(
            f"{len(missing)} of {CHILDREN} children are not in the file: {missing[:20]}; the "
            f"gathering log on them: {events_of(doc, set(missing))[:10]}; record said: "
            f"{r.stderr[-1500:]}")
    if len(children) < CHILDREN:
        problems.append(f"the file holds {len(children)} children of the master {master}, "
                        f"expected {CHILDREN}")
    unnamed = []
    for pid, used_ms in sorted(printed.items()):
        if pid not in entries:
            continue
        ps = entries[pid]
        before = [p for p in ps if fleetprof_meta(p).get("execdInto")]
        after = [p for p in ps if not fleetprof_meta(p).get("execdInto")]
        befores += len(before)
        if len(after) != 1:
            problems.append(f"pid {pid}: {len(after)} entries of its last image, expected 1: "
                            f"{[fleetprof_meta(p) for p in ps]}")
            continue
        if not has_function(after[0], FUNCTION):
            unnamed.append(pid)
        mains = [t for p in ps for t in p["threads"] if str(t.get("tid")) == str(pid)]
        if not mains:
            problems.append(f"pid {pid}: no thread with tid {pid} in the file: "
                            f"{[(t.get('name'), t.get('tid')) for p in ps for t in p['threads']]}")
            continue
        got_ms = sum(thread_cpu_ms(t, scale) for t in mains)
        others = [(t.get("name"), t.get("tid")) for p in ps for t in p["threads"]
                  if t not in mains]
        ratios.append((got_ms / used_ms, pid, got_ms, used_ms, len(before), others,
                       reaped[pid]))
    if unnamed:
        problems.append(f"{len(unnamed)} children have no sample with {FUNCTION} on the stack: "
                        f"{unnamed[:20]}; the first's samples: "
                        f"{samples_text(entries[unnamed[0]], scale)}; its runtime log: "
                        f"{[fleetprof_log(p) for p in entries[unnamed[0]]]}")

    ratios.sort()
    short = [x for x in ratios if x[3] - x[2] > SHORT_MAX_MS]
    if short:
        problems.append(
            f"{len(short)} of {len(ratios)} children have less CPU in the profile than their "
            f"thread used; the worst: " + "; ".join(
                f"pid {pid}: profile {got:.2f} ms, printed {used:.2f} ms"
                for _, pid, got, used, _, _, _ in sorted(short, key=lambda x: x[2] - x[3])[:8]))
    # Less than its thread printed: lost; more than the whole process used: made up. (The
    # CPU after the line, its exit, is the thread's too: charged, rightly, to its last stack.)
    off = [x for x in ratios if x[0] < 1 - TOLERANCE or x[2] > x[6] + SHORT_MAX_MS]
    lost = sorted(x[3] - x[2] for x in ratios)
    if ratios:
        note(f"{how}: {len(entries) - 1} pids in the file ({befores} lives before an "
                    f"exec), record took {took:.1f} s; profile/printed CPU: min "
                    f"{ratios[0][0]:.3f}, median {statistics.median(x[0] for x in ratios):.3f}, "
                    f"max {ratios[-1][0]:.3f}; printed minus profile: median "
                    f"{statistics.median(lost):.2f} ms, max {lost[-1]:.2f} ms; the process's "
                    f"whole CPU minus profile: min {min(x[6] - x[2] for x in ratios):.2f} ms")
    if off:
        worst = sorted(off, key=lambda x: -abs(x[0] - 1))[:8]
        problems.append(
            f"{len(off)} of {len(ratios)} children have a CPU in the profile more than "
            f"{TOLERANCE:.0%} below what they printed, or above all their process used; the "
            f"worst: " + "; ".join(
                f"pid {pid}: profile {got:.2f} ms, printed {used:.2f} ms ({ratio - 1:+.1%}), "
                f"the process used {whole:.2f} ms ({nb} lives before an exec, other threads "
                f"{others}; the gathering log on it: {events_of(doc, {pid})[:4]})"
                for ratio, pid, got, used, nb, others, whole in worst))
    assert not problems, "\n".join(problems)


def test_forked_children_each_in_the_file_with_their_cpu(tmp):
    check_children(tmp, "fork")


def test_fork_exec_children_each_in_the_file_with_their_cpu(tmp):
    check_children(tmp, "exec")


def test_spawned_children_each_in_the_file_with_their_cpu(tmp):
    check_children(tmp, "spawn")


LIGHT_AFTER = 8  # FORK_LIGHT_AFTER, child/lifecycle/runtime.c
THREADS_LINE = re.compile(r"^child (\d+) cpu_ns=(\d+) threads_before_exec=(\d+)$")


def test_children_that_exec_at_once_start_nothing_before_it(tmp):
    """A master whose forked children exec at once (one at a time: the lines come in fork
    order). Each child counts its threads just before its exec. The first ones are full
    children (the runtime's sampler thread beside the program's); once LIGHT_AFTER of them
    in a row exec'd before their start was due, the next are light (only the program's
    thread: nothing of ours is made for an exec to throw away). Whether a child is quick
    depends on the machine (a busy one may delay an exec past the start), so the test asks
    for some light children after the first LIGHT_AFTER, not for a number. Every child,
    full or light, is in the file with its function and all the CPU its thread used (a
    light child's life before its exec is in its new image's first sample)."""
    n, cpu_ms = 40, CPU_MS
    out = os.path.join(tmp, "light.json")
    argv = [CLI, "record", "--no-summary", "-o", out, "--", SHORTLIVED, str(n), str(cpu_ms),
            "exec-threads", "1"]
    r = subprocess.run(argv, env=clean_env(tmp), cwd=tmp, capture_output=True, text=True,
                       timeout=RECORD_TIMEOUT_S)
    assert r.returncode == 0, f"status {r.returncode}\n{r.stderr[-3000:]}"
    lines = [THREADS_LINE.match(line) for line in r.stdout.splitlines()]
    assert all(lines) and len(lines) == n, f"expected {n} children's lines:\n{r.stdout[-2000:]}"
    threads = [int(m[3]) for m in lines]
    note(f"threads before the exec, in fork order: {threads}")
    assert threads[0] == 2, f"the first child ran {threads[0]} threads before its exec, " \
        f"expected 2 (its own and the runtime's sampler): {threads}"
    light = [i for i, k in enumerate(threads) if k == 1]
    assert light, f"no child exec'd with its own thread only: {threads}"
    assert min(light) >= LIGHT_AFTER, \
        f"child {min(light)} was light before {LIGHT_AFTER} quick ones: {threads}"
    doc = pc.load_valid(out)
    unit = (doc["meta"].get("sampleUnits") or {}).get("threadCPUDelta")
    scale = MS_PER_UNIT[unit]
    by_pid = {}
    for p in pc.all_processes(doc):
        pid = fleetprof_meta(p).get("pid")
        if pid is not None and p.get("threads"):
            by_pid.setdefault(int(pid), []).append(p)
    problems = []
    for i, m in enumerate(lines):
        pid, used_ms = int(m[1]), int(m[2]) / 1e6
        ps = by_pid.get(pid)
        if not ps:
            problems.append(f"child {i} (pid {pid}, {threads[i]} threads) is not in the file")
            continue
        got_ms = sum(thread_cpu_ms(t, scale) for p in ps for t in p["threads"]
                     if str(t.get("tid")) == str(pid))
        if not any(has_function(p, FUNCTION) for p in ps):
            problems.append(f"child {i} (pid {pid}): no sample in {FUNCTION}")
        if used_ms - got_ms > SHORT_MAX_MS:
            problems.append(f"child {i} (pid {pid}, {threads[i]} threads): profile "
                            f"{got_ms:.2f} ms, printed {used_ms:.2f} ms")
    assert not problems, "\n".join(problems[:10])


if __name__ == "__main__":
    taplib.run([
        test_forked_children_each_in_the_file_with_their_cpu,
        test_fork_exec_children_each_in_the_file_with_their_cpu,
        test_spawned_children_each_in_the_file_with_their_cpu,
        test_children_that_exec_at_once_start_nothing_before_it,
    ])
