"""A real fleetprofd for integration tests: started in a test's temp directory, its log kept,
always stopped (SIGTERM, then SIGKILL) by the test's cleanup. Paths come from the build
directory that meson passes as the test script's first argument."""
import json
import os
import re
import subprocess
import sys
import time

BUILD = os.path.abspath(sys.argv[1])
DAEMON = os.path.join(BUILD, "daemon", "fleetprofd")
CLI = os.path.join(BUILD, "tools", "fleetprof")


class Daemon:
    def __init__(self, tmp, *args):
        self.dir = os.path.join(tmp, "run")
        self.sock = os.path.join(self.dir, "fleetprof.sock")
        self.log_path = os.path.join(tmp, "daemon.log")
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen([DAEMON, "--foreground", "--socket", self.sock,
                                      "--log-level", "debug", *args], stderr=self.log_file)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.sock):
            assert self.proc.poll() is None, f"fleetprofd exited: {self.log()}"
            assert time.monotonic() < deadline, "fleetprofd did not create its socket"
            time.sleep(0.02)

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def status(self):
        r = subprocess.run([CLI, "status", "--socket", self.sock, "--json"], capture_output=True,
                           text=True, timeout=10)
        assert r.returncode == 0, f"fleetprof status failed: {r.stderr}"
        return json.loads(r.stdout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()


def wait_until(cond, what, timeout=60):
    """Polls cond until it holds; fails with what after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def capture_doc(d, tmp, name="fleet.json"):
    """A capture of d's fleet into tmp/name, checked and loaded."""
    import profile_check as pc
    from wire import capture
    out = os.path.join(tmp, name)
    result, error = capture(d.sock, out, timeout=120)
    assert error is None, error
    return pc.load_valid(out)


def process(doc, pid):
    """The profile of process pid in a capture."""
    import profile_check as pc
    for p in pc.all_processes(doc):
        if p["meta"]["fleetprof"]["pid"] == pid:
            return p
    raise AssertionError(f"pid {pid} not in "
                         f"{[p['meta']['fleetprof']['pid'] for p in pc.all_processes(doc)]}")


def render_event(e):
    """A gathering-log event as [ms, text, pid] ([ms, text] without a pid): a typed one
    ([ms, message, {"kind", "pid", "name", ...}]) with the message's {key} placeholders
    filled from its arguments; an older one as it is."""
    if len(e) > 2 and isinstance(e[2], dict):
        args = e[2]
        text = re.sub(r"\{(\w+)\}", lambda m: str(args.get(m.group(1), m.group(0))), e[1])
        return [e[0], text] + ([args["pid"]] if "pid" in args else [])
    return list(e)


def gathering_events(doc):
    """A capture's gathering-log events, rendered (render_event)."""
    (log,) = doc["profileGatheringLog"].values()
    return [render_event(e) for e in log["events"]]


def events(doc):
    """The texts of a capture's gathering-log events."""
    return [e[1] for e in gathering_events(doc)]
