/* common/hash.h - the one hash function of the tree: FNV-1a, 64-bit (and 32-bit where a
 * table keeps 32-bit hashes). Fast for the short keys we hash (names, paths, build ids),
 * and stable: buffer/region.c stores FNV-1a 64 of a description in a file format, so the
 * function must never change.
 *
 * Header-only, libc only.
 */
#ifndef FLEETPROF_COMMON_HASH_H
#define FLEETPROF_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FLEETPROF_FNV64_SEED 0xcbf29ce484222325ull

/* FNV-1a 64 of len bytes at data, continuing from h (FLEETPROF_FNV64_SEED to start): keys
 * of several parts are hashed one part after the other. */
static inline uint64_t fleetprof_fnv1a64(const void *data, size_t len, uint64_t h)
{
    const unsigned char *p = data;

    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* FNV-1a 64 of a NUL-terminated string. */
static inline uint64_t fleetprof_fnv1a64_str(const char *s)
{
    return fleetprof_fnv1a64(s, strlen(s), FLEETPROF_FNV64_SEED);
}

/* FNV-1a 32 of len bytes at data. */
static inline uint32_t fleetprof_fnv1a32(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

#endif /* FLEETPROF_COMMON_HASH_H */
