#!/usr/bin/env python3
"""Nobody let in (docs/security.md): a profiled process and the CLI talk only to a daemon of
their own user, found in a directory only that user (or root) controls, and the daemon
listens only in such a directory. Each impostor here is a real listener running as another
user (nobody), in a directory it made or with its socket moved into ours; each check is made
with the real fleetprofd, the real runtime and the real CLI. Also: links planted in a shared
FLEETPROF_DIR are never followed, and every file we write has one mode (0600).

Switching users needs root: run as another user, those tests are skipped and say so.

Usage: test-security.py BUILD_DIR   (meson passes it; output is TAP)
"""
import atexit
import glob
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import Daemon, wait_until  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
DAEMON = os.path.join(BUILD, "daemon", "fleetprofd")
CLI = os.path.join(BUILD, "tools", "fleetprof")

# The impostor: listens at argv[1] and, for each connection, prints how many bytes it was sent
# before the other side closed (or went quiet for 10 s).
IMPOSTOR = r"""
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(10)
    n = 0
    try:
        while True:
            d = c.recv(65536)
            if not d:
                break
            n += len(d)
    except OSError:
        pass
    c.close()
    print(json.dumps({"bytes": n}), flush=True)
"""


# The impostor runs as another user: the system's Python, which every user may run (the
# tests' own may live in root's home).
USER_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def nobody():
    return pwd.getpwnam("nobody").pw_uid


def need_root():
    if os.geteuid() != 0:
        raise taplib.Skip("not root: cannot run another user's listener")


def as_user(uid):
    def switch():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return switch


