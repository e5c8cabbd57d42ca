#!/usr/bin/env python3
"""Integration tests of the file commands: `fleetprof summary` and `fleetprof merge` on
profiles the runtime really wrote (a preloaded workload, the demo fleet) and on hand-made
ones (gathering logs, odd numbers, bad inputs); and the demo fleet itself. Every profile
merge writes is loaded and checked like the front-end would (profile_check.py), and
summary's numbers are cross-checked against profile_check's own reading of the samples.

Usage: test-tools.py BUILD_DIR   (meson passes it; output is TAP)
"""
import collections
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
FLEETPROF = os.path.join(BUILD, "tools", "fleetprof")
DEMO = os.path.join(BUILD, "tools", "demo", "demo-fleet")
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")


def _sanitized():
    with open(os.path.join(BUILD, "meson-info", "intro-buildoptions.json")) as f:
        opts = {o["name"]: o["value"] for o in json.load(f)}
    return opts.get("b_sanitize", "none") != "none"


# A sanitized libfleetprof.so cannot be preloaded (the sanitizer runtime must come first and
# calls our interposed dl_iterate_phdr before we are initialized): the tests that need the
# runtime to write profiles only run in ordinary builds, and say so in a TAP comment.
SANITIZED = _sanitized()


def needs_runtime(test):
    def wrapper(tmp):
        if SANITIZED:
            print(f"# {test.__name__}: skipped in a sanitized build (no preloading)")
            return
        test(tmp)
    wrapper.__name__ = test.__name__
    return wrapper


