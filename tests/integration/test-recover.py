#!/usr/bin/env python3
"""Crash-surviving profiles without a daemon: a process profiled with FLEETPROF_DIR (or
FLEETPROF_OUTPUT) keeps its chunks in fleetprof-PID.chunks; killed, it leaves the file, and
`fleetprof recover` (or `merge`) turns it into its profile. Real processes, real SIGKILL;
each recovered profile is loaded and checked like the front-end would.

Usage: test-recover.py BUILD_DIR   (meson passes it; output is TAP)
"""
import glob
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
FLEETPROF = os.path.join(BUILD, "tools", "fleetprof")


def env_for(**extra):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("FLEETPROF_"):
            del e[k]
    e.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1"})
    e.update({k: str(v) for k, v in extra.items()})
    return e


def wait_until(cond, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def zombie_cpu_seconds(pid):
    """CPU of a process that was killed and not reaped yet (a zombie keeps its times)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def recover(out, *files, expect_ok=True):
    r = subprocess.run([FLEETPROF, "recover", "-o", out, *files], capture_output=True,
                       text=True, timeout=120)
    if expect_ok:
        assert r.returncode == 0, f"recover failed ({r.returncode}): {r.stderr}"
    return r


def start_killable(tmp, argv, **extra):
    p = subprocess.Popen(argv, env=env_for(FLEETPROF_DIR=tmp, **extra),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return p


def thread_cpu(doc):
    """CPU seconds the samples of every thread add up to (threadCPUDelta)."""
    return sum(pc.cpu_sampling(t)[1] for _, t in pc.all_threads(doc))


def test_sigkill_keeps_samples(tmp):
    """A worker SIGKILLed mid-run: its samples up to its death are in the recovered profile
    (the CPU they carry is the CPU the process used, at most the last ticks short), on the
    right threads and functions, marked recovered."""
    p = start_killable(tmp, [WORKLOAD, "threads", "3", "120"])
    chunks = os.path.join(tmp, f"fleetprof-{p.pid}.chunks")
    wait_until(lambda: taplib.cpu_seconds(p.pid) >= 1.5, "1.5 s of CPU in the workers")
    p.send_signal(signal.SIGKILL)
    wait_until(lambda: open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0]
               == "Z", "the process to die")
    used = zombie_cpu_seconds(p.pid)
    p.wait()
    assert p.returncode == -signal.SIGKILL, p.returncode
    assert os.path.exists(chunks), f"no chunk file left: {os.listdir(tmp)}"
    assert not glob.glob(os.path.join(tmp, "*.json")), "a killed process wrote a profile?"

    out = os.path.join(tmp, "recovered.json")
    r = recover(out, chunks)
    assert f"recovered pid {p.pid}" in r.stderr, r.stderr
    doc = pc.load_valid(out)
    meta = doc["meta"]["fleetprof"]
    assert meta["pid"] == p.pid and meta.get("recovered") == "chunk file", meta
    names = {t["name"] for _, t in pc.all_threads(doc)}
    assert {"wl-worker-0", "wl-worker-1", "wl-worker-2"} <= names, names
    fns = pc.functions(doc)
    for f in ("wl_thread_alpha", "wl_thread_beta", "wl_thread_gamma"):
        assert any(f in n for n in fns), f"{f} missing from {sorted(fns)[:30]}"
    got = thread_cpu(doc)
    # The sampler writes every tick; what the kill can take is the ticks since the last
    # write (a few ms of 3 threads) and a torn last entry.
    assert got >= used * 0.9 - 0.05, f"recovered {got:.3f} s of CPU of {used:.3f} s used"
    assert got <= used + 0.05, f"recovered {got:.3f} s of CPU, more than {used:.3f} s used"
    log = doc["profilingLog"][str(p.pid)]["runtime"]["recovered"]
    assert log["described"] and log["corruptChunks"] == 0, log
    # The file stays (recover reads, never deletes): recovering twice gives the same.
    assert os.path.exists(chunks)


def test_a_process_whose_daemon_is_not_there_keeps_a_chunk_file(tmp):
    """FLEETPROF_SOCKET names a socket nobody serves (the daemon not started, or gone): the
    process profiles alone, so its chunks go in FLEETPROF_DIR's file as without a daemon,
    and a SIGKILL loses none of them (they were in memory nobody else held)."""
    p = start_killable(tmp, [WORKLOAD, "busy", "120"],
                       FLEETPROF_SOCKET=os.path.join(tmp, "nobody.sock"))
    chunks = os.path.join(tmp, f"fleetprof-{p.pid}.chunks")
    wait_until(lambda: taplib.cpu_seconds(p.pid) >= 0.5 and os.path.exists(chunks),
               "0.5 s of CPU and a chunk file")
    p.send_signal(signal.SIGKILL)
    p.wait()
    out = os.path.join(tmp, "recovered.json")
    r = recover(out, chunks)
    assert f"recovered pid {p.pid}" in r.stderr, r.stderr
    doc = pc.load_valid(out)
    assert any("wl_hot_leaf" in n for n in pc.functions(doc)), sorted(pc.functions(doc))[:30]
    assert thread_cpu(doc) >= 0.3, thread_cpu(doc)


def test_normal_exit_leaves_no_chunk_file(tmp):
    """A process that writes its profile removes its chunk file: FLEETPROF_DIR, and a
    FLEETPROF_OUTPUT whose directory holds the file meanwhile."""
    r = subprocess.run([WORKLOAD, "busy", "0.2"], env=env_for(FLEETPROF_DIR=tmp),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    left = sorted(os.listdir(tmp))
    assert len(left) == 1 and left[0].endswith(".json"), left
    out_dir = os.path.join(tmp, "out")
    os.mkdir(out_dir)
    r = subprocess.run([WORKLOAD, "busy", "0.2"],
                       env=env_for(FLEETPROF_OUTPUT=os.path.join(out_dir, "p-%p.json")),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    left = sorted(os.listdir(out_dir))
    assert len(left) == 1 and left[0].startswith("p-"), left


def test_forked_workers_each_keep_their_own(tmp):
    """A master and its forked workers killed together: one chunk file per process (a
    forked child never writes into its parent's shared pages), all recovered into one
    fleet profile with `merge`, which takes chunk files beside profiles."""
    p = subprocess.Popen([WORKLOAD, "prefork", "2", "120"],
                         env=env_for(FLEETPROF_DIR=tmp), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True)

    def files():
        return glob.glob(os.path.join(tmp, "fleetprof-*.chunks"))

    def workers_busy():
        kids = [int(x) for x in open(f"/proc/{p.pid}/task/{p.pid}/children")
                .read().split()]
        return len(kids) == 2 and all(taplib.cpu_seconds(k) >= 0.3 for k in kids)

    wait_until(workers_busy, "two forked workers with 0.3 s of CPU each")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert len(files()) == 3, f"expected master + 2 workers: {os.listdir(tmp)}"
    out = os.path.join(tmp, "fleet.json")
    r = subprocess.run([FLEETPROF, "merge", "-o", out, *files()], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = pc.load_valid(out)
    procs = list(pc.all_processes(doc))
    assert len(procs) == 3, [p_["meta"]["fleetprof"] for p_ in procs]
    pids = {p_["meta"]["fleetprof"]["pid"] for p_ in procs}
    assert p.pid in pids, pids
    fns = pc.functions(doc)
    assert any("wl_worker_main" in n for n in fns), sorted(fns)[:30]
    assert not glob.glob(os.path.join(tmp, "*.recovered.*")), os.listdir(tmp)


def test_exec_keeps_the_old_images_chunks_aside(tmp):
    """exec ends the old image without a profile of its own: its chunk file is moved aside
    (fleetprof-PID.exec-NS.chunks: the new image makes fleetprof-PID.chunks again, and removes
    it at its exit), and `recover` over the directory gives both lives."""
    r = subprocess.run([WORKLOAD, "exec", "0.2"], env=env_for(FLEETPROF_DIR=tmp),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    left = sorted(os.path.basename(f) for f in glob.glob(os.path.join(tmp, "*.chunks")))
    assert len(left) == 1 and ".exec-" in left[0], os.listdir(tmp)
    out = os.path.join(tmp, "out", "all.json")
    os.mkdir(os.path.dirname(out))
    r = subprocess.run([FLEETPROF, "recover", "-o", out, tmp], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    procs = [q for q in pc.all_processes(pc.load_valid(out)) if q.get("threads")]
    assert len(procs) == 2, [q["meta"]["fleetprof"] for q in procs]
    assert sum(1 for q in procs if q["meta"]["fleetprof"].get("execdInto")) == 1


def test_damaged_files_are_survived(tmp):
    """Files damaged every way a dying or hostile writer could: random bytes over the
    chunks, a truncated file, a file that is no region. recover never crashes or hangs; it
    recovers what is whole or says why it cannot."""
    p = start_killable(tmp, [WORKLOAD, "threads", "2", "120"])
    chunks = os.path.join(tmp, f"fleetprof-{p.pid}.chunks")
    wait_until(lambda: taplib.cpu_seconds(p.pid) >= 0.5, "0.5 s of CPU")
    p.kill()
    p.wait()
    data = bytearray(open(chunks, "rb").read())
    rng = random.Random(1234)
    header = 4096 + 2 * (1 << 20)
    for round_ in range(12):
        bad = bytearray(data)
        for _ in range(1 + round_ * 40):
            at = rng.randrange(header, len(bad))
            bad[at] = rng.randrange(256)
        if round_ % 3 == 2:
            bad = bad[:rng.randrange(header, len(bad))]
        path = os.path.join(tmp, f"bad-{round_}.chunks")
        open(path, "wb").write(bad)
        out = os.path.join(tmp, f"bad-{round_}.json")
        r = recover(out, path, expect_ok=False)
        assert r.returncode in (0, 1), f"recover died: {r.returncode} {r.stderr}"
        if r.returncode == 0:
            pc.load_valid(out)
    junk = os.path.join(tmp, "junk.chunks")
    open(junk, "wb").write(b"not a region at all" * 100)
    r = recover(os.path.join(tmp, "junk.json"), junk, expect_ok=False)
    assert r.returncode == 1 and "not a chunk file" in r.stderr, r.stderr
    r = recover(os.path.join(tmp, "x.json"), os.path.join(tmp, "absent.chunks"),
                expect_ok=False)
    assert r.returncode == 1 and "No such file" in r.stderr, r.stderr


def marker_stack_names(t, marker_data):
    """Function names of a marker's stack, innermost first."""
    st = t["stackTable"]
    ss, fs = st["schema"], t["frameTable"]["schema"]
    stack = marker_data["stack"]["samples"]["data"][0][0]
    names = []
    while stack is not None:
        frame = st["data"][stack][ss["frame"]]
        names.append(t["stringTable"][t["frameTable"]["data"][frame][fs["location"]]])
        stack = st["data"][stack][ss["prefix"]]
    return names


def crash_markers(doc):
    out = []
    for _, t in pc.all_threads(doc):
        ms = t["markers"]["schema"]
        for m in t["markers"]["data"]:
            if t["stringTable"][m[ms["name"]]] == "Crash":
                out.append((t, m[ms["data"]]))
    return out


def crash_and_recover(tmp, mode, seconds, want_signal):
    """Runs workload MODE without, then with the profiler: the same death both times; the
    recovered profile's Crash marker, on the thread that crashed."""
    plain = subprocess.run([WORKLOAD, mode, "0.05"], capture_output=True, timeout=60)
    assert plain.returncode == -want_signal, f"without the profiler: {plain.returncode}"
    p = subprocess.run([WORKLOAD, mode, str(seconds)], env=env_for(FLEETPROF_DIR=tmp),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == plain.returncode, \
        f"died of {p.returncode} with the profiler, {plain.returncode} without: {p.stderr}"
    files = glob.glob(os.path.join(tmp, "fleetprof-*.chunks"))
    assert len(files) == 1, os.listdir(tmp)
    out = os.path.join(tmp, "crashed.json")
    recover(out, files[0])
    doc = pc.load_valid(out)
    crashes = crash_markers(doc)
    assert len(crashes) == 1, f"{len(crashes)} Crash markers"
    t, data = crashes[0]
    assert t["name"] == "GeckoMain", t["name"]
    assert data["type"] == "Crash", data
    schemas = {s["name"]: s for s in doc["meta"]["markerSchema"]}
    assert {f["key"] for f in schemas["Crash"]["data"]} >= {"signal", "address", "reason"}
    fns = pc.functions(doc)
    assert any("wl_recurse" in n for n in fns), "no samples of the work before the crash"
    return data, marker_stack_names(t, data)


def test_segfault_leaves_a_crash_marker(tmp):
    """A segfault: killed by SIGSEGV exactly as without the profiler, and the recovered
    profile has a Crash marker with the signal, the faulting address and the faulting
    function on top of its stack."""
    data, stack = crash_and_recover(tmp, "segv", 0.3, signal.SIGSEGV)
    assert data["signal"] == "SIGSEGV" and data["address"] == "0x0", data
    assert data["reason"] == "address not mapped", data
    assert "wl_crash_here" in stack[0], stack[:5]
    assert any("main" in n for n in stack[1:]), stack


def test_abort_leaves_a_crash_marker(tmp):
    """abort(): killed by SIGABRT as without the profiler, Crash marker from abort's caller."""
    data, stack = crash_and_recover(tmp, "abort", 0.3, signal.SIGABRT)
    assert data["signal"] == "SIGABRT" and data["address"] == "-", data
    assert any("wl_abort_here" in n for n in stack), stack[:8]


def test_a_program_with_its_own_segv_handler_keeps_running(tmp):
    """A program that handles SIGSEGV itself (a JIT's guard page): it finds the default
    action, its handler is called for each fault and read back, and it carries on, exactly
    as without the profiler; nothing is recorded as a crash."""
    plain = subprocess.run([WORKLOAD, "segv-handled", "5"], capture_output=True, text=True,
                           timeout=60)
    assert plain.returncode == 0, plain.stderr
    prof = subprocess.run([WORKLOAD, "segv-handled", "5"], env=env_for(FLEETPROF_DIR=tmp),
                          capture_output=True, text=True, timeout=60)
    assert prof.returncode == 0, prof.stderr
    assert prof.stdout == plain.stdout == "segv_before=default\nsegv_handled=5\nsegv_after=own\n", \
        (plain.stdout, prof.stdout)
    profiles = glob.glob(os.path.join(tmp, "*.json"))
    assert len(profiles) == 1 and not glob.glob(os.path.join(tmp, "*.chunks")), os.listdir(tmp)
    assert not crash_markers(pc.load_valid(profiles[0]))


def test_recover_over_a_directory(tmp):
    """A FLEETPROF_DIR after a run: exit profiles of the processes that ended, a chunk file
    of one that was killed. `recover -o OUT DIR/*` and `recover -o OUT DIR` take all of them
    and exit 0; a file that is neither makes it name that file and exit 1, OUT still
    written with the rest."""
    d = os.path.join(tmp, "dir")
    for _ in range(2):
        r = subprocess.run([WORKLOAD, "busy", "0.1"], env=env_for(FLEETPROF_DIR=d),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    p = start_killable(d, [WORKLOAD, "busy", "60"])
    wait_until(lambda: taplib.cpu_seconds(p.pid) >= 0.1, "some CPU")
    p.kill()
    p.wait()
    names = sorted(os.listdir(d))
    assert len(names) == 3 and names[-1] == f"fleetprof-{p.pid}.chunks", names
    for args in ([os.path.join(d, n) for n in names], [d]):
        out = os.path.join(tmp, "all.json")
        r = recover(out, *args)
        doc = pc.load_valid(out)
        pids = sorted(q["meta"]["fleetprof"]["pid"] for q in pc.all_processes(doc)
                      if "pid" in q["meta"].get("fleetprof", {}))
        assert p.pid in pids and len(pids) == 3, f"{args}: {pids}: {r.stderr}"
        os.unlink(out)
    bad = os.path.join(d, "junk.chunks")
    with open(bad, "w") as f:
        f.write("not a region")
    r = recover(out, d, expect_ok=False)
    assert r.returncode == 1 and "junk.chunks" in r.stderr and "could not use" in r.stderr, \
        r.stderr
    assert len(list(pc.all_processes(pc.load_valid(out)))) >= 3


taplib.run([
    test_recover_over_a_directory,
    test_sigkill_keeps_samples,
    test_a_process_whose_daemon_is_not_there_keeps_a_chunk_file,
    test_normal_exit_leaves_no_chunk_file,
    test_forked_workers_each_keep_their_own,
    test_exec_keeps_the_old_images_chunks_aside,
    test_damaged_files_are_survived,
    test_segfault_leaves_a_crash_marker,
    test_abort_leaves_a_crash_marker,
    test_a_program_with_its_own_segv_handler_keeps_running,
])
