#!/usr/bin/env python3
"""Integration tests of `fleetprof summary` on real recordings: a fleet's summary fits a
screen (the demo in 40 lines, 200 short-lived children in 60), ranks by CPU time rather than
by sleeping threads' samples, and its detailed views (--per-process, --pid, --log, --tree)
agree with the profile.

Usage: test-summary.py BUILD_DIR   (TAP output)
"""
import atexit
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import taplib  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "test_record", os.path.join(os.path.dirname(os.path.abspath(__file__)), "test-record.py"))
rec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rec)

BUILD = rec.BUILD
CLI = rec.CLI
WORKLOAD = rec.WORKLOAD
DEMO = os.path.join(BUILD, "tools", "demo", "demo-fleet")
SHORTLIVED = os.path.join(BUILD, "tests", "workloads", "wl-shortlived")
JOBS = ("demo_worker_compress", "demo_worker_hash", "demo_worker_parse", "demo_worker_render")


def summary(path, *args):
    r = subprocess.run([CLI, "summary", *args, path], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"summary {args}: status {r.returncode}: {r.stderr}"
    assert "\x1b" not in r.stdout
    return r.stdout


def summary_json(path, *args):
    return json.loads(summary(path, "--json", *args))


def section(text, title):
    """The lines of the section whose heading starts with title, up to a blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start + 1:end]


_DEMO = {}


@atexit.register
def _remove_demo():
    if "dir" in _DEMO:
        shutil.rmtree(_DEMO["dir"], ignore_errors=True)


def demo_recording(tmp):
    """The bundled demo, recorded once (in a directory of its own, which outlives a test's)
    for the tests that read it."""
    if "path" not in _DEMO:
        _DEMO["dir"] = tempfile.mkdtemp(prefix="fleetprof-summary-demo-")
        out = os.path.join(_DEMO["dir"], "demo.json")
        r = rec.record(tmp, "--no-summary", "-o", out, "--", DEMO, "--workers", "4",
                       "--seconds", "2", "--helpers-per-sec", "5")
        assert r.returncode == 0, f"status {r.returncode}: {r.stderr}"
        rec.check_file(out)
        _DEMO["path"] = out
    return _DEMO["path"]


def test_demo_summary_fits_a_screen(tmp):
    """The demo's summary is at most 40 lines; every worker's function is in it, and the
    exec'd helpers are one program line, not one block each."""
    path = demo_recording(tmp)
    doc = json.load(open(path))
    text = summary(path)
    lines = text.splitlines()
    assert len(lines) <= 40, f"{len(lines)} lines:\n{text}"
    for job in JOBS:
        assert job in text, f"{job} is not in the summary:\n{text}"
    programs = section(text, "Programs (")
    helpers = [line for line in programs if "demo-fleet-helper" in line]
    assert len(helpers) == 1, text
    n_helpers = sum(1 for p in doc["processes"]
                    if p["threads"] and p["meta"]["fleetprof"]["name"] == "demo-fleet-helper")
    assert n_helpers >= 2 and helpers[0].split()[0] == str(n_helpers), (n_helpers, helpers)
    assert "(exec'd child)" in helpers[0], helpers[0]
    assert any("demo-fleet (master)" in line for line in programs), programs
    assert any("demo-fleet (forked worker)" in line for line in programs), programs
    assert "Process " not in text  # no per-process blocks by default
    # The program lines add up to the fleet.
    s = summary_json(path)
    assert sum(p["processes"] for p in s["programs"]) == len(s["processes"])
    assert sum(p["samples"] for p in s["programs"]) == s["samples"]
    assert sum(p["cpuNs"] for p in s["programs"]) == s["cpuNs"] > 0


def test_summary_of_200_short_lived_children(tmp):
    """200 short-lived children: one program line for them all, the whole summary in 60 lines
    (the old summary printed a block per process, about a thousand lines)."""
    out = os.path.join(tmp, "short.json")
    r = rec.record(tmp, "--no-summary", "-o", out, "--", SHORTLIVED, "200", "5", timeout=300)
    assert r.returncode == 0, f"status {r.returncode}: {r.stderr}"
    doc = rec.check_file(out)
    text = summary(out)
    lines = text.splitlines()
    assert len(lines) <= 60, f"{len(lines)} lines:\n{text}"
    programs = section(text, "Programs (")
    (children,) = [line for line in programs if "(forked worker)" in line]
    assert children.split()[0] == "200" and "wl_short_task" in children, programs
    s = summary_json(out)
    assert len(s["processes"]) == 201 and "dropped 0." in text, text
    assert "wl_short_task" in "\n".join(section(text, "Top functions of the fleet"))
    # Each child has one sample without a stack, its CPU before the profiler's start: said
    # in a sentence ("1 sample", reasons with their counts in parentheses).
    (no_stack,) = [line for line in lines if line.strip().startswith("No stack:")]
    assert re.fullmatch(r"  No stack: \d+ samples? \(\d+\.\d\d%\): [^;()]+[^;]*? \(\d+\)"
                        r"(; [^;]+ \(\d+\))*\.", no_stack), no_stack
    assert "before the profiler started" in no_stack, no_stack


def test_processes_of_one_program_are_told_apart_by_command_line(tmp):
    """One program run with different arguments (as git's subcommands are all "git"): its
    program line lists the command lines with how many processes ran each, the most-run
    first (the one run first is listed second); --per-process and --json give each
    process's own."""
    stripped = os.path.join(BUILD, "tests", "workloads", "wl-stripped")
    out = os.path.join(tmp, "commands.json")
    r = rec.record(tmp, "--no-summary", "-o", out, "--", "sh", "-c",
                   f"{stripped} 8 5; {stripped} 5 5; {stripped} 5 5")
    assert r.returncode == 0, f"status {r.returncode}: {r.stderr}"
    text = summary(out)
    programs = section(text, "Programs (")
    (row,) = [i for i, line in enumerate(programs)
              if "wl-stripped" in line and line.split()[0].isdigit()]
    assert programs[row].split()[0] == "3", programs
    assert re.search(r"commands: wl-stripped 5 5 \(2\), wl-stripped 8 5 \(1\)$",
                     programs[row + 1]), programs
    per = summary(out, "--per-process")
    assert per.count(f"  command: {stripped} 5 5\n") == 2, per
    assert per.count(f"  command: {stripped} 8 5\n") == 1, per
    s = summary_json(out)
    commands = sorted(p["command"] for p in s["processes"] if "wl-stripped" in p["name"])
    assert commands == [f"{stripped} 5 5", f"{stripped} 5 5", f"{stripped} 8 5"], commands
    # In the Firefox Profiler, each process's track is labelled by its processName: the
    # program and its arguments.
    with open(out) as f:
        doc = json.load(f)
    labels = sorted(t["processName"] for p in doc["processes"] for t in p["threads"]
                    if t["name"] == "GeckoMain" and p["meta"]["fleetprof"]["name"] == "wl-stripped")
    assert labels == ["wl-stripped 5 5", "wl-stripped 5 5", "wl-stripped 8 5"], labels


def test_the_header_states_the_interval_achieved(tmp):
    """The interval asked is not the interval got: CPU timers fire at the kernel's tick (a
    busy thread at 1 ms gets a stack per 4 ms of CPU on a 250 Hz kernel). The header says
    both, the measured one from the file's own counts (each process's CPU over its
    runtime.handlerCaptures), and --json gives it as measuredIntervalMs; so does each
    process's profilingLog in the file."""
    stripped = os.path.join(BUILD, "tests", "workloads", "wl-stripped")
    out = os.path.join(tmp, "interval.json")
    r = rec.record(tmp, "--no-summary", "-o", out, "--", stripped, "60", "30")
    assert r.returncode == 0, f"status {r.returncode}: {r.stderr}"
    doc = rec.check_file(out)
    captures = cpu_ns = 0
    for p in rec.processes(doc):
        n = sum(v["runtime"]["handlerCaptures"] for v in p["profilingLog"].values())
        captures += n
        if n:
            cpu_ns += sum(row[t["samples"]["schema"]["threadCPUDelta"]] or 0
                          for t in p["threads"] for row in t["samples"]["data"])
    assert captures > 0, "no capture counted in the file"
    head = summary(out).splitlines()[0]
    m = re.search(r", interval 1 ms \(measured: a stack per ([0-9.]+) ms of CPU\)", head)
    assert m, head
    assert abs(float(m[1]) - cpu_ns / 1e6 / captures) < 0.006, (head, cpu_ns, captures)
    assert float(m[1]) >= 0.9, head  # never more often than asked
    assert abs(summary_json(out)["measuredIntervalMs"] - cpu_ns / 1e6 / captures) < 1e-6
    # The file says it too, per process, beside the CPU its samples carry.
    for p in rec.processes(doc):
        for log in p["profilingLog"].values():
            n, cpu = log["runtime"]["handlerCaptures"], log["profileWriter"]["cpuNs"]
            assert cpu == sum(row[t["samples"]["schema"]["threadCPUDelta"]] or 0
                              for t in p["threads"] for row in t["samples"]["data"]), log
            if n:
                assert abs(log["measuredIntervalMs"] - cpu / 1e6 / n) < 1e-6, log
            else:
                assert "measuredIntervalMs" not in log, log


def test_ranked_by_cpu_not_by_sleeping_samples(tmp):
    """A process that sleeps is sampled as often as one that computes: by samples (--wall)
    its sleep comes first; by CPU (the default) the computation does, as `perf report` and
    `pprof -top` would show it."""
    out = os.path.join(tmp, "mixed.json")
    r = rec.record(tmp, "--no-summary", "-o", out, "--", "/bin/sh", "-c",
                   f"{WORKLOAD} idle 1.5 & {WORKLOAD} --cpu busy 0.3; wait")
    assert r.returncode == 0, f"status {r.returncode}: {r.stderr}"
    rec.check_file(out)
    cpu = summary_json(out)
    wall = summary_json(out, "--wall")
    assert cpu["rankedBy"] == "cpu" and wall["rankedBy"] == "samples"
    assert cpu["fleet"]["top"][0]["function"] == "wl_hot_leaf", cpu["fleet"]["top"][:3]
    # The idle process sleeps 1.5 s and the shell waits as long: by samples, a wait comes
    # first (nanosleep, or the shell's wait4 or sigsuspend), one that used next to no CPU.
    sleep = wall["fleet"]["top"][0]
    assert sleep["function"] != "wl_hot_leaf", wall["fleet"]
    assert sleep["selfCpuNs"] * 20 < cpu["fleet"]["top"][0]["selfCpuNs"], (sleep, cpu["fleet"])
    text = summary(out)
    assert "Ranked by CPU time" in text
    top = section(text, "Top functions of the fleet")
    assert top[1].split()[-1] == "workload!wl_hot_leaf", top
    text = summary(out, "--wall")
    assert "Ranked by samples (--wall)" in text
    # The shell that ran them is their master; they are its exec'd children.
    roles = {(p["name"], p["role"]) for p in cpu["processes"]}
    assert ("workload", "exec'd child") in roles and ("sh", "master") in roles, roles


def test_per_process_and_pid_views(tmp):
    path = demo_recording(tmp)
    s = summary_json(path)
    text = summary(path, "--per-process")
    blocks = [line for line in text.splitlines() if line.startswith("Process ")]
    assert len(blocks) == len(s["processes"]), (len(blocks), len(s["processes"]))
    worker = next(p for p in s["processes"] if p["top"] and p["top"][0]["function"] in JOBS)
    one = summary(path, "--pid", str(worker["pid"]))
    blocks = [line for line in one.splitlines() if line.startswith("Process ")]
    assert len(blocks) == 1 and blocks[0].startswith(f"Process {worker['pid']} demo-fleet ")
    assert "forked worker" in blocks[0], blocks[0]
    assert worker["top"][0]["function"] in one
    r = subprocess.run([CLI, "summary", "--pid", "1", path], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "has no process 1" in r.stderr, r.stderr
    only = summary_json(path, "--pid", str(worker["pid"]))
    assert [p["pid"] for p in only["processes"]] == [worker["pid"]]


def test_log_view_has_every_event(tmp):
    path = demo_recording(tmp)
    doc = json.load(open(path))
    (log,) = doc["profileGatheringLog"].values()
    default = summary(path)
    full = summary(path, "--log")
    timeline = [line for line in full.splitlines() if line.strip().startswith("+")
                and " ms  " in line]
    assert len(timeline) == len(log["events"]), (len(timeline), len(log["events"]))
    # The digest counts them; the default summary does not list answered children.
    assert "added the exit profile" not in default and "added the exit profile" in full
    n = len(doc["processes"])
    assert f"answered {n}, no answer 0, no progress 0, dropped 0." in default, default


def test_tree_view(tmp):
    """--tree: per program, the hottest call paths, each node's total at least the sum of
    its children's, and no deeper than --depth."""
    path = demo_recording(tmp)
    text = summary(path, "--tree", "--depth", "6")
    rows = section(text, "Call tree")
    assert rows, text
    parsed = []
    for row in rows:
        if row.strip().startswith("..."):
            continue
        total, self_, rest = row[2:9], row[10:17], row[19:]
        depth = (len(rest) - len(rest.lstrip(" "))) // 2
        parsed.append((float(total.strip(" %")), float(self_.strip(" %")), depth,
                       rest.strip()))
    assert max(d for _, _, d, _ in parsed) <= 5
    assert any(name == "demo-fleet (forked worker)" and d == 0 for _, _, d, name in parsed)
    for i, (total, self_, depth, name) in enumerate(parsed):
        assert self_ <= total + 0.05, (name, total, self_)
        kids = []
        for t2, _, d2, _ in parsed[i + 1:]:
            if d2 <= depth:
                break
            if d2 == depth + 1:
                kids.append(t2)
        assert sum(kids) <= total + 0.05 * (len(kids) + 1), (name, total, kids)
    # Each root is printed rounded to 0.1 %, so each may add up to 0.05 to the sum: the
    # demo's three roots (worker, helper, master) once summed above 100.05.
    roots = [t for t, _, d, _ in parsed if d == 0]
    assert sum(roots) <= 100 + 0.05 * len(roots), roots
    deep = summary(path, "--tree")
    assert any(job in deep for job in JOBS), deep


def test_the_digest_counts_by_kind_not_by_words(tmp):
    """The gathering log's events are typed: a process's name is an argument, never the
    daemon's words, so a program named "dropped-lost" that answered is counted as answered
    (before, the summary searched the text and counted it as dropped)."""
    prog = os.path.join(tmp, "dropped-lost")
    os.symlink(WORKLOAD, prog)
    out = os.path.join(tmp, "named.json")
    r = rec.record(tmp, "--no-summary", "-o", out, "--", prog, "busy", "0.1")
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        doc = json.load(f)
    (log,) = doc["profileGatheringLog"].values()
    named = [e for e in log["events"] if len(e) > 2 and isinstance(e[2], dict)
             and e[2].get("name") == "dropped-lost"]
    assert named and all("dropped-lost" not in e[1] for e in named), named
    assert all(isinstance(e[2], dict) and e[2].get("kind") for e in log["events"]), log
    text = summary(out)
    assert "answered 1, no answer 0, no progress 0, dropped 0." in text, text


if __name__ == "__main__":
    taplib.run([
        test_the_digest_counts_by_kind_not_by_words,
        test_demo_summary_fits_a_screen,
        test_summary_of_200_short_lived_children,
        test_processes_of_one_program_are_told_apart_by_command_line,
        test_the_header_states_the_interval_achieved,
        test_ranked_by_cpu_not_by_sleeping_samples,
        test_per_process_and_pid_views,
        test_log_view_has_every_event,
        test_tree_view,
    ])
