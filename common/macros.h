/* common/macros.h - small macros every module may use (libc only).
 *
 * Kept header-only so buffer/ stays free of anything but libc and this file
 * never grows into a grab-bag of functions.
 */
#ifndef FLEETPROF_COMMON_MACROS_H
#define FLEETPROF_COMMON_MACROS_H

#include <stddef.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

// clang-format off
#define container_of(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))
// clang-format on

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* <sys/param.h> (pulled in by <uv.h>) defines the same. */
#ifndef MIN
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#endif
#ifndef MAX
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#endif

#endif /* FLEETPROF_COMMON_MACROS_H */
