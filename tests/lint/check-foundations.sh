#!/usr/bin/env bash
# The shared foundations have one owner each, in common/ (issue #29):
# - a file written for the user goes through common/outfile.h (one fsync, mode and cleanup
#   policy), so fsync(), rename() and a temporary name beside a destination appear nowhere
#   else;
# - hashing is common/hash.h's FNV-1a, so its primes appear nowhere else (tools/demo/ burns
#   CPU with an FNV loop of its own: a workload, not a hash).
# Prints each violation as FILE:LINE: TEXT and exits 1 if there is one.
#
# Allowed elsewhere, each for a reason that is not writing a user's file:
#   ipc/uv-listener.c   a listening socket bound under a temporary name, renamed into place
#   child/core/region.c      a chunk file moved aside at exec, and back if the exec fails
set -uo pipefail
root=${1:?usage: check-foundations.sh SOURCE_ROOT}
cd "$root" || exit 2
status=0
while IFS= read -r -d '' f; do
    case "$f" in
        ./common/*|./tests/*|./build*) continue ;;
        ./ipc/uv-listener.c|./child/core/region.c) allowed='fsync|fleetprof_tmpfile_beside' ;;
        *) allowed='fsync|rename|fleetprof_tmpfile_beside' ;;
    esac
    # Calls only: a word boundary, then "(" (comments that name the calls are fine).
    if out=$(grep -nE "(^|[^_[:alnum:]])($allowed)[[:space:]]*\(" "$f" | grep -vE '^[0-9]+:[[:space:]]*(/\*|\*)'); then
        while IFS= read -r line; do
            echo "${f#./}:$line"
        done <<<"$out"
        status=1
    fi
done < <(find . -path ./build -prune -o \( -name '*.c' -o -name '*.h' \) -print0)
hash_status=0
while IFS= read -r -d '' f; do
    case "$f" in
        ./common/*|./tests/*|./build*|./tools/demo/*) continue ;;
    esac
    if out=$(grep -niE '0x100000001b3|16777619|0xcbf29ce484222325|2166136261' "$f"); then
        while IFS= read -r line; do
            echo "${f#./}:$line"
        done <<<"$out"
        hash_status=1
    fi
done < <(find . -path ./build -prune -o \( -name '*.c' -o -name '*.h' \) -print0)
[[ $status -eq 0 ]] || echo "write files through common/outfile.h (fleetprof_outfile_*)" >&2
[[ $hash_status -eq 0 ]] || echo "hash with common/hash.h (fleetprof_fnv1a64, fleetprof_fnv1a32)" >&2
exit $((status | hash_status))
