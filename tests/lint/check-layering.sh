#!/usr/bin/env bash
# Enforces who may include whom (docs/architecture.md, "Layout and who may use whom").
# Usage: check-layering.sh ROOT   — prints each violation as file:line: reason; exits 1 if any.
set -uo pipefail
root=${1:?usage: check-layering.sh ROOT}
cd "$root" || exit 2

# libc, POSIX and Linux headers: the only <...> includes buffer/ may use.
libc_re='^(assert|complex|ctype|errno|fenv|float|inttypes|iso646|limits|locale|math|setjmp|signal|stdalign|stdarg|stdatomic|stdbool|stddef|stdint|stdio|stdlib|stdnoreturn|string|tgmath|threads|time|uchar|wchar|wctype|pthread|sched|unistd|fcntl|poll|dirent|dlfcn|fnmatch|ftw|limits|semaphore|spawn|strings|syslog|termios|alloca|byteswap|endian|features|malloc|link|elf|execinfo)\.h$|^(sys|linux|asm|bits|netinet|arpa)/'

fail=0
report() {
    echo "$1: $2"
    fail=1
}

while IFS= read -r file; do
    module=${file%%/*}
    sub=${file#*/}
    unitmod=""
    case "$file" in
    tests/unit/*/*) unitmod=${sub#unit/}; unitmod=${unitmod%%/*} ;;
    esac
    lineno=0
    while IFS= read -r line; do
        lineno=$((lineno + 1))
        [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*([\<\"])([^\>\"]+)[\>\"] ]] || continue
        kind=${BASH_REMATCH[1]}
        inc=${BASH_REMATCH[2]}
        where="$file:$lineno"
        incmod=${inc%%/*}

        # Another module's internal header. A unit test may use its own module's; fuzz
        # targets exercise internals by design.
        if [[ $inc == *-internal.h ]]; then
            if [[ $inc == */* && $incmod != "$module" && $incmod != "$unitmod" && $file != tests/fuzz/* ]]; then
                report "$where" "includes another module's internal header $inc"
            fi
        fi

        case "$module" in
        buffer)
            if [[ $kind == "<" && ! $inc =~ $libc_re ]]; then
                report "$where" "buffer/ may include only libc headers, not <$inc>"
            elif [[ $kind == '"' && $inc == */* && $incmod != buffer && $incmod != common ]]; then
                report "$where" "buffer/ may include only buffer/ and common/, not \"$inc\""
            fi
            ;;
        json)
            if [[ $kind == "<" && ! $inc =~ $libc_re ]]; then
                report "$where" "json/ may include only libc headers, not <$inc>"
            elif [[ $kind == '"' && $inc == */* && $incmod != json && $incmod != common ]]; then
                report "$where" "json/ may include only json/ and common/, not \"$inc\""
            fi
            ;;
        profile)
            # Shared by the runtime, the daemon and the tools: none of them, no transport.
            case "$incmod" in
            child | daemon | tools | ipc | proto) [[ $inc == */* ]] && report "$where" "profile/ must not depend on $incmod/" ;;
            esac
            [[ $inc == uv.h || $inc == libunwind* || $inc == protobuf-c/* ]] && report "$where" "profile/ must not use <$inc>"
            ;;
        ipc)
            if [[ $inc == child/* || $inc == daemon/* || $inc == tools/* ]]; then
                report "$where" "ipc/ must not depend on $incmod/"
            fi
            # The codec is sans-I/O: only the uv transport (ipc/uv-*.c) touches libuv.
            if [[ $inc == uv.h && $(basename "$file") != uv-* ]]; then
                report "$where" "only ipc/uv-*.[ch] may include <uv.h>; the codec is sans-I/O"
            fi
            ;;
        proto)
            [[ $inc == */* && $incmod != proto && $inc != protobuf-c/* ]] &&
                report "$where" "proto/ may include only protobuf-c"
            ;;
        child)
            [[ $inc == daemon/* || $inc == tools/* ]] && report "$where" "child/ must not depend on $incmod/"
            # libuv and protobuf-c only in libfleetprof-ipc.so (ipc.c, ipc-pack.c), which the
            # runtime dlopen()s (docs/layers.md): never in libfleetprof.so itself.
            if [[ $sub != */* && $sub != ipc.c && $sub != ipc-pack.c ]] &&
                [[ $inc == uv.h || $inc == protobuf-c/* || $inc == proto/* || $inc == ipc/* ]]; then
                report "$where" "libfleetprof.so must not use $inc: only libfleetprof-ipc.so (ipc.c, ipc-pack.c) may"
            fi
            # The module reaches the runtime only through struct rt_ipc_core (ipc-module.h).
            if [[ ($sub == ipc.c || $sub == ipc-pack.c) && $inc == child/* && $inc != child/ipc-module.h &&
                $inc != child/fds.h ]]; then
                report "$where" "libfleetprof-ipc.so must reach the runtime only through child/ipc-module.h ($inc)"
            fi
            # The runtime's layers (docs/architecture.md, "Inside child/"): the core sees
            # neither the daemon client (client.h, ipc-start.h) nor the lifecycle (lifecycle.h), the
            # client not the lifecycle. groups.c holds public API entry points, which like
            # api.c finish a forked child's deferred start (rt_running(), lifecycle.h).
            if [[ $sub != */* && ($inc == child/client.h || $inc == child/ipc-start.h || $inc == child/lifecycle.h) ]]; then
                case "$sub" in
                preload.c | preload-fds.c | api.c | runtime.c | lifecycle.h) ;;
                groups.c) [[ $inc != child/lifecycle.h ]] && report "$where" "the runtime's core must not include $inc (above it)" ;;
                client.c | symbolize-remote.c | client.h)
                    [[ $inc == child/lifecycle.h ]] && report "$where" "the daemon client must not include $inc (above it)"
                    ;;
                *) report "$where" "the runtime's core must not include $inc (above it)" ;;
                esac
            fi
            ;;
        daemon)
            if [[ $inc == child/* && $inc != child/include/* ]] || [[ $inc == libunwind* ]]; then
                report "$where" "daemon/ must not use the child runtime ($inc)"
            fi
            [[ $inc == tools/* ]] && report "$where" "daemon/ must not depend on tools/"
            ;;
        tools)
            [[ $inc == child/* && $inc != child/include/* ]] && report "$where" "tools/ may use only public headers ($inc)"
            ;;
        esac
    done <"$file"
done < <(find buffer json profile proto ipc child daemon tools common tests -type f \( -name '*.c' -o -name '*.h' \) \
    -not -path 'tests/lint/fixtures/*' 2>/dev/null | sort)

# Functions a file defines (not static), the public ones of its layer; attribute macros may
# come first (RT_NO_TSAN). Interposed libc functions (FLEETPROF_EXPORT) are the program's.
defined_in() {
    grep -hE '^([A-Z][A-Z0-9_]* )*[a-z][a-z0-9_ ]*[ *][a-z_][a-z0-9_]*\(' "$@" 2>/dev/null |
        grep -vE '(^| )(static|FLEETPROF_EXPORT) ' |
        sed -E 's/^.*[ *]([a-z_][a-z0-9_]*)\(.*$/\1/' | sort -u
}

# calls_up ABOVE HEADER FILE...: each FILE that calls a function ABOVE defines is reported (it
# is below ABOVE, whose functions it must not call; HEADER is what it may use instead).
calls_up() {
    local above=$1 header=$2 f fn n
    shift 2
    [[ -f $above ]] || return 0
    for fn in $(defined_in "$above"); do
        for f in "$@"; do
            [[ -f $f && $f != "$above" ]] || continue
            while IFS=: read -r n _; do
                report "$f:$n" "calls $fn() of $above, which is above it ($header)"
            done < <(grep -nE "(^|[^a-z0-9_])$fn\(" "$f")
        done
    done
}

# Inside daemon/, nothing below server.c calls it (daemon/core.h): the files under it call
# down into core.c, and the functions server.c defines are the public API for main.c.
calls_up daemon/server.c daemon/core.h $(ls daemon/*.c 2>/dev/null | grep -v '^daemon/main\.c$')

# Inside child/ (the runtime), the interposed libc functions (preload.c, preload-fds.c) are
# the top: they call down into the runtime, and nothing of it calls them (child/fds.h).
child_files=$(ls child/*.c 2>/dev/null)
calls_up child/preload.c child/fds.h $child_files
calls_up child/preload-fds.c child/fds.h $child_files
# Below them, the lifecycle (runtime.c), then the daemon client (client.c, symbolize-remote.c),
# then the core: a lower file reaches an upper one only through the hooks it was given
# (struct rt_sampler_hooks, rt_ipc_start()'s profile writer).
child_module="child/ipc.c child/ipc-pack.c" # libfleetprof-ipc.so, dlopen()ed (docs/layers.md)
child_runtime=$(ls child/*.c 2>/dev/null | grep -vE '^child/(ipc|ipc-pack)\.c$')
child_core=$(ls child/*.c 2>/dev/null | grep -vE '^child/(preload|preload-fds|api|runtime|client|symbolize-remote|ipc|ipc-pack)\.c$')
calls_up child/runtime.c "a hook it was given" child/client.c child/symbolize-remote.c $child_core
calls_up child/client.c "a hook it was given" $child_core
calls_up child/symbolize-remote.c "a hook it was given" $child_core
# libfleetprof-ipc.so calls libfleetprof.so only through the table it is handed
# (struct rt_ipc_core); its link (-z defs) enforces it too.
for f in $child_runtime; do
    calls_up "$f" "struct rt_ipc_core" $child_module
done

exit $fail
