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

/* A fast 64-bit hash of len bytes at data, for in-memory tables only (not stable across
 * versions, not for hostile keys): two independent lanes of 8-byte words, so that the
 * multiplies overlap (a profile's stack is some 100 bytes: one chain of multiplies was a
 * tenth of the Gecko writer's time). */
static inline uint64_t fleetprof_hash64(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t a = len * 0x9e3779b97f4a7c15ull, b = 0, w[2] = {0, 0};

    for (; len >= 16; p += 16, len -= 16) {
        memcpy(w, p, sizeof(w));
        a = (a ^ w[0]) * 0xff51afd7ed558ccdull;
        b = (b ^ w[1]) * 0xc4ceb9fe1a85ec53ull;
        a = a << 32 | a >> 32; /* high bits down: a multiply only carries them up */
        b = b << 32 | b >> 32;
    }
    w[0] = w[1] = 0;
    memcpy(w, p, len);
    a = (a ^ w[0]) * 0xff51afd7ed558ccdull;
    b = (b ^ w[1]) * 0xc4ceb9fe1a85ec53ull;
    a ^= b << 32 | b >> 32;
    return a ^ a >> 29;
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
