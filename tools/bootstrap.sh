#!/usr/bin/env bash
# Installs the Debian packages fleetprof needs to build and test, only those missing.
# Uses sudo when not root. Prints nothing and changes nothing when all are present.
# With --with-servers (CI), also the real servers and programs some tests use when they are
# installed (nginx-light and ab: the privilege-drop test; postgresql-15, its initdb and
# pgbench: the benchmark 'real'; chromium: rendering the SVG flame graph, headless); Debian starts nginx's and PostgreSQL's services (a cluster 15/main on
# port 5432) on install unless policy-rc.d forbids it, so a developer's ./run test does not
# ask for them.
set -euo pipefail

# binutils: the symbol tests strip and re-link debug files (objcopy, strip, readelf).
# libc6-dbg: source lines for libc frames, in profiles and in the symbol tests.
# tmux: a real terminal for the `fleetprof top` tests.
# g++: libstdc++ (its demangler, for C++ and Rust names) and the C++ test program.
# zlib1g-dev: gzip for `fleetprof export --format pprof`.
# protobuf-compiler: protoc, the pprof tests' independent decoder of what we export.
packages=(
    meson ninja-build pkg-config gcc g++ python3 binutils
    libuv1-dev libunwind-dev libprotobuf-c-dev protobuf-c-compiler libdw-dev libelf-dev
    libcmocka-dev clang libclang-rt-14-dev clang-format libc6-dbg tmux
    zlib1g-dev protobuf-compiler
)
if [[ ${1:-} == --with-servers ]]; then
    packages+=(nginx-light apache2-utils postgresql-15 chromium)
fi

missing=()
for p in "${packages[@]}"; do
    # dpkg-query prints "install ok installed" only for fully installed packages.
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: missing packages (${missing[*]}) and no apt-get: install them by hand" >&2
    exit 1
fi
sudo=()
if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || {
        echo "bootstrap: need root or sudo to install: ${missing[*]}" >&2
        exit 1
    }
    sudo=(sudo)
fi
echo "bootstrap: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
