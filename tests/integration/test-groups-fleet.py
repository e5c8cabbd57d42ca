#!/usr/bin/env python3
"""Integration tests of the fleet view of performance groups (issue 14): a real child's
GroupStats as a fake daemon receives them (cadence, cumulative, final before the exit profile,
none without groups); real profiled processes (tests/workloads/wl-groups.c) send their cumulative group totals to a real
fleetprofd; its GroupsReport (read with wire.py) and `fleetprof status` show fleet sums equal
to the processes' own totals, exited processes included. Scripted children (forked processes
speaking the protocol) send hostile GroupStats: each is refused or dropped with a clear log
line, and the daemon keeps serving the others.

Usage: test-groups-fleet.py BUILD_DIR   (TAP output)
"""
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import taplib  # noqa: E402
from daemon_helper import Daemon  # noqa: E402
from wire import field, frame, parse_fields, read_frames, read_varint, varint  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
WL_GROUPS = os.path.join(BUILD, "tests", "workloads", "wl-groups")
CLI = os.path.join(BUILD, "tools", "fleetprof")
HELLO, WELCOME, PROFILE_DATA, GROUP_STATS, GROUPS_REQUEST, GROUPS_REPORT = 1, 2, 15, 19, 36, 37
BUCKETS = 22
# A name longer than the status table's column, of multi-byte characters: cut between them.
GAMMA = "gamma-größe-éééééééééééééééééé"
COUNTERS = ["cpu_ns", "cycles", "activations", "events", "worst_event_ns", "slow_events",
            "discarded", "migrated", "stale"]  # GroupTotals fields 2..10


def wait_for(what, check, timeout=30):
    """Polls check() until it returns something true; a generous timeout (the fact tested
    is what the daemon reports, not how fast)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def packed(values):
    return b"".join(varint(v) for v in values)


def unpack_varints(chunks):
    out = []
    for chunk in chunks:
        i = 0
        while i < len(chunk):
            v, i = read_varint(chunk, i)
            out.append(v)
    return out


def decode_totals(raw):
    f = parse_fields(raw)
    t = {"name": f.get(1, [b""])[0].decode()}
    for k, name in enumerate(COUNTERS, 2):
        t[name] = f.get(k, [0])[0]
    t["durations"] = unpack_varints(f.get(11, []))
    return t


def groups_report(sock, per_process=""):
    """The daemon's GroupsReport as {fleet_cpu_ns, processes, groups: {name: {...}}}."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    try:
        s.sendall(frame(GROUPS_REQUEST, field(1, 7), field(2, per_process)))
        for num, msg in read_frames(s, timeout=10):
            if num != GROUPS_REPORT:
                continue
            assert msg[1] == [7], f"reply to another request: {msg}"
            out = {"fleet_cpu_ns": msg.get(3, [0])[0], "processes": msg.get(4, [0])[0],
                   "groups": {}}
            for raw in msg.get(5, []):
                g = parse_fields(raw)
                totals = decode_totals(g[1][0])
                rows = []
                for rp in g.get(4, []):
                    p = parse_fields(rp)
                    rows.append({"pid": p.get(1, [0])[0], "name": p.get(2, [b""])[0].decode(),
                                 "exited": bool(p.get(3, [0])[0]),
                                 "totals": decode_totals(p[4][0])})
                out["groups"][totals["name"]] = {"totals": totals,
                                                 "processes": g.get(2, [0])[0],
                                                 "live": g.get(3, [0])[0], "per_process": rows}
            return out
    finally:
        s.close()
    raise AssertionError("no GroupsReport from the daemon")


def start_worker(d, events, *groups):
    """A wl-groups process; returns (Popen, its own totals {group: totals})."""
    env = dict(os.environ, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=d.sock)
    p = subprocess.Popen([WL_GROUPS, str(events), *groups], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env=env, text=True)
    line = p.stdout.readline()
    assert line, f"wl-groups ended early (exit {p.wait()})"
    own = json.loads(line)
    assert own["pid"] == p.pid
    return p, own["groups"]


def same_totals(reported, own):
    return all(reported[k] == own[k] for k in COUNTERS) and \
        reported["durations"] == own["durations"]


