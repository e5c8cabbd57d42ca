#!/usr/bin/env python3
"""Integration tests of parent/child coordination (issue 5): a real fleetprofd, real
profiled processes, the real CLI. Checks design invariants 1 (the fleet's total memory stays
under the global limit + 2 chunks per process) and 2 (eviction takes the globally oldest
data) from the outside, and that misbehaving peers never take the daemon down.

Usage: test-coordination.py BUILD_DIR   (TAP output)
"""
import errno
import fcntl
import json
import mmap
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
from wire import capture, field, frame, parse_fields, read_frames, split_frames, varint  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import Daemon, events  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
DAEMON = os.path.join(BUILD, "daemon", "fleetprofd")
CLI = os.path.join(BUILD, "tools", "fleetprof")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
KiB, MiB = 1024, 1024 * 1024
CHUNK = 64 * KiB


def child_env(d, tmp, **extra):
    e = dict(os.environ)
    e.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_SOCKET": d.sock,
              "FLEETPROF_OUTPUT": os.path.join(tmp, "p-%p.json"), "FLEETPROF_CHUNK_KB": "64"})
    e.update({k: str(v) for k, v in extra.items()})
    return e


def flood(d, tmp, seconds, rate, **extra):
    return subprocess.Popen([WORKLOAD, "flood", str(seconds), str(rate)],
                            env=child_env(d, tmp, **extra), stdout=subprocess.PIPE, text=True)


def surviving_markers(path):
    """Sequence numbers and absolute times (ms since epoch) of the flood markers kept."""
    doc = pc.load(path)
    problems = pc.check_profile(doc)
    assert not problems, f"{path}: " + "; ".join(problems[:5])
    out = []
    for _, t in pc.all_threads(doc):
        ms = t["markers"]["schema"]
        for row in t["markers"]["data"]:
            data = row[ms["data"]]
            if data and str(data.get("name", "")).startswith("m "):
                out.append((int(data["name"].split()[1]),
                            doc["meta"]["startTime"] + row[ms["startTime"]]))
    out.sort()
    return doc, out


def wait_children(d, n, timeout=15):
    deadline = time.monotonic() + timeout
    while True:
        st = d.status()
        if len(st["children"]) >= n:
            return st
        assert time.monotonic() < deadline, f"only {len(st['children'])} of {n} children joined"
        time.sleep(0.05)


def test_sixteen_children_stay_under_the_global_limit(tmp):
    seconds = float(os.environ.get("FLEETPROF_COORD_SECONDS", "20"))
    limit, n = 8 * MiB, 16
    d = Daemon(tmp, "--global-limit", "8M", "--process-limit", "8M")
    procs = []
    try:
        procs = [flood(d, tmp, seconds, 30000, FLEETPROF_BUFFER_MB=8) for _ in range(n)]
        wait_children(d, n)
        worst, polls, near = 0, 0, 0
        while any(p.poll() is None for p in procs):
            st = d.status()
            total = st["unreleased_bytes"] + st["released_bytes"]
            bound = limit + 2 * CHUNK * len(st["children"])
            assert total <= bound, f"fleet holds {total} bytes > {bound} (invariant 1)"
            worst = max(worst, total)
            polls += 1
            near += total > limit / 2
            time.sleep(0.05)
        final = d.status()
        # Real children read their evictions from their chunk regions: no destroy messages.
        assert final["evicted_chunks"] > 0 and final["region_evictions"] > 0, final
        assert final["destroy_requests"] == 0, final
        # The bound was checked where it matters, often: not a number of polls expected
        # from the run's 20 s (each poll starts `fleetprof status`, slow on a busy machine).
        assert near >= 10, \
            f"only {near} of {polls} polls saw the fleet near the limit (max {worst} bytes)"
        # Each child kept exactly its newest markers: a contiguous run ending at its last.
        for p in procs:
            out, _ = p.communicate(timeout=30)
            assert p.returncode == 0
            written = int(out.split(":")[1])
            path = os.path.join(tmp, f"p-{p.pid}.json")
            _, kept = surviving_markers(path)
            seqs = [s for s, _ in kept]
            assert seqs, f"child {p.pid} kept no markers"
            assert seqs == list(range(seqs[0], written)), \
                f"child {p.pid} kept {seqs[0]}..{seqs[-1]} of 0..{written - 1}, not its newest"
            assert seqs[0] > 0, f"child {p.pid} lost nothing: the limit was never enforced"
        assert d.alive()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        d.stop()


