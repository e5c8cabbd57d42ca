#!/usr/bin/env python3
"""Exec keeps what came before (issue #28): the samples and CPU of an image before its exec
are in the file, as an entry of their own for the same pid (meta.fleetprof.execdInto names
the program it exec'd into), with a daemon (`record`), without one (FLEETPROF_DIR, then
`fleetprof merge`), and when the new image is killed (recovery). And a forked child that
execs a program the profiler cannot enter (a static one, or with an environment that does
not preload it) is named by the capture, with that reason, not silently left out.

The workload works a known amount of CPU (its thread's CPU clock, --cpu) in wl_before_exec,
then execs itself to work as much again in wl_hot_leaf: each part must hold its function with
most of that CPU.

Usage: test-exec.py BUILD_DIR   (meson passes it; output is TAP)
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
STATIC = os.path.join(BUILD, "tests", "workloads", "wl-static")
CLI = os.path.join(BUILD, "tools", "fleetprof")
WORK_S = 0.3


def clean_env(tmp):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
    e.pop("LD_PRELOAD", None)
    e["XDG_RUNTIME_DIR"] = os.path.join(tmp, "xdg")
    os.makedirs(e["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    return e


def parts(doc, pid):
    """(the part before the exec, the part after) of pid in doc."""
    mine = [p for p in doc.get("processes") or [] if p["meta"]["fleetprof"].get("pid") == pid]
    before = [p for p in mine if p["meta"]["fleetprof"].get("execdInto")]
    after = [p for p in mine if not p["meta"]["fleetprof"].get("execdInto")]
    assert len(before) == 1 and len(after) == 1, \
        f"pid {pid}: want one part before the exec and one after, got " \
        f"{[p['meta']['fleetprof'] for p in mine]}"
    return before[0], after[0]


def check_parts(doc, pid, killed=False):
    before, after = parts(doc, pid)
    into = before["meta"]["fleetprof"]["execdInto"]
    ms_before = pc.cpu_ms_in(before, "wl_before_exec")
    ms_after = pc.cpu_ms_in(after, "wl_hot_leaf")
    print(f"# pid {pid}: before the exec (into {into}) {ms_before:.0f} ms in wl_before_exec, "
          f"after {ms_after:.0f} ms in wl_hot_leaf")
    assert into == "/proc/self/exe", into  # what the workload passes to execl
    # Each part worked WORK_S of its thread's CPU there; most of it must be in the file.
    assert ms_before >= WORK_S * 1000 * 0.6, f"before the exec: {ms_before:.0f} ms"
    assert pc.cpu_ms_in(before, "wl_hot_leaf") == 0, "the part before holds the new image's work"
    assert pc.cpu_ms_in(after, "wl_before_exec") == 0, "the part after holds the old image's work"
    if not killed:
        assert ms_after >= WORK_S * 1000 * 0.6, f"after the exec: {ms_after:.0f} ms"
    # The new image's first sample holds the CPU its thread used before its profiler started
    # (the exec, loading, the start): charged once. The part before the exec charged its own
    # life; counted again here it would be WORK_S more.
    pre_ms = no_stack_ms(after, "before the profiler started")
    print(f"# after the exec, before its profiler started: {pre_ms:.1f} ms")
    assert 0 < pre_ms < WORK_S * 1000 / 3, \
        f"the new image's CPU before its start: {pre_ms:.1f} ms (the life before the exec " \
        f"is {ms_before:.0f} ms): missing, or charged twice"


def no_stack_ms(proc, why):
    """CPU ms of proc's samples whose only frame is the pseudo-frame '(no stack: WHY...)'."""
    total = 0.0
    for t in proc["threads"]:
        names = pc.frame_names(t)
        sms, ss = t["samples"]["schema"], t["stackTable"]["schema"]
        stacks = t["stackTable"]["data"]
        for row in t["samples"]["data"]:
            idx = row[sms["stack"]]
            if idx is None or not names[stacks[idx][ss["frame"]]].startswith(f"(no stack: {why}"):
                continue
            total += (row[sms["threadCPUDelta"]] or 0) / 1e6
    return total