def sum_totals(rows):
    out = {k: 0 for k in COUNTERS}
    out["durations"] = [0] * BUCKETS
    for t in rows:
        for k in COUNTERS:
            out[k] = max(out[k], t[k]) if k == "worst_event_ns" else out[k] + t[k]
        out["durations"] = [a + b for a, b in zip(out["durations"], t["durations"])]
    return out


def rows_match(d, group, own_by_pid):
    """The report's rows of group, if they are exactly the processes' own totals."""
    rep = groups_report(d.sock, group)
    g = rep["groups"].get(group)
    if not g or len(g["per_process"]) != len(own_by_pid):
        return None
    for row in g["per_process"]:
        own = own_by_pid.get(row["pid"])
        if own is None or not same_totals(row["totals"], own):
            return None
    return rep


def test_fleet_sums_equal_process_totals_and_exited_stay(tmp):
    d = Daemon(tmp)
    workers = []
    try:
        workers = [start_worker(d, 150, "alpha", "beta"), start_worker(d, 100, "alpha", "beta"),
                   start_worker(d, 120, "alpha", GAMMA)]
        own = {name: {p.pid: t[name] for p, t in workers if name in t}
               for name in ("alpha", "beta", GAMMA)}
        for name in own:
            wait_for(f"{name} of every process in the report", lambda: rows_match(d, name, own[name]))
        rep = groups_report(d.sock)
        assert set(rep["groups"]) == {"alpha", "beta", GAMMA}, rep["groups"].keys()
        assert rep["processes"] == 3
        for name, by_pid in own.items():
            g = rep["groups"][name]
            want = sum_totals(by_pid.values())
            assert same_totals(g["totals"], want), f"{name}: {g['totals']} != {want}"
            assert g["processes"] == g["live"] == len(by_pid)
            assert g["per_process"] == [], "a breakdown nobody asked for"
        charged = sum(g["totals"]["cpu_ns"] for g in rep["groups"].values())
        assert rep["fleet_cpu_ns"] >= charged, (rep["fleet_cpu_ns"], charged)

        # fleetprof status shows the same totals.
        st = d.status()
        by_name = {g["name"]: g for g in st["groups"]}
        for name, by_pid in own.items():
            want = sum_totals(by_pid.values())
            assert by_name[name]["cpu_ns"] == want["cpu_ns"]
            assert by_name[name]["events"] == want["events"]
            assert by_name[name]["processes"] == len(by_pid)
        table = subprocess.run([CLI, "status", "--socket", d.sock], capture_output=True,
                               text=True, timeout=10).stdout
        # (text=True: an invalid UTF-8 byte in the table would raise here.)
        assert "GROUP" in table and "alpha" in table and GAMMA[:24] + " " in table, table

        # The first worker exits: its totals stay in the fleet's, its row says exited.
        gone, _ = workers[0]
        gone.stdin.close()
        assert gone.wait(timeout=30) == 0
        wait_for("the worker's departure", lambda: f"child {gone.pid} (wl-groups) left" in d.log())
        rep = groups_report(d.sock, "alpha")
        alpha = rep["groups"]["alpha"]
        assert same_totals(alpha["totals"], sum_totals(own["alpha"].values()))
        assert alpha["processes"] == 3 and alpha["live"] == 2, alpha
        rows = {r["pid"]: r for r in alpha["per_process"]}
        assert rows[gone.pid]["exited"] and rows[gone.pid]["name"] == "wl-groups"
        assert same_totals(rows[gone.pid]["totals"], own["alpha"][gone.pid])
        assert not any(r["exited"] for pid, r in rows.items() if pid != gone.pid)
        assert rep["groups"]["beta"]["live"] == 1
        assert rep["processes"] == 3
        assert "group stats refused" not in d.log(), d.log()
    finally:
        for p, _ in workers:
            if p.poll() is None:
                p.stdin.close()
                p.wait(timeout=30)
        d.stop()


def group_totals(name, value, buckets=BUCKETS):
    durations = [0] * buckets
    durations[3] = value
    body = field(1, name)
    for k in range(2, 11):
        body += field(k, value)
    return field(4, body + field(11, packed(durations)))


def group_stats(process_cpu_ns, *groups):
    return frame(GROUP_STATS, field(1, 1), field(2, process_cpu_ns), field(3, 16000000),
                 *groups)


