#!/usr/bin/env python3
"""Benchmark of the commands that read a big fleet file: `fleetprof summary`, `fleetprof
export --format pprof` and `--format collapsed`, in MB of Gecko JSON per CPU second of the
(single-threaded) command, reading and parsing the JSON included; and the size of the pprof
file against the JSON's.

The input is a fleet of at least 100 MB: the path given as the second argument, else
$FLEETPROF_BIG_FLEET, else one made here by tests/bench/gen-big-fleet (the real Gecko writer
and `fleetprof merge` on a synthetic prefork server: deep stacks, sleeping threads, C++
names). CPU time is the child's user + system time (wait4), the median of interleaved runs,
so a busy machine does not change the figure much.
Prints a table and `BENCH summary.MBps`, `export.pprof_MBps`, `export.collapsed_MBps`,
`export.pprof_size_ratio`.

Usage: bench-export.py BUILD_DIR [FLEET.json]
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import div, med, print_figures  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
FLEETPROF = os.path.join(BUILD, "tools", "fleetprof")
GENERATOR = os.path.join(BUILD, "tests", "bench", "gen-big-fleet")
MIN_MB = 100
RUNS = 3

COMMANDS = {
    "summary": ["summary"],
    "export pprof": ["export", "--format", "pprof", "-o", "{out}.pb.gz"],
    "export collapsed": ["export", "--format", "collapsed", "-o", "{out}.folded"],
}


def generate(tmp):
    """A >= MIN_MB fleet from gen-big-fleet, or None (and why on stderr)."""
    r = subprocess.run([GENERATOR, tmp, str(MIN_MB)], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, FLEETPROF_CLI=FLEETPROF))
    path = os.path.join(tmp, "fleet.json")
    if r.returncode != 0 or not os.path.exists(path):
        print(f"bench-export: gen-big-fleet failed ({r.returncode}): {r.stderr}", file=sys.stderr)
        return None
    return path


def run_cpu(args):
    """CPU seconds (user + system) of one fleetprof command; None if it failed."""
    p = subprocess.Popen([FLEETPROF, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"FAILED fleetprof {' '.join(args)} ({code}): {err.decode(errors='replace')}")
        return None
    return ru.ru_utime + ru.ru_stime


def main():
    given = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("FLEETPROF_BIG_FLEET")
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        if given:
            if not os.path.isfile(given):
                print(f"bench-export: no input file {given}", file=sys.stderr)
                return 1
            src, origin = given, "given"
        else:
            src, origin = generate(tmp), "gen-big-fleet"
            if not src:
                return 1
        json_bytes = os.path.getsize(src)
        mb = json_bytes / 1e6
        out = os.path.join(tmp, "out")
        times = {name: [] for name in COMMANDS}
        for _ in range(RUNS):  # interleaved: each round runs every command once
            for name, args in COMMANDS.items():
                t = run_cpu([a.format(out=out) for a in args] + [src])
                if t is not None:
                    times[name].append(t)
        pprof = out + ".pb.gz"
        pprof_bytes = os.path.getsize(pprof) if os.path.exists(pprof) else None
        print(f"{'reading a ' + origin + ' fleet':36} {'value':>12} {'unit':>8}")
        print(f"{'input':36} {mb:12.1f} {'MB':>8}")
        print(f"{'pprof.gz written':36} {(pprof_bytes or 0) / 1e6:12.2f} {'MB':>8}")
        for name in COMMANDS:
            cpu = med(times[name])
            print(f"{name + ' CPU, median of ' + str(len(times[name])):36} "
                  f"{cpu * 1e3:12.0f} {'ms':>8}")
        if mb < MIN_MB and not given:
            print(f"bench-export: the generated fleet is {mb:.1f} MB, not {MIN_MB}",
                  file=sys.stderr)
            return 1
        figures = {}
        figures["summary.MBps"] = (div(mb, med(times["summary"])), "MB/s", 1)
        figures["export.pprof_MBps"] = (div(mb, med(times["export pprof"])), "MB/s", 1)
        figures["export.collapsed_MBps"] = (div(mb, med(times["export collapsed"])), "MB/s", 1)
        figures["export.pprof_size_ratio"] = (div(pprof_bytes, json_bytes), "ratio", 4)
        return print_figures(figures)


sys.exit(main())
