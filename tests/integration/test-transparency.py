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


def program_unharmed_and_profile_or_cause(tmp, mode):
    r, out = record(tmp, TRANSPARENT, mode, "100")
    # The program's own check ran (its exit status is record's when a profile is written).
    assert "wl-transparent:" not in r.stderr, f"the program saw a change:\n{r.stderr}"
    if os.path.exists(out):
        assert r.returncode == 0, f"record: {r.returncode}\n{r.stderr}"
        doc = pc.load(out)
        problems = pc.check_profile(doc)
        assert not problems, "\n".join(problems[:10])
        names = {n for p in doc.get("processes") or [] for t in p["threads"]
                 for n in pc.frame_names(t)}
        assert "wl_spin" in names, f"the profile lacks wl_spin: {sorted(names)[:20]}"
        return
    # Lost anyway: record names what happened, not a guess that does not apply (the
    # preload did take: the process connected).
    assert "connected, then ended the connection without sending a profile" in r.stderr, \
        r.stderr
    assert "statically linked" not in r.stderr, r.stderr


def test_a_program_that_dup2s_over_descriptors_3_to_63(tmp):
    program_unharmed_and_profile_or_cause(tmp, "dup2-range")


def test_a_program_that_closes_every_descriptor_by_raw_close_range(tmp):
    program_unharmed_and_profile_or_cause(tmp, "raw-close-range")


def test_a_program_that_dup2s_onto_the_profilers_descriptors(tmp):
    # It replaces every descriptor it did not open (ours: the daemon connection, libuv's
    # and libunwind's) with its own pipe: nothing of ours may write into that pipe.
    program_unharmed_and_profile_or_cause(tmp, "dup2-ours")


taplib.run([
    test_a_program_that_dup2s_over_descriptors_3_to_63,
    test_a_program_that_closes_every_descriptor_by_raw_close_range,
    test_a_program_that_dup2s_onto_the_profilers_descriptors,
])
