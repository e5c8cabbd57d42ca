#!/usr/bin/env python3
"""Integration tests: programs that do what a profiler could get in the way of, recorded
with `fleetprof record`; each program checks that what it did took effect.

Usage: test-transparency.py BUILD_DIR   (TAP output)
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
CLI = os.path.join(BUILD, "tools", "fleetprof")
TRANSPARENT = os.path.join(BUILD, "tests", "workloads", "wl-transparent")


def record(tmp, *cmd):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("FLEETPROF_") and k != "LD_PRELOAD"}
    e["XDG_RUNTIME_DIR"] = tmp
    out = os.path.join(tmp, "out.json")
    r = subprocess.run([CLI, "record", "--no-summary", "-o", out, "--", *cmd], env=e,
                       cwd=tmp, capture_output=True, text=True, timeout=120)
    return r, out


def sampled_cpu_ms(doc):
    """CPU time the profile's samples account for (threadCPUDelta, ns), in ms."""
    return sum(row[t["samples"]["schema"]["threadCPUDelta"]] or 0
               for p in doc.get("processes") or [] for t in p["threads"]
               for row in t["samples"]["data"]) / 1e6


def descriptors_taken(doc):
    p = doc["processes"][0]
    return sum(v["runtime"]["descriptorsTaken"] for v in p["profilingLog"].values())


def record_program(tmp, mode):
    """Records `wl-transparent MODE 200` (2 x 200 ms of CPU around what it does)."""
    r, out = record(tmp, TRANSPARENT, mode, "200")
    # The program's own check: it says what changed under it, and fails.
    assert r.returncode == 0 and "wl-transparent:" not in r.stderr, \
        f"record: {r.returncode}\n{r.stderr}"
    assert os.path.exists(out), f"no profile: {r.stderr}"
    doc = pc.load(out)
    problems = pc.check_profile(doc)
    assert not problems, "\n".join(problems[:10])
    assert len(doc.get("processes") or []) == 1, "expected the program's profile"
    # Its CPU after the change is in the profile too: the runtime went on sampling and
    # its profile reached the daemon. (Once the program took libunwind's pipe, stacks are
    # walked with frame pointers, which this workload lacks: wl_spin may be missing from
    # the samples in the vdso.)
    cpu = sampled_cpu_ms(doc)
    assert cpu >= 300, f"only {cpu:.0f} ms of the program's 400 ms of CPU in its samples"
    names = {n for p in doc["processes"] for t in p["threads"] for n in pc.frame_names(t)}
    assert "wl_spin" in names, "wl_spin was never sampled"
    return doc


def test_a_program_that_dup2s_over_descriptors_3_to_63(tmp):
    # The runtime's descriptors sit in a high band: a sweep of low numbers meets none.
    doc = record_program(tmp, "dup2-range")
    assert descriptors_taken(doc) == 0, "the sweep of 3..63 took a descriptor of ours"


def test_a_program_that_closes_every_descriptor_by_raw_close_range(tmp):
    # No interposer sees the system call: the sampler finds the loss and reconnects.
    doc = record_program(tmp, "raw-close-range")
    assert descriptors_taken(doc) > 0, "the loss of our descriptors was not noticed"


def test_a_program_that_dup2s_onto_the_profilers_descriptors(tmp):
    # It replaces every descriptor it did not open (ours: the daemon connection, libuv's
    # and libunwind's, statm) with its own pipe: nothing of ours may write into that pipe,
    # and the runtime gives each up, then reconnects.
    doc = record_program(tmp, "dup2-ours")
    assert descriptors_taken(doc) > 0, "the program's dup2 onto ours was not noticed"


def test_the_programs_first_descriptor_is_3_as_without_the_profiler(tmp):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("FLEETPROF_") and k != "LD_PRELOAD"}
    bare = subprocess.run([TRANSPARENT, "first-fd"], env=e, capture_output=True, text=True,
                          timeout=30)
    r, out = record(tmp, TRANSPARENT, "first-fd")
    assert bare.returncode == 0 and r.returncode == 0, f"{bare.stderr}{r.stderr}"
    assert r.stdout == bare.stdout, f"first descriptor {r.stdout!r}, {bare.stdout!r} without us"


def test_a_killed_process_is_recovered_and_reported_with_its_true_cause(tmp):
    # Killed before it could write a profile: its chunks are read back, and record says so
    # with the true cause, not that the preload failed. (Some work first, so that the daemon
    # has taken its connection.)
    r, out = record(tmp, "/bin/sh", "-c",
                    "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; kill -KILL $$")
    assert os.path.exists(out), f"the killed process's profile was not recovered: {r.stderr}"
    doc = pc.load_valid(out)
    (proc,) = [p for p in pc.all_processes(doc) if p["meta"]["fleetprof"].get("recovered")]
    assert any(n for t in proc["threads"] for n in pc.frame_names(t)), "no frames recovered"
    assert "1 recovered after it was killed or crashed" in r.stderr and \
        "killed by signal 9" in r.stderr, r.stderr
    assert "statically linked" not in r.stderr, r.stderr


taplib.run([
    test_a_program_that_dup2s_over_descriptors_3_to_63,
    test_a_program_that_closes_every_descriptor_by_raw_close_range,
    test_a_program_that_dup2s_onto_the_profilers_descriptors,
    test_the_programs_first_descriptor_is_3_as_without_the_profiler,
    test_a_killed_process_is_recovered_and_reported_with_its_true_cause,
])
