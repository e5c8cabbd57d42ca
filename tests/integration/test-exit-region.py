#!/usr/bin/env python3
"""Exit profiles a short-lived child leaves in its chunk region for the daemon to build
(Hello.exit_in_region, Welcome.exit_in_region, ChunkManagerUpdate.exit_in_region): real
fleetprofd and real children, a fake daemon to see what a child sends to an old daemon or to
one that offers, and hostile children that claim their exit profile is in a damaged region.

Usage: test-exit-region.py BUILD_DIR   (meson passes it; output is TAP)
"""
import copy
import os
import random
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import Daemon, capture_doc, events, process, wait_until  # noqa: E402
from wire import field, frame, split_frames  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
WL_SPLIT = os.path.join(BUILD, "tests", "workloads", "wl-groups-split")
HELLO, WELCOME, UPDATE, PROFILE_DATA, SYMBOLIZE, ERROR = 1, 2, 10, 15, 16, 18
MiB = 1 << 20
# The runtime log's fields about who symbolized: the daemon's build names them its own way.
SYMBOL_FIELDS = {"symbolModulesLoaded", "symbolModulesNamesOnly", "symbolServiceBatches",
                 "symbolServiceFailures", "symbolServiceAddresses", "symbolServiceUnresolved",
                 "symbolModuleErrors", "symbolizeUs", "symbolError", "builtFromRegion"}


def env(sock=None, **extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
    e.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1"})
    if sock:
        e["FLEETPROF_SOCKET"] = sock
    e.update({k: str(v) for k, v in extra.items()})
    return e


def runtime_log(proc):
    """profilingLog[pid].runtime ({} for a profile recovered from a dead child's chunks)."""
    return proc["profilingLog"][str(proc["meta"]["fleetprof"]["pid"])].get("runtime", {})


def comparable(proc):
    """The profile with what may differ between the child's own write and the daemon's build
    taken out: the runtime log's symbolization fields (who resolved the addresses)."""
    p = copy.deepcopy(proc)
    rt = runtime_log(p)
    for k in SYMBOL_FIELDS:
        rt.pop(k, None)
    return p


def diff(a, b, where="", out=None):
    """Paths where two JSON values differ (at most 20)."""
    out = [] if out is None else out
    if len(out) >= 20:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'daemon' if k in a else 'child'}'s")
            else:
                diff(a[k], b[k], f"{where}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{where}[{i}]", out)
    elif a != b:
        out.append(f"{where}: daemon {str(a)[:120]!r} child {str(b)[:120]!r}")
    return out


