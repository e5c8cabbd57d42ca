/* common/grow.h - the one way an array grows: doubling, checked for overflow, untouched on
 * failure.
 *
 *     struct item *v = NULL;
 *     size_t n = 0, cap = 0;
 *     if (FLEETPROF_GROW(v, cap, n + 1) < 0)
 *             return -ENOMEM;
 *     v[n++] = item;
 *
 * Header-only, libc only.
 */
#ifndef FLEETPROF_COMMON_GROW_H
#define FLEETPROF_COMMON_GROW_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* The capacity an empty array first gets (or need, if more). */
#define FLEETPROF_GROW_FIRST 16u

/* Grows *array (elements of elem_size bytes; *cap of them allocated) to hold at least need
 * elements, doubling. Returns 0, or -ENOMEM (the allocation failed, or the size would not fit
 * in a size_t): *array and *cap are then unchanged. */
static inline int fleetprof_grow(void **array, size_t *cap, size_t need, size_t elem_size)
{
    size_t c = *cap ? *cap : FLEETPROF_GROW_FIRST;
    void *grown;

    if (need <= *cap)
        return 0;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return -ENOMEM;
        c *= 2;
    }
    if (elem_size && c > SIZE_MAX / elem_size)
        return -ENOMEM;
    grown = realloc(*array, c * elem_size);
    if (!grown)
        return -ENOMEM;
    *array = grown;
    *cap = c;
    return 0;
}

/* fleetprof_grow() for an array variable and its size_t capacity variable. */
#define FLEETPROF_GROW(array, cap, need) \
    fleetprof_grow((void **)&(array), &(cap), (need), sizeof(*(array)))

#endif /* FLEETPROF_COMMON_GROW_H */
