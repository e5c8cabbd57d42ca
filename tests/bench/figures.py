"""BENCH lines and table cells for the Python benchmarks (bench-gather.py, bench-runtime.py,
bench-symbols-service.py): what was not measured says so, it is never printed as a number.

A figure is `figures["<metric>"] = (value, unit)` or `(value, unit, digits)` in a plain dict,
printed by print_figures() in insertion order. A value that is None, nan or infinite (its runs
failed, or a division had nothing to divide by) gets a `NOT MEASURED` line instead of a BENCH
line, and so does a negative time: a cost that is a difference of two timings is reported as
its two sides and the noise band (paired_noise()), never as a difference that may fall below
zero. Metric names are unique across all benchmarks (tests/lint/check-bench-metrics.py).
"""
import math
import re
import statistics

TIME_UNITS = ("ns", "us", "ms", "s")


def finite(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def div(a, b):
    """a / b, or nan when either is not a finite number or b is not positive."""
    return a / b if finite(a) and finite(b) and b > 0 else math.nan


def med(values):
    """Median of the finite values; nan when there are none."""
    values = [v for v in values if finite(v)]
    return statistics.median(values) if values else math.nan


def paired_noise(with_values, without_values):
    """Noise band of a difference measured as interleaved pairs (rep i of each side ran in the
    same round): half the interquartile range of the per-rep differences with - without, the
    amount a median difference must exceed to say anything. nan with fewer than 4 pairs."""
    d = [a - b for a, b in zip(with_values, without_values) if finite(a) and finite(b)]
    if len(d) < 4:
        return math.nan
    q1, _, q3 = statistics.quantiles(d, n=4)
    return (q3 - q1) / 2


def cell(v, spec):
    """format(v, spec), or "-" right-aligned to the spec's width when v is not a finite
    number: a table cell never reads nan."""
    if finite(v):
        return format(v, spec)
    m = re.match(r"[<>^]?(\d*)", spec)
    return "-".rjust(int(m.group(1) or 0))


def print_figures(figures):
    """Prints `BENCH <metric> <value> <unit>` per figure, or `NOT MEASURED <metric>: why`.
    Returns the exit status: 0 if every figure was measured, else 1."""
    status = 0
    for name, fig in figures.items():
        value, unit = fig[0], fig[1]
        digits = fig[2] if len(fig) > 2 else 3
        if not finite(value):
            print(f"NOT MEASURED {name}: no valid run (see FAILED lines above)")
            status = 1
        elif unit in TIME_UNITS and value < 0:
            print(f"NOT MEASURED {name}: negative time {value:.{digits}f} {unit} (a "
                  f"difference below the noise must be reported as its two sides)")
            status = 1
        else:
            print(f"BENCH {name} {value:.{digits}f} {unit}")
    return status
