#!/usr/bin/env bash
# The shared foundations have one owner each, in common/ (issue #29):
# - a file written for the user goes through common/outfile.h (one fsync, mode and cleanup
#   policy), so fsync(), rename() and a temporary name beside a destination appear nowhere
#   else;
# - an array grows through common/grow.h, so realloc() appears nowhere else, nor a doubling
#   of a capacity;
# - a table is common/map.h's, so the probing of a hand-written one (an index masked with a
#   capacity less one) appears nowhere else;
# - hashing is common/hash.h's (FNV-1a, fleetprof_hash64) and map.h's mixers, so their
#   constants appear nowhere else (tools/demo/ burns CPU with loops of its own: a workload).
# Prints each violation as FILE:LINE: TEXT and exits 1 if there is one.
#
# Allowed elsewhere, each for a reason that is not writing a user's file:
#   ipc/uv-listener.c      a listening socket bound under a temporary name, renamed into place
#   child/core/region.c    a chunk file moved aside at exec, and back if the exec fails
set -uo pipefail
root=${1:?usage: check-foundations.sh SOURCE_ROOT}
cd "$root" || exit 2
status=0

# report KIND PATTERN FILE: every line of FILE matching the extended regex PATTERN, outside
# comments.
report() {
    local kind=$1 pattern=$2 f=$3 out line
    if out=$(grep -nE "$pattern" "$f" | grep -vE '^[0-9]+:[[:space:]]*(/\*|\*[[:space:]/]|\*$)'); then
        while IFS= read -r line; do
            echo "${f#./}:$line"
        done <<<"$out"
        eval "bad_$kind=1"
    fi
}
bad_write=0 bad_grow=0 bad_table=0 bad_hash=0
while IFS= read -r -d '' f; do
    case "$f" in
        ./common/*|./tests/*|./build*) continue ;;
        ./ipc/uv-listener.c|./child/core/region.c) calls='fsync|fleetprof_tmpfile_beside' ;;
        *) calls='fsync|rename|fleetprof_tmpfile_beside' ;;
    esac
    # Calls only: a word boundary, then "(" (comments that name the calls are fine).
    report write "(^|[^_[:alnum:]])($calls)[[:space:]]*\(" "$f"
    report grow "(^|[^_[:alnum:]])realloc(array)?[[:space:]]*\(" "$f"
    report grow "(cap|capacity)[a-z_]*[[:space:]]*(\*=[[:space:]]*2|<<=[[:space:]]*1)|(cap|capacity)[a-z_]*[[:space:]]*\*[[:space:]]*2[^0-9]" "$f"
    report table "&[[:space:]]*\([^()]*(cap|slots|bucket|mask|size)[a-z_]*[[:space:]]*-[[:space:]]*1\)" "$f"
    case "$f" in
        ./tools/demo/*) ;;
        *) report hash "0x100000001b3|16777619|0xcbf29ce484222325|2166136261|2654435761|0x9e3779b97f4a7c15|0xbf58476d1ce4e5b9|0x94d049bb133111eb|0xff51afd7ed558ccd|0xc4ceb9fe1a85ec53" "$f" ;;
    esac
done < <(find . -path ./build -prune -o \( -name '*.c' -o -name '*.h' \) -print0)
[[ $bad_write -eq 0 ]] || { echo "write files through common/outfile.h (fleetprof_outfile_*)" >&2; status=1; }
[[ $bad_grow -eq 0 ]] || { echo "grow arrays with common/grow.h (FLEETPROF_GROW, fleetprof_grown_capacity, FLEETPROF_RESIZE)" >&2; status=1; }
[[ $bad_table -eq 0 ]] || { echo "make tables with common/map.h (struct fleetprof_map)" >&2; status=1; }
[[ $bad_hash -eq 0 ]] || { echo "hash with common/hash.h (fleetprof_fnv1a64, fleetprof_hash64) or map.h's fleetprof_map_mix64" >&2; status=1; }
exit $status
