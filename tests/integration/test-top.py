#!/usr/bin/env python3
"""Integration tests of `fleetprof top` (issue 14) as people and scripts use it, against a
real fleetprofd and real processes timing performance groups
(tests/workloads/wl-groups-split.c: three groups splitting each process's CPU 50/30/20 by construction):

- a fleet of 4: `top --once --json` fleet totals are the sum of what each process says it
  measured, within 1 %, and the split is within 2 points of the truth;
- in a real terminal (tmux): the screen shows the groups and refreshes, keys switch to a
  group's processes and back, a resize is followed, q quits and the terminal is restored;
- through a pipe: plain blocks, no escape codes;
- errors: no daemon, a daemon that does not know the request, an Error reply, usage.

Every wait is bounded and waits for what the program did, never for a wall-clock window.

Usage: test-top.py BUILD_DIR   (TAP output)
"""
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import taplib  # noqa: E402
from daemon_helper import CLI, Daemon  # noqa: E402
from wire import field, frame, read_frames  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
WL_SPLIT = os.path.join(BUILD, "tests", "workloads", "wl-groups-split")
GROUPS = {"top-50": 50.0, "top-30": 30.0, "top-20": 20.0}
GROUPS_REQUEST, ERROR = 36, 18


def _sanitized():
    with open(os.path.join(BUILD, "meson-info", "intro-buildoptions.json")) as f:
        opts = {o["name"]: o["value"] for o in json.load(f)}
    return opts.get("b_sanitize", "none") != "none"


# A sanitized libfleetprof crashes in the sanitizer's start-up (it calls the runtime's
# interposed dl_iterate_phdr first; test-tools.py says the same): the fleet's tests run in
# ordinary builds, and say so in a TAP comment.
SANITIZED = _sanitized()


def needs_runtime(test):
    def wrapper(tmp):
        if SANITIZED:
            print(f"# {test.__name__}: skipped in a sanitized build (the runtime cannot run)")
            return
        test(tmp)
    wrapper.__name__ = test.__name__
    return wrapper