def test_record_keeps_the_life_before_an_exec(tmp):
    out = os.path.join(tmp, "out.json")
    r = subprocess.run([CLI, "record", "--no-summary", "-o", out, "--", WORKLOAD, "--cpu",
                        "burn-exec", str(WORK_S), str(WORK_S)], env=clean_env(tmp), cwd=tmp,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "2 processes" in r.stderr, r.stderr
    doc = pc.load_valid(out)
    pids = {q["meta"]["fleetprof"]["pid"] for q in doc["processes"]}
    assert len(pids) == 1, pids
    check_parts(doc, pids.pop())


def test_record_keeps_a_shells_work_before_it_execs(tmp):
    out = os.path.join(tmp, "out.json")
    script = ("i=0; while [ $i -lt 60000 ]; do i=$((i+1)); done; "
              f"exec '{WORKLOAD}' --cpu busy {WORK_S}")
    r = subprocess.run([CLI, "record", "--no-summary", "-o", out, "--", "sh", "-c", script],
                       env=clean_env(tmp), cwd=tmp, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = pc.load_valid(out)
    pids = {q["meta"]["fleetprof"]["pid"] for q in doc["processes"]}
    assert len(pids) == 1, pids
    before, after = parts(doc, pids.pop())
    sh_ms = sum(pc.cpu_sampling(t)[1] for t in before["threads"]) * 1000
    print(f"# the shell's part: {sh_ms:.0f} ms of CPU, exec'd into "
          f"{before['meta']['fleetprof']['execdInto']}")
    assert before["meta"]["fleetprof"]["name"] == "sh", before["meta"]["fleetprof"]
    # The track's label: the program and its arguments.
    assert before["threads"][0]["processName"].startswith("sh -c "), before["threads"][0]
    assert before["meta"]["fleetprof"]["execdInto"] == WORKLOAD
    assert sh_ms > 0, "the shell's loop left no CPU in the file"
    assert pc.cpu_ms_in(after, "wl_hot_leaf") >= WORK_S * 1000 * 0.6


def test_without_a_daemon_the_life_before_an_exec_stays(tmp):
    out_dir = os.path.join(tmp, "profiles")
    os.mkdir(out_dir)
    env = clean_env(tmp)
    env.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_DIR": out_dir})
    p = subprocess.run([WORKLOAD, "--cpu", "burn-exec", str(WORK_S), str(WORK_S)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    names = sorted(os.listdir(out_dir))
    print(f"# {names}")
    assert any(n.endswith(".json") for n in names), names
    assert any(".exec-" in n and n.endswith(".chunks") for n in names), names
    merged = os.path.join(tmp, "merged.json")
    r = subprocess.run([CLI, "merge", "-o", merged, *glob.glob(os.path.join(out_dir, "*"))],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "already in the output" not in r.stderr, r.stderr
    doc = pc.load_valid(merged)
    # merge puts the first input at the top level: look at both levels.
    procs = [q for q in pc.all_processes(doc) if q.get("threads")]
    pids = {q["meta"]["fleetprof"]["pid"] for q in procs}
    assert len(pids) == 1, pids
    check_parts({"processes": procs}, pids.pop())


def test_a_killed_image_and_its_life_before_exec_kept(tmp):
    d = Daemon(tmp)
    try:
        env = clean_env(tmp)
        env.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_SOCKET": d.sock})
        # The new image works for ever: killed once it has worked a while.
        p = subprocess.Popen([WORKLOAD, "--cpu", "burn-exec", str(WORK_S), "600"], env=env)
        try:
            def new_image_worked():
                try:
                    with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                        if b"busy" not in f.read():
                            return False
                    with open(f"/proc/{p.pid}/stat") as f:
                        ticks = f.read().rsplit(")", 1)[1].split()
                    return int(ticks[11]) + int(ticks[12]) > 0 and \
                        any(c["pid"] == p.pid for c in d.status()["children"])
                except OSError:
                    return False
            wait_until(new_image_worked, "the new image to work under the daemon", 60)
            time.sleep(0.3)  # some samples of the new image (what it holds is not asserted)
            p.send_signal(signal.SIGKILL)
            p.wait()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        wait_until(lambda: d.status()["exit_profiles"] >= 2 and d.status()["building"] == 0,
                   "both parts kept", 60)
        out = os.path.join(tmp, "fleet.json")
        r = subprocess.run([CLI, "capture", "--socket", d.sock, "-o", out], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        doc = pc.load_valid(out)
        check_parts(doc, p.pid, killed=True)
        _, after = parts(doc, p.pid)
        assert after["meta"]["fleetprof"].get("recovered"), after["meta"]["fleetprof"]
    finally:
        d.stop()


def check_never_profiled(tmp, prog, reason, parent_argv=None, reason_only=False, seen=None):
    """A profiled parent (by default `workload fork-exec 1`: fork, then exec) starts a child
    that execs prog(release), which waits until the file release exists: the capture names
    the child with reason."""
    d = Daemon(tmp)
    release = os.path.join(tmp, "release")
    try:
        env = clean_env(tmp)
        env.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_SOCKET": d.sock})
        argv = (parent_argv or [WORKLOAD, "fork-exec", "1"]) + prog(release)
        parent = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL)
        try:
            # The daemon read what the child is off the live process; then it may end.
            wait_until(lambda: (seen in d.log()) if seen else
                       ("never said Hello" in d.log() or "spawned by" in d.log()),
                       "the daemon to see the child", 60)
            with open(release, "w"):
                pass
            assert parent.wait(timeout=60) == 0
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.wait()
        out = os.path.join(tmp, "fleet.json")
        r = subprocess.run([CLI, "capture", "--socket", d.sock, "-o", out], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        said = r.stdout + r.stderr
        lost = [line for line in said.splitlines() if ": lost " in line]
        print(f"# {lost}")
        assert len(lost) == 1 and reason in lost[0], said
        if not reason_only:
            assert "1 process, 1 lost" in said, said  # the parent in the file, the child named
    finally:
        d.stop()


def test_a_child_that_execs_a_static_program_is_named(tmp):
    check_never_profiled(tmp, lambda release: [STATIC, "--until", release], "static program")


def test_a_child_that_execs_with_a_cleared_environment_is_named(tmp):
    check_never_profiled(
        tmp, lambda release: ["--clear-env", "/bin/sh", "-c",
                              f"while [ ! -e '{release}' ]; do sleep 0.01; done"],
        "environment that does not preload")


def test_a_shells_child_that_execs_a_static_program_is_named(tmp):
    """dash starts a command with vfork: the child connects in the exec wrapper instead."""
    check_never_profiled(tmp, lambda release: [f"'{STATIC}' --until '{release}'; true"],
                         "static program", parent_argv=["/bin/sh", "-c"])


def test_a_shells_background_child_that_outlives_it_is_named(tmp):
    """`program &`: the shell forks the child, which execs a static program, and exits at
    once. The child, an orphan by the time the daemon judges it (its parent is init's or a
    subreaper's then), is still named from the shell's report of its fork."""
    check_never_profiled(tmp, lambda release: [f"'{STATIC}' --until '{release}' & exit 0"],
                         "static program", parent_argv=["/bin/sh", "-c"])


def test_a_program_exec_d_inside_a_chroot_is_named(tmp):
    """chroot(1) changes its root and execs there: the new image cannot reach the daemon's
    socket (its path names nothing inside the root), and its life was lost without a word.
    The daemon names it with the reason (whether chroot(1) reported before its exec or
    not: the count of processes in the file depends on that, the naming does not). The
    root is the test's directory, holding a static program that waits for /release."""
    if os.geteuid() != 0:
        raise taplib.Skip("not root: chroot needs CAP_SYS_CHROOT")
    chroot = "/usr/sbin/chroot"
    if not os.access(chroot, os.X_OK):
        raise taplib.Skip("no /usr/sbin/chroot")
    subprocess.run(["cp", STATIC, os.path.join(tmp, "wl-static")], check=True)
    # Released only once the daemon judged the image in the root (a fork child's early
    # connection closing in its first exec, into chroot(1), says "never said Hello" sooner).
    check_never_profiled(tmp, lambda release: [chroot, tmp, "/wl-static", "--until", "/release"],
                         "in a chroot", reason_only=True, seen="in a chroot")


def test_a_posix_spawned_static_program_is_named(tmp):
    """posix_spawn execs inside libc, past the exec wrappers: the parent tells the daemon."""
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        raise taplib.Skip("no /usr/bin/python3 (a dynamically linked parent that posix_spawns)")
    script = ("import os, sys; p = os.posix_spawn(sys.argv[1], sys.argv[1:], dict(os.environ)); "
              "sys.exit(os.waitpid(p, 0)[1])")
    check_never_profiled(tmp, lambda release: [STATIC, "--until", release], "static program",
                         parent_argv=[python, "-c", script])


if __name__ == "__main__":
    taplib.run([
        test_record_keeps_the_life_before_an_exec,
        test_record_keeps_a_shells_work_before_it_execs,
        test_without_a_daemon_the_life_before_an_exec_stays,
        test_a_killed_image_and_its_life_before_exec_kept,
        test_a_child_that_execs_a_static_program_is_named,
        test_a_child_that_execs_with_a_cleared_environment_is_named,
        test_a_shells_child_that_execs_a_static_program_is_named,
        test_a_shells_background_child_that_outlives_it_is_named,
        test_a_program_exec_d_inside_a_chroot_is_named,
        test_a_posix_spawned_static_program_is_named,
    ])
