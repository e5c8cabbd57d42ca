#!/usr/bin/env bash
# Enforces who may include whom (docs/architecture.md, "Layout and who may use whom").
# Usage: check-layering.sh ROOT   — prints each violation as file:line: reason; exits 1 if any.
set -uo pipefail
root=${1:?usage: check-layering.sh ROOT}
cd "$root" || exit 2

# libc, POSIX and Linux headers: the only <...> includes buffer/ may use.
libc_re='^(assert|complex|ctype|errno|fenv|float|inttypes|iso646|limits|locale|math|setjmp|signal|stdalign|stdarg|stdatomic|stdbool|stddef|stdint|stdio|stdlib|stdnoreturn|string|tgmath|threads|time|uchar|wchar|wctype|pthread|sched|unistd|fcntl|poll|dirent|dlfcn|fnmatch|ftw|limits|semaphore|spawn|strings|syslog|termios|alloca|byteswap|endian|features|malloc|link|elf|execinfo)\.h$|^(sys|linux|asm|bits|netinet|arpa)/'

# The runtime's layers, top to bottom (docs/architecture.md, "Inside child/"): a layer's
# files include the headers and call the functions of their own layer and those below.
runtime_layers=(entry lifecycle client core base)
layer_rank() {
    local i
    for i in "${!runtime_layers[@]}"; do
        [[ ${runtime_layers[$i]} == "$1" ]] && { echo "$i"; return; }
    done
    echo -1
}

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
    if [[ $module == child && $sub != */* ]]; then
        report "$file:1" "a file of the runtime lives in its layer's folder (child/LAYER/, docs/architecture.md)"
    fi
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
            child | daemon | tools | ipc) [[ $inc == */* ]] && report "$where" "profile/ must not depend on $incmod/" ;;
            esac
            # A region's description is a ProcessDescription: region-image.c reads it.
            if [[ $inc == proto/* || $inc == protobuf-c/* ]] && [[ $sub != region-image.* ]]; then
                report "$where" "profile/ reads proto/ messages only in region-image.c ($inc)"
            fi
            [[ $inc == uv.h || $inc == libunwind* ]] && report "$where" "profile/ must not use <$inc>"
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
            layer=${sub%%/*}
            [[ $sub == */* ]] || layer=""
            rank=$(layer_rank "$layer")
            if [[ $layer == "" ]]; then
                : # reported once above
            elif [[ $layer == ipc-module ]]; then
                # libfleetprof-ipc.so reaches the runtime only through struct rt_ipc_core.
                if [[ $inc == child/* && $inc != child/ipc-module/* && $inc != child/core/ipc-module.h &&
                    $inc != child/base/fds.h && $inc != child/base/clock.h && $inc != child/include/* ]]; then
                    report "$where" "libfleetprof-ipc.so must reach the runtime only through child/core/ipc-module.h ($inc)"
                fi
            elif [[ $layer == symbols-module ]]; then
                if [[ $inc == child/* && $inc != child/symbols-module/* && $inc != child/client/symbols-plugin.h ]]; then
                    report "$where" "libfleetprof-symbols.so must reach the runtime only through child/client/symbols-plugin.h ($inc)"
                fi
            elif [[ $rank -ge 0 ]]; then
                # libuv and protobuf-c only in libfleetprof-ipc.so, which the runtime dlopen()s
                # (docs/layers.md): never in libfleetprof.so itself.
                if [[ $inc == uv.h || $inc == protobuf-c/* || $inc == proto/* || $inc == ipc/* ]]; then
                    report "$where" "libfleetprof.so must not use $inc: only libfleetprof-ipc.so (child/ipc-module/) may"
                fi
                inclayer=""
                [[ $inc == child/*/* ]] && inclayer=${inc#child/} && inclayer=${inclayer%%/*}
                incrank=$(layer_rank "$inclayer")
                if [[ $inclayer == ipc-module || $inclayer == symbols-module ]]; then
                    report "$where" "the runtime reaches a module only through its table ($inc)"
                elif [[ $incrank -ge 0 && $incrank -lt $rank ]]; then
                    report "$where" "the runtime's $layer layer must not include $inc ($inclayer is above it)"
                fi
            else
                [[ $layer != include ]] && report "$where" "child/$layer/ is not a layer of the runtime (docs/architecture.md)"
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
# Below it the daemon stands on two floors (docs/architecture.md, "Inside daemon/"): the
# services call the foundations and the bottom, never each other; the foundations call the
# bottom (budget.c, which carries out the controller's actions, also region.c and
# departures.c), never a service; the bottom calls neither. The ways up are the hooks
# server.c sets in struct daemon.
daemon_services="daemon/gather.c daemon/recover.c daemon/census.c daemon/region-updates.c daemon/symbols-service.c"
daemon_foundations="daemon/budget.c daemon/departures.c daemon/region.c daemon/capture-placement.c daemon/capture-file.c daemon/workers.c"
daemon_bottom="daemon/core.c daemon/controller.c daemon/groups.c daemon/pace.c"
for svc in $daemon_services; do
    calls_up "$svc" "a hook server.c sets" $daemon_services $daemon_foundations $daemon_bottom
done
for f in $daemon_foundations; do
    calls_up "$f" "daemon/core.h" $daemon_bottom
done
calls_up daemon/budget.c "daemon/core.h" daemon/departures.c daemon/region.c daemon/capture-file.c daemon/workers.c

# Inside child/ (the runtime), each layer calls only its own and those below it: a lower file
# reaches an upper one only through the hooks it was given (struct rt_sampler_hooks,
# rt_ipc_start()'s profile writer). Interposed libc functions (FLEETPROF_EXPORT) are the C
# library's to the runtime, not a layer's.
for ((upper = 0; upper < ${#runtime_layers[@]}; upper++)); do
    for ((lower = upper + 1; lower < ${#runtime_layers[@]}; lower++)); do
        for above in child/"${runtime_layers[$upper]}"/*.c; do
            [[ -f $above ]] || continue
            calls_up "$above" "a hook it was given" child/"${runtime_layers[$lower]}"/*.c
        done
    done
done
# libfleetprof-ipc.so calls libfleetprof.so only through the table it is handed
# (struct rt_ipc_core); its link (-z defs) enforces it too.
for layer in "${runtime_layers[@]}"; do
    for f in child/"$layer"/*.c; do
        [[ -f $f ]] && calls_up "$f" "struct rt_ipc_core" child/ipc-module/*.c
    done
done

exit $fail
