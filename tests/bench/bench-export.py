#!/usr/bin/env python3
"""Benchmark of `fleetprof export --format pprof`: MB of Gecko JSON turned into gzipped pprof
per CPU second of the (single-threaded) command, reading and parsing the JSON included, and
the size of the result against the JSON's.

The input is a big fleet file: the path given as the second argument, else
$FLEETPROF_BIG_FLEET (tests/bench/gen-big-fleet makes one of 100 MB and more); without
either, a demo fleet recorded here (much smaller: the table says how big). CPU time is the
child's user + system time (wait4), so a busy machine does not change the figure much.
Prints a table, `BENCH export.pprof_MBps` and `BENCH export.pprof_size_ratio`.

Usage: bench-export.py BUILD_DIR [FLEET.json]
"""
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import div, print_figures  # noqa: E402

BUILD = os.path.abspath(sys.argv[1])
FLEETPROF = os.path.join(BUILD, "tools", "fleetprof")
DEMO = os.path.join(BUILD, "tools", "demo", "demo-fleet")
RUNS = 3


def record_demo(tmp):
    """A demo fleet of 8 workers for 4 s at 0.25 ms: the input when no big file is given."""
    out = os.path.join(tmp, "demo.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETPROF_")}
    env["XDG_RUNTIME_DIR"] = tmp
    r = subprocess.run([FLEETPROF, "record", "--no-summary", "--interval", "0.25", "-o", out,
                        "--", DEMO, "--workers", "8", "--seconds", "4"],
                       env=env, cwd=tmp, capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or not os.path.exists(out):
        print(f"bench-export: recording the demo fleet failed ({r.returncode}): {r.stderr}",
              file=sys.stderr)
        return None
    return out


def export_cpu(src, out):
    """CPU seconds (user + system) of one export of src to out; None if it failed."""
    p = subprocess.Popen([FLEETPROF, "export", "--format", "pprof", "-o", out, src],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        print(f"FAILED export ({p.returncode}): {err.decode(errors='replace')}")
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
            src, origin = record_demo(tmp), "demo fleet recorded here"
            if not src:
                return 1
        json_bytes = os.path.getsize(src)
        out = os.path.join(tmp, "out.pb.gz")
        times = [t for t in (export_cpu(src, out) for _ in range(RUNS)) if t is not None]
        pprof_bytes = os.path.getsize(out) if times and os.path.exists(out) else None
        cpu = statistics.median(times) if times else None
        mb = json_bytes / 1e6
        print(f"{'export --format pprof':36} {'value':>12} {'unit':>8}")
        print(f"{'input (' + origin + ')':36} {mb:12.1f} {'MB':>8}")
        print(f"{'pprof.gz written':36} {(pprof_bytes or 0) / 1e6:12.2f} {'MB':>8}")
        print(f"{'CPU, median of ' + str(len(times)):36} {(cpu or 0) * 1e3:12.0f} {'ms':>8}")
        figures = {}
        figures["export.pprof_MBps"] = (div(mb, cpu), "MB/s", 1)
        figures["export.pprof_size_ratio"] = (div(pprof_bytes, json_bytes), "ratio", 4)
        return print_figures(figures)


sys.exit(main())
