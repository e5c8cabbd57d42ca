#!/usr/bin/env python3
"""Integration tests of the child runtime: real programs, LD_PRELOAD=libfleetprof.so, real
signals and unwinding; every profile is loaded and checked like the front-end would.

Usage: test-runtime.py BUILD_DIR   (meson passes it; output is TAP)
"""
import glob
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
WORKLOAD_FP = os.path.join(BUILD, "tests", "workloads", "workload-fp")
PLUGIN = os.path.join(BUILD, "tests", "workloads", "libwl-plugin.so")
WL_API = os.path.join(BUILD, "tests", "workloads", "wl-api")
TRANSPARENT = os.path.join(BUILD, "tests", "workloads", "wl-transparent")


class Result:
    def __init__(self, returncode, stdout, stderr, cpu_s):
        self.returncode, self.stdout, self.stderr, self.cpu_s = returncode, stdout, stderr, cpu_s


def run(tmp, argv, timeout=60, preload=True, **env):
    """Runs argv to completion; returns its status, output and CPU seconds (user + sys)."""
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.update({"FLEETPROF_STARTUP": "1", "FLEETPROF_OUTPUT": os.path.join(tmp, "p-%p.json")})
    if preload:
        e["LD_PRELOAD"] = LIB
    e.update({k: str(v) for k, v in env.items()})
    out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
    with open(out, "w") as fo, open(err, "w") as fe:
        p = subprocess.Popen(argv, env=e, stdout=fo, stderr=fe)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                p.wait()
                raise AssertionError(f"{argv} still running after {timeout}s (deadlock?)")
            time.sleep(0.02)
    rc = os.waitstatus_to_exitcode(status)
    with open(out) as fo, open(err) as fe:
        return Result(rc, fo.read(), fe.read(), usage.ru_utime + usage.ru_stime)


cpu_seconds = taplib.cpu_seconds