def scripted_child(d, *frames):
    """A forked process that says Hello, sends frames, then stays until the daemon closes
    the connection (or 60 s). Returns its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.sock)
            s.sendall(frame(HELLO, field(1, 1), field(2, 1), field(3, os.getpid()),
                            field(5, "scripted")))
            for f in frames:
                s.sendall(f)
            for _ in read_frames(s, timeout=60):
                pass
        except OSError:
            pass  # the daemon dropped us mid-send: what some cases expect
        finally:
            os._exit(0)
    return pid


def test_hostile_group_stats_are_refused_and_the_daemon_serves_on(tmp):
    d = Daemon(tmp)
    workers, scripted = [], []
    try:
        workers.append(start_worker(d, 80, "alpha"))
        own = {workers[0][0].pid: workers[0][1]["alpha"]}
        wait_for("the worker's totals", lambda: rows_match(d, "alpha", own))

        many = b"".join(group_totals(f"g{i}", 1) for i in range(5000))
        huge = b"".join(group_totals(f"g{i}", 1) for i in range(1000000))
        cases = {
            # Invalid UTF-8 never reaches the daemon's logic: the envelope is undecodable.
            "utf8": (group_stats(10, group_totals(b"bad\xff", 1)),
                     "invalid UTF-8"),
            "control": (group_stats(10, group_totals("esc\x1b[2J", 1)),
                        "name is not 1..128 bytes of UTF-8 without control characters"),
            "buckets": (group_stats(10, group_totals("short", 1, buckets=21)),
                        "'short': 21 histogram buckets, expected 22"),
            "backwards": (group_stats(10, group_totals("alpha", 1000)) +
                          group_stats(20, group_totals("alpha", 500)),
                          "'alpha': cpu_ns went backwards"),
            "many": (group_stats(10, many), "5000 groups, more than the 4096"),
            "huge": (group_stats(10, huge), "frame larger than the maximum frame size"),
        }
        for case, (frames, _) in cases.items():
            scripted.append((case, scripted_child(d, frames)))
        for case, pid in scripted:
            line = cases[case][1]
            wait_for(f"the log line of '{case}'",
                     lambda: any(f"{pid}" in ln and line in ln for ln in d.log().splitlines()))

        # Nothing of theirs entered the fleet's totals; the refused-but-connected children
        # are still served, and the worker's totals are intact.
        rep = groups_report(d.sock, "alpha")
        alpha = rep["groups"]["alpha"]
        names = set(rep["groups"])
        # "backwards" sent one valid message (alpha = 1000 ns) before the bad one.
        assert names == {"alpha"}, names
        backwards_pid = dict(scripted)["backwards"]
        rows = {r["pid"]: r["totals"] for r in alpha["per_process"]}
        assert set(rows) == {workers[0][0].pid, backwards_pid}, rows
        assert rows[backwards_pid]["cpu_ns"] == 1000
        assert same_totals(rows[workers[0][0].pid], own[workers[0][0].pid])
        assert alpha["totals"]["cpu_ns"] == own[workers[0][0].pid]["cpu_ns"] + 1000

        # The daemon goes on serving others: a new worker's groups arrive.
        workers.append(start_worker(d, 50, "delta"))
        wait_for("a new worker's totals",
                 lambda: rows_match(d, "delta", {workers[1][0].pid: workers[1][1]["delta"]}))
        assert d.alive()
        st = d.status()
        assert {g["name"] for g in st["groups"]} == {"alpha", "delta"}
    finally:
        for _, pid in scripted:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
        for p, _ in workers:
            if p.poll() is None:
                p.stdin.close()
                p.wait(timeout=30)
        d.stop()


class FakeDaemon:
    """A listening socket that plays the daemon for one real child: welcomes it, answers
    nothing else, and records every frame (arrival time, envelope field, fields) until the
    child closes the connection."""

    def __init__(self, tmp):
        self.path = os.path.join(tmp, "fake.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.frames = []
        self.hello_at = self.closed_at = None

    def serve(self, timeout=60):
        self.listener.settimeout(timeout)
        conn, _ = self.listener.accept()
        try:
            for num, msg in read_frames(conn, timeout=timeout):
                now = time.monotonic()
                self.frames.append((now, num, msg))
                if num == HELLO:
                    self.hello_at = now
                    clock = field(1, time.monotonic_ns()) + field(2, int(time.time() * 1000))
                    conn.sendall(frame(WELCOME, field(1, msg[1][0]), field(2, 1),
                                       field(3, 1000000), field(4, 64 << 20),
                                       field(5, 256 << 10), field(9, clock), field(10, 1)))
            self.closed_at = time.monotonic()
        finally:
            conn.close()
            self.listener.close()


def run_with_fake_daemon(tmp, *args):
    """Runs wl-groups ARGS (stdin closed: it exits after its work) against a FakeDaemon;
    returns (its own totals, the fake daemon)."""
    fake = FakeDaemon(tmp)
    env = dict(os.environ, FLEETPROF_STARTUP="1", FLEETPROF_SOCKET=fake.path,
               FLEETPROF_SYMBOLIZE="local")  # nobody answers Symbolize here
    p = subprocess.Popen([WL_GROUPS, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         env=env, text=True)
    try:
        fake.serve()
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, f"wl-groups exited {p.returncode}"
    assert fake.closed_at is not None, "the child did not close its connection"
    return json.loads(out)["groups"], fake


def test_child_sends_timed_stats_at_most_4_a_second_final_first(tmp):
    own, fake = run_with_fake_daemon(tmp, "60000", "busy")
    kinds = [num for _, num, _ in fake.frames]
    stats = [(t, msg) for t, num, msg in fake.frames if num == GROUP_STATS]
    assert stats, f"no GroupStats from a process that used a group: {kinds}"
    finals = [i for i, (_, msg) in enumerate(stats) if msg.get(5, [0])[0]]
    assert finals == [len(stats) - 1], f"final flags {[m.get(5) for _, m in stats]}"
    # The final totals go before the exit profile, and nothing of the groups after them.
    exit_at = next(i for i, (_, num, msg) in enumerate(fake.frames)
                   if num == PROFILE_DATA and msg.get(5, [0])[0])
    final_at = max(i for i, (_, num, _) in enumerate(fake.frames) if num == GROUP_STATS)
    assert final_at < exit_at, kinds
    # At most every 250 ms while the process lived (a loaded machine only sends fewer).
    lifetime = fake.closed_at - fake.hello_at
    assert len(stats) - 1 <= int(lifetime / 0.25) + 1, (len(stats), lifetime)
    print(f"# {len(stats)} GroupStats in {lifetime:.2f} s")
    assert len(stats) >= 3, f"{len(stats)} GroupStats in {lifetime:.2f} s of a busy group"
    # Each says when its totals were read (CLOCK_MONOTONIC, as time.monotonic_ns()): in
    # order, within the process's connection, before it arrived.
    times = [msg.get(6, [0])[0] for _, msg in stats]
    assert all(a < b for a, b in zip(times, times[1:])), times
    assert fake.hello_at * 1e9 <= times[0] and times[-1] <= fake.closed_at * 1e9, \
        (fake.hello_at, times, fake.closed_at)
    assert all(tm <= t * 1e9 for (t, _), tm in zip(stats, times)), (stats, times)
    # Cumulative: never decreasing; the last ones are the process's own final totals.
    last = None
    for _, msg in stats:
        (raw,) = msg[4]
        t = decode_totals(raw)
        assert t["name"] == "busy" and len(t["durations"]) == BUCKETS, t
        if last:
            assert all(t[k] >= last[k] for k in COUNTERS), (last, t)
        last = t
    assert same_totals(last, own["busy"]), (last, own["busy"])
    assert stats[-1][1][2][0] >= last["cpu_ns"], "process CPU below a group's charged CPU"


def test_child_without_groups_sends_no_group_stats(tmp):
    own, fake = run_with_fake_daemon(tmp, "30000")
    kinds = [num for _, num, _ in fake.frames]
    assert own == {}
    assert GROUP_STATS not in kinds, kinds
    assert PROFILE_DATA in kinds, f"the child's exit profile did not come: {kinds}"


taplib.run([
    test_child_sends_timed_stats_at_most_4_a_second_final_first,
    test_child_without_groups_sends_no_group_stats,
    test_fleet_sums_equal_process_totals_and_exited_stay,
    test_hostile_group_stats_are_refused_and_the_daemon_serves_on,
])
