#!/usr/bin/env bash
# The foundations checker must report every call planted in fixtures/foundations-bad, pass
# the same calls in common/, and exit non-zero.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(bash "$here/check-foundations.sh" "$here/fixtures/foundations-bad")
rc=$?
[[ $rc -ne 0 ]] || { echo "checker exited 0 on a tree with violations"; exit 1; }
missing=0
for want in "tools/bad.c:4:" "tools/bad.c:5:" "tools/bad.c:6:" "tools/hash.c:3:" "tools/grow.c:3:" \
    "tools/grow.c:4:" "tools/table.c:3:" "tools/table.c:4:"; do
    grep -q "^$want" <<<"$out" || { echo "violation $want not reported"; missing=1; }
done
if grep -q "common/" <<<"$out" || grep -q "tools/bad.c:3:" <<<"$out"; then
    echo "reported what is allowed (common/, or a comment)"; missing=1
fi
echo "$out"
exit $missing