def run(argv, timeout=60, preload_into=None, preexec_fn=None):
    """Runs argv; with preload_into=DIR, profiled by the runtime into DIR/p-<pid>.json."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload_into:
        env.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1",
                    "FLEETPROF_OUTPUT": os.path.join(preload_into, "p-%p.json")})
    try:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                              preexec_fn=preexec_fn)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{argv} still running after {timeout}s") from e


def fleetprof(*args, **kw):
    return run([FLEETPROF, *args], **kw)


def load_checked(path):
    doc = pc.load(path)
    problems = pc.check_profile(doc)
    assert not problems, f"{path} is not a valid profile:\n" + "\n".join(problems[:20])
    return doc


def profiles(tmp):
    return sorted(glob.glob(os.path.join(tmp, "p-*.json")))


def leaf_counts(proc):
    """Self samples per function name of one process profile, by profile_check's reading
    (samples without a stack are counted under None)."""
    counts = collections.Counter()
    for t in proc["threads"]:
        for stack in pc.sample_stacks(t):
            counts[stack[-1]] += 1
        sms = t["samples"]["schema"]
        counts[None] += sum(1 for row in t["samples"]["data"] if row[sms["stack"]] is None)
    return counts


def summary_json(path, *args):
    r = fleetprof("summary", "--json", *args, path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# A hand-made profile (shared/gecko-format.md section 12, with our fleetprof meta).

CATEGORIES = [{"name": "Other", "color": "grey", "subcategories": ["Other"]},
              {"name": "Native", "color": "yellow", "subcategories": ["Other"]}]


def make_process(pid, name, start, leaves, exit_profile=None, top=True):
    """A one-thread process whose samples end in leaves[i] (None: a sample without stack)."""
    funcs = sorted({f for f in leaves if f is not None})
    strings = ["main (in app)"] + [f"{f} (in app)" for f in funcs]
    frames = [[i, False, 0, None, None, None, 1, 0] for i in range(len(strings))]
    stacks = [[None, 0]] + [[0, i + 1] for i in range(len(funcs))]
    samples = [[None if f is None else funcs.index(f) + 1, float(i), 0]
               for i, f in enumerate(leaves)]
    meta = {"version": 36, "startTime": start, "shutdownTime": None, "categories": CATEGORIES,
            "markerSchema": [], "interval": 1, "product": name, "presymbolicated": True,
            "fleetprof": {"pid": pid}}
    if exit_profile is not None:
        meta["fleetprof"]["exit"] = exit_profile
    return {
        "meta": meta, "libs": [], "pausedRanges": [], "processes": [],
        "threads": [{
            "name": "GeckoMain", "processType": "default", "processName": name, "pid": pid,
            "tid": pid, "registerTime": 0, "unregisterTime": None, "stringTable": strings,
            "frameTable": {"schema": {"location": 0, "relevantForJS": 1, "innerWindowID": 2,
                                      "implementation": 3, "line": 4, "column": 5,
                                      "category": 6, "subcategory": 7}, "data": frames},
            "stackTable": {"schema": {"prefix": 0, "frame": 1}, "data": stacks},
            "samples": {"schema": {"stack": 0, "time": 1, "eventDelay": 2}, "data": samples},
            "markers": {"schema": {"name": 0, "startTime": 1, "endTime": 2, "phase": 3,
                                   "category": 4, "data": 5}, "data": []}}],
        "profilingLog": {str(pid): {"profileWriter": {"decodeErrors": 0, "unresolvedFrames": 0},
                                    "runtime": {"failedPuts": 0}}},
    }


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


# summary

@needs_runtime
def test_summary_of_a_runtime_profile(tmp):
    # 0.5 s of CPU in wl_hot_leaf, however long a busy machine makes that take: its share
    # of the samples does not shrink when the program waits for a CPU.
    r = run([WORKLOAD, "--cpu", "busy", "0.5"], preload_into=tmp)
    assert r.returncode == 0, r.stderr
    (path,) = profiles(tmp)
    doc = load_checked(path)
    expected = leaf_counts(doc)
    total = sum(len(t["samples"]["data"]) for t in doc["threads"])

    s = summary_json(path)
    (proc,) = s["processes"]
    assert proc["pid"] == doc["meta"]["fleetprof"]["pid"]
    assert proc["name"] == "workload", proc["name"]
    assert proc["exit"] == bool(doc["meta"]["fleetprof"].get("exit")), proc
    assert proc["samples"] == total == s["samples"], (proc["samples"], total)
    top = proc["top"][0]
    assert top["function"] == "wl_hot_leaf" and top["lib"] == "workload", proc["top"]
    assert top["samples"] == expected["wl_hot_leaf"], (top, expected)
    assert top["percent"] >= 80, f"wl_hot_leaf has only {top['percent']}% of the samples"
    for f in proc["top"]:
        name = f["function"] if f["function"] != "(no stack)" else None
        assert f["samples"] == expected[name], (f, expected)
    assert s["fleet"]["top"][0]["function"] == "wl_hot_leaf"

    r = fleetprof("summary", path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{path}: 1 process, {total} samples"), lines[0]
    assert lines[1].startswith("Ranked by CPU time"), lines[1]
    (program,) = [line for line in lines if line.endswith("%") and " workload " in line]
    assert program.split()[:2] == ["1", "100.0%"] and "wl_hot_leaf" in program, r.stdout
    r = fleetprof("summary", "--per-process", path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Process "))
    assert lines[first].startswith(f"Process {proc['pid']} workload ("), lines[first]
    assert lines[first + 1].split() == ["SELF%", "TOTAL%", "SELF", "ms", "FUNCTION"]
    assert lines[first + 2].split()[-1] == "workload!wl_hot_leaf", lines[first + 2]


def test_summary_top_option_and_json_document(tmp):
    leaves = ["hot"] * 6 + ["warm"] * 3 + ["cold"] + [None] * 2
    path = write_json(os.path.join(tmp, "p.json"), make_process(42, "app", 1e12, leaves))
    s = summary_json(path, "--top", "2")
    (proc,) = s["processes"]
    assert [(f["function"], f["samples"]) for f in proc["top"]] == [("hot", 6), ("warm", 3)]
    assert proc["top"][0]["percent"] == 50 and proc["samples"] == 12
    assert proc["exit"] is False
    s = summary_json(path, "--top", "10")
    names = [f["function"] for f in s["processes"][0]["top"]]
    assert names == ["hot", "warm", "(no stack)", "cold"], names
    assert summary_json(path, "--top", "0")["processes"][0]["top"] == []
    assert s["gatheringLogs"] == [] and s["profilingLog"][0]["problems"] == {}


def test_summary_names_unnamed_code_by_module_and_offset(tmp):
    # Code no symbol covers is "<module>+0x<offset> (in <module>)" in the file, with the vdso
    # caller when known (profile/gecko.h): the summary keeps the library, and prints
    # the name once, not as "libfoo.so!libfoo.so+0x1a2c".
    doc = make_process(42, "app", 1e12, ["a"] * 3 + ["b"] * 2 + ["c"])
    doc["threads"][0]["stringTable"] = [
        "main (in app)", "libfoo.so+0x1a2c (in libfoo.so)",
        "[vdso]+0x8f0 (called from __vdso_clock_gettime) (in [vdso])", "hot (in app)"]
    path = write_json(os.path.join(tmp, "p.json"), doc)
    (proc,) = summary_json(path)["processes"]
    top = [(f["function"], f["lib"], f["samples"]) for f in proc["top"]]
    assert top == [("libfoo.so+0x1a2c", "libfoo.so", 3),
                   ("[vdso]+0x8f0 (called from __vdso_clock_gettime)", "[vdso]", 2),
                   ("hot", "app", 1)], top
    r = fleetprof("summary", path)
    assert r.returncode == 0, r.stderr
    table = r.stdout[r.stdout.index("Top functions of the fleet"):].splitlines()[2:]
    lines = [line.split(None, 3)[3] for line in table if line.startswith("  ") and "%" in line]
    assert lines[:3] == ["libfoo.so+0x1a2c", "[vdso]+0x8f0 (called from __vdso_clock_gettime)",
                         "app!hot"], r.stdout


def gathering_fleet():
    top = make_process(100, "master", 1000.0, ["serve"] * 4)
    workers = [make_process(101, "worker", 1001.0, ["crunch"] * 8, exit_profile=False),
               make_process(102, "worker", 1002.0, ["crunch"] * 2 + ["io"] * 2),
               make_process(103, "helper", 1003.0, ["burst"] * 3, exit_profile=True)]
    top["processes"] = workers
    for w in workers:
        del w["profilingLog"]
    top["profilingLog"]["100"]["profileWriter"]["unresolvedFrames"] = 3
    top["profilingLog"]["7"] = {"updates": [[101, 1, 1], [101, 2, -1], [102, 3, 0]]}
    top["profileGatheringLog"] = {"7": {"begin": 5000.5, "end": 7010.25, "events": [
        [5000.7, "asked child {pid} ({name}) for its profile", {"pid": 101, "name": "worker"}],
        [5000.8, "asked child {pid} for its profile", {"pid": 102}],
        [5000.9, "asked child for its profile", 104],
        [5012.3, "received profile from {pid}", {"pid": 101, "bytes": 52311}],
        [7004.1, "gave up on pending children: no progress", {"pending": [102, 104]}],
        [7004.2, "dropped exit profile of {pid}", {"pid": 105, "reason": "evicted by the limit"}],
        [7005, "expired exit profile", 106],
        [7006, "child 107 ended without sending an exit profile", 107],
        [7010, "wrote \u001b[31mfleet.json"],
    ]}}
    return top


def test_summary_prints_gathering_log_and_digest(tmp):
    path = write_json(os.path.join(tmp, "fleet.json"), gathering_fleet())
    r = fleetprof("summary", path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "\x1b" not in out, "a control character from the file reached the terminal"
    # By default, a digest: counts, then each event that needs reading once.
    for expected in [
        "Gathering (daemon 7, 2009.8 ms, 9 events): answered 1, no answer 2, no progress 2, "
        "dropped 3.\n",
        "  no answer from 102 (worker), 104\n",
        "  1x gave up on pending children: no progress  pending=[102, 104]\n",
        "  1x dropped exit profile of 105  reason=evicted by the limit\n",
        "  1x child 107 ended without sending an exit profile\n",
        "Problems (profilingLog): unresolvedFrames 3 (1 process), evicted chunks 1 (1 log).",
    ]:
        assert expected in out, f"missing {expected!r} in:\n{out}"
    assert "asked child" not in out and "received profile" not in out, out
    r = fleetprof("summary", "--log", "--per-process", path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "\x1b" not in out, "a control character from the file reached the terminal"
    for expected in [
        "Gathering log of daemon 7 (2009.8 ms, 9 events):",
        "+2005.5 ms  child 107 ended without sending an exit profile\n",
        "+0.2 ms  asked child 101 (worker) for its profile",
        "+0.3 ms  asked child 102 for its profile",
        "+0.4 ms  asked child for its profile  104",
        "+11.8 ms  received profile from 101  bytes=52311",
        "+2003.6 ms  gave up on pending children: no progress  pending=[102, 104]",
        "+2003.7 ms  dropped exit profile of 105  reason=evicted by the limit",
        "+2009.5 ms  wrote ?[31mfleet.json",
    ]:
        assert expected in out, f"missing {expected!r} in:\n{out}"
    digest = out[out.index("Digest:"):]
    lines = {line.split(":")[0].strip(): line for line in digest.splitlines()[1:] if ":" in line}
    assert "101 (worker), 102 (worker), 104" in lines["waited for"], digest
    assert lines["answered"].endswith("101 (worker)"), digest
    assert lines["no answer"].endswith("102 (worker), 104"), digest
    assert lines["no progress / gave up"].endswith("102 (worker), 104"), digest
    assert "105: evicted by the limit" in digest and "106: expired exit profile  106" in digest
    assert "107: child 107 ended without sending an exit profile" in digest
    assert "pid 100 (master): unresolvedFrames 3" in out, out
    assert "pid 7: evicted chunks 1 (of 3 controller updates)" in out, out
    assert "Process 103 helper (exit profile, 1 thread, 3 samples)" in out, out
    assert "Process 101 worker (live, 1 thread, 8 samples)" in out, out

    s = summary_json(path)
    assert [p["pid"] for p in s["processes"]] == [100, 101, 102, 103]
    assert [p["exit"] for p in s["processes"]] == [False, False, False, True]
    top = s["fleet"]["top"][0]
    assert {k: top[k] for k in ("function", "lib", "samples", "percent", "totalSamples")} == {
        "function": "crunch", "lib": "app", "samples": 10, "percent": 52.63,
        "totalSamples": 10}, top
    assert s["rankedBy"] == "samples" and s["cpuNs"] is None  # no CPU deltas in the file
    assert [(p["name"], p["processes"], p["samples"]) for p in s["programs"]] == [
        ("worker", 2, 12), ("master", 1, 4), ("helper", 1, 3)], s["programs"]
    (log,) = s["gatheringLogs"]
    assert log["daemon"] == "7" and log["begin"] == 5000.5 and log["end"] == 7010.25
    assert log["digest"] == {"waitedFor": [101, 102, 104], "answered": [101],
                             "noAnswer": [102, 104], "noProgress": [102, 104],
                             "dropped": [{"pid": 105, "reason": "evicted by the limit"},
                                         {"pid": 106, "reason": "expired exit profile  106"},
                                         {"pid": 107, "reason": "child 107 ended without "
                                                                "sending an exit profile"}]}
    assert [e["class"] for e in log["events"]] == ["waitedFor"] * 3 + [
        "answered", "noProgress", "dropped", "dropped", "dropped", None]
    assert abs(log["events"][3]["ms"] - 11.8) < 1e-6 and log["events"][4]["pids"] == [102, 104]
    logs = {e["pid"]: e for e in s["profilingLog"]}
    assert logs["100"]["problems"] == {"unresolvedFrames": 3}
    assert logs["7"]["controllerEvictions"] == 1 and logs["7"]["controllerUpdates"] == 3


def test_summary_errors(tmp):
    r = fleetprof("summary", os.path.join(tmp, "missing.json"))
    assert r.returncode == 1 and "missing.json: No such file or directory" in r.stderr, r.stderr
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write('{"meta": {"version": 36},\n  "threads": [1, 2,, 3]}\n')
    r = fleetprof("summary", bad)
    assert r.returncode == 1, r
    assert "bad.json: not JSON: line 2, column 20: unexpected ','" in r.stderr, r.stderr
    with open(bad, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
    r = fleetprof("summary", bad)
    assert r.returncode == 1 and "not JSON: line 1, column 1" in r.stderr, r.stderr
    nometa = write_json(os.path.join(tmp, "nometa.json"), {"threads": []})
    r = fleetprof("summary", nometa)
    assert r.returncode == 1 and "not a Gecko profile (no meta field)" in r.stderr, r.stderr
    r = fleetprof("summary", tmp)
    assert r.returncode == 1 and "Is a directory" in r.stderr, r.stderr
    for args in [[], ["a", "b"], ["--bogus", nometa]]:
        r = fleetprof("summary", *args)
        assert r.returncode == 2 and "Usage: fleetprof summary" in r.stderr, (args, r)
        assert r.stdout == ""
    r = fleetprof("summary", "--top", "x", nometa)
    assert r.returncode == 2 and "--top wants a number from 0 to" in r.stderr, r


def test_summary_survives_malformed_tables(tmp):
    doc = make_process(42, "app", 1e12, ["a", "b", "b"])
    t = doc["threads"][0]
    t["samples"]["data"] += [[99, 4.0, 0], ["x", 5.0, 0], [1.5, 6.0, 0], [], 7]
    t["stackTable"]["data"].append([0, 1000])
    t["samples"]["data"].append([len(t["stackTable"]["data"]) - 1, 8.0, 0])
    t["frameTable"]["data"].append([5000, False, 0, None, None, None, 0, 0])
    t["stackTable"]["data"].append([0, len(t["frameTable"]["data"]) - 1])
    t["samples"]["data"].append([len(t["stackTable"]["data"]) - 1, 9.0, 0])
    doc["processes"] = [{"meta": 5, "threads": "no"}, 17, {"threads": [{"samples": None}]}]
    path = write_json(os.path.join(tmp, "p.json"), doc)
    s = summary_json(path)
    proc = s["processes"][0]
    # 5 bad sample rows, a stack with a bad frame, a frame with a bad location string.
    assert proc["samples"] == 10 and proc["invalidSamples"] == 7, proc
    assert {f["function"]: f["samples"] for f in proc["top"]} == {"b": 2, "a": 1}, proc["top"]
    assert len(s["processes"]) == 4
    r = fleetprof("summary", path)
    assert r.returncode == 0 and "invalid stack indexes (7)." in r.stdout, r
    r = fleetprof("summary", "--per-process", path)
    assert r.returncode == 0 and "7 samples have invalid stack" in r.stdout, r


# merge

@needs_runtime
def test_merge_demo_fleet(tmp):
    r = run([DEMO, "--seconds", "2", "--workers", "2", "--helpers-per-sec", "2"],
            preload_into=tmp, timeout=60)
    assert r.returncode == 0, r.stderr
    workers = {int(line.split()[4]): line.split()[-1] for line in r.stdout.splitlines()
               if line.startswith("demo-fleet: worker")}
    assert sorted(workers.values()) == ["demo_worker_compress", "demo_worker_hash"], r.stdout
    inputs = profiles(tmp)
    assert len(inputs) >= 5, f"expected master, 2 workers and helpers, got {inputs}"
    master = int(r.stdout.split()[2])

    out = os.path.join(tmp, "fleet.json")
    m = fleetprof("merge", "-o", out, *inputs)
    assert m.returncode == 0, m.stderr
    assert f"{len(inputs)} processes from {len(inputs)} files" in m.stdout, m.stdout
    assert m.stderr == "", m.stderr
    check = subprocess.run([sys.executable, pc.__file__, out], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    doc = load_checked(out)
    procs = list(pc.all_processes(doc))
    assert len(procs) == len(inputs) >= 3
    assert doc["meta"]["fleetprof"]["pid"] == master, "the earliest process is not the top"
    assert all(p["processes"] == [] for p in doc["processes"])
    assert all("profilingLog" not in p for p in doc["processes"])
    assert sorted(doc["profilingLog"]) == sorted(str(p["meta"]["fleetprof"]["pid"]) for p in procs)
    funcs = pc.functions(doc)
    for f in ["demo_worker_compress", "demo_worker_hash", "demo_descend", "demo_worker_main"]:
        assert f in funcs, f"{f} not in the merged profile"
    assert {"demo_helper_task", "demo_forked_helper"} & funcs, "no helper function"
    # Each input is in the output unchanged (numbers included).
    by_pid = {p["meta"]["fleetprof"]["pid"]: p for p in procs}
    for path in inputs:
        src = pc.load(path)
        proc = by_pid[src["meta"]["fleetprof"]["pid"]]
        got = dict(proc)
        del src["profilingLog"]
        if proc is doc:  # the top level: it gained the others and their logs
            del got["profilingLog"]
            got["processes"] = []
        assert got == src, f"{path} changed in the merge"

    s = summary_json(out)
    tops = {p["pid"]: p["top"][0]["function"] for p in s["processes"] if p["top"]}
    for pid, func in workers.items():
        assert tops[pid] == func, (pid, tops)
    assert all(p["exit"] for p in s["processes"]), "the runtime's profiles are exit profiles"


def test_merge_top_is_earliest_and_fleets_are_flattened(tmp):
    a = write_json(os.path.join(tmp, "a.json"), make_process(2, "late", 2000.5, ["x"]))
    b = write_json(os.path.join(tmp, "b.json"), make_process(1, "early", 1000.25, ["y"]))
    c = write_json(os.path.join(tmp, "c.json"), make_process(3, "later", 3000, ["z"]))
    ab = os.path.join(tmp, "ab.json")
    assert fleetprof("merge", "-o", ab, a, b).returncode == 0
    doc = load_checked(ab)
    assert doc["meta"]["fleetprof"]["pid"] == 1
    assert [p["meta"]["fleetprof"]["pid"] for p in doc["processes"]] == [2]
    assert sorted(doc["profilingLog"]) == ["1", "2"]
    # Merging a merged file with another: sub-processes are lifted to the top level.
    abc = os.path.join(tmp, "abc.json")
    r = fleetprof("merge", "-o", abc, c, ab)
    assert r.returncode == 0 and "3 processes from 2 files" in r.stdout, r
    doc = load_checked(abc)
    assert doc["meta"]["fleetprof"]["pid"] == 1
    assert [p["meta"]["fleetprof"]["pid"] for p in doc["processes"]] == [2, 3]
    assert sorted(doc["profilingLog"]) == ["1", "2", "3"]
    # Two gathered fleets: the later one's daemon part (no threads) is not a process.
    fleets = []
    for n, start in ((10, 4000), (20, 5000)):
        top = make_process(n, "fleetprofd", start, [])
        top["threads"] = []
        top["processes"] = [make_process(n + 1, "w", start + 1, ["w"]),
                            make_process(n + 2, "w", start + 2, ["w"])]
        top["profileGatheringLog"] = {str(n): {"begin": 0, "end": 1, "events": []}}
        fleets.append(write_json(os.path.join(tmp, f"fleet{n}.json"), top))
    both = os.path.join(tmp, "both.json")
    r = fleetprof("merge", "-o", both, *fleets)
    assert r.returncode == 0 and "4 processes from 2 files" in r.stdout, r
    doc = load_checked(both)
    assert [p["meta"]["fleetprof"]["pid"] for p in doc["processes"]] == [11, 12, 21, 22]
    assert sorted(doc["profileGatheringLog"]) == ["10", "20"]
    # The same pid twice keeps both log entries.
    r = fleetprof("merge", "-o", os.path.join(tmp, "twice.json"), a, a)
    assert r.returncode == 0, r
    assert f"warning: {a}: pid 2 is already in the output" in r.stderr, r.stderr
    assert sorted(pc.load(os.path.join(tmp, "twice.json"))["profilingLog"]) == ["2", "2#2"]


def test_merge_keeps_numbers_and_strings_exactly(tmp):
    a = make_process(1, "app", 1000, ["f"])
    b = make_process(2, "app", 2000, ["g"])
    text_a = json.dumps(a).replace('"startTime": 1000', '"startTime": 1000.000000000000000001')
    text_b = json.dumps(b).replace('"registerTime": 0', '"registerTime": 1.50E+0')
    text_b = text_b.replace('"processName": "app"', '"processName": "caf\\u00e9 \\ud83d\\ude00"')
    text_b = text_b.replace('"tid": 2', '"tid": 123456789012345678901234567890')
    pa, pb = os.path.join(tmp, "a.json"), os.path.join(tmp, "b.json")
    with open(pa, "w") as f:
        f.write(text_a)
    with open(pb, "w") as f:
        f.write(text_b)
    out = os.path.join(tmp, "out.json")
    r = fleetprof("merge", "-o", out, pb, pa)
    assert r.returncode == 0, r.stderr
    with open(out, encoding="utf-8") as f:
        text = f.read()
    for t in ['"startTime":1000.000000000000000001', '"registerTime":1.50E+0',
              '"tid":123456789012345678901234567890', '"processName":"caf\u00e9 \U0001F600"']:
        assert t in text, f"{t} not in the output"
    load_checked(out)


def test_merge_skips_bad_inputs_with_warnings(tmp):
    good = write_json(os.path.join(tmp, "good.json"), make_process(1, "app", 1000, ["f"]))
    garbage = os.path.join(tmp, "garbage.json")
    with open(garbage, "w") as f:
        f.write("[1, 2")
    nometa = write_json(os.path.join(tmp, "nometa.json"), {"threads": []})
    nostart = make_process(5, "app", 1, ["f"])
    del nostart["meta"]["startTime"]
    nostart = write_json(os.path.join(tmp, "nostart.json"), nostart)
    missing = os.path.join(tmp, "missing.json")
    out = os.path.join(tmp, "out.json")
    r = fleetprof("merge", "-o", out, garbage, good, nometa, missing, nostart)
    assert r.returncode == 0, r.stderr
    for path, why in [(garbage, "not JSON: line 1, column 6"), (nometa, "not a Gecko profile (no meta field)"),
                      (missing, "No such file or directory"), (nostart, "no meta.startTime")]:
        assert f"warning: skipping {path}: {why}" in r.stderr, r.stderr
    assert "1 process from 1 file, 4 skipped" in r.stdout, r.stdout
    load_checked(out)


def test_merge_nothing_usable_and_usage(tmp):
    garbage = os.path.join(tmp, "garbage.json")
    with open(garbage, "w") as f:
        f.write("nope")
    out = os.path.join(tmp, "out.json")
    r = fleetprof("merge", "-o", out, garbage)
    assert r.returncode == 1 and "nothing to merge" in r.stderr, r
    assert os.listdir(tmp) == ["garbage.json"], os.listdir(tmp)
    for args in [["-o", out], [garbage], []]:
        r = fleetprof("merge", *args)
        assert r.returncode == 2 and "Usage: fleetprof merge" in r.stderr, (args, r)


def test_merge_is_atomic(tmp):
    inputs = [write_json(os.path.join(tmp, f"in{i}.json"),
                         make_process(10 + i, "app", 1000 + i, ["f"] * 3000)) for i in range(4)]
    out = os.path.join(tmp, "out.json")
    with open(out, "w") as f:
        f.write("previous")

    def listing():
        return sorted(os.listdir(tmp))

    before = listing()
    # A write that fails half-way (file size limit): the old file stays, no temp file is left.
    limit = 64 * 1024

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = fleetprof("merge", "-o", out, *inputs, preexec_fn=small_files)
    assert r.returncode == 1 and f"cannot write {out}: File too large" in r.stderr, r
    assert listing() == before, listing()
    with open(out) as f:
        assert f.read() == "previous", "the old output was touched"
    # An output directory that does not exist, or cannot be written.
    r = fleetprof("merge", "-o", os.path.join(tmp, "no", "such", "dir", "x.json"), *inputs)
    assert r.returncode == 1 and "cannot create a temporary file" in r.stderr, r
    ro = os.path.join(tmp, "ro")
    os.mkdir(ro, 0o555)
    r = fleetprof("merge", "-o", os.path.join(ro, "x.json"), *inputs)
    if os.geteuid() != 0:  # root writes anyway
        assert r.returncode == 1 and "Permission denied" in r.stderr, r
        assert os.listdir(ro) == []
    os.chmod(ro, 0o755)
    shutil.rmtree(ro)
    # And then it works, with the mode of every file we write (docs/security.md).
    r = fleetprof("merge", "-o", out, *inputs)
    assert r.returncode == 0, r
    assert listing() == before, listing()
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(out).st_mode & 0o777 == 0o600 & ~mask, oct(os.stat(out).st_mode)
    assert len(load_checked(out)["processes"]) == 3


# The demo fleet itself.

def test_demo_fleet_hang_worker_and_help(tmp):
    r = run([DEMO, "--help"])
    assert r.returncode == 0 and "--hang-worker K" in r.stdout
    for bad in [["--workers", "x"], ["--hang-worker", "2", "--workers", "2"], ["extra"]]:
        assert run([DEMO, *bad]).returncode == 2, bad
    p = subprocess.Popen([DEMO, "--seconds", "4", "--workers", "2", "--hang-worker", "1",
                          "--helpers-per-sec", "0"], stdout=subprocess.PIPE, text=True)
    try:
        lines = [p.stdout.readline() for _ in range(3)]
        hung = int(lines[2].split()[4])
        assert "(will hang after 1 s)" in lines[2], lines
        # The worker stops itself at its first check after 1 s and stays stopped until the
        # master's SIGCONT at 4 s: wait for the state itself (bounded), not for a moment at
        # which it should have been reached (a busy machine may run the worker late).
        states = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{hung}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                break  # reaped: it ended without ever being seen stopped
            if not states or states[-1] != state:
                states.append(state)
            if state in ("T", "Z"):
                break
            time.sleep(0.01)
        assert states and states[-1] == "T", f"worker 1 went through states {states}, never T"
        rest = p.communicate(timeout=30)[0]
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 0 and "done after" in rest, rest


if __name__ == "__main__":
    taplib.run([
        test_summary_of_a_runtime_profile,
        test_summary_top_option_and_json_document,
        test_summary_names_unnamed_code_by_module_and_offset,
        test_summary_prints_gathering_log_and_digest,
        test_summary_errors,
        test_summary_survives_malformed_tables,
        test_merge_demo_fleet,
        test_merge_top_is_earliest_and_fleets_are_flattened,
        test_merge_keeps_numbers_and_strings_exactly,
        test_merge_skips_bad_inputs_with_warnings,
        test_merge_nothing_usable_and_usage,
        test_merge_is_atomic,
        test_demo_fleet_hang_worker_and_help,
    ])
