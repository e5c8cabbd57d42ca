/* child/core/fp-walk.c - walking saved frame pointers: the handler's fp mode, the fallback
 * of a dwarf sample inside the loader, a crash's stack, and a stack copy whose unwinding
 * failed. Async-signal-safe: reads memory only within the bounds it is given. */
#include <string.h>

#include "child/core/core.h"

uint32_t rt_fp_walk(uint64_t *frames, uint32_t max, uint64_t ip, uint64_t sp, uint64_t bp,
                    uintptr_t stack_lo, uintptr_t stack_hi, const uint8_t *copy, size_t copy_len)
{
    uint64_t lo = sp > stack_lo ? sp : stack_lo, hi = stack_hi;
    uint64_t fp = bp;
    uint32_t n = 0;

    if (max == 0)
        return 0;
    frames[n++] = ip;
    if (copy) /* walking a copy: only what was copied is readable */
        hi = sp + copy_len < hi ? sp + copy_len : hi;
    while (n < max && hi >= 16 && fp >= lo && fp <= hi - 16 && (fp & 7) == 0) {
        uint64_t next, ret;

        if (copy) {
            memcpy(&next, copy + (fp - sp), 8);
            memcpy(&ret, copy + (fp - sp) + 8, 8);
        } else {
            next = ((const uint64_t *)(uintptr_t)fp)[0];
            ret = ((const uint64_t *)(uintptr_t)fp)[1];
        }
        if (ret == 0)
            break;
        frames[n++] = ret;
        if (next <= fp)
            break;
        fp = next;
    }
    return n;
}
