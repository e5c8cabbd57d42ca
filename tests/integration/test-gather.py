#!/usr/bin/env python3
"""Integration tests of gathering (issue 6): one profile for the whole fleet from a real
fleetprofd, with real children and scripted ones (forked processes speaking the protocol
through wire.py) that are slow, silent, or die while streaming. Every written file is
checked like the front-end would load it.

Usage: test-gather.py BUILD_DIR   (TAP output)
"""
import functools
import glob
import hashlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import CLI, Daemon, gathering_events, wait_until  # noqa: E402
from wire import capture, capture_ok, field, frame, read_frames  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
HELLO, GATHER, GET_PROGRESS, PROGRESS, PROFILE_DATA = 1, 12, 13, 14, 15


def env(d, **extra):
    e = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=d.sock)
    e.update({k: str(v) for k, v in extra.items()})
    return e


def connected(d, n, timeout=15):
    deadline = time.monotonic() + timeout
    while d.log().count(" connected") < n:
        assert time.monotonic() < deadline, f"fewer than {n} children connected:\n{d.log()}"
        time.sleep(0.05)


def gathering_log(doc):
    return gathering_events(doc)


def checked(path):
    doc = pc.load(path)
    problems = pc.check_profile(doc)
    assert not problems, f"{path}: " + "; ".join(problems[:5])
    return doc


def process_pids(doc):
    return [p["meta"]["fleetprof"]["pid"] for p in doc["processes"]]


def minimal_process(pid):
    """A small valid process profile, as a scripted child would send."""
    cats = [{"name": "Other", "color": "grey", "subcategories": ["Other"]}]
    return json.dumps({
        "meta": {"version": 36, "startTime": time.time() * 1000, "shutdownTime": None,
                 "interval": 1, "categories": cats, "markerSchema": [],
                 "fleetprof": {"pid": pid, "ppid": 1, "exit": False}},
        "libs": [], "pausedRanges": [], "processes": [],
        "threads": [{"name": "GeckoMain", "processType": "tab", "processName": "scripted",
                     "pid": pid, "tid": pid, "registerTime": 0, "unregisterTime": None,
                     "stringTable": ["scripted_main"],
                     "frameTable": {"schema": {"location": 0, "relevantForJS": 1,
                                               "innerWindowID": 2, "implementation": 3,
                                               "line": 4, "column": 5, "category": 6,
                                               "subcategory": 7},
                                    "data": [[0, False, 0, None, None, None, 0, 0]]},
                     "stackTable": {"schema": {"prefix": 0, "frame": 1}, "data": [[None, 0]]},
                     "samples": {"schema": {"stack": 0, "time": 1, "eventDelay": 2},
                                 "data": [[0, 0.0, 0], [0, 1.0, 0]]},
                     "markers": {"schema": {"name": 0, "startTime": 1, "endTime": 2,
                                            "phase": 3, "category": 4, "data": 5},
                                 "data": []}}]}).encode()