def wait_until(cond, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def profiles(tmp):
    paths = sorted(glob.glob(os.path.join(tmp, "p-*.json")))
    leftovers = glob.glob(os.path.join(tmp, "*.tmp.*"))
    assert not leftovers, f"temporary files left behind: {leftovers}"
    return paths


def load_checked(path):
    doc = pc.load(path)
    problems = pc.check_profile(doc)
    assert not problems, f"{path} is not a valid profile:\n" + "\n".join(problems[:20])
    return doc


def only_profile(tmp):
    paths = profiles(tmp)
    assert len(paths) == 1, f"expected one profile, found {paths}"
    return load_checked(paths[0])


def main_thread(doc):
    mains = [t for t in doc["threads"] if t["name"] == "GeckoMain"]
    assert len(mains) == 1, f"GeckoMain threads: {[t['name'] for t in doc['threads']]}"
    return mains[0]


def assert_recursion(doc, leaf, depth, min_share=0.8):
    t = main_thread(doc)
    stacks = pc.sample_stacks(t)
    assert stacks, "no samples with a stack"
    hot = [s for s in stacks if s and s[-1] == leaf]
    assert len(hot) >= min_share * len(stacks), \
        f"only {len(hot)} of {len(stacks)} samples end in {leaf}; e.g. {stacks[len(stacks)//2]}"
    deep = [s for s in hot if s.count("wl_recurse") >= depth and "main" in s]
    assert len(deep) >= 0.9 * len(hot), \
        f"{len(deep)} of {len(hot)} {leaf} samples show main + {depth} wl_recurse frames; e.g. {hot[0]}"


def assert_sampled_per_cpu(doc, t, interval_ms=1.0):
    """Thread t of process profile doc was sampled once per interval of the CPU it used
    (profile_check.cpu_sampling_problem): however long it waited for a CPU, unlike a count
    expected from the wall-clock length of a run."""
    problem = pc.cpu_sampling_problem(doc, t, interval_ms)
    assert problem is None, problem


def test_busy_dwarf_symbolized_deep_stacks(tmp):
    # 1.5 s of the main thread's CPU, however long that takes on a busy machine.
    r = run(tmp, [WORKLOAD, "--cpu", "busy", "1.5", "12"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == "", f"the runtime printed: {r.stdout!r} {r.stderr!r}"
    doc = only_profile(tmp)
    assert_recursion(doc, "wl_hot_leaf", 12)
    t = main_thread(doc)
    assert_sampled_per_cpu(doc, t)
    fs = t["frameTable"]["schema"]
    lines = [row[fs["line"]] for row, name in zip(t["frameTable"]["data"], pc.frame_names(t))
             if name == "wl_hot_leaf"]
    assert any(isinstance(l, int) and l > 0 for l in lines), f"no source line for wl_hot_leaf: {lines}"
    sms = t["samples"]["schema"]
    cpu = [row[sms["threadCPUDelta"]] for row in t["samples"]["data"]]
    # The main thread does nearly all the process's work; its CPU deltas must account for it.
    assert 0.85 * r.cpu_s * 1e9 <= sum(cpu) <= 1.05 * r.cpu_s * 1e9, \
        f"CPU deltas add up to {sum(cpu) / 1e9:.3f} s; the process used {r.cpu_s:.3f} s"
    assert r.cpu_s >= 1.5, f"the workload used {r.cpu_s:.3f} s of CPU, not its 1.5 s"
    assert doc["meta"]["sampleUnits"]["threadCPUDelta"] == "ns"
    assert doc["meta"]["presymbolicated"] is True
    counters = {c["name"]: c for c in doc.get("counters", [])}
    assert "RSS" in counters and counters["RSS"]["samples"]["data"], "no memory counter samples"
    assert doc["profilerOverhead"]["samples"]["data"], "no profiler overhead samples"


def test_fp_stackwalk(tmp):
    r = run(tmp, [WORKLOAD_FP, "--cpu", "busy", "1", "8"], FLEETPROF_STACKWALK="fp")
    assert r.returncode == 0, r.stderr
    doc = only_profile(tmp)
    assert doc["meta"]["fleetprof"]["stackwalk"] == "fp"
    assert_recursion(doc, "wl_hot_leaf", 8)


def test_copy_stackwalk(tmp):
    r = run(tmp, [WORKLOAD, "--cpu", "busy", "1", "8"], FLEETPROF_STACKWALK="copy")
    assert r.returncode == 0, r.stderr
    doc = only_profile(tmp)
    assert doc["meta"]["fleetprof"]["stackwalk"] == "copy"
    assert_recursion(doc, "wl_hot_leaf", 8)


def test_corrupt_frame_pointer_never_kills_the_program(tmp):
    for mode in ("fp", "copy", "dwarf"):
        r = run(tmp, [WORKLOAD, "bad-fp"], FLEETPROF_STACKWALK=mode,
                FLEETPROF_OUTPUT=os.path.join(tmp, f"p-{mode}-%p.json"))
        assert r.returncode == 0, f"{mode}: the program died ({r.returncode})"
    assert len(glob.glob(os.path.join(tmp, "p-*.json"))) == 3
    for path in glob.glob(os.path.join(tmp, "p-*.json")):
        load_checked(path)


def test_threads_have_names_and_functions(tmp):
    # Each thread works for 0.5 s of its own CPU: 4 threads on 2 busy CPUs take far longer
    # than 0.5 s, and their samples are counted against the CPU they used.
    r = run(tmp, [WORKLOAD, "--cpu", "threads", "4", "0.5"])
    assert r.returncode == 0, r.stderr
    doc = only_profile(tmp)
    by_name = {t["name"]: t for t in doc["threads"]}
    expected = {"wl-worker-0": "wl_thread_alpha", "wl-worker-1": "wl_thread_beta",
                "wl-worker-2": "wl_thread_gamma", "wl-worker-3": "wl_thread_delta"}
    for name, func in expected.items():
        assert name in by_name, f"thread {name} missing; threads: {sorted(by_name)}"
        stacks = pc.sample_stacks(by_name[name])
        hot = [s for s in stacks if func in s]
        assert stacks and len(hot) >= 0.9 * len(stacks), \
            f"{name}: {len(hot)} of {len(stacks)} samples in {func}"
        _, cpu_s = pc.cpu_sampling(by_name[name])
        # From its registration to its last sample: all but the last interval's CPU.
        assert 0.45 <= cpu_s <= 0.55, f"{name}: CPU deltas add up to {cpu_s:.3f} s, not 0.5 s"
        assert_sampled_per_cpu(doc, by_name[name])
        assert by_name[name]["unregisterTime"] is not None, f"{name} ended but is not unregistered"
    assert "GeckoMain" in by_name


def test_an_idle_thread_pool_costs_no_unwinder_caches(tmp):
    """64 threads that wait for work that never comes are registered and in the profile,
    but none of them gets libunwind's per-thread cache (256 KiB each), which a thread's
    first sample makes: before, each was warmed as it started, 18 MiB for the pool."""
    def peak_rss_kb(r):
        assert r.returncode == 0, r.stderr
        return int(r.stdout.split("max_rss_kb=")[1].split()[0])

    alone = peak_rss_kb(run(tmp, [WORKLOAD, "pool", "64", "0.3"], preload=False))
    profiled = peak_rss_kb(run(tmp, [WORKLOAD, "pool", "64", "0.3"],
                               FLEETPROF_STACKWALK="dwarf"))
    doc = only_profile(tmp)
    assert len(doc["threads"]) >= 65, f"{len(doc['threads'])} threads in the profile"
    # The runtime's own share (buffer chunks, registry, the main thread's cache) is a few
    # MiB; 64 caches would be 16 MiB more.
    assert profiled - alone < 64 * 96, f"the pool cost {profiled - alone} KiB more profiled"


def test_idle_thread_gets_same_samples_without_cpu(tmp):
    r = run(tmp, [WORKLOAD, "idle", "0.5"])
    assert r.returncode == 0, r.stderr
    doc = only_profile(tmp)
    t = main_thread(doc)
    sms = t["samples"]["schema"]
    cpu = [row[sms["threadCPUDelta"]] for row in t["samples"]["data"]]
    times = [row[sms["time"]] for row in t["samples"]["data"]]
    # It slept 0.5 s, which no busy machine makes shorter: sampled all along.
    span = times[-1] - times[0] if times else 0
    assert span >= 450, f"an idle thread is still sampled; got {len(cpu)} in {span:.0f} ms"
    assert sum(1 for c in cpu if c == 0) >= 0.9 * len(cpu), "idle samples should have no CPU"
    log = doc["profilingLog"][str(doc["meta"]["fleetprof"]["pid"])]["profileWriter"]
    assert log["sameSamples"] >= 0.9 * len(cpu), log
    # The sampler of an all-idle process sleeps through ticks, and writes them when it wakes:
    # still one sample per interval (1 ms), but far fewer wake-ups (profilerOverhead rows).
    # Each wake writes the ticks it slept through 1 ms apart, back from its own time: so a
    # gap other than 1 ms opens at most once per wake. How many ticks are lost between
    # wakes is the machine's business: a wake late on a busy machine restarts the schedule
    # instead of catching up (138 samples in the 0.5 s, with two CPU hogs beside it). A
    # tick written back to before the previous wake's sample is clamped to its time by the
    # profile writer (a gap of 0), which is not counted here.
    gaps = [b - a for a, b in zip(times, times[1:])]
    wakes = len(doc["profilerOverhead"]["samples"]["data"])
    assert wakes < 0.5 * len(times), f"{wakes} sampler wake-ups for {len(times)} idle samples"
    median = sorted(gaps)[len(gaps) // 2]
    assert 0.9 <= median <= 1.1, f"median gap {median} ms"
    off_grid = [g for g in gaps if abs(g - 1.0) > 0.1 and g > 0.05]
    assert len(off_grid) <= wakes, \
        f"{len(off_grid)} gaps other than 1 ms for {wakes} wakes; e.g. {off_grid[:10]}"


def runtime_log(doc):
    return doc["profilingLog"][str(doc["meta"]["fleetprof"]["pid"])]["runtime"]


def test_an_idle_process_skips_its_descriptor_and_memory_checks(tmp):
    # At most every 10 ms the sampler fstat()s its descriptors and reads statm, unless no
    # thread but itself ran since the last check it made: a sleeping process pays for one or
    # two at its start (without the skip: one at each of the sampler's wakes, none skipped).
    r = run(tmp, [WORKLOAD, "idle", "0.5"])
    assert r.returncode == 0, r.stderr
    log = runtime_log(only_profile(tmp))
    made, skipped = log["descriptorChecks"], log["descriptorChecksSkipped"]
    assert made >= 1, log
    # The sampler wakes every 100 ms while no thread runs (child/core/core.h,
    # RT_IDLE_DRAIN_NS): about 6 checks due in the 0.5 s, nearly all skipped.
    assert made <= 3 and skipped >= 3, f"{made} checks made, {skipped} skipped: {log}"


def test_a_descriptor_closed_by_an_unknown_thread_while_idle_is_noticed(tmp):
    # The main thread sleeps; a thread the runtime does not know (a raw clone) closes every
    # descriptor with the close_range system call, which no interposer sees, and ends. Its
    # CPU and context switches count as the process running: the next check finds the loss,
    # and statm, given up, is opened again (the program lists it when it wakes).
    r = run(tmp, [TRANSPARENT, "idle-close-range", "500"])
    assert r.returncode == 0, r.stderr
    log = runtime_log(only_profile(tmp))
    assert log["descriptorsTaken"] > 0, log
    assert log["descriptorChecksSkipped"] > 0, f"the process was never idle: {log}"
    statm = [line for line in r.stdout.splitlines() if line.endswith("/statm")]
    assert statm, f"statm was not opened again while the process slept: {r.stdout!r}, {log}"


def test_prefork_workers_profile_themselves(tmp):
    # Each worker works for 0.5 s of its own CPU (the master for 0.25 s).
    r = run(tmp, [WORKLOAD, "--cpu", "prefork", "4", "0.5"])
    assert r.returncode == 0, r.stderr
    paths = profiles(tmp)
    assert len(paths) == 5, f"master + 4 workers should write 5 profiles, got {paths}"
    docs = [load_checked(p) for p in paths]
    pids = {d["meta"]["fleetprof"]["pid"] for d in docs}
    assert len(pids) == 5
    master = [d for d in docs if "wl_recurse" in pc.functions(d)]
    workers = [d for d in docs if d not in master]
    assert len(master) == 1 and len(workers) == 4
    master_pid = master[0]["meta"]["fleetprof"]["pid"]
    tasks = set()
    for d in workers:
        assert d["meta"]["fleetprof"]["ppid"] == master_pid
        funcs = pc.functions(d)
        mine = [f for f in funcs if f.startswith("wl_worker_task_")]
        assert len(mine) == 1, f"a worker shows exactly its own task, got {mine}"
        tasks.add(mine[0])
        assert "wl_recurse" not in funcs, "a worker must not carry the master's samples"
        _, cpu_s = pc.cpu_sampling(main_thread(d))
        assert 0.45 <= cpu_s <= 0.55, f"a worker's CPU deltas add up to {cpu_s:.3f} s, not 0.5 s"
        assert_sampled_per_cpu(d, main_thread(d))
    assert tasks == {f"wl_worker_task_{i}" for i in range(4)}


def test_a_forked_worker_keeps_no_copy_of_the_parents_statm(tmp):
    # A forked worker starts its runtime over; the copy of the parent's /proc/PID/statm
    # descriptor (the RSS counter's, which reads the parent's memory) leaked in each one.
    e = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1")
    e.pop("FLEETPROF_OUTPUT", None)
    # Workers of 1.5 s of CPU each: alive while we look, however busy the machine.
    p = subprocess.Popen([WORKLOAD, "--cpu", "prefork", "2", "1.5", "0.2"], env=e)

    def statm_open(w):
        links = []
        for fd in os.listdir(f"/proc/{w}/fd"):
            try:
                links.append(os.readlink(f"/proc/{w}/fd/{fd}"))
            except FileNotFoundError:
                pass
        return [link for link in links if link.endswith("/statm")]

    try:
        workers = []
        deadline = time.monotonic() + 30
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
            with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
                workers = [int(w) for w in f.read().split()]
        assert len(workers) == 2, f"workers: {workers}"
        for w in workers:
            # Wait (bounded) until the worker's sampler has opened its own statm; by then
            # the parent's copy must be gone.
            wait_until(lambda: f"/proc/{w}/statm" in statm_open(w),
                       f"worker {w} to open its own statm (open: {statm_open(w)})")
            statm = statm_open(w)
            assert statm == [f"/proc/{w}/statm"], f"worker {w} has statm open as {statm}"
    finally:
        rc = p.wait(timeout=20)
    assert rc == 0, f"workload ended with {rc}"


def test_exec_keeps_profiling(tmp):
    r = run(tmp, [WORKLOAD, "--cpu", "exec", "1"])
    assert r.returncode == 0, r.stderr
    doc = only_profile(tmp)
    assert_recursion(doc, "wl_hot_leaf", 10)


def test_fork_exec_children_never_die_of_the_profiler(tmp):
    # The forked child's sampler must not leave a SIGPROF pending across exec: the new image
    # starts with SIGPROF at its default action, which kills it.
    # 20 kHz widens the race window (about 1 kill per 1000 children before the fix).
    r = run(tmp, [WORKLOAD, "fork-exec", "2500"], timeout=300, FLEETPROF_INTERVAL_MS="0.05",
            FLEETPROF_OUTPUT=os.path.join(tmp, "fe-%p.json"))
    assert r.returncode == 0 and "killed: 0" in r.stdout, r.stdout + r.stderr


def test_forked_children_never_inherit_a_held_loader_or_unwinder_lock(tmp):
    # A fork copies the loader's and libunwind's locks as they are. Forked while the sampler
    # walked a stack copy (or listed the modules), a child inherited a held lock and hung in
    # its deferred start or at exit: 1 to 2 children in 100 with stacks copied, and the
    # prefork test's daemonizing worker now and then. The runtime's own loader and libunwind
    # work now stays out of every fork (a gate the fork closes).
    for walk in ("copy", "dwarf"):
        r = run(tmp, [WORKLOAD, "fork-loader", "100"], timeout=900, FLEETPROF_STACKWALK=walk)
        assert r.returncode == 0 and "hung=0" in r.stdout, f"{walk}: {r.stdout}{r.stderr}"


def test_a_forked_child_that_execs_at_once_starts_nothing(tmp):
    # The fork makes only the thread's registration, the sampler thread and the runtime's
    # descriptors (its chunk file among them); the buffer and the process's description
    # (/proc/self/maps) wait for the start, at the sampler's tick once the child has lived
    # 10 ms (or used an interval of CPU: a second here). A child that looked at its chunk
    # file sooner than 10 ms after the fork finds no description. On a loaded machine the
    # look can come later (then the start may rightly have come first): such a run proves
    # nothing, and another is made, up to 20.
    looks = []
    for _ in range(20):
        r = run(tmp, [WORKLOAD, "fork-exec-fds"], FLEETPROF_INTERVAL_MS="1000",
                FLEETPROF_OUTPUT=os.path.join(tmp, "ff-%p.json"))
        assert r.returncode == 0, r.stdout + r.stderr
        m = re.search(r"chunk_file_described=(-?\d) after_us=(\d+)", r.stdout)
        assert m, r.stdout + r.stderr
        looks.append((int(m[1]), int(m[2])))
        if int(m[2]) < 9000:
            assert int(m[1]) == 0, f"described {int(m[2])} us after the fork: {looks}"
            return
    raise taplib.Skip(f"no child looked within 9 ms of its fork in 20 runs: {looks}")


def test_a_lowered_descriptor_limit_moves_the_band_with_it(tmp):
    # The band's top is read once; a program that lowers RLIMIT_NOFILE to 300 afterwards
    # still finds the runtime's new descriptors (a forked child's statm and chunk file)
    # in the band below 300, not on its own low numbers.
    r = run(tmp, [WORKLOAD, "fork-low-nofile"])
    assert r.returncode == 0, r.stdout + r.stderr
    line = [x for x in r.stdout.splitlines() if x.startswith("runtime_fds=")][0]
    fds = [f.split(":") for f in line.split("=", 1)[1].split(",") if f]
    assert sorted(kind for _, kind in fds) == ["chunks", "statm"], line
    assert all(300 - 64 <= int(n) < 300 for n, _ in fds), line


def test_a_daemon_that_hangs_up_never_kills_the_program(tmp):
    # A "daemon" that accepts and closes at once (one that refuses, crashes or restarts):
    # the child's first write then fails with EPIPE. It must not raise SIGPIPE in a thread of
    # the program: 45 % of such children died of it when Hello left from the main thread.
    path = os.path.join(tmp, "hangup.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)

    def hang_up():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    env = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=path,
               FLEETPROF_DIR=os.path.join(tmp, "exit"))
    statuses = []
    try:
        for _ in range(10):
            procs = [subprocess.Popen([WORKLOAD, "busy", "0.01"], env=env,
                                      stderr=subprocess.DEVNULL) for _ in range(10)]
            statuses += [p.wait(timeout=60) for p in procs]
    finally:
        srv.close()
    died = [rc for rc in statuses if rc != 0]
    assert not died, f"{len(died)} of {len(statuses)} children ended with {sorted(set(died))}"


def test_a_file_size_limit_fails_the_profile_not_the_program(tmp):
    # Under RLIMIT_FSIZE the profile's write fails with EFBIG and raises SIGXFSZ in the
    # exiting thread, whose default action killed the program (status 153 in a shell).
    out = os.path.join(tmp, "limited.json")
    e = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_OUTPUT=out)
    e.pop("FLEETPROF_SOCKET", None)

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    r = subprocess.run([WORKLOAD, "busy", "0.2"], env=e, preexec_fn=limit, timeout=60,
                       capture_output=True)
    assert r.returncode == 0, f"ended with {r.returncode}: {r.stderr[-300:]!r}"
    assert not glob.glob(out + "*"), f"left {glob.glob(out + '*')}"
    want = f"cannot write the profile to {out}: File too large".encode()
    assert want in r.stderr, f"the lost profile is not named: {r.stderr[-300:]!r}"


def test_a_profile_that_cannot_be_written_is_named_on_stderr(tmp):
    # The user asked for a file, or for FLEETPROF_DIR as the daemon's fallback: a failed
    # write is one line on stderr, once, and the program's status is its own.
    out = os.path.join(tmp, "no-such-dir", "p.json")
    r = run(tmp, [WORKLOAD, "exit-underscore", "0.1"], FLEETPROF_OUTPUT=out)
    assert r.returncode == 3, f"exit status {r.returncode}: {r.stderr}"
    want = f"cannot write the profile to {out}: No such file or directory"
    assert r.stderr.count(want) == 1, f"stderr: {r.stderr!r}"
    blocker = os.path.join(tmp, "a-file")
    open(blocker, "w").close()
    r = run(tmp, [WORKLOAD, "busy", "0.1"], FLEETPROF_OUTPUT="",
            FLEETPROF_SOCKET=os.path.join(tmp, "no-daemon.sock"),
            FLEETPROF_DIR=os.path.join(blocker, "dir"))
    assert r.returncode == 0, f"exit status {r.returncode}: {r.stderr}"
    want = f"cannot write the exit profile to {blocker}/dir: Not a directory"
    assert r.stderr.count(want) == 1, f"stderr: {r.stderr!r}"


def test_underscore_exit_writes_profile_and_keeps_status(tmp):
    r = run(tmp, [WORKLOAD, "exit-underscore", "0.5"])
    assert r.returncode == 3, f"exit status {r.returncode}, expected 3"
    doc = only_profile(tmp)
    assert "wl_hot_leaf" in pc.functions(doc)
    assert doc["meta"]["shutdownTime"] is not None


def test_sigterm_writes_profile_and_dies_by_signal(tmp):
    e = dict(os.environ, FLEETPROF_STARTUP="1", LD_PRELOAD=LIB,
             FLEETPROF_OUTPUT=os.path.join(tmp, "p-%p.json"))
    p = subprocess.Popen([WORKLOAD, "wait-signal"], env=e)
    try:
        # Until it has been sampled in its loop: 0.2 s of its CPU, however long that takes.
        wait_until(lambda: cpu_seconds(p.pid) >= 0.2 or p.poll() is not None,
                   "the workload to use 0.2 s of CPU")
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == -signal.SIGTERM, f"the process must still die by SIGTERM, got {rc}"
    doc = only_profile(tmp)
    assert "wl_hot_leaf" in pc.functions(doc)


def test_exit_and_sigterm_at_a_1s_interval(tmp):
    """At a 1 s interval the sampler sleeps up to 1 s between ticks. A program that exits, or
    is sent SIGTERM, in between still ends as it would without us (its status) and leaves its
    profile. How long that takes (the exit path and the handler wake the sampler rather than
    wait for its tick) is bench-runtime's `child.exit_wall_ms_interval_1s` and
    `child.sigterm_wall_ms_interval_1s`: a time, so a benchmark, not a test."""
    for i in range(5):
        r = run(tmp, [WORKLOAD, "idle", "0.05"], FLEETPROF_INTERVAL_MS=1000)
        assert r.returncode == 0, f"run {i}: exit status {r.returncode}: {r.stderr}"
    assert len(profiles(tmp)) == 5, f"profiles: {profiles(tmp)}"
    e = dict(os.environ, FLEETPROF_STARTUP="1", LD_PRELOAD=LIB, FLEETPROF_INTERVAL_MS="1000",
             FLEETPROF_OUTPUT=os.path.join(tmp, "s-%p.json"))
    for i in range(2):
        p = subprocess.Popen([WORKLOAD, "wait-signal"], env=e)
        try:
            wait_until(lambda: cpu_seconds(p.pid) >= 0.05 or p.poll() is not None,
                       "the workload to use 0.05 s of CPU")
            p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=20)
        finally:
            if p.poll() is None:
                p.kill()
        assert rc == -signal.SIGTERM, f"run {i}: must die by SIGTERM, got {rc}"
    assert len(glob.glob(os.path.join(tmp, "s-*.json"))) == 2


def test_a_program_that_resets_or_takes_sigprof_is_not_killed_and_keeps_its_own(tmp):
    # Daemons reset every signal handler to SIG_DFL at start, and some programs run a
    # profiler of their own on SIGPROF (setitimer). Either replaced the runtime's handler:
    # the next sample killed the program ("Profiling timer expired"), or its handler got
    # our 1 kHz. Now its action is kept aside and chained for its own signals only.
    r = run(tmp, [WORKLOAD, "own-sigprof", "0.5"])
    assert r.returncode == 0, f"ended with {r.returncode} (-27: killed by SIGPROF): {r.stderr}"
    calls = int(r.stdout.split("own_sigprof=")[1].split()[0])
    # 0.5 s of CPU on a 10 ms ITIMER_PROF: ~50; ours alone would add ~500.
    assert 20 <= calls <= 80, f"the program's own handler ran {calls} times, expected ~50"
    doc = only_profile(tmp)
    # Our sampling goes on at 1 kHz beside the program's 100 Hz of its own.
    assert_sampled_per_cpu(doc, main_thread(doc))
    assert pc.cpu_sampling(main_thread(doc))[1] >= 0.4, "the samples miss the program's CPU"


def test_api_labels_markers_counters(tmp):
    r = run(tmp, [WL_API, "0.4"], preload=False)
    assert r.returncode == 0, r.stderr
    doc = only_profile(tmp)
    t = main_thread(doc)
    stacks = pc.sample_stacks(t)
    labelled = [s for s in stacks if "wl-label-phase" in s]
    # The labelled phase is 0.4 s of the thread's CPU: some 400 samples with CPU at 1 kHz.
    sms = t["samples"]["schema"]
    labelled_cpu = [row[sms["threadCPUDelta"]] for row, s in
                    zip((r for r in t["samples"]["data"] if r[sms["stack"]] is not None), stacks)
                    if "wl-label-phase" in s and row[sms["threadCPUDelta"]]]
    assert len(labelled_cpu) > 200 and sum(labelled_cpu) >= 0.3e9, \
        f"{len(labelled_cpu)} samples carry the label and {sum(labelled_cpu) / 1e9:.3f} s of CPU"
    merged = [s for s in labelled if s.index("wl-label-phase") > s.index("api_labelled_phase")
              and s.index("wl-label-phase") < s.index("api_hot_inside_label")]
    assert len(merged) >= 0.9 * len(labelled), \
        f"the label must sit between its function and the callee; e.g. {labelled[0]}"
    ms = t["markers"]["schema"]
    strings = t["stringTable"]
    markers = {}
    for row in t["markers"]["data"]:
        markers.setdefault(strings[row[ms["name"]]], []).append(row)
    for name in ("wl-instant", "wl-span", "wl-interval", "wl-typed", "wl-with-stack"):
        assert name in markers, f"marker {name} missing; have {sorted(markers)}"
    inst = markers["wl-instant"][0]
    assert inst[ms["phase"]] == 0 and inst[ms["data"]] == {"type": "Text", "name": "hello from wl-api"}
    phases = sorted(r[ms["phase"]] for r in markers["wl-span"])
    assert phases == [2, 3], phases
    iv = markers["wl-interval"][0]
    assert iv[ms["phase"]] == 1 and iv[ms["endTime"]] >= iv[ms["startTime"]]
    typed = markers["wl-typed"][0][ms["data"]]
    assert typed["type"] == "WlPhase" and typed["bytes"] == 12288
    assert strings[typed["label"]] == "setup", "unique-string fields hold a string index"
    schema = [s for s in doc["meta"]["markerSchema"] if s["name"] == "WlPhase"]
    assert schema and [f["format"] for f in schema[0]["data"]] == ["unique-string", "bytes"]
    cause = markers["wl-with-stack"][0][ms["data"]]["stack"]
    cause_stack = cause["samples"]["data"][0][0]
    assert cause_stack is not None
    counters = {c["name"]: c for c in doc["counters"]}
    assert "wl-items" in counters
    cs = counters["wl-items"]["samples"]
    total = sum(r[cs["schema"]["count"]] for r in cs["data"])
    assert total == 350, f"counter deltas add up to {total}, expected 50 x 7"
    assert len(doc["pausedRanges"]) == 1 and doc["pausedRanges"][0]["endTime"] is not None


def test_dlopen_loop_at_10khz_never_deadlocks(tmp):
    seconds = float(os.environ.get("FLEETPROF_DLOPEN_SECONDS", "20"))
    r = run(tmp, [WORKLOAD, "dlopen", str(seconds), PLUGIN], timeout=seconds + 60,
            FLEETPROF_INTERVAL_MS="0.1")
    assert r.returncode == 0, r.stderr
    loops = int(r.stdout.split(":")[1])
    assert loops > 100, f"only {loops} dlopen/dlclose loops"
    doc = only_profile(tmp)
    assert len(main_thread(doc)["samples"]["data"]) > 1000
    runtime = doc["profilingLog"][str(doc["meta"]["fleetprof"]["pid"])]["runtime"]
    assert runtime["unsafeSamplesInLoader"] > 0, \
        f"no sample hit the loader guard in {loops} dlopen loops: {runtime}"


def test_a_library_loaded_after_the_start_is_in_the_exit_profile(tmp):
    # The module list is collected at the start (the chunk file's description) and kept
    # until the loader's counts move: a dlopen() since must be in the exit profile's libs.
    r = run(tmp, [WORKLOAD, "dlopen-stay", PLUGIN])
    assert r.returncode == 0, r.stderr
    names = [lib["name"] for lib in only_profile(tmp)["libs"]]
    assert os.path.basename(PLUGIN) in names, names


def test_bad_setting_is_named_once_and_defaults_apply(tmp):
    r = run(tmp, [WORKLOAD, "busy", "0.3"], FLEETPROF_INTERVAL_MS="fast",
            FLEETPROF_STACKWALK="magic")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2, f"one line per bad variable, got {lines}"
    assert "FLEETPROF_INTERVAL_MS=fast" in lines[0] and "milliseconds" in lines[0]
    assert "FLEETPROF_STACKWALK=magic" in lines[1] and "fp, dwarf or copy" in lines[1]
    doc = only_profile(tmp)
    assert doc["meta"]["interval"] == 1 and doc["meta"]["fleetprof"]["stackwalk"] == "dwarf"


def test_exports_only_api_and_interposed_functions(tmp):
    out = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True,
                         check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    names = {n.split("@")[0] for n in names}
    interposed = {"pthread_create", "dlopen", "dlclose", "dl_iterate_phdr", "_exit", "_Exit",
                  "execve", "execv", "execvp", "execvpe", "fexecve", "execl", "execlp", "execle",
                  "close", "close_range", "closefrom", "pipe", "pipe2", "sigaction",
                  "signal", "bsd_signal", "ssignal", "sysv_signal", "__sysv_signal", "sigset",
                  "sigignore", "siginterrupt", "dup2", "dup3", "epoll_create", "epoll_create1",
                  "eventfd", "socket", "epoll_wait", "epoll_pwait", "posix_spawn", "posix_spawnp",
                  "open", "open64", "openat", "openat64", "dup", "accept", "accept4", "chroot", "fork",
                  # signal masks, the alternate stack, raw system calls (child/core/cpu-timer.c)
                  "syscall", "pthread_sigmask", "sigprocmask", "sigaltstack",
                  # blocking calls, drawn where they wait (child/entry/preload-waits.c)
                  "nanosleep", "clock_nanosleep", "usleep", "sleep", "pause", "poll", "ppoll",
                  "select", "pselect", "waitpid", "wait", "wait4", "waitid", "sigsuspend",
                  "sigwait", "sigwaitinfo", "sigtimedwait", "read", "recv", "recvfrom", "recvmsg",
                  "pthread_join", "sem_wait", "sem_timedwait", "pthread_cond_wait",
                  "pthread_cond_timedwait",
                  # user ids: a forked child connects first (child/entry/preload-credentials.c)
                  "setuid", "seteuid", "setreuid", "setresuid", "setfsuid"}
    stray = {n for n in names if not n.startswith("fleetprof_")} - interposed
    assert not stray, f"libfleetprof.so exports more than its API: {sorted(stray)}"
    assert {"fleetprof_init", "fleetprof_marker", "fleetprof_counter_add"} <= names


IPC_LIBS = ("libuv", "libprotobuf-c", "libfleetprof-ipc")


def mapped_ipc_libs(maps):
    return sorted({os.path.basename(line.split()[-1]) for line in maps.splitlines()
                   if any(n in line for n in IPC_LIBS)})


def test_the_runtime_does_not_link_libuv_or_protobuf(tmp):
    """Issue #17: libfleetprof.so needs no more than libc, libunwind (the lead's part) and
    the loader; the IPC client is libfleetprof-ipc.so, loaded when first needed."""
    out = subprocess.run(["readelf", "-d", LIB], capture_output=True, text=True,
                         check=True).stdout
    needed = [line.split("[")[-1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    assert not [n for n in needed if n.startswith(("libuv", "libprotobuf-c"))], needed
    assert os.path.exists(os.path.join(os.path.dirname(LIB), "libfleetprof-ipc.so"))


def test_a_process_without_a_daemon_never_maps_libuv_or_protobuf(tmp):
    # The shell sleeps through sampler ticks before cat prints the shell's own maps.
    script = "sleep 0.05; cat /proc/$$/maps"
    for how, env in [("loaded", {"FLEETPROF_STARTUP": "0"}), ("started", {}),
                     ("started, a profile at exit", None)]:
        extra = {"FLEETPROF_OUTPUT": ""} if env is not None else {}
        r = run(tmp, ["sh", "-c", script], **(env or {}), **extra)
        assert r.returncode == 0, r.stderr
        libs = mapped_ipc_libs(r.stdout)
        if env is None:
            # A chunk region (FLEETPROF_OUTPUT) is described with protobuf-c: the module then.
            assert "libfleetprof-ipc.so" in libs, (how, libs)
        else:
            assert libs == [], (how, libs)


def test_without_the_ipc_module_a_process_profiles_alone_and_says_why_once(tmp):
    """libfleetprof.so copied without libfleetprof-ipc.so: no daemon connection and no region
    description, the reason once on stderr (FLEETPROF_DEBUG), the profile still written."""
    libdir = os.path.join(tmp, "lib")
    os.mkdir(libdir)
    lone = os.path.join(libdir, "libfleetprof.so")
    subprocess.run(["cp", LIB, lone], check=True)
    e = dict(os.environ, LD_PRELOAD=lone, FLEETPROF_STARTUP="1", FLEETPROF_DEBUG="1",
             FLEETPROF_SOCKET=os.path.join(tmp, "no.sock"),
             FLEETPROF_OUTPUT=os.path.join(tmp, "p-%p.json"))
    e.pop("LD_LIBRARY_PATH", None)  # meson's: the loader's search path would find it there
    r = subprocess.run([WORKLOAD, "busy", "0.1"], env=e, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "cannot load libfleetprof-ipc.so" in line]
    assert len(said) == 1, r.stderr
    assert pc.sample_stacks(main_thread(only_profile(tmp)))


taplib.run([
    test_the_runtime_does_not_link_libuv_or_protobuf,
    test_a_process_without_a_daemon_never_maps_libuv_or_protobuf,
    test_without_the_ipc_module_a_process_profiles_alone_and_says_why_once,
    test_busy_dwarf_symbolized_deep_stacks,
    test_fp_stackwalk,
    test_copy_stackwalk,
    test_corrupt_frame_pointer_never_kills_the_program,
    test_threads_have_names_and_functions,
    test_an_idle_thread_pool_costs_no_unwinder_caches,
    test_idle_thread_gets_same_samples_without_cpu,
    test_an_idle_process_skips_its_descriptor_and_memory_checks,
    test_a_descriptor_closed_by_an_unknown_thread_while_idle_is_noticed,
    test_prefork_workers_profile_themselves,
    test_a_forked_worker_keeps_no_copy_of_the_parents_statm,
    test_exec_keeps_profiling,
    test_fork_exec_children_never_die_of_the_profiler,
    test_forked_children_never_inherit_a_held_loader_or_unwinder_lock,
    test_a_forked_child_that_execs_at_once_starts_nothing,
    test_a_lowered_descriptor_limit_moves_the_band_with_it,
    test_a_daemon_that_hangs_up_never_kills_the_program,
    test_a_file_size_limit_fails_the_profile_not_the_program,
    test_a_profile_that_cannot_be_written_is_named_on_stderr,
    test_underscore_exit_writes_profile_and_keeps_status,
    test_sigterm_writes_profile_and_dies_by_signal,
    test_exit_and_sigterm_at_a_1s_interval,
    test_a_program_that_resets_or_takes_sigprof_is_not_killed_and_keeps_its_own,
    test_api_labels_markers_counters,
    test_dlopen_loop_at_10khz_never_deadlocks,
    test_a_library_loaded_after_the_start_is_in_the_exit_profile,
    test_bad_setting_is_named_once_and_defaults_apply,
    test_exports_only_api_and_interposed_functions,
])
