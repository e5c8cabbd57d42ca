#!/usr/bin/env python3
"""Integration tests: programs that do what a profiler could get in the way of, recorded
with `fleetprof record`; each program checks that what it did took effect.

Usage: test-transparency.py BUILD_DIR   (TAP output)
"""
import glob
import os
import resource
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import Daemon  # noqa: E402

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


LIB = os.path.join(BUILD, "child", "libfleetprof.so")


def python(tmp, code, profiled, **kw):
    """Runs Python code from a file (multiprocessing's forkserver needs one), profiled
    (preloaded, its profile to tmp/p-PID.json) or not."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("FLEETPROF_") and k != "LD_PRELOAD"}
    if profiled:
        e.update(LD_PRELOAD=LIB, FLEETPROF_STARTUP="1",
                 FLEETPROF_OUTPUT=os.path.join(tmp, "p-%p.json"))
    script = os.path.join(tmp, "program.py")
    with open(script, "w") as f:
        f.write(code)
    return subprocess.Popen([sys.executable, script], env=e, cwd=tmp, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def same_with_and_without(tmp, code, timeout=120):
    """The program's output and status, without fleetprof and with it (and its profile)."""
    results = []
    for profiled in (False, True):
        p = python(tmp, code, profiled, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        finally:  # a hung pool's helpers too
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        results.append((p.returncode, out))
    assert results[0] == results[1], f"without: {results[0]}, with: {results[1]}: {err}"
    return results[1]


# Termination as without fleetprof: SIGTERM and SIGINT at their default read as the default,
# end the process at once with its status, and the profile is still written.
SIGNAL_VIEW = """
import os, signal, sys
print(signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
os.kill(os.getpid(), signal.SIGTERM)
print("went on after raising SIGTERM")
"""

KEYBOARD_INTERRUPT = """
import os, signal, sys, time
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    print("no KeyboardInterrupt")
except KeyboardInterrupt:
    print("cleanup ran")
    sys.exit(7)
"""

FORKSERVER_POOL = """
import multiprocessing as mp
def square(x):
    return x * x
if __name__ == "__main__":
    mp.set_start_method("forkserver")
    with mp.Pool(2) as pool:
        print(sum(pool.map(square, range(200))))
"""


def profiles_of(tmp):
    return glob.glob(os.path.join(tmp, "p-*.json"))


def test_sigterm_and_sigint_read_as_default_and_end_the_process(tmp):
    status, out = same_with_and_without(tmp, SIGNAL_VIEW)
    assert status == -signal.SIGTERM and "went on" not in out, (status, out)
    (prof,) = profiles_of(tmp)
    pc.load_valid(prof)
    status, out = same_with_and_without(tmp, KEYBOARD_INTERRUPT)
    assert status == 7 and "cleanup ran" in out, (status, out)
    assert len(profiles_of(tmp)) == 2, profiles_of(tmp)


def test_a_read_interrupted_by_sigterm_ends_the_process(tmp):
    """Before, the read returned EINTR and the program went on."""
    code = "import os, sys\nprint('read', len(os.read(0, 1)), flush=True)\nprint('went on')"
    for profiled in (False, True):
        p = python(tmp, code, profiled, stdin=subprocess.PIPE)
        deadline = time.monotonic() + 60
        # Blocked in its read (state S, in the kernel's pipe read), then SIGTERM.
        while True:
            with open(f"/proc/{p.pid}/wchan") as f:
                wchan = f.read()
            if "pipe" in wchan or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        assert p.returncode == -signal.SIGTERM and out == "", \
            f"profiled={profiled}: {p.returncode} {out!r} {err}"
    (prof,) = profiles_of(tmp)
    pc.load_valid(prof)


def test_a_forkserver_pool_works_as_without_the_profiler(tmp):
    """Its workers check that SIGTERM/SIGINT are at their default: with our handlers visible
    they died at once and the pool forked replacements forever."""
    status, out = same_with_and_without(tmp, FORKSERVER_POOL, timeout=120)
    assert status == 0 and out.strip() == str(sum(x * x for x in range(200))), (status, out)


def test_a_tiny_descriptor_limit_never_kills_the_program(tmp):
    """Under RLIMIT_NOFILE 8 or 9 the program died of SIGABRT: libuv aborts when its first loop
    cannot make its signal pipe. Now the runtime sees it cannot spare the descriptors and
    profiles without the daemon; the program ends as it does without fleetprof."""
    workload = os.path.join(BUILD, "tests", "workloads", "workload")
    d = Daemon(tmp)
    try:
        for n in (6, 8, 9, 10, 12):
            def limit(n=n):
                resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
            statuses = []
            for profiled in (False, True):
                e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
                if profiled:
                    e.update(LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=d.sock)
                r = subprocess.run([workload, "busy", "0.05"], env=e, preexec_fn=limit,
                                   capture_output=True, text=True, timeout=120)
                statuses.append(r.returncode)
            assert statuses == [0, 0], f"RLIMIT_NOFILE {n}: without, with: {statuses}"
        assert d.alive(), d.log()
    finally:
        d.stop()


def test_a_program_that_dup2s_over_its_whole_table(tmp):
    """A sweep of dup2() onto every number up to the limit, while the runtime makes its
    connection again behind it: libuv aborted the program (1 run in 10; its epoll or socket
    replaced between being made and being protected, or closed under a thread still using
    it), and a dup2() failed now and then. Now every run ends 0 with the table as without
    fleetprof."""
    workload = os.path.join(BUILD, "tests", "workloads", "workload")
    d = Daemon(tmp)

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
    try:
        outs = []
        for profiled in [False] + [True] * 20:
            e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
            if profiled:
                e.update(LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=d.sock)
            r = subprocess.run([workload, "close-fill", "0.05", "0.05"], env=e,
                               preexec_fn=limit, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, (profiled, r.returncode, r.stderr[-2000:])
            outs.append(r.stdout.split(",")[0])
        assert outs == ["filled 8189"] * len(outs), outs
        assert d.alive(), d.log()
    finally:
        d.stop()


def limited_run(tmp, d, argv, rlimit, value, profiled):
    """argv under rlimit = value (soft and hard), alone or preloaded beside daemon d; the
    finished Popen (returncode set) and its stdout. A clean stderr is asserted."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
    if profiled:
        e.update(LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=d.sock,
                 FLEETPROF_DIR=os.path.join(tmp, f"dir-{rlimit}-{value}"))
    p = subprocess.Popen(argv, env=e, preexec_fn=lambda: resource.setrlimit(rlimit, (value, value)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and "fleetprof" not in err, (value, profiled, out, err)
    return p, out


def test_a_program_that_runs_out_of_descriptors_gets_the_profilers(tmp):
    """Under prlimit --nofile 8, 12 and 32 the program opens files until it cannot. With
    fleetprof it got 16 of 28 under 32 (the runtime held 12). Now its first EMFILE makes the
    runtime give it its descriptors (the daemon connection, the region's, statm, libunwind's
    pipe): it gets all but at most 3 (libuv's signal-lock pipe, which libuv's fork handler
    re-makes, and a loop left by a connection that failed at start), ends as without us, and
    says nothing on its stderr; the daemon, which keeps the region of a process that left
    it, has its profile."""
    workload = os.path.join(BUILD, "tests", "workloads", "workload")
    d = Daemon(tmp)
    try:
        for n in (8, 12, 32):
            got = []
            for profiled in (False, True):
                _, out = limited_run(tmp, d, [workload, "open-max", "0.1"],
                                     resource.RLIMIT_NOFILE, n, profiled)
                assert out.startswith("opened ") and "Too many open files" in out, out
                got.append(int(out.split()[1].rstrip(",")))
            assert got[1] >= got[0] - 3, f"RLIMIT_NOFILE {n}: opened {got[0]} without, {got[1]} with"
        assert d.alive(), d.log()
    finally:
        d.stop()


def test_a_program_under_ulimit_v_gets_its_memory_and_threads(tmp):
    """Under `ulimit -v 30000` the program's largest malloc was 7 MB instead of 26 and its
    pthread_create failed: the runtime's two threads had 8 MiB stacks each (RLIMIT_STACK's
    default). With 256 KiB stacks the runtime takes about 3 MiB (its chunk region, its
    libraries): the program gets its thread, and its memory within 5 MiB of what it gets
    alone, under limits of 30 and 60 MB; and the daemon has its profile."""
    from daemon_helper import capture_doc, process
    workload = os.path.join(BUILD, "tests", "workloads", "workload")
    d = Daemon(tmp)
    try:
        pids = []
        for mb in (30, 60):
            got = []
            for profiled in (False, True):
                p, out = limited_run(tmp, d, [workload, "vm-max"], resource.RLIMIT_AS,
                                     mb * 1000 * 1024, profiled)
                fields = dict(f.split("=", 1) for f in out.split())
                assert fields["thread"] == "ok", (mb, profiled, out)
                got.append(int(fields["largest_malloc_mb"]))
                if profiled:
                    pids.append(p.pid)
            assert got[1] >= got[0] - 5, f"ulimit -v {mb}000: {got[0]} MB alone, {got[1]} MB with"
        doc = capture_doc(d, tmp)
        for pid in pids:
            process(doc, pid)
        assert d.alive(), d.log()
    finally:
        d.stop()


taplib.run([
    test_a_program_under_ulimit_v_gets_its_memory_and_threads,
    test_a_program_that_runs_out_of_descriptors_gets_the_profilers,
    test_a_program_that_dup2s_over_its_whole_table,
    test_a_tiny_descriptor_limit_never_kills_the_program,
    test_sigterm_and_sigint_read_as_default_and_end_the_process,
    test_a_read_interrupted_by_sigterm_ends_the_process,
    test_a_forkserver_pool_works_as_without_the_profiler,
    test_a_program_that_dup2s_over_descriptors_3_to_63,
    test_a_program_that_closes_every_descriptor_by_raw_close_range,
    test_a_program_that_dup2s_onto_the_profilers_descriptors,
    test_the_programs_first_descriptor_is_3_as_without_the_profiler,
    test_a_killed_process_is_recovered_and_reported_with_its_true_cause,
])
