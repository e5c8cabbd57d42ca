/* common/grow.h - the one way an array grows: doubling, checked for overflow, untouched on
 * failure.
 *
 *     struct item *v = NULL;
 *     size_t n = 0, cap = 0;
 *     if (FLEETPROF_GROW(v, cap, n + 1) < 0)
 *             return -ENOMEM;
 *     v[n++] = item;
 *
 * Arrays that share a capacity: fleetprof_grown_capacity(), then FLEETPROF_RESIZE() each;
 * an exact size (shrinking to fit): FLEETPROF_RESIZE().
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

/* The capacity fleetprof_grow() gives an array of cap elements (of elem_size bytes) that must
 * hold need; arrays that share one capacity each take it with fleetprof_resize(). Returns cap
 * when need fits, 0 when the size would not fit in a size_t. */
static inline size_t fleetprof_grown_capacity(size_t cap, size_t need, size_t elem_size)
{
    size_t c = cap ? cap : FLEETPROF_GROW_FIRST;

    if (need <= cap)
        return cap;
    while (c < need) {
        if (c > SIZE_MAX / 2)
            return 0;
        c *= 2;
    }
    return elem_size && c > SIZE_MAX / elem_size ? 0 : c;
}

/* Grows *array (elements of elem_size bytes; *cap of them allocated) to hold at least need
 * elements, doubling. Returns 0, or -ENOMEM (the allocation failed, or the size would not fit
 * in a size_t): *array and *cap are then unchanged. */
static inline int fleetprof_grow(void **array, size_t *cap, size_t need, size_t elem_size)
{
    size_t c;
    void *grown;

    if (need <= *cap)
        return 0;
    c = fleetprof_grown_capacity(*cap, need, elem_size);
    if (!c)
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

/* Sizes *array to exactly n elements of elem_size bytes (to shrink it to what it holds, or
 * to give arrays that share a capacity the same size). n == 0 frees it. Returns 0, or
 * -ENOMEM (the allocation failed, or the size would not fit): *array is then unchanged. */
static inline int fleetprof_resize(void **array, size_t n, size_t elem_size)
{
    void *sized;

    if (!n) {
        free(*array);
        *array = NULL;
        return 0;
    }
    if (elem_size && n > SIZE_MAX / elem_size)
        return -ENOMEM;
    sized = realloc(*array, n * elem_size);
    if (!sized)
        return -ENOMEM;
    *array = sized;
    return 0;
}

/* fleetprof_resize() for an array variable. */
#define FLEETPROF_RESIZE(array, n) fleetprof_resize((void **)&(array), (n), sizeof(*(array)))

#endif /* FLEETPROF_COMMON_GROW_H */
