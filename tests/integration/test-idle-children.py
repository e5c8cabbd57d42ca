#!/usr/bin/env python3
"""Idle forked children (issue #31): a child a profiled master forks, that sleeps from its
first instruction and lives 1 s or more, is in `fleetprof status` within 1 s and in every
capture, as a process with its main thread whose samples say it sleeps. A real fleetprofd and
a real profiled master (workload fork-idle). Such a child has a light connection: no IPC
thread until the daemon asks it something.

Usage: test-idle-children.py BUILD_DIR   (meson passes it; output is TAP)
"""
import os
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import Daemon, capture_doc, process, wait_until  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
STATUS_BOUND_S = 1.0  # the requirement
POLL_S = 0.05
NO_STACK = "(no stack"
BEFORE_START = "(no stack: before the profiler started"


def env(sock):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
    e.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_SOCKET": sock})
    return e


class IdleFleet:
    """A profiled master (workload fork-idle SECONDS) and the child it forked, which sleeps
    SECONDS: started, the child's pid read from the master's "child PID" line (at `seen`,
    time.monotonic()), both stopped by close() if they still run."""

    def __init__(self, d, seconds):
        self.master = subprocess.Popen([WORKLOAD, "fork-idle", str(seconds)], env=env(d.sock),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ready, _, _ = select.select([self.master.stdout], [], [], 60)
        assert ready, "the master did not say which child it forked within 60 s"
        line = self.master.stdout.readline().decode()
        self.seen = time.monotonic()
        assert line.startswith("child "), f"master said {line!r}: {self.master.stderr.read()}"
        self.pid = int(line.split()[1])

    def child_state(self):
        """The child's state letter in /proc (S: asleep, Z: exited, None: reaped)."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return None

    def assert_asleep(self, when):
        state = self.child_state()
        assert state == "S", f"{when}, the child is in state {state!r}, not asleep: the " \
            "machine is too slow for the child's sleep (fork-idle SECONDS)"

    def finish(self):
        """The master's exit status once it reaped the child (it exits 1 if the child did not
        exit 0)."""
        _, err = self.master.communicate(timeout=60)
        assert self.master.returncode == 0, f"master exited {self.master.returncode}: {err}"

    def close(self):
        if self.master.poll() is None:
            # The master has not reaped the child: its pid is still the child's.
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.master.kill()
            self.master.communicate()


def child_status(d, pid):
    """The child's entry in the daemon's status report, or None."""
    return next((c for c in d.status()["children"] if c["pid"] == pid), None)


def main_thread(proc, pid):
    threads = [t for t in proc["threads"] if t.get("tid") == pid]
    assert len(threads) == 1, \
        f"child {pid}: {len(threads)} threads with its pid as tid: " \
        f"{[(t['name'], t.get('tid')) for t in proc['threads']]}"
    t = threads[0]
    assert t["name"] == "GeckoMain", t["name"]
    return t


def asleep_samples(proc, pid, where):
    """Checks that the child's main thread was sampled all along its sleep: every sample has
    a stack (no "(no stack: ...)" pseudo-frame), in nanosleep, without CPU, from near the
    fork on. Returns (the absolute time of its last sample, ms since epoch; the time its
    samples span, ms)."""
    t = main_thread(proc, pid)
    sms = t["samples"]["schema"]
    rows = t["samples"]["data"]
    assert len(rows) >= 100, f"{where}: {len(rows)} samples of the child's main thread"
    without = sum(1 for row in rows if row[sms["stack"]] is None)
    assert not without, f"{where}: {without} of {len(rows)} samples have a null stack"
    stacks = pc.sample_stacks(t)
    # One may come first: the CPU from the fork to the runtime's start in the child.
    if stacks and stacks[0] and stacks[0][-1].startswith(BEFORE_START):
        stacks, rows = stacks[1:], rows[1:]
    reasons = {}
    for s in stacks:
        if s and s[-1].startswith(NO_STACK):
            reasons[s[-1]] = reasons.get(s[-1], 0) + 1
    assert not reasons, f"{where}: samples without a stack: {reasons}"
    asleep = sum(1 for s in stacks if any("nanosleep" in f for f in s))
    assert asleep >= 0.95 * len(stacks), \
        f"{where}: only {asleep} of {len(stacks)} samples in nanosleep: " \
        f"{sorted({' > '.join(s[-3:]) for s in stacks})[:10]}"
    # The first sample carries the CPU the child used between the fork and its sleep.
    cpu = [row[sms["threadCPUDelta"]] for row in rows]
    assert sum(1 for c in cpu if not c) >= 0.95 * len(cpu), \
        f"{where}: {sum(1 for c in cpu if c)} of {len(cpu)} samples carry CPU"
    times = [row[sms["time"]] for row in rows]
    return proc["meta"]["startTime"] + times[-1], times[-1] - times[0]


def test_an_idle_forked_child_is_in_status_within_a_second(tmp):
    """The child is listed by `fleetprof status --json` within 1 s of the master saying it
    forked it, as a running child of the master."""
    d = Daemon(tmp)
    fleet = None
    try:
        fleet = IdleFleet(d, 3)
        entry = None
        while entry is None:
            elapsed = time.monotonic() - fleet.seen
            assert elapsed <= STATUS_BOUND_S, \
                f"child {fleet.pid} not in `fleetprof status` {elapsed:.3f} s after its fork" \
                f" (bound {STATUS_BOUND_S} s):\n{d.log()[-3000:]}"
            entry = child_status(d, fleet.pid)
            if entry is None:
                time.sleep(POLL_S)
        elapsed = time.monotonic() - fleet.seen
        print(f"# child {fleet.pid} in status {elapsed * 1000:.0f} ms after its pid was read",
              flush=True)
        assert elapsed <= STATUS_BOUND_S, f"{elapsed:.3f} s"
        assert entry["ppid"] == fleet.master.pid and entry["name"] == "workload", entry
        assert entry["state"] == "running", entry
        fleet.assert_asleep("once in status")
        # Still listed while it sleeps (not dropped as a silent child).
        wait_until(lambda: time.monotonic() - fleet.seen >= 1.5, "1.5 s", timeout=10)
        fleet.assert_asleep("1.5 s after its fork")
        assert child_status(d, fleet.pid), f"child {fleet.pid} left the status:\n" \
            f"{d.status()}"
        fleet.finish()
        assert d.alive(), d.log()[-2000:]
    finally:
        if fleet:
            fleet.close()
        d.stop()


def test_an_idle_forked_child_is_in_every_capture(tmp):
    """Captures taken while the child sleeps (1 s and 2 s after its fork) hold it as a live
    process with its main thread, sampled in nanosleep; one taken after it exited holds its
    exit profile."""
    d = Daemon(tmp)
    fleet = None
    try:
        fleet = IdleFleet(d, 4)
        last, spans = [], []
        for n, age in enumerate((1.0, 2.0), 1):
            wait_until(lambda a=age: time.monotonic() - fleet.seen >= a, f"{age} s", timeout=10)
            fleet.assert_asleep(f"before capture {n}")
            doc = capture_doc(d, tmp, f"capture-{n}.json")
            fleet.assert_asleep(f"after capture {n}")
            proc = process(doc, fleet.pid)
            meta = proc["meta"]["fleetprof"]
            assert meta.get("exit") is False and meta.get("forked") is True, meta
            assert meta["ppid"] == fleet.master.pid, meta
            at, span = asleep_samples(proc, fleet.pid, f"capture {n}")
            # Sampled from near the fork on (an idle sampler writes its ticks as it wakes,
            # every 100 ms at most).
            assert span >= 1000 * (age - 0.5), f"capture {n}: samples over {span:.0f} ms"
            last.append(at)
            spans.append(span)
        assert last[1] >= last[0] + 500, f"the second capture's samples end at {last}"
        fleet.finish()
        wait_until(lambda: child_status(d, fleet.pid) is None, "the child's exit", timeout=30)
        wait_until(lambda: d.status()["building"] == 0, "the daemon's builds")
        doc = capture_doc(d, tmp, "after-exit.json")
        proc = process(doc, fleet.pid)
        assert proc["meta"]["fleetprof"].get("exit") is True, proc["meta"]["fleetprof"]
        _, span = asleep_samples(proc, fleet.pid, "after its exit")
        assert span >= spans[1], f"exit profile samples over {span:.0f} ms, less than before"
        assert d.alive(), d.log()[-2000:]
    finally:
        if fleet:
            fleet.close()
        d.stop()


def threads_of(pid):
    """The names of pid's threads (/proc/PID/task/*/comm)."""
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:
            pass
    return sorted(names)


