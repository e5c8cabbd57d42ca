/* common/map.h - the one hash map of the tree: from a key the caller hashes to a 64-bit
 * value (a pointer, an index, a count).
 *
 * Open addressing with linear probing, kept at most half full, so a probe is short and
 * touches one or two cache lines. Each slot keeps its key's full hash, so a lookup compares
 * keys only when the hashes are equal, and growing never calls back into the caller.
 *
 * Keys stay with the caller (in its array of entries, or in the object a value points at):
 * `same(ctx, key, value)` says whether the key looked for is the one behind a stored value.
 * For integer keys, hash with fleetprof_map_mix64(), which is one-to-one: equal hashes are
 * then equal keys, and `same` is NULL.
 *
 *     struct fleetprof_map by_id = {0};
 *     uint64_t value;
 *     int r = fleetprof_map_intern(&by_id, fleetprof_map_mix64(id), NULL, NULL, NULL,
 *                                  next_index, &value);
 *     if (r < 0)
 *             return r;             // -ENOMEM
 *     if (r == 1)
 *             entries[next_index++] = ...;   // added: value == next_index before the ++
 *
 * Any value but UINT64_MAX can be stored. Not thread-safe. Header-only, libc only.
 */
#ifndef FLEETPROF_COMMON_MAP_H
#define FLEETPROF_COMMON_MAP_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

struct fleetprof_map_slot {
    uint64_t hash;
    uint64_t stored; /* value + 1; 0: empty */
};

struct fleetprof_map {
    struct fleetprof_map_slot *slots; /* owned; cap of them */
    size_t cap;                       /* 0, or a power of two */
    size_t count;                     /* slots in use */
};

/* Whether key (what the caller looks for) is the key of the stored value. */
typedef bool fleetprof_map_same_fn(const void *ctx, const void *key, uint64_t value);

/* The capacity an empty map first gets (8 keys: many maps stay small, one per process). */
#define FLEETPROF_MAP_FIRST 16u

/* A one-to-one mix of an integer key into a well-spread hash (SplitMix64's finalizer): the
 * low bits, which pick the slot, depend on every bit of the key. */
static inline uint64_t fleetprof_map_mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Two 64-bit keys hashed as one (not one-to-one: give a `same`). */
static inline uint64_t fleetprof_map_mix128(uint64_t a, uint64_t b)
{
    return fleetprof_map_mix64(a ^ fleetprof_map_mix64(b + 0x9e3779b97f4a7c15ull));
}

/* The slot that holds key, or the empty slot where it would go. */
static inline size_t fleetprof_map__probe(const struct fleetprof_map *m, uint64_t hash,
                                          fleetprof_map_same_fn *same, const void *ctx,
                                          const void *key)
{
    size_t mask = m->cap - 1, i = (size_t)hash & mask;

    for (;; i = (i + 1) & mask) {
        const struct fleetprof_map_slot *s = &m->slots[i];

        if (!s->stored)
            return i;
        if (s->hash == hash && (!same || same(ctx, key, s->stored - 1)))
            return i;
    }
}

/* Makes room for `more` keys beyond those present. Returns 0 or -ENOMEM (the map is then
 * unchanged). */
