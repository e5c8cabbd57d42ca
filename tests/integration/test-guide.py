#!/usr/bin/env python3
"""The user guide's shell examples run as written (docs/user-guide.md, issue 32).

Every line of every ```sh block runs, in the guide's order, in one working directory, with
the build's fleetprof and fleetprofd first on PATH. What a guide leaves to the reader is
given, each by one substitution named below: the program (`./server`, `./worker`,
`./program`: the bundled demo fleet, for a second), the paths it names as examples (the
socket's directory, `DIR`, `/tmp/profiles` and the pid 4242 in them: this test's own,
prepared the way the guide says they come about). A line must exit 0 and leave the file it
names with -o; a line ending in `&` runs beside the next ones; `top` without --once runs
until it has drawn a screen. Lines that are not commands (a synopsis with [OPTIONS]) and
programs this machine does not have (go, profilecli, flamegraph.pl: not Debian's, or not
installed) are listed in a TAP comment. `./run demo` is the README's quick start: it builds
in the checkout and runs there, not here.

Usage: test-guide.py BUILD_DIR   (TAP output)
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import taplib  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUIDE = os.path.join(SOURCE, "docs", "user-guide.md")
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
DEMO = os.path.join(BUILD, "tools", "demo", "demo-fleet")
NOT_HERE = ("./run demo",)  # the README's quick start: builds and writes in the checkout


def sanitized():
    with open(os.path.join(BUILD, "meson-info", "intro-buildoptions.json")) as f:
        opts = {o["name"]: o["value"] for o in json.load(f)}
    return opts.get("b_sanitize", "none") != "none"


def guide_lines():
    """The guide's shell commands, in order: (line number, text), continuations joined and
    comments off."""
    out, block, pending, start = [], False, "", 0
    with open(GUIDE) as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line.startswith("```"):
                block = line.strip() == "```sh" if not block else False
                continue
            if not block:
                continue
            if not pending:
                start = n
            line = re.sub(r"\s+#\s.*$", "", line)
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            text = (pending + line).strip()
            pending = ""
            if text:
                out.append((start, text))
    return out


class Guide:
    def __init__(self, tmp):
        self.tmp = tmp
        self.work = os.path.join(tmp, "work")
        self.home = os.path.join(tmp, "home")
        self.run_dir = os.path.join(tmp, "run")  # the guide's /run/user/1000
        self.dir = os.path.join(tmp, "dir")  # the guide's DIR
        self.profiles = os.path.join(tmp, "profiles")  # the guide's /tmp/profiles
        for d in (self.work, self.home, self.run_dir, self.dir, self.profiles):
            os.makedirs(d, mode=0o700)
        self.env = dict(os.environ, HOME=self.home, XDG_RUNTIME_DIR=self.run_dir,
                        PATH=os.pathsep.join([os.path.join(BUILD, "tools"),
                                              os.path.join(BUILD, "daemon"),
                                              os.environ.get("PATH", "/usr/bin:/bin")]))
        for k in ("LD_PRELOAD", "FLEETPROF_STARTUP", "FLEETPROF_OUTPUT", "FLEETPROF_DIR",
                  "FLEETPROF_SOCKET"):
            self.env.pop(k, None)
        self.background = []
        self.crashed_pid = None

    def prepare(self):
        """DIR holds profiles of processes that could not reach a daemon (FLEETPROF_DIR);
        /tmp/profiles a profile and the chunks of a process killed with SIGKILL."""
        # No daemon yet at the default socket ($XDG_RUNTIME_DIR's): as the guide's §6 runs.
        env = dict(self.env, LD_PRELOAD=LIB, FLEETPROF_STARTUP="1")
        r = subprocess.run([DEMO, "--workers", "1", "--seconds", "1", "--helpers-per-sec", "0"],
                           env=dict(env, FLEETPROF_DIR=self.dir), capture_output=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert glob.glob(os.path.join(self.dir, "*.json")), os.listdir(self.dir)
        env["FLEETPROF_DIR"] = self.profiles
        r = subprocess.run([DEMO, "--workers", "1", "--seconds", "1", "--helpers-per-sec", "0"],
                           env=env, capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr
        # A worker killed with SIGKILL while its master runs on ("When a worker crashes").
        p = subprocess.Popen([DEMO, "--workers", "1", "--seconds", "30", "--helpers-per-sec",
                              "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True)
        try:
            worker = None
            while worker is None:
                line = p.stdout.readline()
                assert line, "demo-fleet ended before naming its worker"
                m = re.search(r"worker 0 pid (\d+)", line)
                worker = int(m[1]) if m else None
            chunks = os.path.join(self.profiles, f"fleetprof-{worker}.chunks")
            deadline = time.monotonic() + 60
            while taplib.cpu_seconds(worker) < 0.3 or not os.path.exists(chunks):
                assert time.monotonic() < deadline, f"no {chunks}, or no CPU, after 60 s"
                time.sleep(0.05)
            os.kill(worker, signal.SIGKILL)  # the guide's "kill -9"
            self.crashed_pid = worker
        finally:
            p.terminate()
            p.wait(timeout=60)
        assert os.path.exists(chunks), os.listdir(self.profiles)

    def substitute(self, text):
        pid = self.a_pid()
        subs = [
            ("./server", f"{DEMO} --seconds 1 --helpers-per-sec 2"),
            ("./worker", f"{DEMO} --workers 1 --seconds 3 --helpers-per-sec 0"),
            ("./program", f"{DEMO} --workers 1 --seconds 1 --helpers-per-sec 0"),
            ("/path/to/libfleetprof.so", LIB),
            ("LD_PRELOAD=libfleetprof.so", f"LD_PRELOAD={LIB}"),
            ("LD_PRELOAD=build/child/libfleetprof.so", f"LD_PRELOAD={LIB}"),
            ("build/tools/", os.path.join(BUILD, "tools") + "/"),
            ("/run/user/1000", self.run_dir),
            ("DIR/", self.dir + "/"),
            ("/tmp/profiles", self.profiles),
            ("fleetprof-4242.chunks", f"fleetprof-{self.crashed_pid}.chunks"),
            ("--pid 4242", f"--pid {pid}"),
            ("tagfocus=pid=1234", f"tagfocus=pid={pid}"),
        ]
        # One pass, longest first: a replacement is never replaced again.
        table = dict(subs)
        pattern = "|".join(re.escape(k) for k in sorted(table, key=len, reverse=True))
        return re.sub(pattern, lambda m: table[m[0]], text)

    def a_pid(self):
        """A worker's pid from fleet.json, once a line wrote it (the guide's 4242)."""
        try:
            with open(os.path.join(self.work, "fleet.json")) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            return 4242
        pids = [p["meta"]["fleetprof"]["pid"] for p in doc.get("processes", [])
                if p.get("threads") and p["meta"]["fleetprof"].get("forked")]
        return pids[0] if pids else doc["meta"]["fleetprof"]["pid"]

    def run_line(self, n, text):
        cmd = self.substitute(text)
        words = cmd.split()
        program = next(w for w in words if "=" not in w or w.startswith("-"))
        if program in ("go", "profilecli", "flamegraph.pl") and not shutil.which(program):
            return f"line {n}: {program} is not installed"
        if cmd.endswith("&"):
            self.background.append(subprocess.Popen(
                ["bash", "-c", cmd[:-1]], cwd=self.work, env=self.env,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            time.sleep(0.5)  # the guide's next line expects it started
            return None
        if words[:2] == ["fleetprof", "top"] and "--once" not in words:
            p = subprocess.Popen(["bash", "-c", cmd], cwd=self.work, env=self.env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                out, err = p.communicate(timeout=4)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
                out, err = p.communicate(timeout=30)
            assert "fleetprof top" in out and "checkout" in out, \
                f"line {n}: {cmd}: no screen: {out!r} {err!r}"
            return None
        r = subprocess.run(["bash", "-c", cmd], cwd=self.work, env=self.env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"line {n}: {cmd}: exit {r.returncode}\n{r.stderr[-2000:]}"
        m = re.search(r"(?:^|\s)-o (\S+)", cmd)
        if m:
            path = os.path.join(self.work, m[1])
            assert os.path.exists(path) and (os.path.isdir(path) or os.path.getsize(path)), \
                f"line {n}: {cmd}: nothing at {path}"
        return None

    def close(self):
        for p in self.background:
            if p.poll() is None:
                p.kill()
            p.wait()
        # Daemons the guide started detach: found by their sockets, all under tmp.
        for pid in daemons_serving(self.tmp):
            os.kill(pid, signal.SIGTERM)


def wait_gone(tmp):
    """True once no daemon under tmp is left (SIGTERM: they stop within seconds)."""
    deadline = time.monotonic() + 30
    while daemons_serving(tmp):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_guides_examples_run_as_written(tmp):
    if sanitized():
        raise taplib.Skip("the runtime cannot run in a sanitized build")
    lines = guide_lines()
    assert len(lines) >= 30, f"only {len(lines)} commands found in {GUIDE}"
    g = Guide(tmp)
    left = []
    try:
        g.prepare()
        for n, text in lines:
            if text in NOT_HERE:
                left.append(f"line {n}: {text}: the README's quick start")
                continue
            if "[" in text and "]" in text and "--" in text:
                left.append(f"line {n}: a synopsis")
                continue
            why = g.run_line(n, text)
            if why:
                left.append(why)
        for p in g.background:
            err = p.stderr.read().decode(errors="replace") if p.poll() is not None else ""
            assert p.wait(timeout=120) == 0, f"{p.args}: {err[-2000:]}"
    finally:
        g.close()
    assert not daemons_serving(tmp) or wait_gone(tmp), "a daemon the guide started lives on"
    print(f"# ran {len(lines) - len(left)} of {len(lines)} commands; not here: "
          + "; ".join(left))
    # The commands run here: everything but what needs another program.
    assert len(lines) - len(left) >= 25, left


def daemons_serving(path):
    """Pids of fleetprofd processes with an argument that is path, or under it."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args[0].endswith(b"fleetprofd") and any(a.startswith(path.encode()) for a in args):
            pids.append(int(pid))
    return pids


def test_fleetprofd_detaches_with_its_status(tmp):
    """The guide starts the daemon with a plain `fleetprofd --socket PATH`: it returns once
    the daemon listens (the socket answers at once), with status 0, and lets go of a caller
    that reads its output (a script's $(...), this test's pipes); a second one on the same
    socket fails with status 1 and says why, where it used to say 0 and complain later."""
    daemon = os.path.join(BUILD, "daemon", "fleetprofd")
    cli = os.path.join(BUILD, "tools", "fleetprof")
    sock = os.path.join(tmp, "fp.sock")
    try:
        r = subprocess.run([daemon, "--socket", sock], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        st = subprocess.run([cli, "status", "--socket", sock], capture_output=True, text=True,
                            timeout=60)
        assert st.returncode == 0 and "0 processes" in st.stdout, (st.stdout, st.stderr)
        assert len(daemons_serving(sock)) == 1
        r = subprocess.run([daemon, "--socket", sock], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 1 and "another fleetprofd is serving" in r.stderr, r
        assert len(daemons_serving(sock)) == 1
    finally:
        for pid in daemons_serving(sock):
            os.kill(pid, signal.SIGTERM)


taplib.run([test_the_guides_examples_run_as_written, test_fleetprofd_detaches_with_its_status])
