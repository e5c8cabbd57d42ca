#!/usr/bin/env python3
"""A real server: PostgreSQL 15 under pgbench, recorded by `fleetprof record` and by `perf
record`, and where its CPU goes by user-level leaf function.

PostgreSQL's backends alternate between work and waits in epoll_wait (the client socket and
the latch), so the share of their CPU whose innermost user-level frame is epoll_wait tells
whether a profiler charges the CPU of the work to the wait that follows it: the kernel time
of the epoll_wait syscall itself is small. Three configurations of the same server (the same
data directory), REPS interleaved repetitions each (order rotated every repetition):
  plain        `postgres -D DATA -k SOCKDIR ...` not profiled (its tps is the reference);
  fleetprof    `fleetprof record --no-summary -o P.json -- postgres ...`;
  perf-record  `perf record -F 1000 -g -N -o X.data -- postgres ...`, read by `perf script`.
Each: the server starts (pg_isready), `pgbench -c 4 -j 2 -T 8 -S` (select-only: short
queries, so backends wait in epoll_wait between them) runs against it, then a fast shutdown
(SIGINT to the postmaster, as `pg_ctl stop -m fast`) ends the server and with it the record
or perf command, which writes its file. The tables were made once beforehand (`pgbench -i -s
2` against an unprofiled server); select-only leaves them unchanged.

The server runs with fsync=off, 16 MB of shared buffers, autovacuum off, a unix socket in a
temporary directory only (listen_addresses=''; the port, a free one, names the socket).
PostgreSQL refuses to run as root: as root, initdb, the server, the record command and pgbench
run as the system user fleetprof-bench (created with useradd when missing; nobody if that
fails), through setpriv. perf runs as that user too when perf_event_paranoid lets an
unprivileged perf sample the kernel (<= 1); at 2 (Debian's default) such a perf samples user
time only and would not see the CPU of the syscalls, so perf then runs as root with postgres
still dropped to the user (setpriv between perf and postgres), and the table says so. Run
as another user, everything runs as that user (perf only if it may sample the kernel).

Metrics, over the processes named postgres (the postmaster and its forked children: backends,
checkpointer, walwriter...; all their threads):
  fleetprof: CPU from threadCPUDelta, by the leaf frame of each sample (the runtime's frames
    are user-level; it has no kernel frames);
  perf: samples (at -F 1000 each ~1 ms of CPU; weighted by their period), by the first frame
    of the callchain that is not the kernel's ([kernel.kallsyms], [unknown kernel], or a
    kernel address).
epoll_wait leaves: epoll_wait, epoll_pwait, epoll_pwait2 (also as __GI_/__ names, and the
runtime's interposed epoll_wait). futex leaves: a name holding "futex" (glibc's
__futex_abstimed_wait_common: sem_wait, condition and mutex waits) or __lll_lock_wait/wake; a
futex syscall that glibc inlines into its caller (sem_post's wake) counts under that caller.
Shares are medians over the repetitions of each repetition's share; tps is pgbench's
(without the initial connection time).

The truth each share is compared with: epoll-cpu-probe.so, preloaded into the server in all
three configurations, reads each thread's CPU clock before and after every epoll_wait and
writes, at each process's exit, the CPU spent inside the calls and the process's CPU. A
profiler changes the truth it measures (perf's per-task events are switched out and in at
every context switch, inside the wait), so each profiler is compared with the probe of its
own run: error = its epoll_wait share over the probed processes - the probe's share, in
points. The probe costs each call two clock reads, in every configuration alike.

Prints a table per repetition, the medians, the top leaves of each profiler, then BENCH
real.postgres_epoll_wait_cpu_share(_perf_record), real.postgres_futex_cpu_share(_perf_record),
real.postgres_tps(_perf_record, _plain), real.postgres_epoll_wait_cpu_share_measured
(_perf_record, _plain), real.postgres_epoll_wait_share_error(_perf_record). Exit 77 (skipped)
without PostgreSQL 15 (/usr/lib/postgresql/15/bin: Debian's postgresql-15); a run that fails
leaves its configuration unmeasured (FAILED, NOT MEASURED, exit 1), as does perf missing or not allowed.
Every process started here is killed by pid on the way out.

Usage: bench-real.py BUILD_DIR [REPS]   (default 3; FLEETPROF_BENCH_REPS too)
"""
import collections
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)
import profile_check as pc  # noqa: E402
from figures import cell, div, med, print_figures  # noqa: E402

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
REPS = int(sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FLEETPROF_BENCH_REPS", "3"))
LIB = os.path.join(BUILD, "child", "libfleetprof.so")
PROBE = os.path.join(BUILD, "tests", "bench", "epoll-cpu-probe.so")
CLI = os.path.join(BUILD, "tools", "fleetprof")
PG_BIN = "/usr/lib/postgresql/15/bin"
POSTGRES, INITDB, PGBENCH, PG_ISREADY = (os.path.join(PG_BIN, p) for p in
                                         ("postgres", "initdb", "pgbench", "pg_isready"))
BENCH_USER = "fleetprof-bench"
SCALE, CLIENTS, JOBS, SECONDS = 2, 4, 2, 8
PGBENCH_ARGS = ["-c", str(CLIENTS), "-j", str(JOBS), "-T", str(SECONDS), "-S"]
SERVER_SETTINGS = ["listen_addresses=", "fsync=off", "synchronous_commit=off",
                   "full_page_writes=off", "shared_buffers=16MB", "max_connections=20",
                   "autovacuum=off", "max_wal_size=256MB", "log_checkpoints=off"]
START_TIMEOUT_S, STOP_TIMEOUT_S, TOOL_TIMEOUT_S = 60, 180, 300
CONFIGS = ["plain", "fleetprof", "perf-record"]

POSTGRES_NAME = re.compile(r"^postgres(:|$)")
EPOLL_LEAVES = {"epoll_wait", "__GI_epoll_wait", "__epoll_wait", "__libc_epoll_wait",
                "epoll_pwait", "__GI_epoll_pwait", "__epoll_pwait", "epoll_pwait2",
                "__GI_epoll_pwait2"}
KERNEL_DSOS = ("[kernel.kallsyms]", "[unknown kernel]", "[guest.kernel.kallsyms]")
KERNEL_ADDR = 0xffff800000000000

IS_ROOT = os.geteuid() == 0
started = []  # Popen objects of the servers' roots (postgres, record or perf)
postmasters = []  # pids read from postmaster.pid


def base_name(name):
    """A symbol without its offset (+0x..) and symbol version (@GLIBC_..)."""
    name = name.split("+0x", 1)[0]
    return name.split("@", 1)[0]


def is_epoll(name):
    return base_name(name) in EPOLL_LEAVES


def is_futex(name):
    name = base_name(name)
    return "futex" in name.lower() or name.startswith(("__lll_lock_wait", "__lll_lock_wake",
                                                       "__GI___lll_lock_w"))


def load():
    return os.getloadavg()[0]


# ---- the user, the processes ----------------------------------------------------------------

def bench_user():
    """(name, uid, gid) to run PostgreSQL as when we are root, else None (ourselves).
    Raises RuntimeError when no unprivileged user can be had."""
    if not IS_ROOT:
        return None
    try:
        pw = pwd.getpwnam(BENCH_USER)
    except KeyError:
        r = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                            "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                            BENCH_USER], capture_output=True, text=True, timeout=60) \
            if shutil.which("useradd") else None
        try:
            pw = pwd.getpwnam(BENCH_USER)
        except KeyError:
            why = r.stderr.strip() if r else "no useradd"
            print(f"note: cannot create user {BENCH_USER} ({why}): running as nobody")
            try:
                pw = pwd.getpwnam("nobody")
            except KeyError:
                raise RuntimeError(f"no user {BENCH_USER} and no nobody to run PostgreSQL as "
                                   "(it refuses root)") from None
    return pw.pw_name, pw.pw_uid, pw.pw_gid


def as_user(user, argv):
    """argv run as user (setpriv execs it: the pid stays the program's), or as is."""
    if user is None:
        return list(argv)
    if shutil.which("setpriv"):
        return ["setpriv", f"--reuid={user[0]}", f"--regid={user[2]}", "--init-groups", "--",
                *argv]
    return ["runuser", "-u", user[0], "--", *argv]


def children_of():
    """{ppid: [pid, ...]} of every process now."""
    out = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        out[ppid].append(int(entry))
    return out


def kill_tree(pid):
    """SIGKILL to pid and every descendant of it, each by pid (the parent first, so that a
    postmaster does not start what it lost again)."""
    kids = children_of()
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(kids.get(p, []))
    for p in seen:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def reap(p, timeout):
    """Waits for Popen p; (wait status, CPU s of its reaped tree) or None after it had to be
    killed at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return status, ru.ru_utime + ru.ru_stime
        if time.monotonic() > deadline:
            kill_tree(p.pid)
            _, status, _ = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            return None
        time.sleep(0.05)


def failure(status, log):
    """None for exit status 0, else why (with the end of the log file)."""
    if status is None:
        return "did not end in time: killed"
    tail = ""
    try:
        with open(log, errors="replace") as f:
            tail = f.read().strip()[-300:]
    except OSError:
        pass
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}: {tail}"
    if os.WEXITSTATUS(status):
        return f"exit status {os.WEXITSTATUS(status)}: {tail}"
    return None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- perf ------------------------------------------------------------------------------------

def perf_setup(user, tmp, env):
    """(prefix for perf's commands or None when perf cannot measure here, what the table says)."""
    perf = shutil.which("perf")
    if not perf:
        return None, "perf is not installed (Debian: linux-perf)"
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            paranoid = int(f.read())
    except (OSError, ValueError):
        paranoid = 2

    def works(prefix):
        data = os.path.join(tmp, "perf-check.data")
        try:
            r = subprocess.run(prefix + ["perf", "record", "-q", "-F", "1000", "-g", "-N", "-o",
                                         data, "--", "true"], capture_output=True, text=True,
                               timeout=60, env=env, cwd=tmp)
            return r.returncode == 0, r.stderr.strip()[-200:]
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, str(e)
        finally:
            if os.path.exists(data):
                os.unlink(data)

    who = user[0] if user else pwd.getpwuid(os.geteuid()).pw_name
    if paranoid <= 1:
        ok, err = works(as_user(user, []))
        if ok:
            return as_user(user, []), f"perf as {who}, like postgres"
        if not IS_ROOT:
            return None, f"perf record is not allowed here: {err}"
        why = f"perf as {who} failed: {err}"
    elif not IS_ROOT:
        return None, (f"perf_event_paranoid={paranoid}: an unprivileged perf samples user time "
                      "only, without the kernel time of the epoll_wait and futex syscalls")
    else:
        why = (f"perf_event_paranoid={paranoid}: a perf of {who} would sample user time only, "
               "not the CPU of the syscalls")
    ok, err = works([])
    if not ok:
        return None, f"perf record does not work here, even as root: {err}"
    return [], f"perf as root, postgres as {who} ({why})"


# ---- the server ------------------------------------------------------------------------------

class Server:
    def __init__(self, tmp, user, env):
        self.tmp, self.user, self.env = tmp, user, env
        self.data = os.path.join(tmp, "data")
        self.sock = os.path.join(tmp, "sock")
        self.port = free_port()

    def postgres_argv(self):
        argv = [POSTGRES, "-D", self.data, "-k", self.sock, "-p", str(self.port)]
        for s in SERVER_SETTINGS:
            argv += ["-c", s]
        return argv

    def start(self, argv, log, extra_env=None):
        """Starts argv (the server, maybe under a profiler) in a session of its own and waits
        until it accepts connections. Returns (Popen, postmaster pid); raises RuntimeError."""
        with open(log, "w") as out:
            p = subprocess.Popen(argv, env=dict(self.env, **(extra_env or {})), cwd=self.tmp,
                                 stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(p)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"the server ended at its start ({p.returncode}): "
                                   f"{open(log, errors='replace').read().strip()[-300:]}")
            r = subprocess.run(as_user(self.user, [PG_ISREADY, "-q", "-h", self.sock, "-p",
                                                   str(self.port), "-t", "1"]),
                               env=self.env, cwd=self.tmp, timeout=30)
            if r.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"not accepting connections after {START_TIMEOUT_S} s")
            time.sleep(0.1)
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            pm = int(f.readline())
        postmasters.append(pm)
        return p, pm

    def stop(self, p, pm):
        """Fast shutdown (SIGINT to the postmaster); waits for p (postgres, record or perf) to
        end. Returns (wait status or None if it had to be killed, CPU s of its tree)."""
        try:
            os.kill(pm, signal.SIGINT)
        except ProcessLookupError:
            pass
        got = reap(p, STOP_TIMEOUT_S)
        if alive(pm):
            kill_tree(pm)
        return got if got else (None, float("nan"))

    def pgbench(self, args, timeout, want_tps=True):
        """pgbench as the user; (tps or None, why it failed or None)."""
        argv = as_user(self.user, [PGBENCH, "-h", self.sock, "-p", str(self.port), "-U",
                                   "postgres", *args, "postgres"])
        try:
            r = subprocess.run(argv, env=self.env, cwd=self.tmp, capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"pgbench did not end in {timeout} s"
        if r.returncode != 0:
            return None, f"pgbench exit status {r.returncode}: {(r.stdout + r.stderr)[-300:]}"
        if not want_tps:
            return None, None
        m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", r.stdout)
        return (float(m.group(1)), None) if m else (None, "pgbench printed no tps")


# ---- reading the profiles --------------------------------------------------------------------

def new_shares():
    return {"cpu_ms": 0.0, "epoll_ms": 0.0, "futex_ms": 0.0, "leaves": collections.Counter(),
            "pids": set(), "other_ms": 0.0,
            "by_pid": collections.defaultdict(lambda: [0.0, 0.0])}  # pid: [cpu_ms, epoll_ms]


def add(res, pid, leaf, name, ms):
    res["cpu_ms"] += ms
    res["leaves"][leaf] += ms
    res["by_pid"][pid][0] += ms
    if is_epoll(name):
        res["epoll_ms"] += ms
        res["by_pid"][pid][1] += ms
    elif is_futex(name):
        res["futex_ms"] += ms


def probe_dir(tmp, config, rep, user):
    """A directory epoll-cpu-probe.so (as the server's user) writes its epoll.PID files to."""
    d = os.path.join(tmp, f"probe-{config}-{rep}")
    os.mkdir(d, 0o700)
    if user:
        os.chown(d, user[1], user[2])
    return d


def probe_results(d):
    """What epoll-cpu-probe.so measured in the postgres processes: {pid: (cpu_ms, epoll_ms)}.
    A process that never called epoll_wait, or ended without exit() (_exit, a kill), left no
    file."""
    got = {}
    for name in os.listdir(d):
        with open(os.path.join(d, name)) as f:
            fields = f.read().split()
        if len(fields) == 5 and fields[0] == "postgres":
            got[int(fields[1])] = (int(fields[4]) / 1e6, int(fields[2]) / 1e6)
    return got


def fleetprof_shares(path):
    """Where the CPU of a recorded profile's postgres processes went, by leaf frame."""
    doc = pc.load(path)
    problems = pc.check_profile(doc)
    if problems:
        raise ValueError(f"invalid profile: {problems[0]} ({len(problems)} problems)")
    res = new_shares()
    for _, t in pc.all_threads(doc):
        sms = t["samples"]["schema"]
        if "threadCPUDelta" not in sms:
            raise ValueError(f"thread {t.get('tid')} has no threadCPUDelta")
        if not POSTGRES_NAME.match(t.get("processName") or ""):
            res["other_ms"] += sum(r[sms["threadCPUDelta"]] or 0
                                   for r in t["samples"]["data"]) / 1e6
            continue
        res["pids"].add(t["pid"])
        names = pc.frame_names(t)
        fs, ss = t["frameTable"]["schema"], t["stackTable"]["schema"]
        locs = [t["stringTable"][row[fs["location"]]] for row in t["frameTable"]["data"]]
        stacks = t["stackTable"]["data"]
        for row in t["samples"]["data"]:
            ms = (row[sms["threadCPUDelta"]] or 0) / 1e6
            idx = row[sms["stack"]]
            if idx is None:
                add(res, t["pid"], "(no stack)", "", ms)
                continue
            frame = stacks[idx][ss["frame"]]
            add(res, t["pid"], locs[frame], names[frame], ms)
    return res


def perf_shares(prefix, data, env, cwd):
    """Where the CPU of postgres went in a perf.data, by user-level leaf: each sample weighs
    its period (ns of the cpu-clock/task-clock; 1 ms a sample for other events)."""
    r = subprocess.run(prefix + ["perf", "script", "-i", data, "-F",
                                 "comm,pid,tid,period,event,ip,sym,dso"],
                       capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, env=env, cwd=cwd)
    if r.returncode != 0:
        raise ValueError(f"perf script: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    res = new_shares()
    res["samples"] = 0
    for block in r.stdout.split("\n\n"):
        lines = [line for line in block.split("\n") if line.strip()]
        if not lines:
            continue
        head = lines[0].split()
        at = next((i for i, w in enumerate(head) if re.fullmatch(r"-?\d+/\d+", w)), None)
        if at is None:
            continue
        comm = " ".join(head[:at])
        rest = head[at + 1:]
        period = int(rest[0]) if rest and rest[0].isdigit() else 0
        event = rest[1].rstrip(":") if len(rest) > 1 else ""
        ms = period / 1e6 if event.split(":")[0] in ("cpu-clock", "task-clock") else 1.0
        if comm != "postgres":
            res["other_ms"] += ms
            continue
        pid = int(head[at].split("/")[0])
        res["pids"].add(pid)
        res["samples"] += 1
        leaf, name = "(no user frame)", ""
        for line in lines[1:]:
            parts = line.strip().split(None, 1)
            if len(parts) < 2:
                continue
            sym, _, dso = parts[1].rpartition(" (")
            dso = dso.rstrip(")")
            try:
                addr = int(parts[0], 16)
            except ValueError:
                addr = 0
            if dso in KERNEL_DSOS or addr >= KERNEL_ADDR:
                continue
            name = base_name(sym)
            leaf = f"{name} ({os.path.basename(dso)})"
            break
        add(res, pid, leaf, name, ms)
    return res


# ---- the runs --------------------------------------------------------------------------------

def run_once(server, config, rep, perf_prefix):
    """One configuration once: a dict of its figures, or {"error": why}."""
    tmp = server.tmp
    log = os.path.join(tmp, f"{config}-{rep}.log")
    out = os.path.join(tmp, f"{config}-{rep}.json")
    data = os.path.join(tmp, f"{config}-{rep}.data")
    argv = server.postgres_argv()
    if config == "plain":
        argv = as_user(server.user, argv)
    elif config == "fleetprof":
        argv = as_user(server.user, [CLI, "record", "--no-summary", "-o", out, "--", *argv])
    else:
        perf = ["perf", "record", "-q", "-F", "1000", "-g", "-N", "-o", data, "--"]
        argv = perf_prefix + perf + (argv if perf_prefix else as_user(server.user, argv))
    res = {}
    probe = probe_dir(tmp, config, rep, server.user)
    try:
        try:
            p, pm = server.start(argv, log, {"LD_PRELOAD": PROBE,
                                             "FLEETPROF_BENCH_EPOLL_DIR": probe})
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
            return {"error": f"start: {e}"}
        try:
            tps, why = server.pgbench(PGBENCH_ARGS, SECONDS + 120)
        finally:
            status, cpu = server.stop(p, pm)
        why = why or failure(status, log)
        if why:
            return {"error": why}
        res.update(tps=tps, tree_cpu=cpu)
        truth = probe_results(probe)
        if not truth:
            return {"error": "epoll-cpu-probe.so measured no postgres process"}
        res["probed"] = len(truth)
        res["measured_pct"] = 100 * (sum(e for _, e in truth.values()) /
                                     sum(c for c, _ in truth.values()))
        if config == "plain":
            return res
        try:
            if config == "fleetprof":
                if not os.path.exists(out):
                    return {"error": "no profile written"}
                sh = fleetprof_shares(out)
            else:
                if not os.path.exists(data):
                    return {"error": "no perf.data written"}
                sh = perf_shares(perf_prefix, data, server.env, tmp)
        except (ValueError, KeyError, IndexError, OSError, subprocess.TimeoutExpired) as e:
            return {"error": f"reading the profile: {type(e).__name__}: {e}"}
        if sh["cpu_ms"] <= 0:
            return {"error": f"no postgres CPU in the profile ({len(sh['pids'])} postgres "
                             f"processes, {sh['other_ms']:.0f} ms of other processes)"}
        res.update(sh)
        res["epoll_pct"] = 100 * sh["epoll_ms"] / sh["cpu_ms"]
        # The same share over the processes the probe measured, against what it measured.
        seen = [sh["by_pid"][pid] for pid in truth if pid in sh["by_pid"]]
        if len(seen) != len(truth) or sum(c for c, _ in seen) <= 0:
            return {"error": f"{len(truth) - len(seen)} of the {len(truth)} processes the probe "
                             "measured are not in the profile"}
        res["probed_pct"] = 100 * sum(e for _, e in seen) / sum(c for c, _ in seen)
        res["error_points"] = res["probed_pct"] - res["measured_pct"]
        res["futex_pct"] = 100 * sh["futex_ms"] / sh["cpu_ms"]
        return res
    finally:
        for f in (out, data):
            if os.path.exists(f):
                os.unlink(f)
        shutil.rmtree(probe, ignore_errors=True)


def init_data(server):
    """initdb, then `pgbench -i` against an unprofiled server. Raises RuntimeError."""
    r = subprocess.run(as_user(server.user, [INITDB, "-D", server.data, "-U", "postgres", "-A",
                                             "trust", "-E", "UTF8", "--locale=C", "--no-sync"]),
                       env=server.env, cwd=server.tmp, capture_output=True, text=True,
                       timeout=TOOL_TIMEOUT_S)
    if r.returncode != 0:
        raise RuntimeError(f"initdb exit status {r.returncode}: {(r.stdout + r.stderr)[-300:]}")
    log = os.path.join(server.tmp, "init.log")
    p, pm = server.start(as_user(server.user, server.postgres_argv()), log)
    try:
        _, why = server.pgbench(["-i", "-q", "-s", str(SCALE)], TOOL_TIMEOUT_S, want_tps=False)
    finally:
        status, _ = server.stop(p, pm)
    why = why or failure(status, log)
    if why:
        raise RuntimeError(f"pgbench -i: {why}")


def main():
    missing = [p for p in (POSTGRES, INITDB, PGBENCH, PG_ISREADY) if not os.access(p, os.X_OK)]
    if missing:
        print(f"bench-real: skipped: PostgreSQL 15 is not installed ({', '.join(missing)} "
              "missing; Debian: postgresql-15, or tools/bootstrap.sh --with-servers)")
        return 77
    for path in (LIB, CLI, PROBE):
        if not os.path.exists(path):
            print(f"bench-real: {path} not built", file=sys.stderr)
            return 1
    # meson's timeout sends SIGTERM: turn it into an exception so that finally blocks run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
    tmp = tempfile.mkdtemp(prefix="fleetprof-bench-real-", dir=base_dir)
    t_start, load_start = time.monotonic(), load()
    runs = {c: [] for c in CONFIGS}
    errors = []
    perf_prefix, perf_note = None, ""
    try:
        try:
            user = bench_user()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            print(f"FAILED: {e}")
            return 1
        os.chmod(tmp, 0o700)
        for d in ("sock", "run", "home"):
            os.mkdir(os.path.join(tmp, d), 0o700)
        if user:
            for d in ("", "sock", "run", "home"):
                os.chown(os.path.join(tmp, d), user[1], user[2])
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C", "LC_ALL": "C",
               "HOME": os.path.join(tmp, "home"), "XDG_RUNTIME_DIR": os.path.join(tmp, "run"),
               "TMPDIR": tmp}
        if user:
            env.update(USER=user[0], LOGNAME=user[0])
        server = Server(tmp, user, env)
        # The record command (as the user) must reach this build.
        check = subprocess.run(as_user(user, ["test", "-x", CLI, "-a", "-r", LIB, "-a", "-r",
                                              PROBE]), env=env,
                               cwd=tmp, timeout=30)
        if check.returncode != 0:
            print(f"FAILED: {user[0] if user else 'this user'} cannot run {CLI} or read {LIB} "
                  "(a build directory others cannot enter?)")
            return 1
        perf_prefix, perf_note = perf_setup(user, tmp, env)
        configs = CONFIGS if perf_prefix is not None else CONFIGS[:2]
        try:
            init_data(server)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
            errors.append(f"setup: {e}")
            configs = []
        for rep in range(REPS if configs else 0):
            order = configs[rep % len(configs):] + configs[:rep % len(configs)]
            for c in order:
                r = run_once(server, c, rep, perf_prefix)
                if "error" in r:
                    errors.append(f"{c} rep {rep}: {r['error']}")
                    runs[c].append(None)
                else:
                    runs[c].append(r)
    finally:
        for p in started:
            if p.poll() is None:
                kill_tree(p.pid)
                p.wait()
        for pm in postmasters:
            if alive(pm):
                kill_tree(pm)
        shutil.rmtree(tmp, ignore_errors=True)
    return report(runs, errors, perf_prefix is not None, perf_note, user, load_start,
                  time.monotonic() - t_start)


def report(runs, errors, perf_ok, perf_note, user, load_start, total_s):
    print(f"PostgreSQL 15 under `pgbench {' '.join(PGBENCH_ARGS)}` (scale {SCALE}, select-only), "
          f"{REPS} interleaved reps; {os.cpu_count()} CPUs, load average {load_start:.2f} at "
          f"the start (other users), {load():.2f} at the end; took {total_s:.0f} s")
    print(f"   postgres ran as {user[0] if user else pwd.getpwuid(os.geteuid()).pw_name}; "
          f"perf-record: {perf_note}")
    print(f"   {'config':<12} {'rep':>3} {'tps':>9} {'tree cpu s':>10} {'pg cpu s':>9} "
          f"{'pg procs':>8} {'epoll_wait %':>12} {'futex %':>8} {'probed':>6} "
          f"{'measured %':>10} {'profiled %':>10} {'error':>6}")
    for c in CONFIGS:
        for rep, r in enumerate(runs[c]):
            if r is None:
                print(f"   {c:<12} {rep:>3} {'FAILED':>9}")
                continue
            pg = r.get("cpu_ms", float("nan")) / 1e3
            procs = len(r["pids"]) if "pids" in r else None
            print(f"   {c:<12} {rep:>3} {r['tps']:9.0f} {cell(r['tree_cpu'], '10.2f')} "
                  f"{cell(pg, '9.2f')} {procs if procs is not None else '-':>8} "
                  f"{cell(r.get('epoll_pct'), '12.1f')} {cell(r.get('futex_pct'), '8.2f')} "
                  f"{r['probed']:>6} {cell(r['measured_pct'], '10.1f')} "
                  f"{cell(r.get('probed_pct'), '10.1f')} {cell(r.get('error_points'), '+6.1f')}")

    def median(c, key):
        """Median over the reps; nan when a rep failed or the configuration did not run."""
        if not runs[c] or any(r is None for r in runs[c]):
            return float("nan")
        return med([r[key] for r in runs[c]])

    print("   medians:")
    for c in CONFIGS:
        print(f"   {c:<12} {'':>3} {cell(median(c, 'tps'), '9.0f')} "
              f"{cell(median(c, 'tree_cpu'), '10.2f')} "
              f"{cell(div(median(c, 'cpu_ms'), 1e3) if c != 'plain' else None, '9.2f')} "
              f"{'':>8} {cell(median(c, 'epoll_pct') if c != 'plain' else None, '12.1f')} "
              f"{cell(median(c, 'futex_pct') if c != 'plain' else None, '8.2f')} {'':>6} "
              f"{cell(median(c, 'measured_pct'), '10.1f')} "
              f"{cell(median(c, 'probed_pct') if c != 'plain' else None, '10.1f')} "
              f"{cell(median(c, 'error_points') if c != 'plain' else None, '+6.1f')}")
    print("   tree cpu: the server's whole process tree (the profiler's own process included), "
          "from wait4; pg cpu: the CPU the profiler attributes to the postgres processes.")
    print("   measured: the CPU spent inside epoll_wait, by each process's own thread CPU clock "
          "around each call (epoll-cpu-probe.so, in every configuration), over the processes "
          "it saw (probed: those that called epoll_wait and ended by exit); profiled: the "
          "profiler's epoll_wait share over the same processes; error: profiled - measured, "
          "in points.")

    for c in ("fleetprof", "perf-record"):
        good = [r for r in runs[c] if r]
        if not good:
            continue
        total = sum(r["cpu_ms"] for r in good)
        leaves = collections.Counter()
        for r in good:
            leaves.update(r["leaves"])
        print(f"   {c}: user-level leaves, share of postgres CPU over {len(good)} reps "
              f"(E: counted as epoll_wait, F: as futex)")
        for leaf, ms in leaves.most_common(10):
            name = leaf.rsplit(" (", 1)[0]
            tag = "E" if is_epoll(name) else "F" if is_futex(name) else " "
            print(f"      {tag} {100 * ms / total:5.1f} %  {leaf}")
        others = sum(r["other_ms"] for r in good)
        if round(others):
            print(f"      (left out, not postgres: {others:.0f} ms)")

    for err in errors:
        print(f"   FAILED {err}")
    if not perf_ok:
        print(f"   FAILED perf-record: not run: {perf_note}")

    figures = {}
    figures["real.postgres_epoll_wait_cpu_share"] = (median("fleetprof", "epoll_pct"), "%", 1)
    figures["real.postgres_epoll_wait_cpu_share_perf_record"] = (
        median("perf-record", "epoll_pct"), "%", 1)
    figures["real.postgres_epoll_wait_cpu_share_measured"] = (
        median("fleetprof", "measured_pct"), "%", 1)
    figures["real.postgres_epoll_wait_cpu_share_measured_perf_record"] = (
        median("perf-record", "measured_pct"), "%", 1)
    figures["real.postgres_epoll_wait_cpu_share_measured_plain"] = (
        median("plain", "measured_pct"), "%", 1)
    figures["real.postgres_epoll_wait_share_error"] = (
        median("fleetprof", "error_points"), "points", 1)
    figures["real.postgres_epoll_wait_share_error_perf_record"] = (
        median("perf-record", "error_points"), "points", 1)
    figures["real.postgres_futex_cpu_share"] = (median("fleetprof", "futex_pct"), "%", 2)
    figures["real.postgres_futex_cpu_share_perf_record"] = (
        median("perf-record", "futex_pct"), "%", 2)
    figures["real.postgres_tps"] = (median("fleetprof", "tps"), "tps", 0)
    figures["real.postgres_tps_perf_record"] = (median("perf-record", "tps"), "tps", 0)
    figures["real.postgres_tps_plain"] = (median("plain", "tps"), "tps", 0)
    print()
    return print_figures(figures)


if __name__ == "__main__":
    sys.exit(main())
