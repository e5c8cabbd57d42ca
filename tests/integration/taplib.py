"""A tiny TAP runner for the Python integration tests: each test is a function; an
AssertionError or any exception fails it with its message; meson counts the subtests."""
import os
import sys
import tempfile
import traceback


class Skip(Exception):
    """Raised by a test that cannot run here (say why): reported as TAP's SKIP, not a pass."""


def run(tests):
    only = os.environ.get("FLEETPROF_TEST_ONLY")  # a developer's filter: names containing it
    if only:
        tests = [t for t in tests if only in t.__name__]
    print(f"1..{len(tests)}", flush=True)
    failed = 0
    for n, test in enumerate(tests, 1):
        name = test.__name__
        tmp = tempfile.mkdtemp(prefix=f"fleetprof-{name}-")
        try:
            test(tmp)
            print(f"ok {n} - {name}", flush=True)
        except Skip as e:
            print(f"ok {n} - {name} # SKIP {e}", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, then the next test runs
            failed += 1
            print(f"not ok {n} - {name}", flush=True)
            lines = (str(e) or type(e).__name__).splitlines() or [""]
            if isinstance(e, AssertionError):
                where = traceback.extract_tb(e.__traceback__)[-1]
                lines.append(f"at {os.path.basename(where.filename)}:{where.lineno}: {where.line}")
            else:
                lines += traceback.format_exc().splitlines()
            for line in lines:
                print(f"# {line}")
            # meson shows only stderr of a failed TAP test: the reason goes there too, so
            # that a CI log says why.
            print(f"{name}: " + "\n".join(lines), file=sys.stderr, flush=True)
        finally:
            if not os.environ.get("FLEETPROF_KEEP_TMP"):
                os.system(f"rm -rf '{tmp}'")
    sys.exit(1 if failed else 0)


def cpu_seconds(pid):
    """User + system CPU seconds pid has used so far (0 once it is gone): what a test waits
    on instead of a wall-clock sleep."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
