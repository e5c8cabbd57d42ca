#!/usr/bin/env bash
# Fails when a project source differs from .clang-format. Fix with:
#   clang-format -i $(git ls-files '*.c' '*.h')
set -uo pipefail
root=${1:?usage: check-format.sh ROOT}
cd "$root" || exit 2
command -v clang-format >/dev/null 2>&1 || { echo "clang-format not installed (tools/bootstrap.sh)"; exit 77; }
mapfile -t files < <(find buffer proto ipc child daemon tools common tests -type f \( -name '*.c' -o -name '*.h' \) \
    -not -path 'tests/lint/fixtures/*' | sort)
[[ ${#files[@]} -gt 0 ]] || { echo "no sources found under $root"; exit 1; }
clang-format --dry-run --Werror "${files[@]}"