def test_eviction_takes_the_globally_oldest(tmp):
    """Two children at different rates share a 2 MiB budget. If the daemon always evicts the
    globally oldest chunk (invariant 2), both keep data back to about the same moment; a
    per-process share would give the faster child a 3 times shorter window. Compared in a
    live capture: an exit profile would itself take budget from the survivor."""
    d = Daemon(tmp, "--global-limit", "2M", "--process-limit", "8M")
    fast = slow = None
    try:
        fast = flood(d, tmp, 12, 45000, FLEETPROF_BUFFER_MB=8)
        slow = flood(d, tmp, 12, 15000, FLEETPROF_BUFFER_MB=8)
        wait_children(d, 2)
        time.sleep(6)
        out = os.path.join(tmp, "live.json")
        result, error = capture(d.sock, out)
        assert error is None, f"capture failed: {error}"
        doc = pc.load(out)
        problems = pc.check_profile(doc)
        assert not problems, problems[:5]
        windows = {}
        for p in doc["processes"]:
            pid = p["meta"]["fleetprof"]["pid"]
            kept = []
            for t in p["threads"]:
                ms = t["markers"]["schema"]
                for row in t["markers"]["data"]:
                    data = row[ms["data"]]
                    if data and str(data.get("name", "")).startswith("m "):
                        kept.append(p["meta"]["startTime"] + row[ms["startTime"]])
            windows[pid] = (min(kept), max(kept), len(kept))
        f, s_ = windows[fast.pid], windows[slow.pid]
        fast_window, slow_window = f[1] - f[0], s_[1] - s_[0]
        assert fast_window > 100 and slow_window > 100, (fast_window, slow_window)
        # One chunk of the slow child spans ~100 ms: its oldest data may be that much older.
        assert abs(f[0] - s_[0]) < 0.25 * max(fast_window, slow_window) + 150, \
            f"oldest kept data differs by {abs(f[0] - s_[0]):.0f} ms " \
            f"(windows {fast_window:.0f} and {slow_window:.0f} ms)"
        assert f[2] > 2 * s_[2], "the faster child should keep more markers"
    finally:
        for p in (fast, slow):
            if p and p.poll() is None:
                p.kill()
        d.stop()


HELLO, WELCOME, AWAIT, UPDATE, DESTROY = 1, 2, 9, 10, 11


