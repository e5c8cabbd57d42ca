#!/usr/bin/env bash
# The layering checker must report every file planted in fixtures/bad, and exit non-zero.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(bash "$here/check-layering.sh" "$here/fixtures/bad")
rc=$?
[[ $rc -ne 0 ]] || { echo "checker exited 0 on a tree full of violations"; exit 1; }
missing=0
for f in buffer/bad.c daemon/bad.c daemon/gather.c child/core/sampler.c child/core/region.c child/core/threads.c \
    child/ipc-module/ipc.c child/entry/api.c child/stray.c child/base/log.c tools/bad.c ipc/frame.c \
    daemon/census.c daemon/region.c; do
    grep -q "^$f:" <<<"$out" || { echo "violation in $f not reported"; missing=1; }
done
echo "$out"
exit $missing
