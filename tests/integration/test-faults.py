#!/usr/bin/env python3
"""The fault matrix (issue #28): the real daemon and real processes under faults, each case
counting the processes that ran against those in the file or named with their reason. None
may be lost silently, and the program's own results must not change.

  - the daemon SIGKILLed in the middle of a capture: the children go on alone and leave
    their profiles in FLEETPROF_DIR; `fleetprof merge` gets every one;
  - a child SIGKILLed as it writes its exit profile: recovered from its chunks;
  - children SIGKILLed in the middle of a capture: recovered, the capture's answer;
  - the output on a full file system (a small tmpfs; root only): a clear error, the previous
    file intact, and what the failed capture held in the next one;
  - 200 children exiting at once under record: 201 processes in the file.

(Elsewhere: the socket removed under a running daemon (test-coordination), a child flooding
updates (test-coordination), the global limit (test-record), descriptors and signals
(test-transparency), the daemon's file size limit (test-gather).)

Usage: test-faults.py BUILD_DIR   (meson passes it; output is TAP)
"""
import glob
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import Daemon, wait_until  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
SHORTLIVED = os.path.join(BUILD, "tests", "workloads", "wl-shortlived")
CLI = os.path.join(BUILD, "tools", "fleetprof")


def clean_env(tmp, **extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
    e.pop("LD_PRELOAD", None)
    e["XDG_RUNTIME_DIR"] = os.path.join(tmp, "xdg")
    os.makedirs(e["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    e.update(extra)
    return e


def pids_in(doc):
    return sorted(p["meta"]["fleetprof"]["pid"] for p in pc.all_processes(doc)
                  if p.get("threads"))


def start_children(tmp, d, n, argv, **extra):
    env = clean_env(tmp, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=d.sock, **extra)
    kids = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL) for _ in range(n)]
    wait_until(lambda: len(d.status()["children"]) == n, f"{n} children connected", 60)
    return kids


def stop_all(kids):
    for k in kids:
        if k.poll() is None:
            k.kill()
            k.wait()


def test_daemon_killed_mid_capture_children_keep_their_profiles(tmp):
    d = Daemon(tmp)
    out_dir = os.path.join(tmp, "alone")
    os.mkdir(out_dir)
    kids = []
    try:
        # Markers as fast as they can: profiles big enough that the capture takes a while.
        kids = start_children(tmp, d, 4, [WORKLOAD, "flood", "3", "200000"],
                              FLEETPROF_DIR=out_dir)
        wait_until(lambda: min(c["unreleased_bytes"] + c["released_bytes"]
                               for c in d.status()["children"]) > 4 << 20,
                   "4 MiB in each child", 60)
        cap = subprocess.Popen([CLI, "capture", "--socket", d.sock, "-o",
                                os.path.join(tmp, "never.json")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        # Mid-capture: the daemon asked the children (its log says so), then it dies.
        wait_until(lambda: "asked child" in d.log() or "gather" in d.log(), "the capture", 30)
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait()
        _, err = cap.communicate(timeout=60)
        assert cap.returncode != 0, "a capture whose daemon died must fail"
        print(f"# capture: {err.strip().splitlines()[-1:]}")
        for k in kids:
            assert k.wait(timeout=120) == 0, "a child's result changed when its daemon died"
    finally:
        stop_all(kids)
        d.stop()
    files = sorted(os.listdir(out_dir))
    print(f"# left alone: {files}")
    merged = os.path.join(tmp, "merged.json")
    r = subprocess.run([CLI, "merge", "-o", merged, *glob.glob(os.path.join(out_dir, "*"))],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = pids_in(pc.load_valid(merged))
    want = sorted(k.pid for k in kids)
    assert got == want, f"merge holds {got}, the children were {want}"


def test_child_killed_in_its_exit_is_in_the_file(tmp):
    d = Daemon(tmp)
    kids = []
    try:
        env = clean_env(tmp, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=d.sock)
        k = subprocess.Popen([WORKLOAD, "flood", "2", "1000000"], env=env,
                             stdout=subprocess.PIPE, text=True)
        kids = [k]
        # As it starts its exit (tens of MiB of markers: its exit profile takes a while to
        # write and send), SIGKILL.
        for line in k.stdout:  # "markers: N", its last line, as it starts its exit
            if line.startswith("markers:"):
                break
        else:
            raise AssertionError(f"the workload ended without its last line: {k.wait()}")
        k.send_signal(signal.SIGKILL)
        k.wait()
        wait_until(lambda: d.status()["exit_profiles"] == 1 and d.status()["building"] == 0,
                   "its profile kept", 60)
        out = os.path.join(tmp, "fleet.json")
        r = subprocess.run([CLI, "capture", "--socket", d.sock, "-o", out],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        doc = pc.load_valid(out)
        assert pids_in(doc) == [k.pid]
        how = [p["meta"]["fleetprof"].get("recovered") for p in pc.all_processes(doc)
               if p.get("threads")]
        print(f"# killed in its exit: in the file, recovered: {how}")
    finally:
        stop_all(kids)
        d.stop()


def test_children_killed_mid_capture_are_its_answers(tmp):
    d = Daemon(tmp)
    kids = []
    try:
        kids = start_children(tmp, d, 3, [WORKLOAD, "flood", "600", "200000"])
        wait_until(lambda: min(c["unreleased_bytes"] + c["released_bytes"]
                               for c in d.status()["children"]) > 4 << 20,
                   "4 MiB in each child", 60)
        out = os.path.join(tmp, "fleet.json")
        cap = subprocess.Popen([CLI, "capture", "--socket", d.sock, "-o", out],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: "asked child" in d.log(), "the capture to ask", 30)
        for k in kids:
            k.send_signal(signal.SIGKILL)
        _, err = cap.communicate(timeout=120)
        assert cap.returncode == 0, err
        got = pids_in(pc.load_valid(out))
        # Each killed child is in this capture (recovered as its answer, or its answer sent
        # before it died), or in the next (recovered after the capture had its answer).
        wait_until(lambda: d.status()["building"] == 0, "the builds", 60)
        out2 = os.path.join(tmp, "fleet2.json")
        r = subprocess.run([CLI, "capture", "--socket", d.sock, "-o", out2],
                           capture_output=True, text=True, timeout=120)
        got2 = pids_in(pc.load_valid(out2)) if r.returncode == 0 else []
        print(f"# first capture {got}, second {got2}")
        assert sorted(set(got) | set(got2)) == sorted(k.pid for k in kids), (got, got2)
    finally:
        stop_all(kids)
        d.stop()


def test_output_on_a_full_file_system(tmp):
    if os.geteuid() != 0:
        raise taplib.Skip("not root: cannot mount a small tmpfs")
    full = os.path.join(tmp, "full")
    os.mkdir(full)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", full],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise taplib.Skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    d = None
    kids = []
    try:
        out = os.path.join(full, "fleet.json")
        with open(out, "w") as f:
            f.write("{\"previous\": true}\n")
        d = Daemon(tmp)
        kids = start_children(tmp, d, 2, [WORKLOAD, "flood", "600", "200000"])
        wait_until(lambda: min(c["unreleased_bytes"] + c["released_bytes"]
                               for c in d.status()["children"]) > 1 << 20,
                   "1 MiB in each child", 60)
        r = subprocess.run([CLI, "capture", "--socket", d.sock, "-o", out],
                           capture_output=True, text=True, timeout=120)
        print(f"# {r.stderr.strip().splitlines()[-1:]}")
        assert r.returncode != 0, "a capture onto a full file system must fail"
        assert "No space left on device" in r.stderr, r.stderr
        with open(out) as f:
            assert f.read() == "{\"previous\": true}\n", "the previous file was damaged"
        assert not [n for n in os.listdir(full) if ".tmp." in n], os.listdir(full)
        # The fleet is still there: a capture elsewhere has both children.
        out2 = os.path.join(tmp, "fleet.json")
        r = subprocess.run([CLI, "capture", "--socket", d.sock, "-o", out2],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr + d.log()[-4000:]
        got = pids_in(pc.load_valid(out2))
        assert got == sorted(k.pid for k in kids), f"{got}: {r.stderr}\n{d.log()[-3000:]}"
    finally:
        stop_all(kids)
        if d:
            d.stop()
        subprocess.run(["umount", full], capture_output=True)


def test_two_hundred_children_ending_at_once_are_all_in_the_file(tmp):
    n = 200
    out = os.path.join(tmp, "at-once.json")
    r = subprocess.run([CLI, "record", "--no-summary", "-o", out, "--", SHORTLIVED, str(n), "5"],
                       env=clean_env(tmp), cwd=tmp, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    got = pids_in(pc.load_valid(out))
    lost = [line for line in r.stderr.splitlines() if ": lost " in line]
    print(f"# {len(got)} processes in the file, {len(lost)} named lost")
    assert len(got) == n + 1 and not lost, r.stderr[-2000:]


if __name__ == "__main__":
    taplib.run([
        test_output_on_a_full_file_system,
        test_daemon_killed_mid_capture_children_keep_their_profiles,
        test_child_killed_in_its_exit_is_in_the_file,
        test_children_killed_mid_capture_are_its_answers,
        test_two_hundred_children_ending_at_once_are_all_in_the_file,
    ])
