#!/usr/bin/env bash
# The benchmark metric checker must report every problem planted in fixtures/bench-bad, name
# none of its good lines, and exit non-zero.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(python3 "$here/check-bench-metrics.py" "$here/fixtures/bench-bad")
rc=$?
echo "$out"
[[ $rc -ne 0 ]] || { echo "checker exited 0 on a tree full of duplicates"; exit 1; }
fail=0
expect() { # expect FILE:LINE TEXT
    grep -qF "$1: " <<<"$out" && grep -F "$1: " <<<"$out" | grep -qF "$2" ||
        { echo "not reported: $1: ...$2..."; fail=1; }
}
b=tests/bench
expect "$b/bench-one.c:14" "one.twice_us also printed at $b/bench-one.c:13"
expect "$b/bench-one.c:15" "prints nan"
expect "$b/bench-one.c:16" "is not spelled out"
expect "$b/bench-two.py:6" "both.shared_ms also printed at $b/bench-one.c:12"
expect "$b/bench-two.py:7" "one.walk_dwarf_ns is also produced by one.walk_{}_ns"
expect "$b/bench-two.py:8" "not a literal name"
for good in one.fine_ms two.per_mode two.printed_ms only_in_comments; do
    if grep -qF "$good" <<<"$out"; then
        echo "reported a good line: $good"
        fail=1
    fi
done
[[ $(wc -l <<<"$out") -eq 6 ]] || { echo "expected exactly 6 problems"; fail=1; }
exit $fail
