/* tests/lib/block-walk.h - read callbacks for walks over buffer blocks (buf_read_cb), shared
 * by the unit tests and fuzz targets of the chunk-image and region readers.
 *
 * Header-only: fuzz targets build without the cmocka test library. A read that fails where
 * the walker promised a whole block is a bug: abort(), which fails a test and a fuzz run. */
#ifndef FLEETPROF_TESTS_LIB_BLOCK_WALK_H
#define FLEETPROF_TESTS_LIB_BLOCK_WALK_H

#include <stdint.h>
#include <stdlib.h>

#include "buffer/chunk.h"

/* Every span of every block must lie in [lo, hi): the walker never reads outside its input.
 * userdata: a struct block_bounds. */
struct block_bounds {
    const uint8_t *lo, *hi;
};

static inline int block_read_within(struct buf_entry_reader *r, uint64_t index, void *userdata)
{
    const struct block_bounds *b = userdata;
    uint8_t byte;

    (void)index;
    for (int i = 0; i < 2; i++)
        if (r->len[i] > 0 && (r->span[i] < b->lo || r->span[i] + r->len[i] > b->hi))
            abort();
    while (buf_entry_reader_remaining(r) > 0)
        if (buf_entry_reader_read(r, &byte, 1) != 0)
            abort();
    return 0;
}

/* A hash of every block (its index and bytes) and their count, to compare two walks.
 * userdata: a zeroed struct block_digest. */
struct block_digest {
    uint64_t hash;
    uint64_t blocks;
};

static inline int block_digest_cb(struct buf_entry_reader *r, uint64_t index, void *userdata)
{
    struct block_digest *d = userdata;
    uint8_t byte;

    d->hash = (d->hash ^ index) * 0x100000001b3u;
    while (buf_entry_reader_remaining(r) > 0) {
        if (buf_entry_reader_read(r, &byte, 1) != 0)
            abort();
        d->hash = (d->hash ^ byte) * 0x100000001b3u;
    }
    d->blocks++;
    return 0;
}

#endif /* FLEETPROF_TESTS_LIB_BLOCK_WALK_H */
