#!/usr/bin/env python3
"""Integration tests of `fleetprof record` (the daemon in-process, around one command) and
`fleetprof capture` (gathering from a running fleetprofd): real processes, real files.

Each record runs with XDG_RUNTIME_DIR pointing into the test's own directory, so the test
can check that record's private directory is gone afterwards.

Usage: test-record.py BUILD_DIR   (TAP output)
"""
import atexit
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import urllib.parse
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pprof_text  # noqa: E402
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import gathering_events, wait_until  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
DAEMON = os.path.join(BUILD, "daemon", "fleetprofd")
CLI = os.path.join(BUILD, "tools", "fleetprof")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
SHORTLIVED = os.path.join(BUILD, "tests", "workloads", "wl-shortlived")
PROFILE_CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profile_check.py")


# ---- helpers ------------------------------------------------------------------------------

_XDG = {}


def xdg_dir(tmp):
    """A short runtime directory per test: record's socket path must fit in 108 bytes (else
    it falls back to /tmp, where the cleanup checks would not look)."""
    if tmp not in _XDG:
        _XDG[tmp] = tempfile.mkdtemp(prefix="fpr-")
    return _XDG[tmp]


@atexit.register
def _remove_xdg_dirs():
    for d in _XDG.values():
        shutil.rmtree(d, ignore_errors=True)


def record_env(tmp):
    xdg = xdg_dir(tmp)
    e = dict(os.environ)
    e["XDG_RUNTIME_DIR"] = xdg
    for k in ("LD_PRELOAD", "FLEETPROF_SOCKET", "FLEETPROF_OUTPUT", "FLEETPROF_LIB"):
        e.pop(k, None)
    return e


def private_dirs(tmp):
    return os.listdir(xdg_dir(tmp))


def record(tmp, *args, timeout=120):
    """Runs `fleetprof record ARGS`; returns the CompletedProcess (text)."""
    return subprocess.run([CLI, "record", *args], env=record_env(tmp), cwd=tmp,
                          capture_output=True, text=True, timeout=timeout)


