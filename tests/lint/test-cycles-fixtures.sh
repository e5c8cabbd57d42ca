#!/usr/bin/env bash
# The circle checker must report the circle planted in fixtures/cycles-bad (a.c <-> b.c),
# exit non-zero, and leave out c.c, which only calls down.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(python3 "$here/check-runtime-cycles.py" "$here/fixtures/cycles-bad" 2>&1)
rc=$?
echo "$out"
[[ $rc -ne 0 ]] || { echo "checker exited 0 on a tree with a circle"; exit 1; }
grep -q "child/core/a.c calls rt_b() of child/core/b.c" <<<"$out" || { echo "a.c -> b.c not reported"; exit 1; }
grep -q "child/core/b.c calls rt_a() of child/core/a.c" <<<"$out" || { echo "b.c -> a.c not reported"; exit 1; }
! grep -q "c\.c" <<<"$out" || { echo "c.c reported, though it only calls down"; exit 1; }