def hostile_child(d, behaviour, report):
    """Forks a process that connects and misbehaves; returns once it has done so. An
    unexpected exception in it is written to report."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.sock)
            try:
                behaviour(s)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the daemon closed on us mid-send: what we wanted
            s.close()
        except Exception as e:  # noqa: BLE001 - reported through the file and the exit code
            with open(report, "w") as f:
                f.write(repr(e))
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return pid, os.waitstatus_to_exitcode(status)


def hello(s):
    s.sendall(frame(HELLO, field(1, 1), field(2, 1), field(3, os.getpid()), field(5, "hostile")))
    for num, msg in read_frames(s):
        if num == AWAIT:
            return msg[1][0]
    raise AssertionError("no AwaitNextChunkManagerUpdate after Hello")


def expect_closed(s):
    s.settimeout(5)
    while True:
        try:
            if not s.recv(65536):
                return
        except ConnectionResetError:
            return


def test_misbehaving_children_are_dropped_and_logged(tmp):
    d = Daemon(tmp, "--global-limit", "64M")
    healthy = None
    try:
        healthy = flood(d, tmp, 6, 2000)
        wait_children(d, 1)

        def garbage(s):
            # Random bytes may announce a long frame: the daemon rightly waits for the
            # rest. Ending the stream there makes it a truncated frame.
            s.sendall(os.urandom(4096))
            s.shutdown(socket.SHUT_WR)
            expect_closed(s)

        def undecodable(s):
            s.sendall(varint(6) + b"\xff" * 6)
            expect_closed(s)

        def update_before_hello(s):
            s.sendall(frame(UPDATE, field(1, 5), field(2, 1000)))
            expect_closed(s)

        def chunks_backwards(s):
            poll = hello(s)
            s.sendall(frame(UPDATE, field(1, poll), field(2, 4096), field(4, 10),
                            field(5, field(1, 300) + field(2, 65536)),
                            field(5, field(1, 200) + field(2, 65536))))
            expect_closed(s)

        def flooding(s):
            hello(s)
            for i in range(40):
                s.sendall(frame(UPDATE, field(1, 999999), field(2, 4096)))
            expect_closed(s)

        def oversized(s):
            s.sendall(varint(64 * MiB) + b"x" * 1024)
            expect_closed(s)

        for name, b in [("garbage", garbage), ("undecodable", undecodable),
                        ("update before Hello", update_before_hello),
                        ("chunks backwards", chunks_backwards), ("flooding", flooding),
                        ("oversized frame", oversized)]:
            report = os.path.join(tmp, "hostile.err")
            pid, code = hostile_child(d, b, report)
            assert code == 0, f"{name}: {open(report).read() if os.path.exists(report) else code}"
            assert d.alive(), f"the daemon died after: {name}"

        log = d.log()
        for reason in ("before Hello", "released chunks not in increasing done time",
                       "flooding", "dropping"):
            assert reason in log, f"daemon log lacks '{reason}':\n{log[-3000:]}"
        st = d.status()
        pids = [c["pid"] for c in st["children"]]
        assert pids == [healthy.pid], f"only the healthy child should remain: {pids}"
        assert st["dropped_children"] >= 2, st

        # A killed child and a normally exiting one leave the tracker.
        victim = flood(d, tmp, 30, 2000)
        wait_children(d, 2)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        healthy.communicate(timeout=30)
        deadline = time.monotonic() + 5
        while d.status()["children"]:
            assert time.monotonic() < deadline, f"children still tracked: {d.status()}"
            time.sleep(0.05)
        assert d.alive()
        log = d.log()
        assert f"child {victim.pid}" in log and f"child {healthy.pid}" in log
    finally:
        if healthy and healthy.poll() is None:
            healthy.kill()
        d.stop()


def test_long_poll_answered_while_main_thread_is_paused(tmp):
    d = Daemon(tmp, "--global-limit", "64M")
    p = subprocess.Popen([WORKLOAD, "pause-main", "4", "20000"],
                         env=child_env(d, tmp, FLEETPROF_BUFFER_MB=2), stdout=subprocess.PIPE)
    try:
        wait_children(d, 1)
        seen = set()
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            st = d.status()
            if st["children"]:
                c = st["children"][0]
                seen.add((c["released_bytes"], c["chunks"]))
                assert c["last_update_age_ms"] < 1500, c
            time.sleep(0.1)
        assert len(seen) >= 3, f"the released state changed only {len(seen)} times: {seen}"
        p.communicate(timeout=20)
        assert p.returncode == 0
    finally:
        if p.poll() is None:
            p.kill()
        d.stop()


STATUS_REQUEST, STATUS_REPORT = 31, 33
NOBODY = 65534


def status_as(uid, sock_path):
    """Asks the daemon for a status report from a forked process running as uid (None: as
    we are), speaking the protocol itself (wire.py): nothing it runs comes from the build
    tree, so it works wherever the tree is checked out, even where uid may not enter.
    Returns "refused: <errno name>" if connect() fails, "report" if a StatusReport came
    back, or "closed" if the daemon hung up without one."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        answer = "error"
        try:
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sock_path)
            except OSError as e:
                answer = f"refused: {errno.errorcode.get(e.errno, e.errno)}"
            else:
                try:
                    s.sendall(frame(STATUS_REQUEST, field(1, 1)))
                    answer = "closed"
                    for num, _ in read_frames(s, timeout=20):
                        if num == STATUS_REPORT:
                            answer = "report"
                            break
                except (BrokenPipeError, ConnectionResetError):
                    answer = "closed"
        except Exception as e:  # noqa: BLE001 - reported to the parent
            answer = f"error: {e!r}"
        os.write(w, answer.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        answer = f.read()
    os.waitpid(pid, 0)
    return pid, answer


def test_socket_permissions_and_other_uid_refused(tmp):
    if os.getuid() != 0:
        print("# not root: cannot run a peer under another uid; checking modes only")
    d = Daemon(tmp)
    try:
        assert stat.S_IMODE(os.stat(d.dir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(d.sock).st_mode) == 0o600
        if os.getuid() != 0:
            return
        # The client itself works: our own uid gets a report.
        _, answer = status_as(None, d.sock)
        assert answer == "report", f"as root: {answer}"
        # The file modes keep another uid from even connecting.
        _, answer = status_as(NOBODY, d.sock)
        assert answer == "refused: EACCES", f"uid {NOBODY} through the 0700 directory: {answer}"
        # With the modes opened up (our directories only), it connects, and the daemon
        # refuses the peer's uid: no report, the connection closed, the refusal logged.
        os.chmod(tmp, 0o755)
        os.chmod(d.dir, 0o755)
        os.chmod(d.sock, 0o666)
        pid, answer = status_as(NOBODY, d.sock)
        assert answer == "closed", f"uid {NOBODY} with open modes: {answer}"
        want = f"refused pid {pid} (uid {NOBODY})"
        deadline = time.monotonic() + 10
        while want not in d.log():
            assert time.monotonic() < deadline, f"no '{want}' in: {d.log()[-2000:]}"
            time.sleep(0.05)
        assert d.alive()
    finally:
        d.stop()


def test_shutdown_stops_children_and_removes_socket(tmp):
    d = Daemon(tmp)
    p = flood(d, tmp, 6, 2000)
    try:
        wait_children(d, 1)
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(timeout=10) == 0
        assert not os.path.exists(d.sock), "the socket must be removed"
        assert p.poll() is None, "the child must carry on without the daemon"
        out, _ = p.communicate(timeout=30)
        assert p.returncode == 0
        doc = pc.load(os.path.join(tmp, f"p-{p.pid}.json"))
        assert not pc.check_profile(doc)
        # It was told to stop: sampling paused from the daemon's shutdown on.
        assert doc["pausedRanges"], "no paused range after the daemon's Stop"
    finally:
        if p.poll() is None:
            p.kill()
        d.stop()


def test_forked_workers_connect_on_their_own(tmp):
    d = Daemon(tmp)
    try:
        e = child_env(d, tmp)
        r = subprocess.run([WORKLOAD, "prefork", "3", "1"], env=e, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        time.sleep(0.3)
        log = d.log()
        connected = [line for line in log.splitlines() if "connected" in line]
        master = [line for line in connected if f"parent {os.getpid()})" in line]
        assert len(master) == 1, f"the master should connect once: {connected}"
        master_pid = master[0].split("child ")[1].split(" ")[0]
        workers = [line for line in connected if f"parent {master_pid})" in line]
        assert len(workers) == 3, f"3 forked workers should connect with parent {master_pid}:" \
                                  f" {connected}"
        assert "dropping" not in log, log
    finally:
        d.stop()


def test_status_without_daemon_says_what_to_do(tmp):
    r = subprocess.run([CLI, "status", "--socket", os.path.join(tmp, "none.sock")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1
    assert "no daemon is listening" in r.stderr and "fleetprofd --socket" in r.stderr, r.stderr


def test_second_daemon_on_same_socket_refuses_to_start(tmp):
    d = Daemon(tmp)
    try:
        r = subprocess.run([DAEMON, "--foreground", "--socket", d.sock], capture_output=True,
                           text=True, timeout=10)
        assert r.returncode == 1 and "another fleetprofd" in r.stderr, r.stderr
        assert d.alive() and os.path.exists(d.sock)
    finally:
        d.stop()


def frames_now(sock, buf):
    """The frames the socket holds now (read without waiting), after the partial frame buf;
    returns them and the bytes of a frame still incomplete."""
    out = []
    sock.setblocking(False)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            got, buf = split_frames(buf + data)
            out += got
    except BlockingIOError:
        pass
    return out, buf


class FakeDaemon:
    """A listening socket that plays the daemon for one real profiled process, frame by frame."""

    def __init__(self, tmp, name):
        self.path = os.path.join(tmp, name + ".sock")
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(4)
        self.buf, self.frames, self.conn = b"", [], None

    def start_child(self, tmp, seconds, rate, welcome_extra=()):
        env = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=self.path,
                   FLEETPROF_OUTPUT=os.path.join(tmp, "p-%p.json"), FLEETPROF_CHUNK_KB="64",
                   FLEETPROF_BUFFER_MB="64")
        p = subprocess.Popen([WORKLOAD, "flood", str(seconds), str(rate)], env=env,
                             stdout=subprocess.DEVNULL)
        self.srv.settimeout(30)
        self.conn, _ = self.srv.accept()
        assert self.next_frame()[0] == HELLO
        clock = field(1, time.monotonic_ns()) + field(2, int(time.time() * 1000))
        self.conn.sendall(frame(WELCOME, field(1, 1), field(2, 1), field(3, 1000000),
                                field(4, 64 * MiB), field(5, CHUNK), field(9, clock),
                                field(10, 1), *welcome_extra))
        return p

    def _take(self, data):
        got, self.buf = split_frames(self.buf + data)
        self.frames += got

    def next_frame(self, timeout=30):
        """The next frame (envelope field, fields), or None if none comes within timeout."""
        self.conn.settimeout(timeout)
        while not self.frames:
            try:
                data = self.conn.recv(65536)
            except socket.timeout:
                return None
            if not data:
                return None
            self._take(data)
        return self.frames.pop(0)

    def next_update(self, timeout=30):
        while True:
            f = self.next_frame(timeout)
            if f is None or f[0] == UPDATE:
                return f

    def take_unread_updates(self):
        """The updates written and not read yet (all the socket holds), taken."""
        got, self.buf = frames_now(self.conn, self.buf)
        self.frames += got
        updates = [f for f in self.frames if f[0] == UPDATE]
        self.frames = []
        return updates

    def close(self):
        if self.conn:
            self.conn.close()
        self.srv.close()


def test_standing_poll_folds_while_daemon_lags(tmp):
    fd = FakeDaemon(tmp, "standing")
    p = fd.start_child(tmp, 6, 60000)
    try:
        fd.conn.sendall(frame(AWAIT, field(1, 7), field(2, 1)))
        chunks = []
        for i in range(4):  # several updates under one poll, each saying it was standing
            u = fd.next_update()
            assert u is not None, f"only {i} updates came under the standing poll"
            assert u[1][1] == [7] and u[1].get(7) == [1], u
            chunks += u[1].get(5, [])
        # A daemon that does not read: the child holds its updates back, folded.
        time.sleep(1.5)
        behind = fd.take_unread_updates()
        assert len(behind) <= 2, f"{len(behind)} updates sent to a daemon that read none"
        for u in behind:
            chunks += u[1].get(5, [])
        u = fd.next_update()
        assert u is not None and u[1][1] == [7], u
        folded = u[1].get(5, [])
        assert len(folded) >= 2, f"the update after a stall carries {len(folded)} chunks"
        chunks += folded
        # Nothing was destroyed: the released bytes are every chunk reported, once each.
        done = [parse_fields(c)[1][0] for c in chunks]
        assert done == sorted(done) and len(set(done)) == len(done), done
        released = sum(parse_fields(c)[2][0] for c in chunks)
        assert u[1].get(3, [0]) == [released], (u[1].get(3), released)
    finally:
        fd.close()
        rc = p.wait(timeout=60)
    assert rc == 0, rc


def test_held_updates_list_two_chunks(tmp):
    """A Welcome with update_hold_ns (field 12): under the standing poll the child holds an
    update until it lists 2 newly released chunks (the hold, 10 s here, never runs out),
    except the first, which tells of its buffer's unreleased chunks: memory the daemon has
    not heard of never waits."""
    fd = FakeDaemon(tmp, "hold")
    p = fd.start_child(tmp, 6, 60000, welcome_extra=[field(12, 10 * 1000 * 1000 * 1000)])
    try:
        fd.conn.sendall(frame(AWAIT, field(1, 7), field(2, 1)))
        listed = []
        for i in range(5):
            u = fd.next_update()
            assert u is not None, f"only {i} updates came under the standing poll"
            assert u[1][1] == [7] and u[1].get(7) == [1], u
            listed.append((len(u[1].get(5, [])), u[1].get(2, [0])[0]))
        assert listed[0][1] > 0, f"the first update tells of no unreleased memory: {listed}"
        later = [n for n, _ in listed if n]
        # Held ones list 2 chunks or more; one whose unreleased bytes rose over the last sent
        # never waits (the buffer took a chunk: memory the daemon has not heard of), however
        # few it lists (beside two hogs, the buffer's second chunk came with 1 released).
        short = [(n, unrel) for (n, unrel), (_, before) in zip(listed[1:], listed)
                 if n and n < 2 and unrel <= before]
        assert len(later) >= 3 and not short, \
            f"updates listed {listed} (new chunks, unreleased bytes)"
    finally:
        fd.close()
        rc = p.wait(timeout=60)
    assert rc == 0, rc


def test_one_shot_poll_is_answered_once(tmp):
    fd = FakeDaemon(tmp, "oneshot")
    p = fd.start_child(tmp, 5, 60000)
    try:
        fd.conn.sendall(frame(AWAIT, field(1, 7)))
        u = fd.next_update()
        assert u is not None and u[1][1] == [7] and 7 not in u[1], u
        # No second answer without a second poll, though chunks keep being released.
        assert fd.next_update(timeout=1.0) is None, "an update came without a poll"
        fd.conn.sendall(frame(AWAIT, field(1, 8)))
        u = fd.next_update()
        assert u is not None and u[1][1] == [8] and 7 not in u[1], u
        assert len(u[1].get(5, [])) >= 2, "the second answer should fold the chunks since"
    finally:
        fd.close()
        rc = p.wait(timeout=60)
    assert rc == 0, rc


def test_daemon_polls_once_or_per_update(tmp):
    d = Daemon(tmp, "--global-limit", "64M")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(d.sock)
        s.sendall(frame(HELLO, field(1, 1), field(2, 1), field(3, os.getpid()),
                        field(5, "standing")))
        polls = []
        for num, msg in read_frames(s):
            if num == AWAIT:
                polls.append(msg)
                break
        assert polls and polls[0].get(2) == [1], f"the daemon's poll is not standing: {polls}"
        poll = polls[0][1][0]
        # More updates under the one poll than an old child may send unasked: all applied.
        for i in range(1, 41):
            s.sendall(frame(UPDATE, field(1, poll), field(2, i * CHUNK), field(7, 1)))
        deadline = time.monotonic() + 10
        while True:
            kids = [c for c in d.status()["children"] if c["pid"] == os.getpid()]
            assert kids, f"dropped: {d.log()[-2000:]}"
            if kids[0]["unreleased_bytes"] == 40 * CHUNK:
                break
            assert time.monotonic() < deadline, kids
            time.sleep(0.05)
        # An update that does not say standing is an old child's answer: a new poll follows.
        s.sendall(frame(UPDATE, field(1, poll), field(2, CHUNK)))
        again = [msg for num, msg in read_frames(s, timeout=10) if num == AWAIT][:1]
        assert again and again[0][1][0] != poll, again
        assert "flooding" not in d.log()
    finally:
        s.close()
        d.stop()


def test_standing_poll_destroy_waits_for_next_update(tmp):
    fd = FakeDaemon(tmp, "destroy")
    p = fd.start_child(tmp, 6, 3000)
    try:
        fd.conn.sendall(frame(AWAIT, field(1, 7), field(2, 1)))
        u = fd.next_update()
        while u is not None and not u[1].get(5):
            u = fd.next_update()
        assert u is not None, "no chunk was released"
        last = parse_fields(u[1][5][-1])[1][0]
        fd.conn.sendall(frame(DESTROY, field(1, 8), field(2, last)))
        # The daemon counted those chunks gone when it asked: the change is not an update of
        # its own, it goes with the next one, which carries newly released chunks.
        u = fd.next_update()
        assert u is not None, "no update after the destroy request"
        new = [parse_fields(c) for c in u[1].get(5, [])]
        assert new, f"an update made by the destroy request alone: {u}"
        assert all(c[1][0] > last for c in new), new
        assert u[1].get(3, [0]) == [sum(c[2][0] for c in new)], u
    finally:
        fd.close()
        rc = p.wait(timeout=60)
    assert rc == 0, rc


REGION_MAGIC, EVICT_OFFSET, PAGE = 0x47525046, 80, 4096


def region_memfd(valid=True):
    """A chunk region as the runtime makes one (buffer/region.h): a memfd sealed against
    shrinking whose first page holds a region header (all zeros when not valid)."""
    fd = os.memfd_create("fake-region", os.MFD_ALLOW_SEALING | os.MFD_CLOEXEC)
    os.ftruncate(fd, PAGE)
    if valid:
        # magic, version, header_bytes, slot_bytes, chunk_bytes, pid, created_ns, meta_bytes,
        # meta_len[2], reserved, meta_seq, meta_hash[2], exec_ns, evict_ns: 88 bytes.
        os.pwrite(fd, struct.pack("<IIIIIiQIIIIQQQQQ", REGION_MAGIC, 1, PAGE, 17 * PAGE, CHUNK,
                                  os.getpid(), time.monotonic_ns(), 0, 0, 0, 0, 0, 0, 0, 0, 0),
                  0)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    return fd


class FakeChild:
    """This process, playing a child frame by frame: Hello (with a region and the
    region_evictions field when asked), then chunk-manager updates under the daemon's poll."""

    def __init__(self, d, region_fd=None, evictions=False, updates=False):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(d.sock)
        self.buf, self.frames = b"", []
        fields = [field(1, 1), field(2, 1), field(3, os.getpid()), field(5, "fake")]
        if region_fd is not None:
            fields.append(field(9, 1))
        if evictions:
            fields.append(field(10, 1))
        if updates:
            fields.append(field(12, 1))
        msg = frame(HELLO, *fields)
        if region_fd is not None:
            socket.send_fds(self.s, [msg], [region_fd])
        else:
            self.s.sendall(msg)
        self.welcome = self.next_of(WELCOME)
        self.poll = self.next_of(AWAIT)[1][0]

    def next_of(self, kind, timeout=10):
        self.s.settimeout(timeout)
        while True:
            for i, f in enumerate(self.frames):
                if f[0] == kind:
                    return self.frames.pop(i)[1]
            data = self.s.recv(65536)
            assert data, f"the daemon closed the connection waiting for frame {kind}"
            got, self.buf = split_frames(self.buf + data)
            self.frames += got

    def received(self):
        """Every frame the daemon sent so far (what the socket holds now), taken."""
        got, self.buf = frames_now(self.s, self.buf)
        self.frames += got
        out, self.frames = self.frames, []
        return out

    def release(self, done_times):
        """One update under the standing poll: one unreleased chunk, done_times released."""
        chunks = [field(5, field(1, t) + field(2, CHUNK)) for t in done_times]
        self.s.sendall(frame(UPDATE, field(1, self.poll), field(2, CHUNK),
                             field(3, CHUNK * len(done_times)), field(4, done_times[0]),
                             *chunks, field(7, 1)))


GATHER, PROFILE_DATA = 12, 15


def test_exit_during_capture_is_its_answer(tmp):
    """A child asked for its profile that exits instead (its exit profile arrives, then it
    goes) is in that capture, with its exit profile as its answer. Before, the exit profile
    was kept for the next capture and this one logged the child as gone with nothing: a
    `fleetprof record` of children that end at once lost some of them (2 of 40 once in CI)."""
    d = Daemon(tmp)
    kid = None
    try:
        kid = FakeChild(d)
        out = os.path.join(tmp, "during.json")
        box = {}
        t = threading.Thread(target=lambda: box.update(r=capture(d.sock, out, timeout=30)))
        t.start()
        gather_id = kid.next_of(GATHER)[1][0]
        profile = b'{"meta":{"fakeExitProfile":true},"threads":[]}'
        # An exit profile is pushed unasked, with an id of the child's: not the gather's.
        kid.s.sendall(frame(PROFILE_DATA, field(1, gather_id + 1000), field(2, profile),
                            field(3, 1), field(5, 1), field(7, len(profile))))
        kid.s.sendall(frame(UPDATE, field(6, 1)))
        kid.s.close()
        kid = None
        t.join(40)
        assert not t.is_alive(), "the capture did not end"
        result, error = box["r"]
        assert error is None and not result.get(5), (result, error)
        with open(out) as f:
            doc = json.load(f)
        fakes = [p for p in doc["processes"] if p.get("meta", {}).get("fakeExitProfile")]
        texts = events(doc)
        assert len(fakes) == 1, f"{len(fakes)} copies of the exit profile in the capture: {texts}"
        assert any("exited during the capture: its exit profile is its answer" in e
                   for e in texts), texts
        assert not any("went away during the capture" in e for e in texts), texts
    finally:
        if kid:
            kid.s.close()
        d.stop()


def fake_child_over_the_limit(tmp, region_fd, evictions):
    """A daemon with a 1 MiB budget, and a fake child with one 64 KiB chunk unreleased that
    releases 24: the 9 oldest are evicted (25 chunks down to the 16 that fit in 1 MiB).
    Returns (status of the child once the daemon applied it, Welcome, frames sent, the
    newest evicted done time, daemon log)."""
    d = Daemon(tmp, "--global-limit", "1M", "--process-limit", "8M")
    try:
        c = FakeChild(d, region_fd, evictions)
        base = time.monotonic_ns() - 10 * 1000 * 1000 * 1000
        done = [base + i * 1000 for i in range(24)]
        c.release(done)
        deadline = time.monotonic() + 10
        while True:
            kids = [k for k in d.status()["children"] if k["pid"] == os.getpid()]
            assert kids, f"dropped: {d.log()[-2000:]}"
            if kids[0]["released_bytes"] < 24 * CHUNK:
                break
            assert time.monotonic() < deadline, kids
            time.sleep(0.05)
        # The update was applied and its evictions carried out before the status was made:
        # any destroy message is in the socket by now.
        sent = c.received()
        c.s.close()
        return kids[0], c.welcome, sent, done[25 - MiB // CHUNK - 1], d
    except BaseException:
        d.stop()
        raise


def test_evictions_through_the_region_of_a_child_that_reads_them(tmp):
    fd = region_memfd()
    page = mmap.mmap(fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ)
    kid, welcome, sent, newest_evicted, d = fake_child_over_the_limit(tmp, fd, True)
    try:
        assert welcome.get(11) == [1], f"the Welcome does not say region_evictions: {welcome}"
        assert not [f for f in sent if f[0] == DESTROY], f"destroy messages sent: {sent}"
        assert kid["destroy_requests"] == 0 and kid["region_evictions"] > 0, kid
        (point,) = struct.unpack_from("<Q", page, EVICT_OFFSET)
        assert point == newest_evicted, (point, newest_evicted)
        # Everything else of the header page is as the child wrote it.
        assert struct.unpack_from("<I", page, 0)[0] == REGION_MAGIC
        assert page[88:PAGE] == bytes(PAGE - 88)
    finally:
        d.stop()
        page.close()
        os.close(fd)
    assert "0 by message" in d.log(), d.log()[-2000:]


def test_old_children_and_unusable_regions_get_destroy_messages(tmp):
    for i, (name, fd, evictions) in enumerate((
            ("an old child with a region", region_memfd(), False),
            ("an old child without one", None, False),
            ("a region that is not one", region_memfd(valid=False), True),
            ("no region at all", None, True))):
        sub = os.path.join(tmp, str(i))  # the socket's path has a length limit
        os.mkdir(sub)
        kid, welcome, sent, newest_evicted, d = fake_child_over_the_limit(sub, fd, evictions)
        d.stop()
        destroys = [f[1] for f in sent if f[0] == DESTROY]
        assert welcome.get(11) is None, f"{name}: region_evictions in the Welcome: {welcome}"
        assert welcome.get(14) is None, f"{name}: updates_in_region in the Welcome: {welcome}"
        assert destroys, f"{name}: no destroy message: {sent}"
        assert max(m[2][0] for m in destroys) == newest_evicted, (name, destroys)
        assert kid["region_evictions"] == 0 and kid["destroy_requests"] == len(destroys), kid
        if fd is not None:
            assert os.pread(fd, 8, EVICT_OFFSET) == bytes(8), f"{name}: the region was written"
            os.close(fd)
        if evictions and fd is not None:
            assert "evictions go by message" in d.log(), d.log()[-2000:]


# The update ring in a region's header page (buffer/region-updates.h): magic, capacity, seq,
# unreleased, released, oldest_done, written, read, read_seq, then 16-byte entries.
RING_OFFSET, RING_MAGIC, RING_CAPACITY = 2304, 0x50555046, 96


def ring_publish(page, seq, unreleased, oldest, written, entries, first_entry):
    """Publishes as an owner would: entries first, at their slots, then the counts and the
    written count under an even seq."""
    for i, (done, size) in enumerate(entries):
        struct.pack_into("<QQ", page, RING_OFFSET + 64 + ((first_entry + i) % RING_CAPACITY) * 16,
                         done, size)
    struct.pack_into("<II", page, RING_OFFSET, RING_MAGIC, RING_CAPACITY)
    struct.pack_into("<QQQQQ", page, RING_OFFSET + 8, seq, unreleased,
                     CHUNK * len(entries), oldest, written)


def test_updates_through_the_region_of_a_child_that_publishes_them(tmp):
    """A child that offers its updates in its region (Hello 12) is told so (Welcome 14); what
    it publishes in its ring reaches the controller with no message, and the daemon moves
    the ring's read point past it. A ring that lists more chunks than it holds is a child
    that lies: dropped, with the reason in the log."""
    fd = region_memfd()
    page = mmap.mmap(fd, PAGE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    d = Daemon(tmp)
    try:
        c = FakeChild(d, fd, evictions=True, updates=True)
        assert c.welcome.get(14) == [1], f"the Welcome does not say updates_in_region: {c.welcome}"
        base = time.monotonic_ns() - 10 * 1000 * 1000 * 1000
        done = [(base + i * 1000, CHUNK) for i in range(3)]
        ring_publish(page, 2, CHUNK, done[0][0], 3, done, 0)
        deadline = time.monotonic() + 10
        while True:
            (kid,) = [k for k in d.status()["children"] if k["pid"] == os.getpid()]
            if kid["released_bytes"] == 3 * CHUNK:
                break
            assert time.monotonic() < deadline, kid
            time.sleep(0.02)
        assert kid["unreleased_bytes"] == CHUNK and kid["region_updates"] == 1, kid
        read, read_seq = struct.unpack_from("<QQ", page, RING_OFFSET + 48)
        assert (read, read_seq) == (3, 2), (read, read_seq)
        assert not [f for f in c.received() if f[0] == UPDATE], "update frames from the daemon?"
        # A lie: more chunks written than the ring can hold.
        ring_publish(page, 4, CHUNK, done[0][0], 3 + 1000, [], 3)
        deadline = time.monotonic() + 10
        while "its update ring lists more chunks than it holds" not in d.log():
            assert time.monotonic() < deadline, d.log()[-2000:]
            time.sleep(0.02)
        assert f"dropping child {os.getpid()} (fake)" in d.log(), d.log()[-2000:]
        assert not [k for k in d.status()["children"] if k["pid"] == os.getpid()]
        c.s.close()
    finally:
        d.stop()
        page.close()
        os.close(fd)


def test_real_children_read_their_evictions_from_their_regions(tmp):
    """Real children over a small budget: the limit holds (invariant 1) with no destroy
    message at all, each child's evictions went through its region (the daemon's log says
    so as it leaves), and each kept only its newest data."""
    limit, n = 4 * MiB, 4
    # Each child's own limit (64 MiB) is far above what it writes in 6 s: only the daemon's
    # evictions can make it lose its oldest markers.
    d = Daemon(tmp, "--global-limit", "4M", "--process-limit", "64M")
    procs = []
    try:
        procs = [flood(d, tmp, 6, 30000, FLEETPROF_BUFFER_MB=64) for _ in range(n)]
        wait_children(d, n)
        while any(p.poll() is None for p in procs):
            st = d.status()
            total = st["unreleased_bytes"] + st["released_bytes"]
            bound = limit + 2 * CHUNK * len(st["children"])
            assert total <= bound, f"fleet holds {total} bytes > {bound} (invariant 1)"
            for k in st["children"]:
                assert k["destroy_requests"] == 0, k
            time.sleep(0.1)
        st = d.status()
        assert st["region_evictions"] > 0 and st["destroy_requests"] == 0, st
        # Their updates came through their regions too (the runtime's update ring).
        assert st["region_updates"] > 0, st
        for p in procs:
            out, _ = p.communicate(timeout=30)
            assert p.returncode == 0
            written = int(out.split(":")[1])
            _, kept = surviving_markers(os.path.join(tmp, f"p-{p.pid}.json"))
            seqs = [q for q, _ in kept]
            assert seqs and seqs == list(range(seqs[0], written)), (p.pid, seqs[:3], written)
            assert seqs[0] > 0, f"child {p.pid} lost nothing: no eviction reached it"
        # Each child's departure says how the limit reached it ("left" or, for one that
        # closed while the daemon wrote to it, "disconnected").
        deadline = time.monotonic() + 10
        while True:
            lines = {p.pid: [ln for ln in d.log().splitlines()
                             if f"child {p.pid} (" in ln and "; evictions: " in ln]
                     for p in procs}
            if all(lines.values()):
                break
            assert time.monotonic() < deadline, d.log()[-3000:]
            time.sleep(0.05)
        for pid, (ln,) in lines.items():
            assert ln.endswith(" through its region, 0 by message"), ln
            assert "; evictions: 0 through" not in ln, ln
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        d.stop()


taplib.run([
    test_sixteen_children_stay_under_the_global_limit,
    test_eviction_takes_the_globally_oldest,
    test_misbehaving_children_are_dropped_and_logged,
    test_long_poll_answered_while_main_thread_is_paused,
    test_standing_poll_folds_while_daemon_lags,
    test_one_shot_poll_is_answered_once,
    test_held_updates_list_two_chunks,
    test_standing_poll_destroy_waits_for_next_update,
    test_daemon_polls_once_or_per_update,
    test_evictions_through_the_region_of_a_child_that_reads_them,
    test_old_children_and_unusable_regions_get_destroy_messages,
    test_updates_through_the_region_of_a_child_that_publishes_them,
    test_real_children_read_their_evictions_from_their_regions,
    test_exit_during_capture_is_its_answer,
    test_socket_permissions_and_other_uid_refused,
    test_shutdown_stops_children_and_removes_socket,
    test_forked_workers_connect_on_their_own,
    test_status_without_daemon_says_what_to_do,
    test_second_daemon_on_same_socket_refuses_to_start,
])
