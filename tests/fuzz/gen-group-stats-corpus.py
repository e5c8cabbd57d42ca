#!/usr/bin/env python3
"""Seeds for fuzz-group-stats (run by hand after a format change):
    tests/fuzz/gen-group-stats-corpus.py tests/fuzz/corpus/group-stats
Each seed is a script of records [op][length: 2 bytes][payload] (see fuzz-group-stats.c)."""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from wire import field, varint  # noqa: E402

JOIN, LEAVE, APPLY, REPORT = 0, 1, 2, 3


def rec(op, proc=0, payload=b""):
    return bytes([op | proc << 2]) + struct.pack(">H", len(payload)) + payload


def totals(name, value, buckets=22):
    durations = [0] * buckets
    durations[value % buckets] = value
    body = field(1, name)
    for k in range(2, 11):
        body += field(k, value)
    return field(4, body + field(11, b"".join(varint(v) for v in durations)))


def stats(cpu, *groups, final=False):
    body = field(1, 1) + field(2, cpu) + field(3, 16000000) + b"".join(groups)
    if final:
        body += field(5, 1)
    return field(19, body)  # Envelope.group_stats


seeds = {
    "sums": rec(JOIN, 0) + rec(JOIN, 1) +
    rec(APPLY, 0, stats(100, totals("alpha", 10), totals("beta", 3))) +
    rec(APPLY, 1, stats(200, totals("alpha", 7))) +
    rec(APPLY, 0, stats(300, totals("beta", 9), totals("alpha", 12))) +
    rec(REPORT, 0, b"alpha") + rec(LEAVE, 0) + rec(REPORT, 0, b"beta"),
    "hostile": rec(JOIN, 0) + rec(APPLY, 0, stats(100, totals("alpha", 10))) +
    rec(APPLY, 0, stats(100, totals("alpha", 9))) +
    rec(APPLY, 0, stats(50, totals("alpha", 11))) +
    rec(APPLY, 0, stats(100, totals("esc\x1b", 1))) +
    rec(APPLY, 0, stats(100, totals("short", 1, buckets=21))) +
    rec(APPLY, 0, stats(100, totals(b"bad\xff", 1))) +
    rec(APPLY, 0, stats(100, totals("dup", 1), totals("dup", 1))) +
    rec(REPORT, 0, b"alpha"),
    "final": rec(JOIN, 2) + rec(APPLY, 2, stats(10, totals("g", 1), final=True)) +
    rec(APPLY, 2, stats(20, totals("g", 2))) + rec(LEAVE, 2) + rec(JOIN, 2) +
    rec(APPLY, 2, stats(5, totals("g", 1))) + rec(REPORT, 0, b"g"),
    "many": rec(JOIN, 3) +
    rec(APPLY, 3, stats(1, *[totals(f"g{i}", i) for i in range(200)])) + rec(REPORT, 0, b"g7"),
}
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
