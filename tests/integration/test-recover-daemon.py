#!/usr/bin/env python3
"""Crash-surviving profiles with a daemon: a child's chunks live in a sealed memfd whose
descriptor it passes with Hello; when it dies without a profile (SIGKILL, a segfault, during
a capture), the real fleetprofd reads them back. Hostile children (unsealed regions, floods
of descriptors, regions scribbled over while the daemon reads) cannot crash or hang it.

Usage: test-recover-daemon.py BUILD_DIR   (meson passes it; output is TAP)
"""
import os
import random
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
from daemon_helper import Daemon, capture_doc, events, process, wait_until  # noqa: E402
from wire import capture, field, frame  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
HELLO = 1
MiB = 1 << 20


def env(d, **extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
    e.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_SOCKET": d.sock})
    e.update({k: str(v) for k, v in extra.items()})
    return e


def wait_log(d, text, timeout=60):
    wait_until(lambda: text in d.log(), f"'{text}' in the daemon's log:\n{d.log()[-2000:]}",
               timeout)


def dead_cpu_seconds(p):
    """SIGKILLs p and returns the CPU it used (read while it is a zombie)."""
    p.send_signal(signal.SIGKILL)
    wait_until(lambda: open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
               "the process to die")
    with open(f"/proc/{p.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    used = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    p.wait()
    return used


def test_a_sigkilled_child_is_recovered_by_the_daemon(tmp):
    """SIGKILL mid-run: the next capture has the child's profile, read back from its shared
    chunks: its threads and functions, the CPU it used, and a log event saying so."""
    d = Daemon(tmp)
    try:
        p = subprocess.Popen([WORKLOAD, "threads", "3", "120"], env=env(d),
                             stdout=subprocess.DEVNULL)
        wait_log(d, f"child {p.pid} (workload")
        wait_until(lambda: taplib.cpu_seconds(p.pid) >= 1.5, "1.5 s of CPU")
        used = dead_cpu_seconds(p)
        wait_log(d, f"child {p.pid} (workload): profile recovered from its chunks")
        doc = capture_doc(d, tmp)
        proc = process(doc, p.pid)
        assert proc["meta"]["fleetprof"].get("recovered") == "shared memory", proc["meta"]
        names = {t["name"] for t in proc["threads"]}
        assert {"wl-worker-0", "wl-worker-1", "wl-worker-2"} <= names, names
        got = sum(pc.cpu_sampling(t)[1] for t in proc["threads"])
        assert used * 0.9 - 0.05 <= got <= used + 0.05, f"recovered {got:.3f} s of {used:.3f} s"
        assert any(f"recovered the profile of child {p.pid} (workload)" in e and "killed" in e
                   for e in events(doc)), events(doc)
        assert d.alive()
    finally:
        d.stop()


def test_a_segfault_under_the_daemon_shows_the_crash(tmp):
    """A segfaulting child dies of SIGSEGV as without the profiler; the capture has its
    profile with the Crash marker, the faulting function on top."""
    d = Daemon(tmp)
    try:
        r = subprocess.run([WORKLOAD, "segv", "0.3"], env=env(d), capture_output=True,
                           timeout=60)
        assert r.returncode == -signal.SIGSEGV, r.returncode
        doc = capture_doc(d, tmp)
        pids = [p["meta"]["fleetprof"]["pid"] for p in pc.all_processes(doc)]
        (proc,) = [p for p in pc.all_processes(doc) if p["meta"]["fleetprof"].get("recovered")]
        crashes = []
        for t in proc["threads"]:
            ms = t["markers"]["schema"]
            crashes += [m[ms["data"]] for m in t["markers"]["data"]
                        if t["stringTable"][m[ms["name"]]] == "Crash"]
        assert len(crashes) == 1 and crashes[0]["signal"] == "SIGSEGV", (pids, crashes)
        assert any("SIGSEGV" in e for e in events(doc)), events(doc)
    finally:
        d.stop()


def test_a_child_killed_during_a_capture_is_in_it(tmp):
    """The capture asks a (stopped) child for its profile; the child is killed before it
    answers: the capture completes, with the profile recovered from its chunks."""
    d = Daemon(tmp, "--child-timeout", "60")
    p = subprocess.Popen([WORKLOAD, "threads", "2", "120"], env=env(d),
                         stdout=subprocess.DEVNULL)
    try:
        wait_log(d, f"child {p.pid} (workload")
        wait_until(lambda: taplib.cpu_seconds(p.pid) >= 0.5, "0.5 s of CPU")
        p.send_signal(signal.SIGSTOP)
        out = os.path.join(tmp, "during.json")
        box = {}
        t = threading.Thread(target=lambda: box.update(r=capture(d.sock, out, timeout=120)))
        t.start()
        wait_log(d, "capture:")  # the capture has started and asked the child
        time.sleep(0.2)
        p.send_signal(signal.SIGKILL)
        p.wait()
        t.join(timeout=120)
        result, error = box["r"]
        assert error is None, error
        doc = pc.load_valid(out)
        proc = process(doc, p.pid)
        assert proc["meta"]["fleetprof"].get("recovered") == "shared memory"
        assert any(f"child {p.pid} (workload) from its shared chunks, as it died during the "
                   "capture" in e for e in events(doc)), events(doc)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        d.stop()


def fake_child(d, fds, behaviour=None):
    """Forks a process that says Hello with the descriptors fds passed alongside, runs
    behaviour(sock) if any, and exits without a word more (as a killed child would)."""
    pid = os.fork()
    if pid == 0:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.sock)
            hello = frame(HELLO, field(1, 1), field(2, 1), field(3, os.getpid()),
                          field(5, "hostile"), field(9, 1))
            s.sendmsg([hello], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                 b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))])
            time.sleep(0.3)  # welcomed
            if behaviour:
                behaviour(s)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return pid


