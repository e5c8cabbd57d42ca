"""Processes a Python benchmark starts and watches (bench-gather.py, bench-symbols-service.py,
bench-process-cost.py): ending one by pid, and reading a live one's CPU off /proc."""
import os
import signal
import subprocess


def stop(p, sig=signal.SIGTERM):
    """Ends one process we started, by pid; SIGKILL if it lingers."""
    if p.poll() is None:
        try:
            p.send_signal(sig)
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def proc_cpu(pid):
    """utime + stime of a live process, in seconds (0 if it is gone); clock-tick grained."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0