def run_as(uid, argv):
    r = subprocess.run(argv, preexec_fn=as_user(uid), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"{argv} as uid {uid}: {r.stderr}"


def shared_dir(tmp):
    """A sticky, world-writable directory like /tmp, of its own: a short path (a socket's must
    fit in 108 bytes), removed when the tests end."""
    shared = tempfile.mkdtemp(prefix="fpsec-")
    atexit.register(shutil.rmtree, shared, True)
    os.chmod(shared, 0o1777)
    return shared


class Impostor:
    """Another user's listener at path (the directory must let that user bind there)."""

    def __init__(self, path, uid):
        self.path = path
        self.proc = subprocess.Popen([USER_PYTHON, "-c", IMPOSTOR, path],
                                     preexec_fn=as_user(uid), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"the impostor did not start: {self.proc.stderr.read()}"

    def connections(self):
        """Bytes received on each connection so far (stops the impostor)."""
        self.stop()
        return [json.loads(line)["bytes"] for line in self.proc.stdout.read().splitlines()]

    def stop(self):
        if self.proc.poll() is None:
            # Let a connection just closed be counted: the impostor prints it at once.
            time.sleep(0.2)
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)


def impostor_in_its_own_directory(tmp):
    """The measured scenario: another user made the socket directory first, and listens in it."""
    d = os.path.join(shared_dir(tmp), "fleetprof-0")
    run_as(nobody(), ["mkdir", "-m", "0777", d])
    return Impostor(os.path.join(d, "fleetprof.sock"), nobody())


def impostor_moved_into_ours(tmp):
    """Another user's listener whose socket was moved into our private directory and given to
    us: the directory and the file look right, only the listener's credentials tell."""
    theirs = os.path.join(shared_dir(tmp), "theirs")
    run_as(nobody(), ["mkdir", "-m", "0700", theirs])
    imp = Impostor(os.path.join(theirs, "s"), nobody())
    ours = tempfile.mkdtemp(prefix="fpsec-ours-")
    atexit.register(shutil.rmtree, ours, True)
    path = os.path.join(ours, "fleetprof.sock")
    os.rename(imp.path, path)
    os.chown(path, 0, 0)
    imp.path = path
    return imp


def profiled(sock, out_dir, seconds="0.2"):
    """A profiled process told to use the daemon at sock, writing its own profile into
    out_dir when it cannot."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
    e.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_SOCKET": sock,
              "FLEETPROF_DIR": out_dir})
    return subprocess.run([WORKLOAD, "busy", seconds], env=e, capture_output=True, text=True,
                          timeout=120)


def check_runtime_refused(sock, tmp, why):
    """A profiled process pointed at sock sends nothing there, says why, and writes its own
    profile."""
    out = os.path.join(tmp, "out")
    r = profiled(sock, out)
    assert r.returncode == 0, r.stderr
    assert "not connecting to the daemon socket" in r.stderr and why in r.stderr, r.stderr
    files = glob.glob(os.path.join(out, "*.json"))
    assert len(files) == 1, f"expected the process's own profile in {out}: {files}"
    doc = pc.load_valid(files[0])
    rt = doc["profilingLog"][str(doc["meta"]["fleetprof"]["pid"])]["runtime"]
    assert why in rt.get("daemonUntrusted", ""), rt
    assert sum(len(t["samples"]["data"]) for _, t in pc.all_threads(doc)) > 0, "no samples"


def check_cli_refused(sock, tmp, why):
    """status, capture and top pointed at sock send nothing there and say why."""
    out = os.path.join(tmp, "capture.json")
    for argv in (["status"], ["status", "--json"], ["capture", "-o", out],
                 ["top", "--once"]):
        r = subprocess.run([CLI, *argv, "--socket", sock], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 1, f"{argv}: exit {r.returncode}: {r.stdout} {r.stderr}"
        assert "refusing the daemon socket" in r.stderr and why in r.stderr, f"{argv}: {r.stderr}"
    assert not os.path.exists(out)


def test_the_daemon_refuses_a_directory_another_user_made(tmp):
    need_root()
    imp = impostor_in_its_own_directory(tmp)
    imp.stop()
    os.unlink(imp.path)
    d = os.path.dirname(imp.path)
    r = subprocess.run([DAEMON, "--socket", imp.path], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1, f"exit {r.returncode}: {r.stderr}"
    assert f"the socket directory {d} belongs to uid {nobody()}" in r.stderr, r.stderr
    assert not os.path.exists(imp.path)


def test_the_default_socket_is_refused_in_a_directory_another_user_made(tmp):
    """The measured scenario itself: XDG_RUNTIME_DIR unset, /tmp/fleetprof-UID made first by
    another user. Run as a uid of its own so that no real user's default path is touched."""
    need_root()
    uid = 4242
    d = f"/tmp/fleetprof-{uid}"
    # That user may not reach the build tree (a checkout in a private directory): copies of
    # the two programs, which link nothing of ours dynamically, where it can.
    bin_dir = tempfile.mkdtemp(prefix="fpsec-bin-")
    atexit.register(shutil.rmtree, bin_dir, True)
    os.chmod(bin_dir, 0o755)
    daemon, cli = shutil.copy(DAEMON, bin_dir), shutil.copy(CLI, bin_dir)
    subprocess.run(["rm", "-rf", d], check=True)
    try:
        run_as(nobody(), ["mkdir", "-m", "0777", d])
        e = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
        r = subprocess.run([daemon], env=e, preexec_fn=as_user(uid), capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 1, f"exit {r.returncode}: {r.stderr}"
        assert f"the socket directory {d} belongs to uid {nobody()}" in r.stderr, r.stderr
        assert os.listdir(d) == [], os.listdir(d)
        r = subprocess.run([cli, "status"], env=e, preexec_fn=as_user(uid),
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1 and "refusing the daemon socket" in r.stderr, r.stderr
    finally:
        subprocess.run(["rm", "-rf", d], check=True)


def test_a_runtime_sends_nothing_to_an_impostor_in_its_directory(tmp):
    need_root()
    imp = impostor_in_its_own_directory(tmp)
    try:
        check_runtime_refused(imp.path, tmp, f"belongs to uid {nobody()}")
        check_cli_refused(imp.path, tmp, f"belongs to uid {nobody()}")
    finally:
        conns = imp.connections()
    assert conns == [], f"the impostor was connected to: {conns}"


def test_a_runtime_sends_nothing_to_another_users_listener_in_our_directory(tmp):
    need_root()
    imp = impostor_moved_into_ours(tmp)
    why = f"runs as uid {nobody()}"
    try:
        check_runtime_refused(imp.path, tmp, why)
        check_cli_refused(imp.path, tmp, why)
    finally:
        conns = imp.connections()
    # The runtime and five commands connected (only then are a listener's credentials known)
    # and sent nothing.
    assert conns == [0] * 5, f"bytes the impostor received per connection: {conns}"


def test_a_socket_directory_with_the_wrong_mode(tmp):
    loose = os.path.join(tmp, "loose")
    os.mkdir(loose)
    os.chmod(loose, 0o770)
    sock = os.path.join(loose, "fleetprof.sock")
    why = f"the socket directory {loose} is writable by its group (mode 0770)"
    r = subprocess.run([DAEMON, "--foreground", "--socket", sock], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1 and why in r.stderr, r.stderr
    assert not os.path.exists(sock)
    # A listener put there by someone in the group: never connected to.
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock)
    listener.listen(8)
    listener.setblocking(False)
    check_runtime_refused(sock, tmp, why)
    check_cli_refused(sock, tmp, why)
    try:
        listener.accept()
        raise AssertionError("something connected to the listener in the loose directory")
    except BlockingIOError:
        pass
    listener.close()


def test_a_real_daemon_is_still_trusted(tmp):
    """The checks let the ordinary case through: a daemon of ours in a private directory
    reached through a link, with the runtime and every command."""
    d = Daemon(tmp)
    try:
        link = os.path.join(tmp, "link")
        os.symlink(d.dir, link)
        sock = os.path.join(link, "fleetprof.sock")
        e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
        e.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1", "FLEETPROF_SOCKET": sock})
        p = subprocess.Popen([WORKLOAD, "busy", "30"], env=e, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: any(c["pid"] == p.pid for c in d.status().get("children", [])),
                       "the child in status")
            r = subprocess.run([CLI, "status", "--socket", sock], capture_output=True,
                               text=True, timeout=30)
            assert r.returncode == 0, r.stderr
            out = os.path.join(tmp, "now.json")
            r = subprocess.run([CLI, "capture", "--socket", sock, "-o", out],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            doc = pc.load_valid(out)
            assert p.pid in [q["meta"]["fleetprof"]["pid"] for q in pc.all_processes(doc)]
        finally:
            p.kill()
            p.wait()
        assert "not connecting" not in p.stderr.read()
    finally:
        d.stop()


def test_record_keeps_its_private_directory_out_of_a_loose_runtime_dir(tmp):
    """A XDG_RUNTIME_DIR others can write (not sticky) is passed over, and said so: record's
    private directory goes to /tmp instead, and the recording works."""
    loose = tempfile.mkdtemp(prefix="fpsec-xdg-")  # short: the socket path must fit
    atexit.register(shutil.rmtree, loose, True)
    os.chmod(loose, 0o777)
    out = os.path.join(tmp, "rec.json")
    r = subprocess.run([CLI, "record", "--no-summary", "-o", out, "--", WORKLOAD, "busy", "0.1"],
                       env={**os.environ, "XDG_RUNTIME_DIR": loose}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"not in {loose}: {loose}, above the socket directory, is writable" in r.stderr, \
        r.stderr
    assert os.listdir(loose) == [], os.listdir(loose)
    doc = pc.load_valid(out)
    assert len(list(pc.all_processes(doc))) >= 1


def test_links_planted_in_a_shared_fleetprof_dir_are_not_followed(tmp):
    """FLEETPROF_DIR in a sticky world-writable directory: another user plants links at the
    names a process will write (its exit profile, its temp file, its chunk file), pointing at
    a file of ours. The process's pid is known before it starts (sh execs it)."""
    need_root()
    shared = shared_dir(tmp)
    victim = os.path.join(tmp, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
    p = subprocess.Popen(["sh", "-c", 'read go; exec env LD_PRELOAD="$0" FLEETPROF_STARTUP=1 '
                          'FLEETPROF_DIR="$1" "$2" busy 0.2', LIB, shared, WORKLOAD],
                         env=e, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    names = [f"{p.pid}.json", f"{p.pid}.json.tmp.{p.pid}", f"fleetprof-{p.pid}.chunks"]
    for name in names:
        run_as(nobody(), ["ln", "-s", victim, os.path.join(shared, name)])
    p.stdin.write("go\n")
    p.stdin.close()
    assert p.wait(timeout=120) == 0, p.stderr.read()
    with open(victim) as f:
        assert f.read() == "precious\n", "the victim file was written through a planted link"
    st = os.lstat(os.path.join(shared, f"{p.pid}.json"))
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0, "the profile is not a file of ours"
    assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    pc.load_valid(os.path.join(shared, f"{p.pid}.json"))


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_every_file_we_write_is_private(tmp):
    """One mode for every file fleetprof writes (common/outfile.h): 0600 under a umask of
    022, as perf keeps perf.data; exit profiles and chunk files included."""
    old = os.umask(0o022)
    try:
        files = {}
        rec = os.path.join(tmp, "rec.json")
        r = subprocess.run([CLI, "record", "--no-summary", "-o", rec, "--pprof",
                            os.path.join(tmp, "rec.pb.gz"), "--", WORKLOAD, "busy", "0.1"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        files["record -o"] = rec
        files["record --pprof"] = os.path.join(tmp, "rec.pb.gz")

        e = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
        e.update({"LD_PRELOAD": LIB, "FLEETPROF_STARTUP": "1"})
        d = Daemon(tmp)
        try:
            r = subprocess.run([WORKLOAD, "busy", "0.1"], env={**e, "FLEETPROF_SOCKET": d.sock},
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            cap = os.path.join(tmp, "cap.json")
            r = subprocess.run([CLI, "capture", "--socket", d.sock, "-o", cap],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            files["capture -o"] = cap
        finally:
            d.stop()

        for fmt, name in (("collapsed", "rec.folded"), ("pprof", "rec2.pb.gz")):
            out = os.path.join(tmp, name)
            r = subprocess.run([CLI, "export", "--format", fmt, "-o", out, rec],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            files[f"export --format {fmt}"] = out
        merged = os.path.join(tmp, "merged.json")
        r = subprocess.run([CLI, "merge", "-o", merged, rec, cap], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        files["merge -o"] = merged

        # A process's own files: FLEETPROF_OUTPUT, FLEETPROF_DIR, and the chunk file of one
        # that was killed, then recovered.
        own = os.path.join(tmp, "own.json")
        r = subprocess.run([WORKLOAD, "busy", "0.1"], env={**e, "FLEETPROF_OUTPUT": own},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        files["FLEETPROF_OUTPUT"] = own
        pdir = os.path.join(tmp, "pdir")
        r = subprocess.run([WORKLOAD, "busy", "0.1"], env={**e, "FLEETPROF_DIR": pdir},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        (files["FLEETPROF_DIR"],) = glob.glob(os.path.join(pdir, "*.json"))
        kdir = os.path.join(tmp, "kdir")
        p = subprocess.Popen([WORKLOAD, "busy", "30"], env={**e, "FLEETPROF_DIR": kdir})
        chunks = os.path.join(kdir, f"fleetprof-{p.pid}.chunks")
        wait_until(lambda: os.path.exists(chunks) and taplib.cpu_seconds(p.pid) > 0.05,
                   "the chunk file and some CPU")
        p.kill()
        p.wait()
        files["fleetprof-PID.chunks"] = chunks
        rec_out = os.path.join(tmp, "recovered.json")
        r = subprocess.run([CLI, "recover", "-o", rec_out, chunks], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        files["recover -o"] = rec_out
    finally:
        os.umask(old)
    modes = {what: oct(mode_of(path)) for what, path in files.items()}
    print(f"# modes: {modes}")
    wrong = {what: m for what, m in modes.items() if m != oct(0o600)}
    assert not wrong, f"not 0600: {wrong}"
    # Nothing left beside them: every temporary file was renamed or removed.
    left = [n for n in os.listdir(tmp) if ".tmp." in n]
    assert not left, f"temporary files left: {left}"


if __name__ == "__main__":
    taplib.run([
        test_the_daemon_refuses_a_directory_another_user_made,
        test_the_default_socket_is_refused_in_a_directory_another_user_made,
        test_a_runtime_sends_nothing_to_an_impostor_in_its_directory,
        test_a_runtime_sends_nothing_to_another_users_listener_in_our_directory,
        test_a_socket_directory_with_the_wrong_mode,
        test_a_real_daemon_is_still_trusted,
        test_record_keeps_its_private_directory_out_of_a_loose_runtime_dir,
        test_links_planted_in_a_shared_fleetprof_dir_are_not_followed,
        test_every_file_we_write_is_private,
    ])