def check_file(path):
    """The file is a valid profile by profile_check.py (run as a program, as a user would)."""
    assert os.path.exists(path), f"{path} was not written"
    r = subprocess.run([sys.executable, PROFILE_CHECK, path], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"profile_check: {r.stdout}{r.stderr}"
    return pc.load(path)


def processes(doc):
    """The process profiles below the top level (the top level is the daemon's own part)."""
    return doc.get("processes") or []


def process_pid(p):
    pid = ((p.get("meta") or {}).get("fleetprof") or {}).get("pid")
    if pid is None:
        for t in p.get("threads") or []:
            if t.get("name") == "GeckoMain":
                pid = t.get("pid")
    return int(pid) if pid is not None else None


def process_functions(p):
    return {n for t in p.get("threads") or [] for n in pc.frame_names(t)}


def alive(pid):
    """True if pid runs (a zombie nobody reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


cpu_seconds = taplib.cpu_seconds


def wait_for(cond, what, timeout=15):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def kill_quietly(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Daemon:
    """A standalone fleetprofd in the test's directory (as in test-coordination.py)."""

    def __init__(self, tmp, *args):
        self.sock = os.path.join(tmp, "run", "fleetprof.sock")
        self.log_path = os.path.join(tmp, "daemon.log")
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen([DAEMON, "--foreground", "--socket", self.sock,
                                      "--log-level", "debug", *args], stderr=self.log_file)
        wait_for(lambda: os.path.exists(self.sock) or self.proc.poll() is not None,
                 "fleetprofd's socket", 10)
        assert self.proc.poll() is None, f"fleetprofd exited: {self.log()}"

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def status(self):
        r = subprocess.run([CLI, "status", "--socket", self.sock, "--json"],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, f"fleetprof status failed: {r.stderr}"
        return json.loads(r.stdout)

    def wait_children(self, n):
        wait_for(lambda: len(self.status()["children"]) >= n, f"{n} children to join")

    def child_env(self, tmp):
        e = dict(os.environ)
        e.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_SOCKET": self.sock})
        return e

    def capture(self, tmp, out, *args, timeout=60):
        return subprocess.run([CLI, "capture", "--socket", self.sock, "-o", out, *args],
                              capture_output=True, text=True, timeout=timeout, cwd=tmp)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()


# ---- record ----------------------------------------------------------------------------------

def test_help_for_every_command(tmp):
    r = subprocess.run([CLI, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    for cmd in ("record", "capture", "status"):
        assert f"  {cmd}" in r.stdout, f"fleetprof --help does not list {cmd}: {r.stdout}"
        c = subprocess.run([CLI, cmd, "--help"], capture_output=True, text=True, timeout=10)
        assert c.returncode == 0 and c.stdout.startswith("Usage: fleetprof " + cmd), \
            f"fleetprof {cmd} --help: {c.returncode} {c.stdout}{c.stderr}"


def test_record_prefork_fleet(tmp):
    out = os.path.join(tmp, "fleet.json")
    r = record(tmp, "-o", out, "--", WORKLOAD, "prefork", "4", "1")
    assert r.returncode == 0, f"status {r.returncode}: {r.stderr}"
    doc = check_file(out)
    procs = processes(doc)
    assert len(procs) >= 5, f"{len(procs)} processes (master + 4 workers expected): {r.stderr}"
    workers = [p for p in procs if any(f.startswith("wl_worker_task_")
                                       for f in process_functions(p))]
    assert len(workers) >= 4, f"{len(workers)} processes ran wl_worker_task_*"
    tasks = {f for p in workers for f in process_functions(p) if f.startswith("wl_worker_task_")}
    assert tasks == {f"wl_worker_task_{i}" for i in range(4)}, tasks
    assert "wrote " + out in r.stderr, r.stderr
    assert not private_dirs(tmp), f"private directory left behind: {private_dirs(tmp)}"


def test_record_keeps_every_child_that_ends_at_once(tmp):
    """Forked children that _exit as soon as they start: most end before their sampler's first
    tick, so they connect from their exit path and say Hello (with their chunk region's
    descriptor), send their exit profile and close, often before the daemon first reads them.
    Every one is in the file with the exit profile it sent: none lost ("ended without sending
    an exit profile"), none taken for killed and recovered from its chunks. Before, libuv's
    end of stream came right after the Hello (a read with a descriptor ends there), and the
    rest was thrown away: 10 to 20 of 21 processes here, with or without load."""
    n = 40
    out = os.path.join(tmp, "at-once.json")
    for run in range(3):
        r = record(tmp, "--no-summary", "-o", out, "--", SHORTLIVED, str(n), "0")
        assert r.returncode == 0, f"run {run}: status {r.returncode}: {r.stderr}"
        doc = check_file(out)
        procs = processes(doc)
        pids = [process_pid(p) for p in procs]
        masters = [p for p in procs if p["meta"]["fleetprof"]["ppid"] not in pids]
        assert len(masters) == 1, f"run {run}: {len(masters)} processes without a profiled parent"
        master = process_pid(masters[0])
        children = [p for p in procs if p["meta"]["fleetprof"]["ppid"] == master]
        lost = [e[1] for e in gathering_events(doc) if "without" in e[1]]
        assert len(children) == n and len(set(pids)) == len(pids), \
            f"run {run}: {len(children)} of {n} children in the file: {lost}"
        recovered = [process_pid(p) for p in children if p["meta"]["fleetprof"].get("recovered")]
        assert not recovered, f"run {run}: children that exited normally were recovered: " \
                              f"{recovered}: {lost}"
        assert not lost, f"run {run}: {lost}"
        assert all(p["meta"]["fleetprof"].get("exit") for p in children), \
            f"run {run}: a child profile is not an exit profile"


def test_a_process_title_names_the_process(tmp):
    """A program that names itself over its argv (postgres, nginx) is shown by that title,
    in the profile and the summary; one that does not keeps its program name."""
    out = os.path.join(tmp, "title.json")
    r = record(tmp, "-o", out, "--", WORKLOAD, "title", "0.3", "wl: worker busy")
    assert r.returncode == 0, f"status {r.returncode}: {r.stderr}"
    doc = check_file(out)
    names = {t.get("processName") for p in processes(doc) for t in p["threads"]
             if t["name"] == "GeckoMain"}
    assert names == {"wl: worker busy"}, names
    assert {p["meta"]["fleetprof"]["name"] for p in processes(doc)} == {"wl: worker busy"}
    s = subprocess.run([CLI, "summary", out], capture_output=True, text=True, timeout=60)
    assert s.returncode == 0, s.stderr
    (line,) = [x for x in s.stdout.splitlines() if "wl: worker busy" in x]
    assert line.split()[0] == "1" and "wl_hot_leaf" in line, s.stdout[:2000]
    r = record(tmp, "-o", out, "--", WORKLOAD, "busy", "0.1")
    doc = check_file(out)
    names = {p["meta"]["fleetprof"]["name"] for p in processes(doc)}
    assert names == {"workload"}, names
    # The track's label: the program and its arguments.
    labels = {t.get("processName") for p in processes(doc) for t in p["threads"]
              if t["name"] == "GeckoMain"}
    assert labels == {"workload busy 0.1"}, labels


def folded_totals(text):
    """Per pid and per leaf frame, the weights of folded lines; each line splits back into
    process;thread;frames and a positive whole weight."""
    got_proc, got_leaf = {}, {}
    for line in text.splitlines():
        path, count = line.rsplit(" ", 1)
        frames = path.split(";")
        assert len(frames) >= 3 and int(count) > 0, line
        pid = int(frames[0].rsplit("(", 1)[1].rstrip(")"))
        got_proc[pid] = got_proc.get(pid, 0) + int(count)
        got_leaf[frames[-1]] = got_leaf.get(frames[-1], 0) + int(count)
    return got_proc, got_leaf


def test_export_collapsed_totals_equal_the_profiles(tmp):
    """`fleetprof export --format collapsed` of a recorded fleet: every line splits back into
    process;thread;frames and a weight. By default the weight is CPU: per process and per
    leaf function the lines hold the profile's threadCPUDelta (ns), and a thread that waits
    weighs nothing; with --weight samples they hold its samples, waiting ones included (from
    stdin and to -o alike)."""
    out = os.path.join(tmp, "fleet.json")
    r = record(tmp, "--no-summary", "-o", out, "--", WORKLOAD, "prefork", "3", "0.5")
    assert r.returncode == 0, r.stderr
    doc = check_file(out)
    assert doc["meta"]["sampleUnits"]["threadCPUDelta"] == "ns", doc["meta"]["sampleUnits"]
    want_proc, want_leaf, cpu_proc, cpu_leaf = {}, {}, {}, {}
    for p in processes(doc):
        pid = p["meta"]["fleetprof"]["pid"]
        for t in p["threads"]:
            sms, fs = t["samples"]["schema"], t["frameTable"]["schema"]
            for row in t["samples"]["data"]:
                idx = row[sms["stack"]]
                if idx is None:
                    leaf = "(no stack)"
                else:
                    frame = t["stackTable"]["data"][idx][t["stackTable"]["schema"]["frame"]]
                    leaf = t["stringTable"][t["frameTable"]["data"][frame][fs["location"]]]
                want_proc[pid] = want_proc.get(pid, 0) + 1
                leaf = leaf.replace(";", ":")
                want_leaf[leaf] = want_leaf.get(leaf, 0) + 1
                cpu = row[sms["threadCPUDelta"]] or 0
                if cpu:
                    cpu_proc[pid] = cpu_proc.get(pid, 0) + cpu
                    cpu_leaf[leaf] = cpu_leaf.get(leaf, 0) + cpu
    weighted = subprocess.run([CLI, "export", "--format", "collapsed", out],
                              capture_output=True, text=True, timeout=60)
    assert weighted.returncode == 0, weighted.stderr
    got_proc, got_leaf = folded_totals(weighted.stdout)
    assert got_proc == cpu_proc, (got_proc, cpu_proc)
    assert got_leaf == cpu_leaf
    assert max(got_leaf, key=got_leaf.get).startswith("wl_worker_task_"), \
        sorted(got_leaf.items(), key=lambda kv: -kv[1])[:5]
    waiting = sum(want_leaf.values()) - sum(
        1 for p in processes(doc) for t in p["threads"] for row in t["samples"]["data"]
        if row[t["samples"]["schema"]["threadCPUDelta"]])
    folded = os.path.join(tmp, "fleet.folded")
    e = subprocess.run([CLI, "export", "--format", "collapsed", "--weight", "samples", "-o",
                        folded, out], capture_output=True, text=True, timeout=60)
    assert e.returncode == 0, e.stderr
    with open(out) as f:
        piped = subprocess.run([CLI, "export", "--format", "collapsed", "--weight", "samples",
                                "-"], stdin=f, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0, piped.stderr
    text = open(folded).read()
    assert text == piped.stdout
    dash = subprocess.run([CLI, "export", "--format", "collapsed", "--weight", "samples",
                           "-o", "-", out], capture_output=True, text=True, timeout=60, cwd=tmp)
    assert dash.returncode == 0 and dash.stdout == text, dash.stderr
    assert not os.path.exists(os.path.join(tmp, "-")), "-o - wrote a file named -"
    got_proc, got_leaf = folded_totals(text)
    assert got_proc == want_proc, (got_proc, want_proc)
    # The fleet had samples that used no CPU (threads waiting): one each by samples, and
    # nothing by CPU (the totals above).
    assert waiting > 0
    assert got_leaf == want_leaf
    assert any(k.startswith("wl_worker_task_") for k in got_leaf), sorted(got_leaf)[:10]
    bad = subprocess.run([CLI, "export", "--format", "html", out], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "unknown --format" in bad.stderr, bad.stderr
    bad = subprocess.run([CLI, "export", "--format", "collapsed", "--weight", "wall", out],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown --weight" in bad.stderr, bad.stderr


def export(*args, stdin=None):
    return subprocess.run([CLI, "export", *args], stdin=stdin, capture_output=True,
                          timeout=120)


def assert_pprof_matches(pp, doc, pids=None):
    """The decoded pprof pp holds the Gecko profile doc's samples: per process samples and
    CPU ns (threadCPUDelta), per leaf function samples, the same (function, line) frames.
    pids: only those processes of doc."""
    want_pid, want_leaf, want_located = pprof_text.gecko_totals(doc)
    if pids is not None:
        want_pid = {p: v for p, v in want_pid.items() if p in pids}
    got_pid, got_leaf = pp.totals()
    assert got_pid == want_pid, f"per pid [samples, cpu ns]: pprof {got_pid}, gecko {want_pid}"
    if pids is None:
        assert got_leaf == want_leaf, f"per leaf: pprof {got_leaf}, gecko {want_leaf}"
        assert pp.located_functions() == want_located, \
            (pp.located_functions() ^ want_located)
    assert pp.sample_types == [("samples", "count"), ("cpu", "nanoseconds")], pp.sample_types


def test_export_pprof_totals_equal_the_profiles(tmp):
    """`fleetprof export --format pprof` of a recorded fleet, decoded by protoc: per process
    and per leaf function the samples equal the profile's, the CPU equals its threadCPUDelta;
    every sample is labelled; frames keep their lines and their library's mapping."""
    out = os.path.join(tmp, "fleet.json")
    r = record(tmp, "--no-summary", "-o", out, "--", WORKLOAD, "prefork", "3", "0.5")
    assert r.returncode == 0, r.stderr
    doc = check_file(out)
    pb = os.path.join(tmp, "fleet.pb.gz")
    e = export("--format", "pprof", "-o", pb, out)
    assert e.returncode == 0 and not e.stdout, e.stderr
    pp = pprof_text.Pprof(pb)
    assert_pprof_matches(pp, doc)
    assert len(pp.totals()[0]) == 4, f"a master and 3 workers: {pp.totals()[0]}"
    assert {f"wl_worker_task_{i}" for i in range(3)} <= set(pp.totals()[1]), pp.totals()[1]
    assert any(line > 0 for _, line in pp.located_functions()), "no line numbers"
    tree = pp.tree
    assert pp.default_sample_type == "cpu"
    e = export("--format", "pprof", "--weight", "samples", "-o", pb, out)
    assert e.returncode == 0, e.stderr
    by_samples = pprof_text.Pprof(pb)
    assert by_samples.default_sample_type == "samples"
    assert by_samples.totals() == pp.totals(), "--weight changes what is shown first, not what"
    (period_type,) = tree["period_type"]
    assert (pp.s(pprof_text.one(period_type, "type")),
            pp.s(pprof_text.one(period_type, "unit"))) == ("cpu", "nanoseconds")
    assert pprof_text.one(tree, "period") == round(doc["meta"]["interval"] * 1e6)
    assert pprof_text.one(tree, "time_nanos") == round(doc["meta"]["startTime"] * 1e6)
    assert 0.4e9 < pprof_text.one(tree, "duration_nanos") < 60e9, tree.get("duration_nanos")
    # Labels on every sample: the process's pid and name, the thread's name and tid.
    names = {p["meta"]["fleetprof"]["pid"]: p["meta"]["fleetprof"]["name"]
             for p in processes(doc)}
    commands = {p["meta"]["fleetprof"]["pid"]: p["meta"]["product"] for p in processes(doc)}
    for values, locs, labels in pp.samples:
        assert labels["process"] == names[labels["pid"]], labels
        assert labels["thread"] and isinstance(labels["tid"], int), labels
        # Its command line, to tell apart processes of one program (git's subcommands).
        assert labels["command"] == commands[labels["pid"]], labels
        assert labels["command"].startswith(WORKLOAD + " prefork"), labels
    # A worker function's location is in the workload's mapping, named by its path and
    # build id (the lib's codeId).
    lib = next(lib for lib in processes(doc)[1]["libs"] if lib["name"] == "workload")
    (mid,) = {m for f, _, m in pp.locations.values() if f == "wl_worker_task_0"}
    m = pp.mappings[mid]
    assert pp.s(pprof_text.one(m, "filename")) == lib["path"], m
    assert pp.s(pprof_text.one(m, "build_id")) == lib["codeId"], m
    assert pprof_text.one(m, "has_functions") is True, m
    # From standard input to standard output: the same profile.
    with open(out) as f:
        piped = export("--format", "pprof", "-", stdin=f)
    assert piped.returncode == 0, piped.stderr
    piped_path = os.path.join(tmp, "piped.pb.gz")
    with open(piped_path, "wb") as f:
        f.write(piped.stdout)
    assert pprof_text.Pprof(piped_path).text == pp.text


def test_export_pprof_split_one_file_per_process(tmp):
    """--split -o DIR: DIR/<pid>.pb.gz for each process, each with that process's totals."""
    out = os.path.join(tmp, "fleet.json")
    r = record(tmp, "--no-summary", "-o", out, "--", WORKLOAD, "prefork", "2", "0.3")
    assert r.returncode == 0, r.stderr
    doc = check_file(out)
    d = os.path.join(tmp, "split")
    e = export("--format", "pprof", "--split", "-o", d, out)
    assert e.returncode == 0, e.stderr
    pids = [p["meta"]["fleetprof"]["pid"] for p in processes(doc)]
    assert sorted(os.listdir(d)) == sorted(f"{pid}.pb.gz" for pid in pids), os.listdir(d)
    for pid in pids:
        pp = pprof_text.Pprof(os.path.join(d, f"{pid}.pb.gz"))
        assert_pprof_matches(pp, doc, pids={pid})
    e = export("--format", "pprof", "--split", out)
    assert e.returncode == 2 and b"--split needs -o DIR" in e.stderr, e.stderr


def test_record_pprof_writes_the_same_profile_as_export(tmp):
    """record --pprof FILE: FILE is what exporting the JSON it wrote gives."""
    out, pb = os.path.join(tmp, "fleet.json"), os.path.join(tmp, "fleet.pb.gz")
    r = record(tmp, "--no-summary", "-o", out, "--pprof", pb, "--", WORKLOAD, "prefork", "2",
               "0.3")
    assert r.returncode == 0, r.stderr
    assert f"wrote {pb} (pprof" in r.stderr, r.stderr
    doc = check_file(out)
    pp = pprof_text.Pprof(pb)
    assert_pprof_matches(pp, doc)
    again = os.path.join(tmp, "again.pb.gz")
    assert export("--format", "pprof", "-o", again, out).returncode == 0
    assert pprof_text.Pprof(again).text == pp.text
    # An unwritable --pprof is refused before CMD runs.
    marker = os.path.join(tmp, "ran")
    r = record(tmp, "--no-summary", "-o", out, "--pprof", os.path.join(tmp, "no", "x.pb.gz"),
               "--", "touch", marker)
    assert r.returncode == 1 and "cannot write" in r.stderr, r.stderr
    assert not os.path.exists(marker), "CMD ran although --pprof could not be written"


def test_an_output_that_cannot_be_written_is_refused_before_cmd_runs(tmp):
    """-o naming a directory (with or without a slash), a device, a directory that does not
    exist, or a place no file can be created (/proc, even for root): refused at once with
    the reason, CMD not run, nothing left behind."""
    marker = os.path.join(tmp, "ran")
    sub = os.path.join(tmp, "sub")
    os.mkdir(sub)
    cases = [(sub, "not a directory"), (sub + "/", "not a directory"),
             ("/dev/null", "not a regular file"),
             (os.path.join(tmp, "no", "x.json"), "cannot create a file beside it"),
             ("/proc/fleetprof-x.json", "cannot create a file beside it")]
    for out, why in cases:
        r = record(tmp, "--no-summary", "-o", out, "--", "touch", marker)
        assert r.returncode == 1 and why in r.stderr, f"-o {out}: {r.returncode}: {r.stderr}"
        assert not os.path.exists(marker), f"-o {out}: CMD ran"
    assert os.listdir(sub) == [] and sorted(os.listdir(tmp)) == ["sub"], os.listdir(tmp)


def test_a_global_limit_below_one_process_is_refused(tmp):
    """--global-limit below what one process needs (two chunks) would write a file of
    nothing: refused before CMD runs, with the minimum; fleetprofd the same."""
    marker = os.path.join(tmp, "ran")
    for limit in ("1K", "511K"):
        r = record(tmp, "--global-limit", limit, "-o", os.path.join(tmp, "x.json"), "--",
                   "touch", marker)
        assert r.returncode == 2 and "at least 512K" in r.stderr, r.stderr
        assert not os.path.exists(marker), "CMD ran"
    r = subprocess.run([DAEMON, "--foreground", "--global-limit", "1K", "--socket",
                        os.path.join(tmp, "s")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "at least 512K" in r.stderr, r.stderr


def test_numbers_are_decimal_only(tmp):
    """An interval or a size is a decimal number, as typed: strtod()'s hexadecimal ("0x10" was
    taken as 16 ms), exponents and infinities are refused before CMD runs, by record, top and
    the runtime's environment alike; a plain decimal is taken."""
    marker = os.path.join(tmp, "ran")
    for bad in ("0x10", "1e1", "inf", " 1"):
        r = record(tmp, "--interval", bad, "-o", os.path.join(tmp, "x.json"), "--",
                   "touch", marker)
        assert r.returncode == 2 and "a decimal number of milliseconds" in r.stderr, r.stderr
        assert not os.path.exists(marker), f"CMD ran with --interval {bad!r}"
    r = record(tmp, "--global-limit", "0x100M", "-o", os.path.join(tmp, "x.json"), "--",
               "touch", marker)
    assert r.returncode == 2 and not os.path.exists(marker), r.stderr
    r = subprocess.run([CLI, "top", "--once", "--interval", "1e-1"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "a decimal number of seconds" in r.stderr, r.stderr
    env = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_INTERVAL_MS="0x10")
    r = subprocess.run(["true"], env=env, capture_output=True, text=True, timeout=30)
    assert "ignoring FLEETPROF_INTERVAL_MS=0x10: expected a decimal number" in r.stderr, r.stderr
    out = os.path.join(tmp, "ok.json")
    r = record(tmp, "--interval", "0.5", "--no-summary", "-o", out, "--", "touch", marker)
    assert r.returncode == 0 and os.path.exists(marker), r.stderr


def test_every_process_evicted_by_the_limit_is_named(tmp):
    """A global limit that cannot hold the fleet: the exit profiles it evicts before the
    capture are named in its log (before, only evictions during a capture were: the file
    held 1 of 41 processes and its log said nothing of the other 40). Each of the 41 is in
    the file or named as evicted, and the summary counts them."""
    n = 40
    out = os.path.join(tmp, "limited.json")
    # 120 ms each: a sample with its stack every tick of the kernel's (CPU-clock timers), the
    # chunks of 40 such children are more than 1M.
    r = record(tmp, "--global-limit", "1M", "--no-summary", "-o", out, "--", SHORTLIVED, str(n),
               "120")
    assert r.returncode == 0, r.stderr
    doc = check_file(out)
    in_file = {process_pid(p) for p in processes(doc)}
    evicted = {e[2] for e in gathering_events(doc)
               if len(e) > 2 and "evicted by the global" in e[1]}
    assert len(in_file) < n + 1, f"the limit evicted nothing: {len(in_file)} processes"
    assert not in_file & evicted, f"in the file and evicted: {in_file & evicted}"
    assert len(in_file | evicted) == n + 1, \
        f"{len(in_file)} in the file + {len(evicted)} named evicted, of {n + 1}"
    s = subprocess.run([CLI, "summary", out], capture_output=True, text=True, timeout=60)
    assert f"dropped {len(evicted)}." in s.stdout, s.stdout
    # record's last line counts them and names the first.
    kept = f"{len(in_file)} process{'' if len(in_file) == 1 else 'es'}"
    assert f"{kept}, {len(evicted)} lost" in r.stderr, r.stderr
    assert "evicted by the global memory limit" in r.stderr, r.stderr


def test_a_process_outliving_record_exits_silently(tmp):
    """A descendant that ends after record wrote its file and removed its private directory:
    its exit profile has nowhere to go, and it says nothing on the program's stderr."""
    err = os.path.join(tmp, "late.err")
    out = os.path.join(tmp, "out.json")
    r = record(tmp, "--no-summary", "-o", out, "--", "sh", "-c",
               f'( sleep 1; "{WORKLOAD}" busy 0.05; echo finished >&2 ) 2>"{err}" & exit 0')
    assert r.returncode == 0, r.stderr

    def finished():
        with open(err) as f:
            return "finished" in f.read()
    wait_until(finished, "the late descendant's end")
    with open(err) as f:
        text = f.read()
    assert "fleetprof" not in text, f"the program's stderr got: {text!r}"


def test_export_pprof_errors(tmp):
    """Clear one-line errors: unknown format and bad arguments (2), unreadable input or
    unwritable output (1), and no file left behind."""
    good = os.path.join(tmp, "fleet.json")
    r = record(tmp, "--no-summary", "-o", good, "--", WORKLOAD, "busy", "0.1")
    assert r.returncode == 0, r.stderr
    cases = [
        (["--format", "perf", good], 2, "unknown --format"),
        (["--format", "collapsed", "--split", "-o", tmp, good], 2, "--split is for"),
        (["--format", "pprof", os.path.join(tmp, "missing.json")], 1, "missing.json"),
        (["--format", "pprof", "-o", os.path.join(tmp, "no", "x.pb.gz"), good], 1,
         "cannot write"),
        (["--format", "pprof", "--split", "-o", "/proc/fleetprof-split", good], 1,
         "cannot create directory"),
    ]
    notjson = os.path.join(tmp, "bad.json")
    with open(notjson, "w") as f:
        f.write("{not json")
    cases.append((["--format", "pprof", "-o", os.path.join(tmp, "x.pb.gz"), notjson], 1,
                  "not JSON"))
    for args, status, text in cases:
        e = export(*args)
        err = e.stderr.decode()
        assert e.returncode == status and text in err, f"{args}: {e.returncode} {err}"
        assert err.startswith("fleetprof export: "), err
    assert not os.path.exists(os.path.join(tmp, "x.pb.gz"))
    assert not [f for f in os.listdir(tmp) if ".pb.gz" in f], os.listdir(tmp)


def record_demo(tmp, workers, seconds):
    """Records the demo fleet (2 helpers a second) into demo.json; returns (path, document)."""
    demo = os.path.join(BUILD, "tools", "demo", "demo-fleet")
    out = os.path.join(tmp, "demo.json")
    r = record(tmp, "--no-summary", "-o", out, "--", demo, "--workers", str(workers),
               "--seconds", str(seconds), "--helpers-per-sec", "2")
    assert r.returncode == 0, f"status {r.returncode}: {r.stderr}"
    return out, check_file(out)


def test_record_demo_fleet_of_eight_workers(tmp):
    """The issue's fleet test: the demo with 8 workers is one file with >= 9 processes (master
    + workers + helpers), each worker with samples and its own recognisable function."""
    out, doc = record_demo(tmp, 8, 2)
    procs = processes(doc)
    assert len(procs) >= 9, f"{len(procs)} processes for a master and 8 workers"
    jobs = ("demo_worker_compress", "demo_worker_hash", "demo_worker_parse",
            "demo_worker_render")
    workers = [p for p in procs if any(f in jobs for f in process_functions(p))]
    assert len(workers) == 8, f"{len(workers)} processes ran a worker function"
    for p in workers:
        # Eight workers share the machine for 2 s: what each got of it is the machine's
        # business. It is sampled once per millisecond of the CPU it did get.
        (main,) = [t for t in p["threads"] if t["name"] == "GeckoMain"]
        problem = pc.cpu_sampling_problem(p, main)
        assert problem is None, f"worker {p['meta']['fleetprof']['pid']}: {problem}"
        mine = [f for f in process_functions(p) if f in jobs]
        assert len(mine) == 1, f"a worker shows exactly its own job: {mine}"
    assert {f for p in workers for f in process_functions(p) if f in jobs} == set(jobs)


def svg_frames(path):
    """The flame graph's boxes as (label, depth, x, width, tooltip), read as XML."""
    import xml.etree.ElementTree as ET
    ns = {"s": "http://www.w3.org/2000/svg"}
    root = ET.parse(path).getroot()
    out = []
    for g in root.iter("{http://www.w3.org/2000/svg}g"):
        if g.get("class") != "f":
            continue
        rect = g.find("s:rect", ns)
        out.append((g.get("data-n"), int(g.get("data-d")), float(rect.get("x")),
                    float(rect.get("width")), g.find("s:title", ns).text))
    return root, out


def chromium_dom(path, fragment=""):
    """The page as headless Chromium leaves it once its scripts ran (the DOM, serialized);
    fragment: the link's part after '#'."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        raise taplib.Skip("no chromium here (tools/bootstrap.sh --with-servers installs it)")
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                        "--dump-dom", "file://" + path + (f"#{fragment}" if fragment else "")],
                       capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "<svg" in r.stdout, r.stderr[-2000:]
    return r.stdout


def test_export_svg_is_a_flame_graph_a_browser_renders(tmp):
    """`fleetprof export --format svg` of the demo: one self-contained file (no script, style
    or font from elsewhere) whose boxes are as wide as their CPU, the whole fleet's at the
    bottom; each worker function is a box. Headless Chromium runs its script (every box
    taken in hand for zoom and search) and shows each worker function's name."""
    out, doc = record_demo(tmp, 4, 1)
    svg = os.path.join(tmp, "demo.svg")
    e = subprocess.run([CLI, "export", "--format", "svg", "-o", svg, out], capture_output=True,
                       text=True, timeout=60)
    assert e.returncode == 0, e.stderr
    text = open(svg).read()
    assert not re.search(r"(href|src)=|@import|url\(|https?://(?!www\.w3\.org/)", text), \
        "the SVG refers to something outside itself"
    root, frames = svg_frames(svg)
    (all_box,) = [f for f in frames if f[1] == 0]
    total_ms = sum((row[t["samples"]["schema"]["threadCPUDelta"]] or 0)
                   for p in processes(doc) for t in p["threads"] for row in t["samples"]["data"]) / 1e6
    shown_ms = float(re.search(r"\(([0-9.]+) ms, 100\.00%\)", all_box[4])[1])
    assert abs(shown_ms - total_ms) < 0.01, (shown_ms, total_ms)
    # Widths are shares of the CPU: the processes' boxes tile the whole fleet's.
    procs = [f for f in frames if f[1] == 1]
    assert abs(sum(f[3] for f in procs) - all_box[3]) < 0.05 * len(procs) + 0.5, procs
    jobs = ("demo_worker_compress", "demo_worker_hash", "demo_worker_parse", "demo_worker_render")
    labels = {f[0] for f in frames}
    for job in jobs:
        assert any(label.endswith("!" + job) for label in labels), (job, sorted(labels)[:30])
    dom = chromium_dom(svg)
    ready = re.search(r'data-ready="(\d+)"', dom)
    assert ready and int(ready[1]) == len(frames), "the page's script did not run over every box"
    # Each worker function's box, after the script fitted its label: the whole name in its
    # tooltip, and a label the box can hold (its name, or a cut of it where it is narrow).
    boxes = re.findall(r'<g class="f"[^>]*data-n="([^"]*)"[^>]*><title>([^<]*)</title>'
                       r'<rect[^>]*width="([0-9.]+)"[^>]*?/?>(?:</rect>)?'
                       r'<text[^>]*?(?:/>|>([^<]*)</text>)', dom)
    assert len(boxes) == len(frames), (len(boxes), len(frames), dom[:3000])
    for job in jobs:
        mine = [b for b in boxes if b[0].endswith("!" + job)]
        assert mine, (job, [b[0] for b in boxes][:40])
        for name, title, width, label in mine:
            assert title.startswith(name + " ("), (name, title)
            fits = label == name or (label.endswith("..") and name.startswith(label[:-2]))
            assert fits or (label == "" and float(width) < 30), (name, width, label)
        assert any(label == name for name, _, _, label in mine) or \
            max(float(w) for _, _, w, _ in mine) < len(mine[0][0]) * 7.2 + 6, (job, mine)
    # A link that opens it searched: the boxes whose name matches are marked, and the share
    # of the CPU under them is the share of the samples with such a frame on their stack.
    dom = chromium_dom(svg, "search=demo_worker_")
    matched = re.search(r'id="matched"[^>]*>Matched: ([0-9.]+)%<', dom)
    assert matched, dom[:3000]
    with_worker = 0
    for p in processes(doc):
        for t in p["threads"]:
            names = [t["stringTable"][row[t["frameTable"]["schema"]["location"]]]
                     for row in t["frameTable"]["data"]]
            st, ss = t["stackTable"]["data"], t["stackTable"]["schema"]
            sch = t["samples"]["schema"]
            for row in t["samples"]["data"]:
                idx, hit = row[sch["stack"]], False
                while idx is not None and not hit:
                    hit = "demo_worker_" in names[st[idx][ss["frame"]]]
                    idx = st[idx][ss["prefix"]]
                with_worker += (row[sch["threadCPUDelta"]] or 0) if hit else 0
    want = 100 * with_worker / 1e6 / total_ms
    assert abs(float(matched[1]) - want) <= 0.3, (matched[1], want)
    assert dom.count('fill="rgb(230,0,230)"') >= len(jobs), "matching boxes not marked"
    # ... and zoomed: the widest box of that name fills the width, what is neither below nor
    # above it is hidden.
    name = max((f for f in frames if f[0].endswith("!demo_worker_hash")), key=lambda f: f[3])[0]
    dom = chromium_dom(svg, "zoom=" + urllib.parse.quote(name))
    zoomed = [(attrs, re.search(r'data-n="([^"]*)"', attrs)[1], x, w) for attrs, x, w in
              re.findall(r'<g class="f"([^>]*)><title>[^<]*</title>'
                         r'<rect[^>]*x="([0-9.]+)"[^>]*width="([0-9.]+)"', dom)]
    shown = [z for z in zoomed if "display: none" not in z[0]]
    assert len(zoomed) == len(frames) and 0 < len(shown) < len(frames), (len(zoomed), len(shown))
    assert any(n == name and float(x) == 10 and abs(float(w) - 1180) < 0.01
               for _, n, x, w in shown), [z for z in shown if z[1] == name]
    assert all(float(x) >= 10 - 1e-6 and float(x) + float(w) <= 1190 + 0.01
               for _, _, x, w in shown), shown[:10]
    bad = subprocess.run([CLI, "export", "--format", "svg", "--weight", "samples", "-o", svg, out],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 0 and "samples, 100.00%)" in open(svg).read(), bad.stderr


def test_record_exit_status_is_cmds(tmp):
    out = os.path.join(tmp, "p.json")
    r = record(tmp, "-o", out, "--", WORKLOAD, "exit-underscore", "0.3")
    assert r.returncode == 3, f"status {r.returncode} (3 expected): {r.stderr}"
    check_file(out)
    r = record(tmp, "-o", out, "--", "sh", "-c", "kill -KILL $$")
    assert r.returncode == 128 + signal.SIGKILL, f"status {r.returncode}: {r.stderr}"
    assert not private_dirs(tmp), private_dirs(tmp)


def test_record_under_a_file_size_limit_fails_clearly_and_keeps_cmds_status(tmp):
    # The output's write fails with EFBIG (and raises SIGXFSZ, which killed record with
    # status 153 and left its temp file): an error naming the file, CMD's status, no temp.
    out = os.path.join(tmp, "limited.json")

    def limit():
        # Below any profile's size: a busy machine gives the workload fewer samples, and a
        # 13 KiB profile once fitted under 16 KiB.
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 10, 4 << 10))

    r = subprocess.run([CLI, "record", "--no-summary", "-o", out, "--", WORKLOAD,
                        "exit-underscore", "0.3"], env=record_env(tmp), cwd=tmp,
                       capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert r.returncode == 3, f"status {r.returncode} (CMD's 3 expected): {r.stderr}"
    assert "File too large" in r.stderr and out in r.stderr, r.stderr
    assert not [f for f in os.listdir(tmp) if f.startswith("limited.json")], os.listdir(tmp)


def test_a_process_keeps_its_own_smaller_buffer_under_the_daemon(tmp):
    """FLEETPROF_BUFFER_MB=2 on a process recorded with a daemon (whose per-process limit is
    64 MiB) keeps its 2 MiB: its oldest markers go, as without a daemon."""
    fleet = os.path.join(BUILD, "tests", "workloads", "bench-fleet")
    counts = {}
    for mb in ("2", None):
        out = os.path.join(tmp, f"b{mb}.json")
        e = record_env(tmp)
        if mb:
            e["FLEETPROF_BUFFER_MB"] = mb
        r = subprocess.run([CLI, "record", "--no-summary", "-o", out, "--", fleet, "fill",
                            "300000", "1"], env=e, cwd=tmp, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        (p,) = processes(check_file(out))
        counts[mb] = sum(len(t["markers"]["data"]) for t in p["threads"])
    assert counts[None] == 300000, counts
    assert counts["2"] < 100000, counts


def test_record_default_output_name(tmp):
    r = record(tmp, "--", WORKLOAD, "busy", "0.2")
    assert r.returncode == 0, r.stderr
    check_file(os.path.join(tmp, "fleetprof.json"))


def test_record_nonexistent_command(tmp):
    out = os.path.join(tmp, "p.json")
    r = record(tmp, "-o", out, "--", "fleetprof-no-such-command")
    assert r.returncode == 127, f"status {r.returncode}: {r.stderr}"
    assert "cannot run fleetprof-no-such-command" in r.stderr, r.stderr
    assert not os.path.exists(out), "a profile was written for a command that never ran"
    assert not private_dirs(tmp), private_dirs(tmp)
    r = record(tmp)
    assert r.returncode == 2 and "no command" in r.stderr, r.stderr
    # An output nobody can write is refused before CMD runs (not after hours of it).
    marker = os.path.join(tmp, "ran")
    r = record(tmp, "-o", os.path.join(tmp, "missing", "p.json"), "--", "touch", marker)
    assert r.returncode == 1 and "cannot write" in r.stderr, r.stderr
    assert not os.path.exists(marker), "CMD ran although the output cannot be written"


def test_record_gathers_live_descendants_without_waiting(tmp):
    """CMD exits while a descendant still runs: the descendant is gathered live, record does
    not wait for it, and it keeps running."""
    out = os.path.join(tmp, "p.json")
    pidfile = os.path.join(tmp, "pid")
    # CMD exits once the descendant has used 0.2 s of CPU (utime, field 14 of its stat, in
    # clock ticks): it has been sampled in its busy loop by then, however busy the machine.
    ticks = int(0.2 * os.sysconf("SC_CLK_TCK"))
    script = (f"'{WORKLOAD}' busy 20 >/dev/null 2>&1 & echo $! > '{pidfile}'; "
              f"while [ \"$(cut -d' ' -f14 /proc/$!/stat)\" -lt {ticks} ]; do sleep 0.05; done")
    t0 = time.monotonic()
    r = record(tmp, "-o", out, "--", "sh", "-c", script)
    elapsed = time.monotonic() - t0
    with open(pidfile) as f:
        pid = int(f.read())
    try:
        assert r.returncode == 0, r.stderr
        assert elapsed < 10, f"record took {elapsed:.1f} s: it waited for the descendant"
        assert alive(pid), "the descendant did not survive record"
        doc = check_file(out)
        live = [p for p in processes(doc) if process_pid(p) == pid]
        assert live, f"descendant {pid} is not in the profile: {[process_pid(p) for p in processes(doc)]}"
        assert "wl_hot_leaf" in process_functions(live[0]), sorted(process_functions(live[0]))[:20]
    finally:
        kill_quietly(pid)


def start_record(tmp, out, *cmd):
    p = subprocess.Popen([CLI, "record", "-o", out, "--", *cmd], env=record_env(tmp), cwd=tmp,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The command has started and joined once its runtime has connected; let it work for
    # 0.2 s of CPU, so that it has been sampled in its busy loop (waiting for a moment
    # instead fails on a machine busy enough that CMD has not got there yet).
    wait_for(lambda: children_of(p.pid) or p.poll() is not None, "record to start CMD")
    assert p.poll() is None, p.communicate()
    cmd = children_of(p.pid)[0]
    wait_for(lambda: cpu_seconds(cmd) >= 0.2 or p.poll() is not None or not alive(cmd),
             f"CMD {cmd} to use 0.2 s of CPU", 60)
    if p.poll() is not None or not alive(cmd):
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        raise AssertionError(f"CMD {cmd} ended on its own (record: {p.returncode}): {err}")
    return p, cmd


def test_record_sigint_once_writes_and_stops_cmd(tmp):
    out = os.path.join(tmp, "p.json")
    p, cmd = start_record(tmp, out, WORKLOAD, "wait-signal")
    try:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 128 + signal.SIGTERM, f"status {p.returncode}: {err}"
        assert not alive(cmd), "CMD still runs after Ctrl-C"
        doc = check_file(out)
        assert "stopping" in err, err
        mine = [q for q in processes(doc) if process_pid(q) == cmd]
        assert mine, f"CMD {cmd} is not in the profile: {err}"
        assert "wl_hot_leaf" in process_functions(mine[0])
        assert not private_dirs(tmp), private_dirs(tmp)
    finally:
        kill_quietly(cmd)
        if p.poll() is None:
            p.kill()


def test_record_sigint_twice_aborts(tmp):
    out = os.path.join(tmp, "p.json")
    # CMD ignores SIGTERM, so the first Ctrl-C leaves it running for the grace period.
    p, cmd = start_record(tmp, out, "sh", "-c", f"trap '' TERM; exec '{WORKLOAD}' wait-signal")
    try:
        p.send_signal(signal.SIGINT)
        time.sleep(0.3)
        assert p.poll() is None, "record ended after one Ctrl-C although CMD ignores SIGTERM"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 130, f"status {p.returncode}: {err}"
        assert "aborted" in err, err
        assert not os.path.exists(out), "aborted, yet a profile was written"
        wait_for(lambda: not alive(cmd), "CMD to be killed", 5)
        assert not private_dirs(tmp), private_dirs(tmp)
    finally:
        kill_quietly(cmd)
        if p.poll() is None:
            p.kill()


# ---- capture ----------------------------------------------------------------------------------

def test_capture_from_running_daemon(tmp):
    d = Daemon(tmp)
    child = None
    try:
        child = subprocess.Popen([WORKLOAD, "flood", "5", "2000"], env=d.child_env(tmp),
                                 stdout=subprocess.DEVNULL)
        d.wait_children(1)
        time.sleep(0.5)
        out = os.path.join(tmp, "now.json")
        r = d.capture(tmp, "now.json")  # relative: the CLI sends an absolute path
        assert r.returncode == 0, f"status {r.returncode}: {r.stderr}\n{d.log()[-3000:]}"
        assert "wrote " + out in r.stdout, r.stdout
        doc = check_file(out)
        assert any(process_pid(p) == child.pid for p in processes(doc)), \
            f"pid {child.pid} not in {[process_pid(p) for p in processes(doc)]}"
        assert child.poll() is None, "the fleet should keep running during a capture"
    finally:
        if child and child.poll() is None:
            child.kill()
            child.wait()
        d.stop()


def test_second_capture_is_refused_while_one_runs(tmp):
    d = Daemon(tmp, "--child-timeout", "1")
    child = healthy = None
    try:
        # A frozen child makes the first capture wait for it (then give up on it); the
        # healthy one gives it something to write.
        child = subprocess.Popen([WORKLOAD, "idle", "60"], env=d.child_env(tmp),
                                 stdout=subprocess.DEVNULL)
        healthy = subprocess.Popen([WORKLOAD, "busy", "60"], env=d.child_env(tmp),
                                   stdout=subprocess.DEVNULL)
        d.wait_children(2)
        child.send_signal(signal.SIGSTOP)
        first = subprocess.Popen([CLI, "capture", "--socket", d.sock, "-o",
                                  os.path.join(tmp, "a.json"), "--timeout", "2"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert first.poll() is None, f"the first capture ended early: {first.communicate()}"
        second = d.capture(tmp, os.path.join(tmp, "b.json"))
        assert second.returncode == 1, f"status {second.returncode}: {second.stderr}"
        assert "already running" in second.stderr, second.stderr
        assert not os.path.exists(os.path.join(tmp, "b.json"))
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, f"first capture: {first.returncode} {err}"
        doc = check_file(os.path.join(tmp, "a.json"))
        assert any(process_pid(p) == healthy.pid for p in processes(doc))
    finally:
        if child:
            kill_quietly(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
        if healthy:
            healthy.kill()
            healthy.wait()
        d.stop()


def test_capture_pprof(tmp):
    """capture --pprof FILE: the captured profile also as pprof, with the same totals."""
    d = Daemon(tmp)
    child = None
    try:
        child = subprocess.Popen([WORKLOAD, "busy", "60"], env=d.child_env(tmp),
                                 stdout=subprocess.DEVNULL)
        d.wait_children(1)
        wait_for(lambda: cpu_seconds(child.pid) > 0.2, "the child to run 0.2 s of CPU")
        out, pb = os.path.join(tmp, "now.json"), os.path.join(tmp, "now.pb.gz")
        r = d.capture(tmp, out, "--pprof", pb)
        assert r.returncode == 0, f"status {r.returncode}: {r.stderr}\n{d.log()[-3000:]}"
        assert f"wrote {pb} (pprof" in r.stdout, r.stdout
        doc = check_file(out)
        pp = pprof_text.Pprof(pb)
        assert_pprof_matches(pp, doc)
        assert child.pid in pp.totals()[0], pp.totals()[0]
    finally:
        if child and child.poll() is None:
            child.kill()
            child.wait()
        d.stop()


def test_capture_errors(tmp):
    # No daemon: say how to start one.
    r = subprocess.run([CLI, "capture", "--socket", os.path.join(tmp, "none.sock"), "-o",
                        os.path.join(tmp, "x.json")], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 1 and "no daemon is listening" in r.stderr, r.stderr
    # A directory that does not exist: refused before asking the daemon.
    d = Daemon(tmp)
    child = None
    try:
        # A child, so that there is something to write.
        child = subprocess.Popen([WORKLOAD, "busy", "60"], env=d.child_env(tmp),
                                 stdout=subprocess.DEVNULL)
        d.wait_children(1)
        r = d.capture(tmp, os.path.join(tmp, "missing", "x.json"))
        assert r.returncode == 1 and "missing" in r.stderr, r.stderr
        # An unwritable directory: the daemon cannot write, says so, and leaves nothing.
        # (root ignores permission bits: then use /proc, where nobody can create files.)
        if os.geteuid() == 0:
            target_dir = "/proc"
        else:
            target_dir = os.path.join(tmp, "ro")
            os.mkdir(target_dir, 0o500)
        before = set(os.listdir(target_dir))
        r = d.capture(tmp, os.path.join(target_dir, "x.json"))
        assert r.returncode == 1, f"status {r.returncode}: {r.stdout}{r.stderr}"
        assert "capture failed" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(target_dir, "x.json"))
        if target_dir != "/proc":
            assert set(os.listdir(target_dir)) == before, "a temporary file was left behind"
        assert d.proc.poll() is None, "the daemon died"
    finally:
        if child:
            child.kill()
            child.wait()
        d.stop()


def test_capture_of_an_empty_fleet_fails_fast(tmp):
    """No child, no exit profile: the daemon says so at once (it must not leave the CLI
    waiting for a result that was decided before the request was registered)."""
    d = Daemon(tmp)
    try:
        out = os.path.join(tmp, "empty.json")
        try:
            r = d.capture(tmp, out, timeout=20)
        except subprocess.TimeoutExpired:
            raise AssertionError("no answer from the daemon within 20 s") from None
        assert r.returncode == 1 and "capture failed" in r.stderr, r.stderr
        assert not os.path.exists(out)
    finally:
        d.stop()


if __name__ == "__main__":
    taplib.run([
    test_export_collapsed_totals_equal_the_profiles,
        test_export_pprof_totals_equal_the_profiles,
        test_export_pprof_split_one_file_per_process,
        test_record_pprof_writes_the_same_profile_as_export,
        test_an_output_that_cannot_be_written_is_refused_before_cmd_runs,
        test_a_global_limit_below_one_process_is_refused,
        test_every_process_evicted_by_the_limit_is_named,
        test_a_process_outliving_record_exits_silently,
        test_export_pprof_errors,
        test_capture_pprof,
    test_a_process_title_names_the_process,
        test_help_for_every_command,
        test_record_prefork_fleet,
        test_record_keeps_every_child_that_ends_at_once,
        test_record_demo_fleet_of_eight_workers,
    test_record_exit_status_is_cmds,
        test_record_under_a_file_size_limit_fails_clearly_and_keeps_cmds_status,
    test_record_default_output_name,
        test_a_process_keeps_its_own_smaller_buffer_under_the_daemon,
        test_record_nonexistent_command,
        test_record_gathers_live_descendants_without_waiting,
        test_record_sigint_once_writes_and_stops_cmd,
        test_record_sigint_twice_aborts,
        test_capture_from_running_daemon,
        test_second_capture_is_refused_while_one_runs,
        test_capture_errors,
        test_capture_of_an_empty_fleet_fails_fast,
        test_numbers_are_decimal_only,
        test_export_svg_is_a_flame_graph_a_browser_renders,
    ])