def sealed_memfd(data):
    fd = os.memfd_create("hostile", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    import fcntl
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def daemon_passed_fds(d):
    """Descriptors of the kinds the hostile children pass (the symbol service's module files
    are the daemon's own business)."""
    n = 0
    for f in os.listdir(f"/proc/{d.proc.pid}/fd"):
        try:
            target = os.readlink(f"/proc/{d.proc.pid}/fd/{f}")
        except OSError:
            continue
        n += target.startswith("/memfd:") or target == "/dev/null"
    return n


def a_real_region(tmp):
    """The chunk file of a workload killed while profiled without a daemon."""
    p = subprocess.Popen([WORKLOAD, "threads", "2", "120"],
                         env={**{k: v for k, v in os.environ.items()
                                 if not k.startswith("FLEETPROF_")},
                              "LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1",
                              "FLEETPROF_DIR": tmp}, stdout=subprocess.DEVNULL)
    wait_until(lambda: taplib.cpu_seconds(p.pid) >= 0.4, "0.4 s of CPU")
    p.kill()
    p.wait()
    with open(os.path.join(tmp, f"fleetprof-{p.pid}.chunks"), "rb") as f:
        return f.read()


def test_hostile_regions_never_hurt_the_daemon(tmp):
    """An unsealed region is refused with a reason; a flood of descriptors is closed as it
    comes; random bytes, a region damaged at random, and one scribbled over while the daemon
    reads it are survived: the daemon logs, keeps serving and keeps none of their
    descriptors."""
    import fcntl  # noqa: F401
    d = Daemon(tmp)
    try:
        before = daemon_passed_fds(d)
        unsealed = os.memfd_create("unsealed")
        os.write(unsealed, b"\0" * 8192)
        pid = fake_child(d, [unsealed])
        wait_log(d, f"child {pid} (hostile): chunk region refused: not sealed against shrinking")

        many = [os.open("/dev/null", os.O_RDONLY) for _ in range(40)]
        fake_child(d, many)

        rng = random.Random(99)
        fake_child(d, [sealed_memfd(bytes(rng.randrange(256) for _ in range(64 * 1024)))])

        real = a_real_region(tmp)
        for round_ in range(4):
            bad = bytearray(real)
            for _ in range(200 * (round_ + 1)):
                at = rng.randrange(4096 + 2 * MiB, len(bad))
                bad[at] = rng.randrange(256)
            fake_child(d, [sealed_memfd(bytes(bad))])

        # Scribbled over by another process while the daemon copies it.
        fd = sealed_memfd(real)

        def scribble_and_go(s):
            if os.fork() == 0:
                end = time.monotonic() + 2
                r = random.Random(os.getpid())
                while time.monotonic() < end:
                    os.pwrite(fd, bytes(r.randrange(256) for _ in range(4096)),
                              r.randrange(4096 + 2 * MiB, len(real) - 4096))
                os._exit(0)

        fake_child(d, [fd], scribble_and_go)
        time.sleep(2.5)
        doc = capture_doc(d, tmp)
        assert d.alive(), d.log()[-2000:]
        wait_until(lambda: daemon_passed_fds(d) <= before,
                   f"the daemon to hold {before} passed descriptors again "
                   f"(holds {daemon_passed_fds(d)})", timeout=20)
        assert "ended without" in " ".join(events(doc)) or \
            "recovered the profile" in " ".join(events(doc)), events(doc)
    finally:
        d.stop()


def test_recovered_profiles_count_in_the_global_budget(tmp):
    """Children with full shared buffers, all killed: every one is recovered, and the
    recovered profiles are held like exit profiles, under the global limit (the oldest
    evicted first), with the children's chunks gone."""
    limit, chunk = 4 * MiB, 64 * 1024
    d = Daemon(tmp, "--global-limit", "4M", "--process-limit", "4M")
    procs = []
    try:
        for _ in range(4):
            procs.append(subprocess.Popen(
                [WORKLOAD, "flood", "120", "20000"],
                env=env(d, FLEETPROF_CHUNK_KB=64, FLEETPROF_BUFFER_MB=4),
                stdout=subprocess.DEVNULL))

        def full():
            st = d.status()
            return len(st["children"]) == 4 and \
                st["unreleased_bytes"] + st["released_bytes"] >= limit // 2
        wait_until(full, "the children to fill half the global limit")
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
        for p in procs:
            wait_log(d, f"child {p.pid} (workload): profile recovered from its chunks")
        wait_until(lambda: not d.status()["children"], "the children to be gone")
        st = d.status()
        total = st["unreleased_bytes"] + st["released_bytes"]
        assert st["exit_profiles"] >= 1, st
        assert st["exit_profile_bytes"] > 0, st
        assert total <= limit + 2 * chunk, f"the fleet holds {total} bytes > {limit} (invariant 1)"
        log = d.log()
        kept = log.count("kept the exit profile of child")
        assert kept == 4, f"{kept} of 4 recovered profiles kept:\n{log[-3000:]}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        d.stop()


def test_a_child_killed_while_disconnected_is_recovered(tmp):
    """The program closed the profiler's descriptors and took every free one, so the runtime
    could not reconnect. SIGKILLed then, it was lost: the daemon had let its region go at the
    disconnect. Now the region is kept while the process lives on, and rebuilt at its death:
    its work before and after the disconnect is in the next capture."""
    d = Daemon(tmp)
    try:
        p = subprocess.Popen([WORKLOAD, "close-fill", "0.3", "600"], env=env(d),
                             stdout=subprocess.PIPE, text=True,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                                   (4096, 4096)))
        line = p.stdout.readline()
        assert line.startswith("filled "), line
        wait_log(d, f"child {p.pid} (workload) disconnected and lives on")
        wait_until(lambda: taplib.cpu_seconds(p.pid) >= 0.8, "0.8 s of CPU")
        assert d.log().count(f"child {p.pid} (workload, parent") == 1, d.log()[-2000:]
        used = dead_cpu_seconds(p)
        wait_log(d, f"child {p.pid} (workload): profile recovered from its chunks")
        doc = capture_doc(d, tmp)
        proc = process(doc, p.pid)
        assert proc["meta"]["fleetprof"].get("recovered") == "shared memory", proc["meta"]
        got = sum(pc.cpu_sampling(t)[1] for t in proc["threads"])
        assert used * 0.9 - 0.05 <= got <= used + 0.05, f"recovered {got:.3f} s of {used:.3f} s"
        # The work after the disconnect (the sweep is a few ms): its samples are there too.
        # By their leaf: the sweep took libunwind's pipe too, and the frames above the leaf
        # go with it (see the runtime's log).
        assert pc.cpu_ms_in(proc, "wl_hot_leaf") >= 0.8 * used * 1000, \
            (pc.cpu_ms_in(proc, "wl_hot_leaf"), used,
             {f: pc.cpu_ms_in(proc, f) for f in pc.functions({"processes": [proc]})
              if pc.cpu_ms_in(proc, f) > 20})
        assert any(f"recovered the profile of child {p.pid} (workload)" in e
                   for e in events(doc)), events(doc)
        assert d.alive()
    finally:
        d.stop()


taplib.run([
    test_a_child_killed_while_disconnected_is_recovered,
    test_a_sigkilled_child_is_recovered_by_the_daemon,
    test_a_segfault_under_the_daemon_shows_the_crash,
    test_a_child_killed_during_a_capture_is_in_it,
    test_hostile_regions_never_hurt_the_daemon,
    test_recovered_profiles_count_in_the_global_budget,
])