def built_and_own(d, tmp, argv, name):
    """Runs argv (a short-lived child named name) profiled under d, its own exit profile to
    FLEETPROF_OUTPUT too. Returns (the exit profile the daemon built from the child's region,
    as a capture holds it; the child's own write, from the same buffer at the same instant),
    after checking what the logs say and that both tell the same profile, field by field
    (but who symbolized)."""
    own = os.path.join(tmp, "own.json")
    p = subprocess.Popen(argv, env=env(d.sock, FLEETPROF_OUTPUT=own),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.wait(timeout=60) == 0, p.stderr.read()
    pid = p.pid
    # The daemon reads the Final after the child is gone; its workers build the profile
    # (off the loop: the line may come after the child's "left").
    wait_until(lambda: f"child {pid} ({name}) left" in d.log(), "the child's end")
    wait_until(lambda: d.status()["building"] == 0, "the daemon's build")
    assert f"child {pid} ({name}): exit profile built from its chunk region" in d.log(), \
        f"no exit profile built from a region:\n{d.log()[-3000:]}"
    doc = capture_doc(d, tmp)
    proc = process(doc, pid)
    assert proc["meta"]["fleetprof"].get("exit") is True, proc["meta"]["fleetprof"]
    assert "recovered" not in proc["meta"]["fleetprof"], proc["meta"]["fleetprof"]
    assert proc["meta"].get("shutdownTime"), proc["meta"]
    assert runtime_log(proc).get("builtFromRegion") is True, runtime_log(proc)
    assert any(f"added the exit profile of child {pid} ({name})" in e and
               "built by the daemon from its shared chunks" in e for e in events(doc)), \
        events(doc)
    mine = pc.load_valid(own)
    assert "builtFromRegion" not in runtime_log(mine), runtime_log(mine)
    problems = diff(comparable(proc), comparable(mine))
    assert not problems, "the daemon's build differs from the child's own:\n" + \
        "\n".join(problems)
    return proc, mine


def test_short_child_exit_profile_is_built_by_the_daemon(tmp):
    """A short-lived child's exit profile is built by the daemon from its region: present,
    symbolized, complete, and the same profile as the one the child writes itself (to
    FLEETPROF_OUTPUT, from the same buffer at the same instant); the daemon's log and the
    gathering log say so."""
    d = Daemon(tmp)
    try:
        proc, _ = built_and_own(d, tmp, [WORKLOAD, "busy", "0.15"], "workload")
        names = {n for t in proc["threads"] for n in pc.frame_names(t)}
        assert any(n.startswith("wl_hot_leaf") for n in names), sorted(names)[:40]
    finally:
        d.stop()


# A short-lived child that uses the runtime's API on two threads (the main thread and
# "py-worker"), through ctypes (the preloaded library's symbols): each thread does 4 rounds
# of 10 ms of its CPU under a label, then records a typed marker of its own schema, a text
# marker, a marker with its stack, a start/end pair and an interval, and adds 1 to a
# counter; the main thread pauses the profiler once. A few hundred entries: its exit
# profile goes through the region (no performance group, which would keep it out).
API_ROUNDS = 4
API_CHILD = """
import ctypes
import threading
import time

lib = ctypes.CDLL(None)


class Field(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("label", ctypes.c_char_p),
                ("format", ctypes.c_char_p), ("kind", ctypes.c_int)]


class Value(ctypes.Structure):
    class V(ctypes.Union):
        _fields_ = [("i", ctypes.c_int64), ("u", ctypes.c_uint64), ("d", ctypes.c_double),
                    ("s", ctypes.c_char_p)]
    _fields_ = [("kind", ctypes.c_int), ("v", V)]


APP, IO, UINT, STRING = 7, 3, 2, 4
lib.fleetprof_now_ns.restype = ctypes.c_uint64
lib.fleetprof_label_push.restype = ctypes.c_void_p
lib.fleetprof_label_pop.argtypes = [ctypes.c_void_p]
lib.fleetprof_marker_typed.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                       ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.POINTER(Value), ctypes.c_size_t]
lib.fleetprof_marker_interval.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64,
                                          ctypes.c_uint64, ctypes.c_char_p]
lib.fleetprof_counter_add.argtypes = [ctypes.c_int, ctypes.c_int64]
FIELDS = (Field * 2)(Field(b"who", b"Who", b"unique-string", STRING),
                     Field(b"round", b"Round", b"integer", UINT))
SCHEMA = lib.fleetprof_marker_schema(b"PyRound", b"{marker.data.who}", FIELDS, 2)
COUNTER = lib.fleetprof_counter_create(b"py-rounds", b"Other", b"rounds of the API")
assert SCHEMA > 0 and COUNTER >= 0, (SCHEMA, COUNTER)
LABELS = {"main": b"py-label-main", "worker": b"py-label-worker"}  # outlive their labels


def spin(seconds):
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def rounds(who):
    for r in range(ROUNDS):
        token = lib.fleetprof_label_push(LABELS[who], APP)
        t0 = lib.fleetprof_now_ns()
        spin(0.01)
        values = (Value * 2)()
        values[0].kind, values[0].v.s = STRING, who.encode()
        values[1].kind, values[1].v.u = UINT, r
        lib.fleetprof_marker_typed(SCHEMA, b"py-round", APP, t0, lib.fleetprof_now_ns(),
                                   values, 2)
        lib.fleetprof_marker(b"py-text", IO, b"round text")
        lib.fleetprof_marker_with_stack(b"py-cause", IO, b"with stack")
        lib.fleetprof_marker_start(b"py-span", IO)
        spin(0.002)
        lib.fleetprof_marker_end(b"py-span", IO)
        lib.fleetprof_marker_interval(b"py-interval", IO, t0, lib.fleetprof_now_ns(), None)
        if who == "main" and r == 1:
            lib.fleetprof_pause()
            spin(0.005)
            lib.fleetprof_resume()
        lib.fleetprof_counter_add(COUNTER, 1)
        lib.fleetprof_label_pop(token)


worker = threading.Thread(target=rounds, args=("worker",), name="py-worker")
worker.start()
rounds("main")
worker.join()
""".replace("ROUNDS", str(API_ROUNDS))


def api_content(proc):
    """What API_CHILD put in its profile, per thread with samples: (samples with a stack,
    label frames in them, its py-round markers as (who, round), how many of its other
    markers of each name, with their data as API_CHILD made it); and the py-rounds
    counter's total."""
    threads = {}
    for t in proc["threads"]:
        stacks = pc.sample_stacks(t)
        if not stacks:
            continue
        ms = t["markers"]["schema"]
        rounds, others = [], {}
        for row in t["markers"]["data"]:
            name, data = t["stringTable"][row[ms["name"]]], row[ms["data"]] or {}
            if name == "py-round" and data.get("type") == "PyRound":
                rounds.append((t["stringTable"][data["who"]], data["round"]))
                continue
            if (name == "py-text" and data.get("name") != "round text") or \
                    (name == "py-cause" and not data.get("stack", {}).get("samples")):
                continue
            others[name] = others.get(name, 0) + 1
        labels = {f for s in stacks for f in s if f.startswith("py-label-")}
        threads[t["tid"]] = (len(stacks), labels, sorted(rounds), others)
    (counter,) = [c for c in proc.get("counters") or [] if c["name"] == "py-rounds"]
    cs = counter["samples"]["schema"]
    return threads, sum(row[cs["count"]] for row in counter["samples"]["data"])


def test_exit_profile_with_api_data_on_two_threads_is_built_the_same(tmp):
    """The daemon's build of an exit profile from the child's region equals the child's own
    write field by field also for what the API records: labels, typed markers with their
    schema, text markers, markers with a stack, start/end and interval markers, a counter,
    a paused range, on two threads with samples."""
    d = Daemon(tmp)
    try:
        script = os.path.join(tmp, "api-child.py")
        with open(script, "w") as f:
            f.write(API_CHILD)
        # The runtime names a process after its argv[0]'s last part.
        proc, _ = built_and_own(d, tmp, [sys.executable, script],
                                os.path.basename(sys.executable))
        # The comparison above is not vacuous: the profile holds all of it.
        schemas = {s["name"]: s for s in proc["meta"].get("markerSchema") or []}
        assert "PyRound" in schemas, sorted(schemas)
        assert [f["key"] for f in schemas["PyRound"]["data"]] == ["who", "round"], \
            schemas["PyRound"]
        threads, counted = api_content(proc)
        assert counted == 2 * API_ROUNDS, f"py-rounds counter total {counted}"
        pid = proc["meta"]["fleetprof"]["pid"]
        main = threads.pop(pid, None)
        workers = [w for w in threads.values() if w[1] == {"py-label-worker"}]
        assert main and len(workers) == 1, f"main {main}, others {threads}"
        # A start and an end are a marker each (phases 2 and 3).
        n = API_ROUNDS
        markers = {"py-text": n, "py-cause": n, "py-span": 2 * n, "py-interval": n}
        for who, (samples, labels, rounds, others) in (("main", main), ("worker", workers[0])):
            assert samples >= 5, f"{who}: {samples} samples with a stack"
            assert labels == {f"py-label-{who}"}, f"{who}: labels {labels}"
            assert rounds == [(who, r) for r in range(n)], f"{who}: markers {rounds}"
            assert others == markers, f"{who}: markers {others}"
        assert len(proc["pausedRanges"]) == 1, proc["pausedRanges"]
    finally:
        d.stop()


def test_a_mid_size_exit_profile_is_built_by_the_daemon(tmp):
    """A child whose buffer holds some 200 KiB (8,000 markers in 0.1 s: more than a 20 ms
    child's, less than the 256 KiB a short-lived process may leave) leaves it in the region
    too: the daemon's worker builds it, the process does not write it, and the profile is
    the one it would have written itself, every marker in it."""
    d = Daemon(tmp)
    try:
        proc, own = built_and_own(d, tmp, [WORKLOAD, "flood", "0.1", "80000"], "workload")
        markers = sum(len(t["markers"]["data"]) for t in proc["threads"])
        assert markers > 4000, f"{markers} markers: the buffer is not mid-size"
        assert markers == sum(len(t["markers"]["data"]) for t in own["threads"])
    finally:
        d.stop()


def test_a_child_with_performance_groups_is_built_by_the_daemon(tmp):
    """A short-lived child that timed performance groups (three threads, 50/30/20): its exit
    profile is built from its region too, the groups' totals in its meta from its last
    GroupStats, as it would have written them itself; and what it printed it measured."""
    d = Daemon(tmp)
    try:
        proc, _ = built_and_own(d, tmp, [WL_SPLIT, "20"], "wl-groups-split")
        groups = {g["name"]: g for g in proc["meta"]["fleetprof"]["groups"]["totals"]}
        assert set(groups) == {"top-50", "top-30", "top-20"}, groups
        assert all(g["events"] == 20 for g in groups.values()), groups
        assert proc["meta"]["fleetprof"]["groups"]["slowEventNs"], proc["meta"]["fleetprof"]
    finally:
        d.stop()


def test_a_large_exit_profile_is_still_sent_by_the_child(tmp):
    """A child whose buffer holds more than a short-lived process's profile (256 KiB)
    writes and sends its exit profile itself: the daemon copies no more than half a MiB of
    a process's chunks to build one."""
    d = Daemon(tmp)
    try:
        p = subprocess.Popen([WORKLOAD, "flood", "0.6", "100000"], env=env(d.sock),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert p.wait(timeout=60) == 0, p.stderr.read()
        wait_until(lambda: f"child {p.pid} (workload) left" in d.log(), "the child's end")
        log = d.log()
        assert f"kept the exit profile of child {p.pid}" in log, log[-3000:]
        assert "exit profile built from its chunk region" not in log, log[-3000:]
        doc = capture_doc(d, tmp)
        proc = process(doc, p.pid)
        assert "builtFromRegion" not in runtime_log(proc), runtime_log(proc)
        markers = sum(len(t["markers"]["data"]) for t in proc["threads"])
        assert markers > 10000, f"{markers} markers: the buffer did not pass 1 MiB"
        assert not any("built by the daemon" in e for e in events(doc)), events(doc)
    finally:
        d.stop()


def test_a_child_without_a_daemon_writes_its_profile_as_before(tmp):
    """No daemon: FLEETPROF_OUTPUT gets the child's own exit profile, nothing about regions."""
    out = os.path.join(tmp, "alone.json")
    r = subprocess.run([WORKLOAD, "busy", "0.1"], env=env(None, FLEETPROF_OUTPUT=out),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = pc.load_valid(out)
    assert doc["meta"]["fleetprof"].get("exit") is True, doc["meta"]["fleetprof"]
    rt = doc["profilingLog"][str(doc["meta"]["fleetprof"]["pid"])]["runtime"]
    assert "builtFromRegion" not in rt, rt
    assert not [f for f in os.listdir(tmp) if f.endswith(".chunks")], os.listdir(tmp)


class FakeDaemon:
    """Plays a daemon for one child: Welcome (with exit_in_region when offer), an Error to
    every Symbolize (the child then names its frames itself), and records the frames, the
    region descriptor passed with Hello, and the region's bytes when a Final says the exit
    profile is in it."""

    def __init__(self, tmp, offer):
        self.sock = os.path.join(tmp, "fake.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.sock)
        self.listener.listen(1)
        self.listener.settimeout(30)
        self.offer = offer
        self.frames = []
        self.region = None

    def serve(self):
        conn, _ = self.listener.accept()
        conn.settimeout(30)
        buf, fds = b"", []
        try:
            while True:
                data, anc, _, _ = conn.recvmsg(1 << 20, socket.CMSG_SPACE(8 * 4))
                for level, kind, raw in anc:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds += list(struct.unpack(f"{len(raw) // 4}i", raw[:len(raw) // 4 * 4]))
                if not data:
                    return
                frames, buf = split_frames(buf + data)
                for num, msg in frames:
                    self.frames.append((num, msg))
                    self.answer(conn, num, msg, fds)
        finally:
            conn.close()
            for fd in fds:
                os.close(fd)

    def answer(self, conn, num, msg, fds):
        if num == HELLO:
            clock = field(1, time.monotonic_ns()) + field(2, int(time.time() * 1000))
            conn.sendall(frame(WELCOME, field(1, msg[1][0]), field(2, 1), field(3, 1000000),
                               field(4, 64 * MiB), field(5, 256 * 1024), field(9, clock),
                               field(10, 1), *([field(13, 1)] if self.offer else [])))
        elif num == SYMBOLIZE:
            conn.sendall(frame(ERROR, field(1, msg[1][0]), field(2, 95),
                               field(3, "no symbol service here")))
        elif num == UPDATE and msg.get(8) == [1] and fds:
            size = os.fstat(fds[0]).st_size
            self.region = os.pread(fds[0], size, 0)

    def of(self, num):
        return [m for n, m in self.frames if n == num]


def run_with_fake(tmp, offer, argv):
    fake = FakeDaemon(tmp, offer)
    p = subprocess.Popen(argv, env=env(fake.sock), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        fake.serve()
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return fake


def test_an_old_daemon_gets_the_exit_profile_as_json(tmp):
    """A daemon whose Welcome does not offer to build it (an old one, or one that refused the
    region) gets the exit profile streamed as before; the child still says it could leave
    it (Hello.exit_in_region) and its Final does not claim it did."""
    fake = run_with_fake(tmp, False, [WORKLOAD, "busy", "0.1"])
    (hello,) = fake.of(HELLO)
    assert hello.get(9) == [1] and hello.get(11) == [1], hello
    pieces = [m for m in fake.of(PROFILE_DATA) if m.get(5) == [1]]
    assert pieces and pieces[-1].get(3) == [1], fake.frames
    finals = [m for m in fake.of(UPDATE) if m.get(6) == [1]]
    assert finals and all(8 not in m for m in finals), finals


def test_an_offering_daemon_gets_a_final_and_no_json(tmp):
    """A daemon that offers gets no exit profile JSON and no symbol request: the child
    publishes the description of its end in its region (exit_ns, its runtime numbers) and
    sends a Final that says so."""
    fake = run_with_fake(tmp, True, [WORKLOAD, "busy", "0.1"])
    assert not [m for m in fake.of(PROFILE_DATA) if m.get(5) == [1]], fake.frames
    assert not fake.of(SYMBOLIZE), fake.frames
    finals = [m for m in fake.of(UPDATE) if m.get(6) == [1]]
    assert finals and finals[-1].get(8) == [1], finals
    assert fake.region and fake.region[:4] == b"FPRG", "no region read at the Final"
    out_dir = os.environ.get("FLEETPROF_SAVE_EXIT_REGION")
    if out_dir:  # corpus seeds for fuzz-region-exit (by hand: see tests/fuzz/meson.build)
        with open(os.path.join(out_dir, "region.bin"), "wb") as f:
            f.write(fake.region)


def hostile_child(d, region, claims=True, hello_offers=True):
    """A process that says Hello with region (sealed memfd) and, if claims, a Final saying its
    exit profile is in it; then it leaves."""
    pid = os.fork()
    if pid == 0:
        try:
            import fcntl
            fd = os.memfd_create("hostile", os.MFD_ALLOW_SEALING)
            os.write(fd, region)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.sock)
            hello = frame(HELLO, field(1, 1), field(2, 1), field(3, os.getpid()),
                          field(5, "hostile"), field(9, 1),
                          *([field(11, 1)] if hello_offers else []))
            s.sendmsg([hello], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                 fd.to_bytes(4, sys.byteorder))])
            time.sleep(0.2)  # welcomed
            if claims:
                s.sendall(frame(UPDATE, field(6, 1), field(8, 1)))
            time.sleep(0.2)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_hostile_exit_regions_never_hurt_the_daemon(tmp):
    """Children that claim their exit profile is in a region that is damaged, random, holds
    no description of an end, is too large, or was never offered: the daemon logs why,
    builds nothing wrong, keeps serving, and a real child after them still gets its exit
    profile built."""
    fake = run_with_fake(tmp, True, [WORKLOAD, "busy", "0.1"])
    real = fake.region
    d = Daemon(tmp)
    try:
        rng = random.Random(17)
        pid = hostile_child(d, bytes(rng.randrange(256) for _ in range(64 * 1024)))
        wait_until(lambda: f"child {pid} (hostile) left its exit profile" in d.log(),
                   "the random region's failure in the log")
        assert "not a chunk region" in d.log(), d.log()[-2000:]
        for round_ in range(6):
            bad = bytearray(real)
            for _ in range(50 * (round_ + 1)):
                at = rng.randrange(0, len(bad)) if round_ % 2 else \
                    rng.randrange(4096 + 2 * MiB, len(bad))
                bad[at] = rng.randrange(256)
            hostile_child(d, bytes(bad))
        # A region without the description of an end (a running process's).
        undescribed = bytearray(real)
        struct.pack_into("<Q", undescribed, 32, 0)  # meta_seq: no description
        pid = hostile_child(d, bytes(undescribed))
        wait_until(lambda: f"child {pid} (hostile) left its exit profile in its chunk region, "
                   "and it could not be built: no description of its end" in d.log(),
                   "the undescribed region's failure in the log")
        pid = hostile_child(d, real, hello_offers=False)
        wait_until(lambda: f"child {pid} (hostile) left its exit profile in a chunk region the "
                   "daemon did not offer to read" in d.log(), "the unoffered claim in the log")
        assert d.alive(), d.log()[-2000:]
        p = subprocess.Popen([WORKLOAD, "busy", "0.1"], env=env(d.sock),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert p.wait(timeout=60) == 0, p.stderr.read()
        wait_until(lambda: f"child {p.pid} (workload) left" in d.log(), "the child's end")
        doc = capture_doc(d, tmp)
        assert d.alive(), d.log()[-2000:]
        built = [p for p in pc.all_processes(doc) if runtime_log(p).get("builtFromRegion")]
        assert any(p["meta"]["fleetprof"]["name"] == "workload" for p in built), [p["meta"]["fleetprof"] for p in pc.all_processes(doc)]
    finally:
        d.stop()


taplib.run([
    test_short_child_exit_profile_is_built_by_the_daemon,
    test_exit_profile_with_api_data_on_two_threads_is_built_the_same,
    test_a_mid_size_exit_profile_is_built_by_the_daemon,
    test_a_child_with_performance_groups_is_built_by_the_daemon,
    test_a_large_exit_profile_is_still_sent_by_the_child,
    test_a_child_without_a_daemon_writes_its_profile_as_before,
    test_an_old_daemon_gets_the_exit_profile_as_json,
    test_an_offering_daemon_gets_a_final_and_no_json,
    test_hostile_exit_regions_never_hurt_the_daemon,
])