def maps_libuv(pid):
    """Whether pid maps libuv."""
    with open(f"/proc/{pid}/maps") as f:
        return any("libuv" in line for line in f)


def test_the_connection_thread_starts_when_the_daemon_asks(tmp):
    """A child has a light connection: in status (its Hello and region are the daemon's), it
    runs its main thread and the sampler, and no IPC thread, and has not even mapped libuv,
    until the daemon asks it something: a capture, which finds it, and after which it has its
    IPC thread and libuv."""
    d = Daemon(tmp)
    fleet = None
    try:
        fleet = IdleFleet(d, 4)
        wait_until(lambda: child_status(d, fleet.pid) is not None, "the child in status")
        wait_until(lambda: time.monotonic() - fleet.seen >= 0.5, "0.5 s", timeout=10)
        fleet.assert_asleep("before the capture")
        assert child_status(d, fleet.pid)["state"] == "running"
        before = threads_of(fleet.pid)
        assert before == ["fleetprof-sampl", "workload"], \
            f"child {fleet.pid} runs {before} before anything was asked of it"
        assert not maps_libuv(fleet.pid), f"child {fleet.pid} mapped libuv before it needed it"
        doc = capture_doc(d, tmp, "capture.json")
        asleep_samples(process(doc, fleet.pid), fleet.pid, "the capture")
        after = threads_of(fleet.pid)
        assert after == ["fleetprof-ipc", "fleetprof-sampl", "workload"], \
            f"child {fleet.pid} runs {after} after a capture"
        assert maps_libuv(fleet.pid), f"child {fleet.pid} runs its IPC thread without libuv"
        fleet.finish()
        assert d.alive(), d.log()[-2000:]
    finally:
        if fleet:
            fleet.close()
        d.stop()


taplib.run([
    test_the_connection_thread_starts_when_the_daemon_asks,
    test_an_idle_forked_child_is_in_status_within_a_second,
    test_an_idle_forked_child_is_in_every_capture,
])