static inline int fleetprof_map_reserve(struct fleetprof_map *m, size_t more)
{
    size_t cap = m->cap ? m->cap : FLEETPROF_MAP_FIRST;
    struct fleetprof_map_slot *slots;

    if (more > SIZE_MAX / 2 - m->count)
        return -ENOMEM;
    while (cap / 2 < m->count + more) {
        if (cap > SIZE_MAX / 2 / sizeof(*slots))
            return -ENOMEM;
        cap *= 2;
    }
    if (cap == m->cap)
        return 0;
    slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        size_t j;

        if (!m->slots[i].stored)
            continue;
        for (j = (size_t)m->slots[i].hash & (cap - 1); slots[j].stored; j = (j + 1) & (cap - 1))
            ;
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

/* Looks key up. Returns true and sets *value (if value is not NULL) when it is there. */
static inline bool fleetprof_map_find(const struct fleetprof_map *m, uint64_t hash,
                                      fleetprof_map_same_fn *same, const void *ctx, const void *key,
                                      uint64_t *value)
{
    size_t i;

    if (!m->count)
        return false;
    i = fleetprof_map__probe(m, hash, same, ctx, key);
    if (!m->slots[i].stored)
        return false;
    if (value)
        *value = m->slots[i].stored - 1;
    return true;
}

/* Finds key, or adds it with the value fresh. Sets *value (if not NULL) to the value found or
 * added. Returns 1 when added, 0 when found, -ENOMEM (nothing added). */
static inline int fleetprof_map_intern(struct fleetprof_map *m, uint64_t hash,
                                       fleetprof_map_same_fn *same, const void *ctx,
                                       const void *key, uint64_t fresh, uint64_t *value)
{
    size_t i;
    int r = fleetprof_map_reserve(m, 1);

    if (r < 0)
        return r;
    i = fleetprof_map__probe(m, hash, same, ctx, key);
    if (m->slots[i].stored) {
        if (value)
            *value = m->slots[i].stored - 1;
        return 0;
    }
    m->slots[i] = (struct fleetprof_map_slot){.hash = hash, .stored = fresh + 1};
    m->count++;
    if (value)
        *value = fresh;
    return 1;
}

/* Sets key's value, adding the key if it is not there. Returns 0 or -ENOMEM. */
static inline int fleetprof_map_set(struct fleetprof_map *m, uint64_t hash,
                                    fleetprof_map_same_fn *same, const void *ctx, const void *key,
                                    uint64_t value)
{
    size_t i;
    int r = fleetprof_map_reserve(m, 1);

    if (r < 0)
        return r;
    i = fleetprof_map__probe(m, hash, same, ctx, key);
    if (!m->slots[i].stored)
        m->count++;
    m->slots[i] = (struct fleetprof_map_slot){.hash = hash, .stored = value + 1};
    return 0;
}

/* Removes key. Returns true if it was there. The slots after it move back (no tombstones),
 * so lookups stay as short as in a map that never held it. */
static inline bool fleetprof_map_remove(struct fleetprof_map *m, uint64_t hash,
                                        fleetprof_map_same_fn *same, const void *ctx,
                                        const void *key)
{
    size_t mask = m->cap - 1, hole, i;

    if (!m->count)
        return false;
    hole = fleetprof_map__probe(m, hash, same, ctx, key);
    if (!m->slots[hole].stored)
        return false;
    for (i = (hole + 1) & mask; m->slots[i].stored; i = (i + 1) & mask) {
        size_t home = (size_t)m->slots[i].hash & mask;

        /* Slot i may fill the hole unless its home lies cyclically in (hole, i]. */
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            m->slots[hole] = m->slots[i];
            hole = i;
        }
    }
    m->slots[hole] = (struct fleetprof_map_slot){0};
    m->count--;
    return true;
}

/* Walks the stored values, in no order: start *cursor at 0; returns false at the end. The
 * map must not change during the walk. */
static inline bool fleetprof_map_next(const struct fleetprof_map *m, size_t *cursor,
                                      uint64_t *value)
{
    for (; *cursor < m->cap; (*cursor)++) {
        if (m->slots[*cursor].stored) {
            *value = m->slots[(*cursor)++].stored - 1;
            return true;
        }
    }
    return false;
}

/* Empties the map, keeping its slots. */
static inline void fleetprof_map_clear(struct fleetprof_map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        m->slots[i] = (struct fleetprof_map_slot){0};
    m->count = 0;
}

static inline void fleetprof_map_free(struct fleetprof_map *m)
{
    free(m->slots);
    *m = (struct fleetprof_map){0};
}

#endif /* FLEETPROF_COMMON_MAP_H */