def scripted_child(d, behaviour):
    """Forks a child that says Hello, then hands every message to behaviour(sock, num, msg)
    until it returns False. Returns its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.sock)
            s.sendall(frame(HELLO, field(1, 1), field(2, 1), field(3, os.getpid()),
                            field(5, "scripted")))
            for num, msg in read_frames(s, timeout=60):
                if behaviour(s, num, msg) is False:
                    break
        finally:
            os._exit(0)
    return pid


def slow_but_progressing(s, num, msg):
    """Answers progress polls with a value that changes every 250 ms; data after 3 s."""
    state = slow_but_progressing.__dict__
    if num == GATHER:
        state["gather"] = msg[1][0]
        state["start"] = time.monotonic()
    elif num == GET_PROGRESS:
        elapsed = time.monotonic() - state["start"]
        value = int(min(elapsed / 3.0, 0.99) * (1 << 31))
        s.sendall(frame(PROGRESS, field(1, msg[1][0]), field(2, msg[2][0]), field(3, value),
                        field(4, "slow")))
    if "gather" in state and time.monotonic() - state["start"] >= 3.0:
        s.sendall(frame(PROFILE_DATA, field(1, state["gather"]),
                        field(2, minimal_process(os.getpid())), field(3, 1)))
        return False
    return True


def silent(s, num, msg):
    return True  # reads everything, answers nothing


def dies_while_streaming(s, num, msg):
    if num == GATHER:
        s.sendall(frame(PROFILE_DATA, field(1, msg[1][0]), field(2, b"{" + b" " * 5000),
                        field(3, 0)))
        return False  # exits with the profile half sent
    return True


def test_stopped_worker_is_given_up_in_time(tmp):
    d = Daemon(tmp, "--child-timeout", "1")
    procs = [subprocess.Popen([WORKLOAD, "busy", "30"], env=env(d)) for _ in range(3)]
    try:
        connected(d, 3)
        time.sleep(0.5)
        procs[1].send_signal(signal.SIGSTOP)
        out = os.path.join(tmp, "hang.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        doc = checked(out)
        pids = process_pids(doc)
        assert sorted(pids) == sorted([procs[0].pid, procs[2].pid]), pids
        log = gathering_log(doc)
        events = [e[1] for e in log]
        assert any(f"gave up on child {procs[1].pid}" in e for e in events), events
        # Design: a frozen child never stalls a gather for more than 2 child timeouts once
        # the others have answered. Timed in the daemon's own log: the whole capture's wall
        # time also counts the healthy children writing their profiles on a busy machine.
        last_answer = max(e[0] for e in log if e[1].startswith("received "))
        gave_up = next(e[0] for e in log if e[1].startswith(f"gave up on child {procs[1].pid}"))
        assert gave_up - last_answer <= 2 * 1000 + 250, \
            f"gave up {gave_up - last_answer:.0f} ms after the last answer: {log}"
        # The result counts it as lost, and `fleetprof capture` names it with the reason.
        assert result.get(7) == [1], result
        r = subprocess.run([CLI, "capture", "--socket", d.sock, "-o", os.path.join(tmp, "2.json")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "2 processes, 1 lost" in r.stdout, r.stdout
        assert f"lost {procs[1].pid} (workload): no progress" in r.stdout, r.stdout
    finally:
        for p in procs:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()
        d.stop()


def test_slow_progress_is_kept_silence_is_dropped(tmp):
    d = Daemon(tmp, "--child-timeout", "1")
    kids = []
    try:
        kids = [scripted_child(d, slow_but_progressing), scripted_child(d, silent)]
        connected(d, 2)
        out = os.path.join(tmp, "slow.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        doc = checked(out)
        assert process_pids(doc) == [kids[0]], f"only the slow child belongs: {process_pids(doc)}"
        events = [e[1] for e in gathering_log(doc)]
        assert any(f"gave up on child {kids[1]}" in e for e in events), events
        assert not any(f"gave up on child {kids[0]}" in e for e in events), events
        assert any(f"child {kids[0]} (scripted) is at" in e for e in events), events
    finally:
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(k, 0)
        d.stop()


def test_child_dying_mid_stream_is_dropped_and_logged(tmp):
    d = Daemon(tmp, "--child-timeout", "1")
    live = subprocess.Popen([WORKLOAD, "busy", "30"], env=env(d))
    kid = None
    try:
        connected(d, 1)
        kid = scripted_child(d, dies_while_streaming)
        connected(d, 2)
        out = os.path.join(tmp, "killed.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        doc = checked(out)
        assert process_pids(doc) == [live.pid]
        events = [e[1] for e in gathering_log(doc)]
        assert any(f"child {kid} (scripted) went away during the capture; its partial data"
                   in e for e in events), events
    finally:
        live.kill()
        live.wait()
        if kid:
            os.waitpid(kid, 0)
        d.stop()


def churn(tmp, d, n, seconds="0.01"):
    pids = []
    running = []
    for _ in range(n):
        running.append(subprocess.Popen([WORKLOAD, "busy", seconds, "3"], env=env(d)))
        pids.append(running[-1].pid)
        if len(running) >= 6:
            running.pop(0).wait()
    for p in running:
        p.wait()
    # Exit profiles arrive before each child's process ends: all are in by now.
    return pids


def test_churn_keeps_every_exit_profile(tmp):
    d = Daemon(tmp)
    try:
        pids = churn(tmp, d, 200)
        out = os.path.join(tmp, "churn.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        doc = checked(out)
        got = process_pids(doc)
        events = " | ".join(e[1] for e in gathering_log(doc))
        missing = [p for p in pids if p not in got]
        assert not missing, f"{len(got)} of 200 exit profiles; missing {missing[:5]}: " \
                            f"{[e for e in events.split(' | ') if str(missing[0]) in e]}"
        not_exit = [p["meta"]["fleetprof"]["pid"] for p in doc["processes"]
                    if not p["meta"]["fleetprof"]["exit"]]
        assert not not_exit, f"not exit profiles: {not_exit}: " \
                             f"{[e for e in events.split(' | ') if str(not_exit[0]) in e]}"
    finally:
        d.stop()


def test_churn_under_a_small_limit_logs_every_missing_profile(tmp):
    d = Daemon(tmp, "--global-limit", "1M")
    try:
        # 100 ms each: the chunks of 60 such exit profiles are more than 1M (a sample with its
        # stack per kernel tick, same-samples of a few bytes between).
        pids = churn(tmp, d, 60, "0.1")
        out = os.path.join(tmp, "churn-small.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        doc = checked(out)
        got = set(process_pids(doc))
        missing = set(pids) - got
        assert missing, "a 1 MiB limit cannot hold 60 exit profiles: the test is not testing"
        log = d.log().splitlines()
        for pid in missing:
            # Evicted under the limit, or (on a starved machine) never sent in its bounded
            # wait at exit: either way the log names the child and the reason.
            lines = [line for line in log if f"child {pid} " in line]
            assert any(("exit profile of" in line and "evicted" in line)
                       or "ended without sending an exit profile" in line for line in lines), \
                f"no log entry says why child {pid}'s profile is missing: {lines}"
        assert len(got) + len(missing) == 60
    finally:
        d.stop()


def test_programs_that_close_every_descriptor_keep_their_profile(tmp):
    # Daemons close "every descriptor" from 3 up: the runtime's connection and event loop
    # must survive it (libuv aborted the process when its eventfd vanished), and the exit
    # profile must still arrive, whichever way the program closes them.
    d = Daemon(tmp)
    try:
        e = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=d.sock)
        pids = []
        for how in ("loop", "range", "from"):
            p = subprocess.Popen([WORKLOAD, "close-fds", how, "0.4"], env=e)
            rc = p.wait(timeout=60)
            assert rc == 0, f"{how}: ended with {rc} (negative: killed by that signal)"
            pids.append(p.pid)
        out = os.path.join(tmp, "closed.json")
        capture_ok(d.sock, out)
        doc = checked(out)
        got = process_pids(doc)
        assert all(pid in got for pid in pids), (pids, got)
        assert d.alive(), d.log()
    finally:
        d.stop()


def test_a_prefork_server_keeps_its_own_descriptors(tmp):
    # The way prefork servers start (workload daemonize): close every descriptor from 3 up
    # at once, open pipes of their own (the numbers just closed), fork a worker. libunwind's
    # memory-probe pipe and libuv's pipes used to be closed then, and their numbers reused:
    # the sampling handler blocked for ever reading the program's pipe, libuv aborted the
    # master, and its fork handler closed the worker's pipes. Each stack walk, with and
    # without a daemon, and once started with stdin and stdout closed (the runtime must
    # not take those numbers: the program gives them to /dev/null); both processes must
    # keep their pipes, /dev/null on 0 and 1, and their profiles.
    def close_stdio():
        os.close(0)
        os.close(1)

    d = Daemon(tmp)
    try:
        pids = []
        runs = [(walk, sock, None) for walk in ("dwarf", "fp", "copy")
                for sock in (d.sock, os.path.join(tmp, "nobody.sock"))]
        runs.append(("dwarf", d.sock, close_stdio))
        for walk, socket_path, preexec in runs:
            e = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1",
                     FLEETPROF_STACKWALK=walk, FLEETPROF_SOCKET=socket_path)
            p = subprocess.Popen([WORKLOAD, "daemonize", "0.3"], env=e,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True,
                                 preexec_fn=preexec)
            try:
                _, err = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)  # the worker too
                p.communicate()
                raise AssertionError(f"{walk}: hung (a handler reading the program's pipe?)")
            where = "with" if socket_path == d.sock else "without"
            assert p.returncode == 0, \
                f"{walk} {where} a daemon: ended with {p.returncode}: {err.strip()}"
            if socket_path == d.sock:
                pids.append(p.pid)
        out = os.path.join(tmp, "servers.json")
        capture_ok(d.sock, out)
        doc = checked(out)
        masters = [p for p in doc["processes"] if p["meta"]["fleetprof"]["pid"] in pids]
        workers = [p for p in doc["processes"] if p["meta"]["fleetprof"]["ppid"] in pids]
        assert len(masters) == 4 and len(workers) == 4, (pids, process_pids(doc))
        assert d.alive(), d.log()
    finally:
        d.stop()


def test_without_daemon_exit_profiles_go_to_fleetprof_dir(tmp):
    out_dir = os.path.join(tmp, "exit")
    e = dict(os.environ, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1",
             FLEETPROF_SOCKET=os.path.join(tmp, "nobody.sock"), FLEETPROF_DIR=out_dir)
    r = subprocess.run([WORKLOAD, "prefork", "2", "0.3"], env=e, timeout=60)
    assert r.returncode == 0
    files = sorted(glob.glob(os.path.join(out_dir, "*.json")))
    assert len(files) == 3, f"master + 2 workers should leave 3 files: {files}"
    for f in files:
        doc = checked(f)
        assert doc["meta"]["fleetprof"]["exit"] is True
        assert os.path.basename(f) == f"{doc['meta']['fleetprof']['pid']}.json"


def test_second_capture_is_busy(tmp):
    d = Daemon(tmp, "--child-timeout", "1")
    kid = None
    try:
        kid = scripted_child(d, slow_but_progressing)
        connected(d, 1)
        first = {}

        def run_first():
            first["result"] = capture(d.sock, os.path.join(tmp, "first.json"))

        import threading
        t = threading.Thread(target=run_first)
        t.start()
        time.sleep(0.5)
        result, error = capture(d.sock, os.path.join(tmp, "second.json"))
        assert result is None and error is not None
        assert error[3][0] == b"a capture is already running", error
        t.join(timeout=30)
        assert first["result"][1] is None, first
        assert not os.path.exists(os.path.join(tmp, "second.json"))
    finally:
        if kid:
            try:
                os.kill(kid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(kid, 0)
        d.stop()


def test_failed_capture_leaves_the_old_file(tmp):
    d = Daemon(tmp)
    try:
        old = os.path.join(tmp, "fleet.json")
        with open(old, "w") as f:
            f.write('{"old": true}')
        # No profiled process: nothing to write, and the previous file stays.
        result, error = capture(d.sock, old)
        assert result is not None and result.get(5), "an empty capture must report an error"
        assert b"nothing to write" in result[5][0], result
        assert open(old).read() == '{"old": true}'
        # A directory that does not exist: a clear error, no stray files.
        live = subprocess.Popen([WORKLOAD, "busy", "10"], env=env(d))
        try:
            connected(d, 1)
            missing = os.path.join(tmp, "no-such-dir", "fleet.json")
            result, error = capture(d.sock, missing)
            assert result is not None and b"no-such-dir" in result[5][0], result
        finally:
            live.kill()
            live.wait()
        assert sorted(os.listdir(tmp)) == sorted(["daemon.log", "fleet.json", "run"]), \
            os.listdir(tmp)
        result, error = capture(d.sock, "relative.json")
        assert error is not None and b"absolute" in error[3][0], error
    finally:
        d.stop()


def timed_pieces(plan, exit_after=False):
    """A behaviour that answers GatherProfile with ProfileData pieces on a schedule. plan(pid)
    gives [(seconds after the request, offset, data, last)]; progress polls are not answered
    (the test's child timeout is long)."""
    def behaviour(s, num, msg):
        if num != GATHER:
            return True
        gather_id, t0 = msg[1][0], time.monotonic()
        for at, offset, data, last, *total in plan(os.getpid()):
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            s.sendall(frame(PROFILE_DATA, field(1, gather_id), field(2, data),
                            *([field(3, 1)] if last else []), field(6, offset),
                            *([field(7, total[0])] if total else [])))
        return not exit_after
    return behaviour


def test_interleaved_children_stream_and_failures_leave_nothing(tmp):
    # The daemon streams one child into the file and spools the others: a child dropped
    # while it was streaming (out of order), while spooled (gone), or at once (not an object)
    # must leave no byte behind, and the completed ones must all be there, whole.
    def cut(at, split):
        def plan(pid):
            doc = minimal_process(pid)
            return [(at[0], 0, doc[:split], False), (at[1], split, doc[split:], True)]
        return plan

    def out_of_order(pid):
        doc = minimal_process(pid)
        return [(0.0, 0, doc[:100], False), (1.0, 7, doc[100:], True)]

    def goes_away(pid):
        return [(0.7, 0, minimal_process(pid)[:60], False)]

    d = Daemon(tmp, "--child-timeout", "5")
    kids = []
    try:
        streams_then_fails = scripted_child(d, timed_pieces(out_of_order))
        spooled_early = scripted_child(d, timed_pieces(cut((0.3, 0.4), 50)))
        spooled_then_current = scripted_child(d, timed_pieces(cut((0.5, 1.5), 80)))
        not_an_object = scripted_child(d, timed_pieces(lambda pid: [(0.6, 0, b"[1,2]", True)]))
        gone = scripted_child(d, timed_pieces(goes_away, exit_after=True))
        kids = [streams_then_fails, spooled_early, spooled_then_current, not_an_object, gone]
        connected(d, len(kids))
        out = os.path.join(tmp, "interleaved.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        doc = checked(out)
        assert sorted(process_pids(doc)) == sorted([spooled_early, spooled_then_current]), \
            process_pids(doc)
        assert result[4][0] == 2 and os.path.getsize(out) == result[3][0], result
        events = [e[1] for e in gathering_log(doc)]
        for expected in (f"child {streams_then_fails} (scripted) dropped: profile pieces out of "
                         "order",
                         f"child {not_an_object} (scripted) dropped: its profile is not a JSON "
                         "object",
                         f"child {gone} (scripted) went away during the capture"):
            assert any(expected in e for e in events), (expected, events)
        assert sorted(os.listdir(tmp)) == sorted(["daemon.log", "interleaved.json", "run"]), \
            os.listdir(tmp)
    finally:
        d.stop()
        for kid in kids:
            os.waitpid(kid, 0)


def test_announced_sizes_place_children_in_any_order(tmp):
    # Children that announce their JSON's size get their place in the file at their first
    # piece and complete in any order. One that goes away, or ends short of what it
    # announced, with others after it in the file, leaves only spaces: the file stays valid.
    def announced(at, split, short=0):
        def plan(pid):
            doc = minimal_process(pid)
            total = len(doc) + short
            return [(at[0], 0, doc[:split], False, total), (at[1], split, doc[split:], True, total)]
        return plan

    def goes_away(pid):
        doc = minimal_process(pid)
        return [(0.1, 0, doc[:60], False, len(doc))]

    d = Daemon(tmp, "--child-timeout", "5")
    kids = []
    try:
        last_to_finish = scripted_child(d, timed_pieces(announced((0.0, 1.2), 40)))
        gone = scripted_child(d, timed_pieces(goes_away, exit_after=True))
        short = scripted_child(d, timed_pieces(announced((0.2, 0.5), 30, short=5)))
        first_to_finish = scripted_child(d, timed_pieces(announced((0.3, 0.4), 20)))
        kids = [last_to_finish, gone, short, first_to_finish]
        connected(d, len(kids))
        out = os.path.join(tmp, "announced.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        doc = checked(out)
        assert sorted(process_pids(doc)) == sorted([last_to_finish, first_to_finish]), \
            process_pids(doc)
        assert result[4][0] == 2 and os.path.getsize(out) == result[3][0], result
        text = open(out, "rb").read()
        assert b" " * 60 in text, "the dropped children's places should be blanked"
        events = [e[1] for e in gathering_log(doc)]
        for expected in (f"child {short} (scripted) dropped: profile size not as announced",
                         f"child {gone} (scripted) went away during the capture"):
            assert any(expected in e for e in events), (expected, events)
        assert sorted(os.listdir(tmp)) == sorted(["daemon.log", "announced.json", "run"]), \
            os.listdir(tmp)
    finally:
        d.stop()
        for kid in kids:
            os.waitpid(kid, 0)


def big_process(pid):
    """minimal_process with ~580 KB of text of its own: its pieces are large enough for the
    daemon to write them as they arrive."""
    doc = json.loads(minimal_process(pid))
    doc["meta"]["startTime"] = 1.7e12  # the same bytes whenever it is made
    doc["fleetprofPad"] = "".join(hashlib.sha256(f"{pid}-{i}".encode()).hexdigest()
                                  for i in range(9000))
    return json.dumps(doc).encode()


def data_last_pieces(plan, gone_at=None):
    """A behaviour that answers GatherProfile with ProfileData pieces whose data is their last
    field (as the runtime sends them), each frame written in two parts 50 ms apart. plan(pid)
    gives [(offset, data, last, total)]; with gone_at, the child exits after that many bytes
    of its first frame."""
    def behaviour(s, num, msg):
        if num != GATHER:
            return True
        gather_id = msg[1][0]
        for offset, data, last, total in plan(os.getpid()):
            f = frame(PROFILE_DATA, field(1, gather_id), *([field(3, 1)] if last else []),
                      field(6, offset), *([field(7, total)] if total else []), field(2, data))
            cut = gone_at if gone_at is not None else len(f) // 2
            s.sendall(f[:cut])
            if gone_at is not None:
                return False
            time.sleep(0.05)
            s.sendall(f[cut:])
        return True
    return behaviour


def test_large_pieces_are_written_as_they_arrive(tmp):
    # Large pieces are not held by the daemon: their bytes go to the file (or a spool) as
    # they come. Each gathered process must be, byte for byte, what its child sent, whether
    # it announced its size or not, streamed or spooled; a child that sends no object, or
    # goes away in the middle of a frame, leaves none of its bytes.
    def pieces(size, announce):
        def plan(pid):
            doc = big_process(pid)
            return [(off, doc[off:off + size], off + size >= len(doc),
                     len(doc) if announce else 0) for off in range(0, len(doc), size)]
        return plan

    def not_an_object(pid):
        doc = big_process(pid)
        return [(0, b"[" + doc[1:], True, len(doc))]

    d = Daemon(tmp, "--child-timeout", "5")
    kids = []
    try:
        announced = scripted_child(d, data_last_pieces(pieces(256 << 10, True)))
        unannounced = [scripted_child(d, data_last_pieces(pieces(200000, False)))
                       for _ in range(2)]
        refused = scripted_child(d, data_last_pieces(not_an_object))
        gone = scripted_child(d, data_last_pieces(pieces(256 << 10, False), gone_at=100000))
        kids = [announced, *unannounced, refused, gone]
        connected(d, len(kids))
        out = os.path.join(tmp, "large.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        doc = checked(out)
        assert sorted(process_pids(doc)) == sorted([announced, *unannounced]), \
            process_pids(doc)
        text = open(out, "rb").read()
        for pid in (announced, *unannounced):
            assert big_process(pid) in text, f"process {pid} differs from what it sent"
        for pid in (refused, gone):
            sent = big_process(pid)
            assert sent[5000:6000] not in text and sent[-1000:] not in text, \
                f"bytes of {pid} were kept"
        events = [e[1] for e in gathering_log(doc)]
        for expected in (f"child {refused} (scripted) dropped: its profile is not a JSON object",
                         f"child {gone} (scripted) went away during the capture"):
            assert any(expected in e for e in events), (expected, events)
        assert sorted(os.listdir(tmp)) == sorted(["daemon.log", "large.json", "run"]), \
            os.listdir(tmp)
    finally:
        d.stop()
        for kid in kids:
            os.waitpid(kid, 0)


def test_write_error_fails_the_capture_and_the_daemon_goes_on(tmp):
    # A file size limit stands in for a full disk: the daemon's writes past it fail with
    # EFBIG, and the SIGXFSZ they raise (default action: die) is the daemon's to ignore.
    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, resource.RLIM_INFINITY))

    popen = subprocess.Popen
    subprocess.Popen = functools.partial(popen, preexec_fn=limit_file_size)
    try:
        d = Daemon(tmp, "--child-timeout", "5")
    finally:
        subprocess.Popen = popen

    def small(pid):
        doc = minimal_process(pid)
        return [(0.0, 0, doc[:100], False), (1.0, 100, doc[100:], True)]

    def big(pid):
        piece = 256 << 10
        body = b'{"pad":"' + b"x" * (4 * piece) + b'"}'
        return [(0.3, off, body[off:off + piece], off + piece >= len(body))
                for off in range(0, len(body), piece)]

    kids = []
    try:
        old = os.path.join(tmp, "fleet.json")
        with open(old, "w") as f:
            f.write('{"old": true}')
        kids.append(scripted_child(d, timed_pieces(small)))
        kids.append(scripted_child(d, timed_pieces(big, exit_after=True)))
        connected(d, 2)
        result, error = capture(d.sock, old)
        assert error is None, error
        assert result.get(5) and b"cannot write" in result[5][0], result
        assert b"File too large" in result[5][0], result
        assert open(old).read() == '{"old": true}'
        assert sorted(os.listdir(tmp)) == sorted(["daemon.log", "fleet.json", "run"]), \
            os.listdir(tmp)
        assert d.alive()
        # The big child has gone; the next capture works.
        os.waitpid(kids.pop(), 0)
        result, error = capture(d.sock, old)
        assert error is None and not result.get(5), result
        assert process_pids(checked(old)) == [kids[0]]
        written = open(old, "rb").read()
        # Alone, a big child streams into the output itself: that write fails the same way.
        os.kill(kids[0], signal.SIGKILL)
        os.waitpid(kids.pop(), 0)
        kids.append(scripted_child(d, timed_pieces(big, exit_after=True)))
        connected(d, 3)
        result, error = capture(d.sock, old)
        assert error is None, error
        assert result.get(5) and b"cannot write " + old.encode() + b": File too large" \
            in result[5][0], result
        assert open(old, "rb").read() == written
        assert sorted(os.listdir(tmp)) == sorted(["daemon.log", "fleet.json", "run"]), \
            os.listdir(tmp)
        assert d.alive()
    finally:
        d.stop()
        for kid in kids:
            os.waitpid(kid, 0)


def test_a_stopping_daemon_names_the_profiles_it_never_wrote(tmp):
    """SIGTERM with an exit profile kept since the last capture: the daemon says which
    processes no capture will have (it used to discard them without a word)."""
    d = Daemon(tmp)
    try:
        p = subprocess.run([WORKLOAD, "busy", "0.1"], env=env(d), capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        wait_until(lambda: "kept the exit profile of child" in d.log(), "the exit profile kept")
    finally:
        d.stop()
    assert "closing with 1 process ended since the last capture and in none" in d.log(), d.log()
    assert "(workload)" in d.log().split("closing with", 1)[1], d.log()


def test_a_removed_socket_is_made_again(tmp):
    """The socket removed under a running daemon (a /tmp cleaner): made again within its
    watch (1 s), said in the log; processes join again and the fleet is still captured."""
    d = Daemon(tmp)
    try:
        os.unlink(d.sock)
        wait_until(lambda: os.path.exists(d.sock), "the socket made again", timeout=30)
        assert "was removed: made again" in d.log(), d.log()
        p = subprocess.run([WORKLOAD, "busy", "0.1"], env=env(d), capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0 and "not connecting" not in p.stderr, p.stderr
        wait_until(lambda: "kept the exit profile of child" in d.log(), "its exit profile")
        out = os.path.join(tmp, "again.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        assert len(process_pids(checked(out))) == 1
    finally:
        d.stop()


def test_a_failed_capture_keeps_what_it_held(tmp):
    """Three exit profiles kept; a capture fails part-way (the daemon's file size limit stops
    its output after the first: EFBIG, as a full disk would): the next capture has all three
    (before, the ones written into the failed file were gone, without a word)."""
    d = Daemon(tmp)
    try:
        pids = []
        for _ in range(3):
            p = subprocess.run([WORKLOAD, "busy", "0.1"], env=env(d), capture_output=True,
                               text=True, timeout=120)
            assert p.returncode == 0, p.stderr
        wait_until(lambda: d.log().count("kept the exit profile of child") == 3,
                   "three exit profiles kept")
        sizes = [int(line.rsplit(", ", 1)[1].split()[0]) for line in d.log().splitlines()
                 if "kept the exit profile of child" in line]
        pids = [int(line.split("kept the exit profile of child ")[1].split()[0])
                for line in d.log().splitlines() if "kept the exit profile of child" in line]
        limit = 4096 + sizes[0] + sizes[1] // 2  # the header, the first, half the second
        _, hard = resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE)
        resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (limit, hard))
        result, error = capture(d.sock, os.path.join(tmp, "full.json"))
        assert error or (result.get(5) and result[5][0]), f"the capture did not fail: {result}"
        resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (hard, hard))
        out = os.path.join(tmp, "next.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        assert sorted(process_pids(checked(out))) == sorted(pids), (pids, d.log())
    finally:
        d.stop()


def test_an_exit_profile_that_is_not_an_object_is_dropped(tmp):
    # A child that exits during a capture answers with its exit profile (ProfileData with
    # exit and last set). Its bytes are spliced, never parsed: an empty one had become a
    # stray comma in processes ("[ ,{...}]") and a JSON string an element that is not a
    # process; each must be dropped with the reason, the file valid with the others whole.
    def answers(data):
        def behaviour(s, num, msg):
            if num != GATHER:
                return True
            parts = [field(2, data)] if data is not None else []
            s.sendall(frame(PROFILE_DATA, field(1, msg[1][0]), *parts, field(3, 1), field(5, 1)))
            time.sleep(1)
            return False
        return behaviour

    def good(s, num, msg):
        if num == GATHER:
            s.sendall(frame(PROFILE_DATA, field(1, msg[1][0]), field(2, minimal_process(os.getpid())),
                            field(3, 1)))
            return False
        return True

    d = Daemon(tmp, "--child-timeout", "5")
    kids = []
    try:
        fine = scripted_child(d, good)
        empty = scripted_child(d, answers(None))
        string = scripted_child(d, answers(b'"not an object"'))
        kids = [fine, empty, string]
        connected(d, len(kids))
        out = os.path.join(tmp, "exits.json")
        result, error = capture(d.sock, out)
        assert error is None, error
        doc = checked(out)
        assert process_pids(doc) == [fine], process_pids(doc)
        events = [e[1] for e in gathering_log(doc)]
        for kid in (empty, string):
            expected = f"child {kid} (scripted) dropped: its exit profile is not a JSON object"
            assert any(expected in e for e in events), (expected, events)
    finally:
        d.stop()
        for kid in kids:
            os.waitpid(kid, 0)


taplib.run([
    test_a_failed_capture_keeps_what_it_held,
    test_a_removed_socket_is_made_again,
    test_a_stopping_daemon_names_the_profiles_it_never_wrote,
    test_stopped_worker_is_given_up_in_time,
    test_slow_progress_is_kept_silence_is_dropped,
    test_child_dying_mid_stream_is_dropped_and_logged,
    test_churn_keeps_every_exit_profile,
    test_churn_under_a_small_limit_logs_every_missing_profile,
    test_programs_that_close_every_descriptor_keep_their_profile,
    test_a_prefork_server_keeps_its_own_descriptors,
    test_without_daemon_exit_profiles_go_to_fleetprof_dir,
    test_second_capture_is_busy,
    test_failed_capture_leaves_the_old_file,
    test_interleaved_children_stream_and_failures_leave_nothing,
    test_announced_sizes_place_children_in_any_order,
    test_large_pieces_are_written_as_they_arrive,
    test_write_error_fails_the_capture_and_the_daemon_goes_on,
    test_an_exit_profile_that_is_not_an_object_is_dropped,
])
