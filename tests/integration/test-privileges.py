#!/usr/bin/env python3
"""Privilege drops keep a process in the fleet (issue #28): a server's workers that fork as
root and drop to an unprivileged user at once (setuid, setresuid), or after some work, are in
the file to their end, exit profile included, with their functions and CPU; nothing is opened
to that user (the daemon still refuses a stranger: test-security.py). And a real nginx
(Debian's nginx-light, as root, `user nobody`, 2 workers) under load, where installed: master
and both workers in the file, each named by the title it held while it worked.

Dropping privileges needs root: run as another user, the tests are skipped and say so.

Usage: test-privileges.py BUILD_DIR   (meson passes it; output is TAP)
"""
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile_check as pc  # noqa: E402
import taplib  # noqa: E402
from daemon_helper import events, gathering_events, wait_until  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
WORKLOAD = os.path.join(BUILD, "tests", "workloads", "workload")
CLI = os.path.join(BUILD, "tools", "fleetprof")
NGINX = "/usr/sbin/nginx"
AB = "/usr/bin/ab"


def need_root():
    if os.geteuid() != 0:
        raise taplib.Skip("not root: a process cannot drop to another user")


def nobody():
    return pwd.getpwnam("nobody").pw_uid


def record_env(tmp):
    e = dict(os.environ)
    e["XDG_RUNTIME_DIR"] = os.path.join(tmp, "xdg")
    os.makedirs(e["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    for k in ("LD_PRELOAD", "FLEETPROF_SOCKET", "FLEETPROF_OUTPUT", "FLEETPROF_LIB",
              "FLEETPROF_DIR"):
        e.pop(k, None)
    return e


def pid_of(p):
    return int(p["meta"]["fleetprof"]["pid"])


def name_of(p):
    return p["meta"]["fleetprof"].get("name") if p.get("threads") else None


def check_workers(tmp, way, seconds=0.6):
    need_root()
    out = os.path.join(tmp, "out.json")
    r = subprocess.run([CLI, "record", "--no-summary", "-o", out, "--", WORKLOAD, "--cpu",
                        "setuid-workers", "2", str(seconds), str(nobody()), way],
                       env=record_env(tmp), cwd=tmp, capture_output=True, text=True, timeout=120)
    # The program's own result first: every drop worked, as without fleetprof.
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    assert "cannot write the exit profile" not in r.stderr, r.stderr
    doc = pc.load_valid(out)
    procs = doc.get("processes") or []
    if way == "after-execs":  # the ten /bin/true first, each in the file too
        execd = [p for p in procs if name_of(p) == "true"]
        assert len(execd) == 10, f"want the 10 exec'd children, got {len(execd)}"
        procs = [p for p in procs if name_of(p) != "true"]
    master = [p for p in procs if not p["meta"]["fleetprof"].get("forked")]
    workers = [p for p in procs if p["meta"]["fleetprof"].get("forked")]
    print(f"# {way}: {len(procs)} processes, stderr: {r.stderr.strip().splitlines()[-1:]}")
    assert len(master) == 1 and len(workers) == 2, \
        f"{way}: want the master and 2 workers, got {[(pid_of(p), name_of(p)) for p in procs]}"
    for w in workers:
        ms = pc.cpu_ms_in(w, "wl_worker_main")
        print(f"# worker {pid_of(w)}: {ms:.0f} ms of CPU in wl_worker_main")
        # Each worker burnt `seconds` of its own CPU in wl_worker_main (--cpu: on a busy
        # machine it does the same work, only later). Most of it must be in the file.
        assert ms >= seconds * 1000 / 2, \
            f"worker {pid_of(w)}: {ms:.0f} ms of CPU in wl_worker_main of {seconds * 1000:.0f}"


def test_workers_that_setuid_at_once_are_in_the_file(tmp):
    check_workers(tmp, "setuid")


def test_workers_that_setresuid_at_once_are_in_the_file(tmp):
    check_workers(tmp, "setresuid")


def test_workers_forked_after_children_that_exec_are_in_the_file(tmp):
    """After ten children in a row that exec at once, the next forked children are light
    (child/lifecycle/runtime.c): nothing of the runtime, not even its timer, is made in them
    until they need it. The workers forked then drop to nobody first thing: they must still
    connect before the drop, and be sampled from it on (a light child otherwise computes
    unsampled until it calls the runtime, at its exit for these)."""
    check_workers(tmp, "after-execs")


def test_workers_that_drop_after_working_are_in_the_file(tmp):
    check_workers(tmp, "late")


def test_a_child_forked_after_chroot_is_named(tmp):
    """A process that chroots (a server's jail, a build sandbox) and forks: the child's path
    to the daemon's socket names nothing inside the new root, and it was lost without a
    word. Nothing outside the root is kept open for it (a descriptor of a directory outside
    would let a jailed process out: OpenSSH's privilege-separated child chroots for that);
    the parent tells the daemon the child's pid, and the daemon names it with the reason.
    The program works as without fleetprof (the workload checks its child's working
    directory and exit)."""
    need_root()
    jail = os.path.join(tmp, "jail")
    os.makedirs(jail)
    out = os.path.join(tmp, "out.json")
    r = subprocess.run([CLI, "record", "--no-summary", "-o", out, "--", WORKLOAD, "chroot", jail,
                        "0.4"], env=record_env(tmp), cwd=tmp, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
    doc = pc.load_valid(out)
    procs = doc.get("processes") or []
    assert len(procs) == 1 and pc.cpu_ms_in(procs[0], "wl_recurse") > 0, \
        f"want the process with its work, got {[(pid_of(p), name_of(p)) for p in procs]}"
    named = [e for e in gathering_events(doc) if len(e) > 2 and "in a chroot" in e[1]]
    assert len(named) == 1 and named[0][2] != pid_of(procs[0]), events(doc)


def test_a_program_at_its_process_limit_gets_its_threads_and_workers(tmp):
    """`ulimit -u`: a program that drops to a user of its own, sets RLIMIT_NPROC, then makes
    threads and forks workers until the limit says no. The runtime's two threads took two of
    its slots, and each forked child's runtime took two more: `prefork 3` under `ulimit -u
    12` got 1 worker of 3. Now a fork, pthread_create or posix_spawn that fails with EAGAIN
    gets the runtime's threads (the connection's, then the sampler) and is made again, and
    children forked since start no runtime: the program makes as many threads and workers
    as without fleetprof, under limits of 6 and 12; its process is still in the file, and
    each worker is named in the log with that reason (the parent lists them in its region,
    the daemon reads them there)."""
    need_root()
    uid = 61234  # a user no other test or process of the machine runs as
    for limit in (6, 12):
        plain = subprocess.run([WORKLOAD, "nproc", str(uid), str(limit), "20"],
                               capture_output=True, text=True, timeout=120)
        assert plain.returncode == 0, plain
        out = os.path.join(tmp, f"out-{limit}.json")
        r = subprocess.run([CLI, "record", "--no-summary", "-o", out, "--", WORKLOAD, "nproc",
                            str(uid), str(limit), "20"], env=record_env(tmp), cwd=tmp,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"exit {r.returncode}: {r.stderr}"
        got = [line for line in r.stdout.splitlines() if line.startswith("threads=")]
        print(f"# ulimit -u {limit}: alone {plain.stdout.strip()}, with fleetprof {got}")
        assert got == [plain.stdout.strip()], \
            f"ulimit -u {limit}: alone {plain.stdout.strip()!r}, with fleetprof {got}"
        doc = pc.load_valid(out)
        procs = doc.get("processes") or []
        assert len(procs) == 1, f"want the program's process, got {len(procs)}"
        # Its exit profile (built by the daemon from its region, as it left the daemon), not
        # a recovery of a death, and it says what the runtime gave up.
        meta = procs[0]["meta"]["fleetprof"]
        assert meta.get("exit") and not meta.get("recovered"), meta
        (log,) = procs[0]["profilingLog"].values()
        assert "process limit" in log["runtime"].get("threadsGivenUp", ""), log["runtime"]
        # Its workers ran without the profiler, and the log names each of them.
        forks = int(got[0].split()[1].split("=")[1])
        named = {e[2] for e in gathering_events(doc)
                 if len(e) > 2 and "forked after its parent gave the profiler's threads" in e[1]}
        assert len(named) == forks, f"{forks} workers, {len(named)} named: {events(doc)}"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


NGINX_CONF = """user nobody {group};
worker_processes 2;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  gzip on;
  gzip_min_length 100;
  server {{ listen 127.0.0.1:{port}; root {d}/html; }}
}}
"""


def test_nginx_master_and_workers_are_in_the_file(tmp):
    need_root()
    if not (os.access(NGINX, os.X_OK) and os.access(AB, os.X_OK)):
        raise taplib.Skip("nginx-light and apache2-utils (ab) are not installed")
    d = os.path.join(tmp, "nginx")
    os.makedirs(os.path.join(d, "html"))
    os.chmod(tmp, 0o755)  # the workers (nobody) read the pages
    os.chmod(d, 0o755)
    os.chmod(os.path.join(d, "html"), 0o755)
    with open(os.path.join(d, "html", "index.html"), "w") as f:
        f.write("fleetprof " * 4000)
    os.chmod(os.path.join(d, "html", "index.html"), 0o644)
    port = free_port()
    group = "nogroup" if shutil.which("getent") is None or subprocess.run(
        ["getent", "group", "nogroup"], capture_output=True).returncode == 0 else "nobody"
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(NGINX_CONF.format(d=d, port=port, group=group))
    out = os.path.join(tmp, "nginx.json")
    rec = subprocess.Popen([CLI, "record", "--no-summary", "-o", out, "--", NGINX, "-p", d,
                            "-c", os.path.join(d, "nginx.conf")],
                           env=record_env(tmp), cwd=tmp, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        def serving():
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False
        wait_until(serving, "nginx listening", 30)
        ab = subprocess.run([AB, "-q", "-n", "4000", "-c", "4", "-H", "Accept-Encoding: gzip",
                             f"http://127.0.0.1:{port}/"], capture_output=True, text=True,
                            timeout=120)
        assert ab.returncode == 0 and "Failed requests:        0" in ab.stdout, ab.stdout + ab.stderr
        with open(os.path.join(d, "nginx.pid")) as f:
            master_pid = int(f.read())
        os.kill(master_pid, signal.SIGQUIT)  # graceful: the workers finish and exit
        _, err = rec.communicate(timeout=60)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()
    assert rec.returncode == 0, f"record exit {rec.returncode}: {err}"
    with open(os.path.join(d, "error.log")) as f:
        log = f.read()
    assert "fleetprof" not in log, f"nginx's error log holds our words:\n{log}"
    doc = pc.load_valid(out)
    procs = doc.get("processes") or []
    names = sorted(name_of(p) or "" for p in procs)
    print(f"# {len(procs)} processes: {names}")
    workers = [p for p in procs if p["meta"]["fleetprof"].get("forked")]
    assert len(procs) == 3 and len(workers) == 2, f"want master + 2 workers: {names}"
    for w in workers:
        assert name_of(w) == "nginx: worker process", f"worker {pid_of(w)} named {name_of(w)!r}"
    busy = [w for w in workers if sum(pc.cpu_sampling(t)[1] for t in w["threads"]) > 0]
    assert busy, "no worker has CPU in the file, though they served the load"


if __name__ == "__main__":
    taplib.run([
        test_workers_that_setuid_at_once_are_in_the_file,
        test_workers_forked_after_children_that_exec_are_in_the_file,
        test_workers_that_setresuid_at_once_are_in_the_file,
        test_workers_that_drop_after_working_are_in_the_file,
        test_a_child_forked_after_chroot_is_named,
        test_a_program_at_its_process_limit_gets_its_threads_and_workers,
        test_nginx_master_and_workers_are_in_the_file,
    ])