def wait_until(pred, what, timeout=60, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"still waiting after {timeout}s for {what}"
        time.sleep(step)


def start_fleet(d, n, rounds, idle_ms=0):
    env = dict(os.environ, FLEETPROF_SOCKET=d.sock, FLEETPROF_SLOW_EVENT_MS="2")
    for k in ("LD_PRELOAD", "FLEETPROF_STARTUP", "FLEETPROF_OUTPUT", "FLEETPROF_DIR"):
        env.pop(k, None)
    return [subprocess.Popen([WL_SPLIT, str(rounds), str(idle_ms)], env=env,
                             stdout=subprocess.PIPE, text=True) for _ in range(n)]


def stop_fleet(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def top(d_sock, *args, timeout=60):
    return subprocess.run([CLI, "top", "--socket", d_sock, *args], capture_output=True,
                          text=True, timeout=timeout)


def top_json(d_sock, *args):
    r = top(d_sock, "--once", "--json", *args)
    assert r.returncode == 0, f"fleetprof top failed ({r.returncode}): {r.stderr}"
    assert r.stdout.count("\n") == 1, f"--once --json printed more than one line: {r.stdout}"
    return json.loads(r.stdout)


def groups_by_name(snap):
    return {g["name"]: g for g in snap["groups"]}


def fleet_reported(d, live_at_least=1):
    """The daemon reports the three groups, with at least live_at_least live processes."""
    snap = top_json(d.sock, "--interval", "0")
    g = groups_by_name(snap)
    return snap if all(n in g and g[n]["live_processes"] >= live_at_least
                       for n in GROUPS) else None


# ---- (a) fleet totals ---------------------------------------------------------------------

@needs_runtime
def test_fleet_totals_are_the_sum_of_the_processes(tmp):
    d = Daemon(tmp)
    procs = []
    try:
        procs = start_fleet(d, 4, rounds=0)  # until SIGTERM: the rates are of a live fleet
        wait_until(lambda: fleet_reported(d, live_at_least=4),
                   "the daemon to report the groups of 4 live processes")

        # While the fleet runs: two reports 1 s apart give rates; the split of the interval
        # holds too (every round splits 50/30/20), within a round's granularity.
        snap = top_json(d.sock, "--interval", "1")
        # top rates over reports at least half an interval apart (its rule for jitter).
        assert snap["rated"] and snap["interval_ns"] >= 500_000_000, snap
        assert snap["fleet_cpu_per_s"] > 0 and snap["processes"] >= 4, snap
        live = groups_by_name(snap)
        interval_sum = sum(live[n]["interval_cpu_ns"] for n in GROUPS)
        print(f"# interval: {interval_sum / 1e6:.1f} ms of group CPU in "
              f"{snap['interval_ns'] / 1e6:.0f} ms, fleet {snap['fleet_cpu_per_s']:.2f} CPU/s")
        # Processes report about once a second: on a starved machine the interval may hold
        # too few rounds to judge a split (20 rounds or more: a round is 5 % at most).
        if interval_sum >= 100_000_000:
            for n, truth in GROUPS.items():
                share = 100.0 * live[n]["interval_cpu_ns"] / interval_sum
                assert abs(share - truth) <= 5, f"{n}: {share:.2f} % of the interval, {truth}"
                assert live[n]["cpu_per_s"] > 0 and live[n]["share_pct"] > 0, live[n]
                assert live[n]["live_processes"] == 4, live[n]
        for p in procs:
            p.send_signal(signal.SIGTERM)  # ends the round, prints its totals, exits

        # What each process measured itself, printed at its end.
        own = {}
        for p in procs:
            out, _ = p.communicate(timeout=300)
            assert p.returncode == 0, f"wl-groups-split {p.pid} exited {p.returncode}"
            rec = json.loads(out)
            own[rec["pid"]] = rec["groups"]

        # The final stats come at each exit: wait until no process of any group is live.
        def all_exited():
            s = top_json(d.sock, "--interval", "0", "--group", "top-50")
            g = groups_by_name(s)
            done = all(g.get(n, {}).get("processes") == 4 and g[n]["live_processes"] == 0
                       for n in GROUPS)
            return s if done else None
        final = wait_until(all_exited, "every process's final group stats", timeout=60)
        g = groups_by_name(final)
        total = sum(g[n]["cpu_ns"] for n in GROUPS)
        for n, truth in GROUPS.items():
            want = sum(o[n]["cpu_ns"] for o in own.values())
            got = g[n]["cpu_ns"]
            print(f"# {n}: fleet {got / 1e6:.2f} ms, processes {want / 1e6:.2f} ms, "
                  f"{100.0 * got / total:.2f} % (truth {truth:.0f} %), "
                  f"{g[n]['cumulative_share_pct']:.2f} % of the fleet's CPU")
            assert abs(got - want) <= 0.01 * want, f"{n}: fleet {got} ns, processes {want} ns"
            assert g[n]["events"] == sum(o[n]["events"] for o in own.values()), (n, g[n])
            assert g[n]["slow_events"] == sum(o[n]["slow_events"] for o in own.values())
            share = 100.0 * got / total
            assert abs(share - truth) <= 2, f"{n}: {share:.2f} % of the groups' CPU, {truth}"
            # The fleet's CPU also counts what no group timed (start-up, the runtime).
            assert 0 < g[n]["cumulative_share_pct"] <= share + 0.5, g[n]
            assert final["rated"] is False and g[n]["cpu_per_s"] is None
        # top-50's events (2.5 ms) are slow at the 2 ms threshold; top-20's (1 ms) only when
        # something else ran on the thread inside the event (seen: one in 744 under load).
        assert g["top-50"]["slow_events"] >= 0.9 * g["top-50"]["events"], g["top-50"]
        assert g["top-20"]["slow_events"] <= 0.02 * g["top-20"]["events"], g["top-20"]

        # The breakdown: one row per process, their own numbers, summing to the group.
        rows = {r["pid"]: r for r in final["per_process"]}
        assert final["group"] == "top-50" and final["group_found"] is True
        assert set(rows) == set(own), f"breakdown pids {sorted(rows)}, fleet {sorted(own)}"
        assert all(r["exited"] for r in rows.values()), rows
        assert sum(r["cpu_ns"] for r in rows.values()) == g["top-50"]["cpu_ns"]
        for pid, r in rows.items():
            want = own[pid]["top-50"]["cpu_ns"]
            assert abs(r["cpu_ns"] - want) <= 0.01 * want, (pid, r["cpu_ns"], want)
            assert r["name"], r
    finally:
        stop_fleet(procs)
        d.stop()


# ---- (b) a real terminal --------------------------------------------------------------------

class Tmux:
    """A private tmux server (its own socket, no user configuration)."""

    def __init__(self, tmp, width, height, command):
        self.sock = os.path.join(tmp, "tmux.sock")
        self.run("-f", "/dev/null", "new-session", "-d", "-x", str(width), "-y", str(height),
                 command)

    def run(self, *args):
        r = subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, f"tmux {args}: {r.stderr}"
        return r.stdout

    def screen(self):
        return self.run("capture-pane", "-p", "-t", "0")

    def var(self, name):
        return self.run("display-message", "-p", "-t", "0", "#{" + name + "}").strip()

    def keys(self, *keys):
        self.run("send-keys", "-t", "0", *keys)

    def kill(self):
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=30)


def tmux_available():
    """tmux comes with tools/bootstrap.sh; without it (and no way to install it) skip."""
    if shutil.which("tmux"):
        return True
    bootstrap = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bootstrap.sh")
    subprocess.run(["bash", bootstrap], capture_output=True, timeout=600)
    return shutil.which("tmux") is not None


def group_line(screen, name):
    return next((line for line in screen.splitlines() if line.startswith(name + " ")), None)


def same_modes(tmp):
    """The terminal's modes (`stty -a` before and after top) are the same. The size line is
    left out: a resize, or tmux sizing a new pane, changes it."""
    wait_until(lambda: os.path.exists(os.path.join(tmp, "stty-after")), "stty -a after top")
    with open(os.path.join(tmp, "stty-before")) as a, \
            open(os.path.join(tmp, "stty-after")) as b:
        before, after = ([line for line in f.read().splitlines() if "rows" not in line]
                         for f in (a, b))
    assert before == after, f"terminal modes before top:\n{before}\nafter:\n{after}"
    return True


@needs_runtime
def test_terminal(tmp):
    if not tmux_available():
        print("# test_terminal: skipped: tmux is missing and tools/bootstrap.sh could not "
              "install it")
        return
    d = Daemon(tmp)
    procs, tmux = [], None
    try:
        procs = start_fleet(d, 2, rounds=0, idle_ms=20)
        wait_until(lambda: fleet_reported(d), "the daemon to report the fleet's groups")
        script = os.path.join(tmp, "run.sh")
        with open(script, "w") as f:
            f.write(f"stty -a > '{tmp}/stty-before'\n"
                    f"'{CLI}' top --socket '{d.sock}' --interval 0.2\n"
                    f"echo top-exit=$?\n"
                    f"stty -a > '{tmp}/stty-after'\n"
                    "exec sleep 600\n")
        tmux = Tmux(tmp, 160, 40, f"sh '{script}'")

        # The groups on the screen, with rates (a second report came), on the alternate
        # screen; then the screen changes by itself: the fleet's totals grow.
        first = wait_until(lambda: (lambda s: s if all(group_line(s, n) for n in GROUPS)
                                    and "CPU/s over" in s else None)(tmux.screen()),
                           "the groups with rates on the terminal")
        assert tmux.var("alternate_on") == "1", "top should draw on the alternate screen"
        assert "\x1b" not in first
        wait_until(lambda: group_line(tmux.screen(), "top-50") != group_line(first, "top-50"),
                   "the screen to refresh")

        # g: the top group's processes; Escape: back to the groups.
        tmux.keys("g")
        view = wait_until(lambda: (lambda s: s if 'group "top-' in s and "PID" in s
                                   else None)(tmux.screen()), "the per-process view")
        assert sum(1 for line in view.splitlines() if " live " in line) == 2, view
        tmux.keys("Escape")
        wait_until(lambda: "PROCS" in tmux.screen(), "the groups view again")

        # A narrower window (SIGWINCH): lines are cut, never wrapped.
        tmux.run("resize-window", "-t", "0", "-x", "60", "-y", "20")
        def narrow():
            s = tmux.screen().splitlines()
            return (len(s) >= 3 and s[0].startswith("fleetprof top") and
                    s[2].startswith("GROUP") and group_line("\n".join(s), "top-50") and
                    all(len(line) <= 60 for line in s))
        wait_until(narrow, "the screen redrawn for 60 columns")

        # q: the program ends with status 0, the screen and the terminal's modes as they were.
        tmux.keys("q")
        after = wait_until(lambda: (lambda s: s if "top-exit=" in s else None)(tmux.screen()),
                           "top to quit on q")
        assert "top-exit=0" in after, after
        assert "top-50" not in after, f"the alternate screen is still shown:\n{after}"
        assert tmux.var("alternate_on") == "0"
        assert tmux.var("cursor_flag") == "1", "the cursor should be visible again"
        assert same_modes(tmp)
    finally:
        if tmux:
            tmux.kill()
        stop_fleet(procs)
        d.stop()


def test_terminal_signals(tmp):
    """SIGTERM on a terminal: the same clean way out as q."""
    if not tmux_available():
        print("# test_terminal_signals: skipped: tmux is missing")
        return
    d = Daemon(tmp)
    tmux = None
    try:
        script = os.path.join(tmp, "run.sh")
        with open(script, "w") as f:
            f.write(f"stty -a > '{tmp}/stty-before'\n"
                    f"'{CLI}' top --socket '{d.sock}' --interval 0.2 & echo $! > '{tmp}/pid'\n"
                    "wait $!\n"
                    "echo top-exit=$?\n"
                    f"stty -a > '{tmp}/stty-after'\n"
                    "exec sleep 600\n")
        tmux = Tmux(tmp, 120, 30, f"sh '{script}'")
        wait_until(lambda: "no group measured yet" in tmux.screen(), "the empty fleet view")
        with open(os.path.join(tmp, "pid")) as f:
            os.kill(int(f.read()), signal.SIGTERM)
        after = wait_until(lambda: (lambda s: s if "top-exit=" in s else None)(tmux.screen()),
                           "top to end on SIGTERM")
        assert "top-exit=0" in after and "GROUP" not in after, after
        assert tmux.var("alternate_on") == "0"
        wait_until(lambda: os.path.exists(os.path.join(tmp, "stty-after")), "stty -a")
        assert same_modes(tmp)
    finally:
        if tmux:
            tmux.kill()
        d.stop()


# ---- (c) a pipe ----------------------------------------------------------------------------

@needs_runtime
def test_pipe(tmp):
    d = Daemon(tmp)
    procs, p = [], None
    try:
        procs = start_fleet(d, 2, rounds=0, idle_ms=20)
        wait_until(lambda: fleet_reported(d), "the daemon to report the fleet's groups")
        p = subprocess.Popen([CLI, "top", "--socket", d.sock, "--interval", "0.2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out = b""
        deadline = time.monotonic() + 60
        # Three blocks, the later ones with rates.
        while out.count(b"fleetprof top") < 3 or b"CPU/s over" not in out:
            assert time.monotonic() < deadline, f"three blocks not seen in 60 s:\n{out!r}"
            ready, _, _ = select.select([p.stdout], [], [], 1)
            if ready:
                chunk = os.read(p.stdout.fileno(), 65536)
                assert chunk, f"top ended early: {p.wait()} {p.stderr.read()!r}"
                out += chunk
        p.send_signal(signal.SIGTERM)
        rest, err = p.communicate(timeout=30)
        out += rest
        assert p.returncode == 0, (p.returncode, err)
        assert b"\x1b" not in out, "escape codes on a pipe"
        text = out.decode()
        for n in GROUPS:
            assert f"\n{n} " in text, f"{n} not listed:\n{text}"
        assert text.startswith("fleetprof top"), text[:200]
        # One block per refresh, blocks separated by a blank line.
        blocks = [b for b in text.split("\n\nfleetprof top") if b.strip()]
        assert len(blocks) >= 3, text

        # --once on a pipe: one block, with rates, and exit 0.
        r = top(d.sock, "--once", "--interval", "0.3")
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("fleetprof top") == 1 and "CPU/s over" in r.stdout, r.stdout
        assert "\x1b" not in r.stdout
        r = top(d.sock, "--once", "--interval", "0.3", "--group", "top-30")
        assert r.returncode == 0, r.stderr
        assert 'group "top-30"' in r.stdout and r.stdout.count(" live ") == 2, r.stdout

        # --json without --once: one object per line, per refresh, the later ones rated.
        p = subprocess.Popen([CLI, "top", "--socket", d.sock, "--interval", "0.2", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Rates come once every process has reported since the first (about a second).
        objs = [json.loads(p.stdout.readline())]
        while not objs[-1]["rated"]:
            assert len(objs) < 100, f"no rated refresh in 100 at 0.2 s: {objs[-1]}"
            objs.append(json.loads(p.stdout.readline()))
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 0, (p.returncode, err)
        assert not objs[0]["rated"] and len(objs) >= 2, objs
        assert all(a["time_ns"] < b["time_ns"] for a, b in zip(objs, objs[1:])), objs
        assert set(GROUPS) <= {g["name"] for g in objs[-1]["groups"]}
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        stop_fleet(procs)
        d.stop()


# ---- (c2) rates at short intervals, as processes come and go -------------------------------

class CpuClocks:
    """Each process's CPU time (CLOCK_PROCESS_CPUTIME_ID through clock_getcpuclockid, all
    its threads, in ns) read every 10 ms beside CLOCK_MONOTONIC (the daemon's clock): the
    truth a rate over any window is checked against."""

    def __init__(self, pids):
        libc = ctypes.CDLL(None, use_errno=True)
        self.clocks = {}
        for pid in pids:
            clk = ctypes.c_int()
            assert libc.clock_getcpuclockid(pid, ctypes.byref(clk)) == 0, pid
            self.clocks[pid] = clk.value
        self.readings = {pid: [] for pid in pids}  # (monotonic ns, cpu ns)
        self.gone = {}  # pid: when its clock was first found gone (it ended before)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            for pid, clk in self.clocks.items():
                if pid in self.gone:
                    continue
                try:
                    cpu = time.clock_gettime_ns(clk)
                except OSError:
                    self.gone[pid] = time.monotonic_ns()
                    continue
                self.readings[pid].append((time.monotonic_ns(), cpu))
            time.sleep(0.01)

    def at(self, pid, t):
        """pid's CPU time at t, between the readings around it."""
        r = self.readings[pid]
        if not r or t <= r[0][0]:
            return r[0][1] if r else 0
        for (t0, c0), (t1, c1) in zip(r, r[1:]):
            if t0 <= t < t1:
                return c0 + (c1 - c0) * (t - t0) / (t1 - t0)
        return r[-1][1]

    def ended(self, pid, cpu_ns):
        """pid ended having used cpu_ns in all (its rusage from wait4): its last reading can
        be tens of ms of CPU short of it on a loaded machine; it had it all by the time its
        clock was found gone (now, if not tried since). Its clock stays gone: the reader
        adds nothing after this."""
        t = self.gone.get(pid) or time.monotonic_ns()
        self.readings[pid].append((max(t, self.readings[pid][-1][0] if self.readings[pid] else 0),
                                   cpu_ns))

    def rate(self, t0, t1):
        return sum(self.at(pid, t1) - self.at(pid, t0) for pid in self.clocks) / (t1 - t0)

    def close(self):
        self.stop.set()
        self.thread.join(timeout=10)


@needs_runtime
def test_rates_at_short_intervals(tmp):
    """top --interval 0.25 and --once --interval 0.3 show the CPU/s the fleet burned over
    the window they name (rates_from_ns..rates_to_ns, the daemon's clock) within 10 %,
    while a worker ends in the middle: processes report once a second each, so rates are of
    totals settled at the time every process had reported up to."""
    d = Daemon(tmp)
    procs, clocks, p = [], None, None
    try:
        # Busy: the machine's CPUs shared among them evenly (a worker that sleeps between
        # rounds burns in bursts the scheduler places, which a loaded machine spreads).
        procs = start_fleet(d, 2, rounds=0)
        # One more that ends after a second or more of rounds (2.5 ms each, alone).
        procs += start_fleet(d, 1, rounds=500)
        clocks = CpuClocks([w.pid for w in procs])
        wait_until(lambda: fleet_reported(d, live_at_least=3), "3 live processes' groups")
        p = subprocess.Popen([CLI, "top", "--socket", d.sock, "--interval", "0.25", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rated = []
        deadline = time.monotonic() + 120
        # The ending worker is waited for without reaping it (its rusage is read after).
        while len(rated) < 12 or os.waitid(os.P_PID, procs[2].pid,
                                           os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            assert time.monotonic() < deadline, f"12 rated refreshes not seen: {rated[-1:]}"
            obj = json.loads(p.stdout.readline())
            if obj["rated"]:
                rated.append(obj)
        _, status, usage = os.wait4(procs[2].pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        procs[2].returncode = 0  # reaped here
        clocks.ended(procs[2].pid, round((usage.ru_utime + usage.ru_stime) * 1e9))
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)
        once = []
        for _ in range(2):
            once.append(top_json(d.sock, "--interval", "0.3"))
            assert once[-1]["rated"], once[-1]
        time.sleep(0.05)  # the last window's end has a reading after it
        spans = []
        for obj in rated + once:
            t0, t1 = obj["rates_from_ns"], obj["rates_to_ns"]
            assert obj["time_ns"] - 3_000_000_000 < t0 < t1 <= obj["time_ns"], obj
            truth = clocks.rate(t0, t1)
            got = obj["fleet_cpu_per_s"]
            spans.append(f"{(t1 - t0) / 1e6:.0f} ms {got:.3f}/{truth:.3f}")
            assert truth > 0.1, spans
            assert abs(got - truth) <= 0.1 * truth, f"fleet CPU/s {got:.3f}, burned {truth:.3f} " \
                f"over {(t1 - t0) / 1e6:.0f} ms, {(obj['time_ns'] - t1) / 1e6:.0f} ms ago: {spans}"
        print(f"# windows (CPU/s shown/burned): {', '.join(spans)}")
        # The windows are near the interval asked once reports allow (each process reports
        # once a second, so the settled time moves in steps).
        assert min((o["rates_to_ns"] - o["rates_from_ns"]) for o in rated) <= 600_000_000, spans
        assert all(o["interval_ns"] >= 150_000_000 for o in once), spans
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        if clocks:
            clocks.close()
        stop_fleet(procs)
        d.stop()


# ---- (d) errors ----------------------------------------------------------------------------

class FakeDaemon:
    """A socket that takes one request and then behaves as told: "close" (a daemon that
    does not know GroupsRequest), or "error" (an Error reply)."""

    def __init__(self, tmp, behaviour):
        self.path = os.path.join(tmp, "fake.sock")
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(4)
        self.behaviour = behaviour
        self.requests = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        try:
            conn, _ = self.srv.accept()
        except OSError:
            return
        with conn:
            for num, msg in read_frames(conn, timeout=10):
                self.requests.append((num, msg))
                if self.behaviour == "error":
                    conn.sendall(frame(ERROR, field(1, msg.get(1, [0])[0]), field(2, 38),
                                       field(3, "unknown request")))
                break

    def close(self):
        self.srv.close()
        self.thread.join(timeout=10)


def test_errors(tmp):
    nowhere = os.path.join(tmp, "nobody.sock")
    r = top(nowhere, "--once")
    assert r.returncode == 1 and nowhere in r.stderr and "no daemon" in r.stderr, r.stderr

    fake = FakeDaemon(tmp, "close")
    try:
        r = top(fake.path, "--once")
    finally:
        fake.close()
    assert r.returncode == 1, r
    assert fake.requests and fake.requests[0][0] == GROUPS_REQUEST, fake.requests
    assert "older than this fleetprof" in r.stderr and fake.path in r.stderr, r.stderr
    os.unlink(fake.path)

    fake = FakeDaemon(tmp, "error")
    try:
        r = top(fake.path, "--once", "--json")
    finally:
        fake.close()
    assert r.returncode == 1 and r.stdout == "", r
    assert "does not know performance groups" in r.stderr and "unknown request" in r.stderr

    for bad in (["--interval", "0"], ["--interval", "x"], ["--interval", "-1"], ["extra"],
                ["--group", ""]):
        r = top(nowhere, *bad)
        assert r.returncode == 2, (bad, r)
    r = top(nowhere, "--help")
    assert r.returncode == 0 and "--once" in r.stdout

    # A group nobody measured, asked for once: said so, exit 1.
    d = Daemon(tmp)
    try:
        r = top(d.sock, "--once", "--interval", "0", "--group", "nobody")
        assert r.returncode == 1 and '"nobody"' in r.stderr, r
        snap = top_json(d.sock, "--interval", "0")
        assert snap["groups"] == [] and snap["rated"] is False, snap
    finally:
        d.stop()


taplib.run([test_fleet_totals_are_the_sum_of_the_processes, test_rates_at_short_intervals,
            test_terminal,
            test_terminal_signals, test_pipe, test_errors])
