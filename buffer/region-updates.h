/* buffer/region-updates.h - chunk-manager updates through a region's header page.
 *
 * A message per update costs the daemon a read and a wake-up: most of its CPU with a large
 * fleet. So a child whose daemon agrees (Hello/Welcome updates_in_region) publishes its
 * updates in a ring in its chunk region's header page instead, which the daemon already
 * maps for evictions, and the daemon takes them all on a timer: no system call per update
 * on either side. Layout (docs/buffer-format.md): at BUF_REGION_UPDATES_OFFSET,
 *
 *   magic, capacity       the owner's, set before its first publication
 *   seq                   the owner's: odd while it writes, +2 per publication (seqlock)
 *   unreleased_bytes, released_bytes, oldest_done_ns   the owner's counts, as of seq
 *   written               the owner's: chunks ever appended to entries[]
 *   read, read_seq        the reader's: chunks taken (the owner may reuse their entries),
 *                         and the seq of the publication taken last
 *   entries[capacity]     released chunks, entry i % capacity for the i-th
 *
 * One writer per field. The owner appends only into entries the reader has taken, so the
 * entries need no lock; the counts are read under the seqlock. Everything the reader takes
 * comes from another process and is checked (indices within the ring); what the chunks say
 * is checked by whoever applies them (the daemon's controller), as for a message.
 */
#ifndef FLEETPROF_BUFFER_REGION_UPDATES_H
#define FLEETPROF_BUFFER_REGION_UPDATES_H

#include <stddef.h>
#include <stdint.h>

#include "buffer/update.h"

#define BUF_REGION_UPDATES_MAGIC    0x50555046u /* "FPUP" */
#define BUF_REGION_UPDATES_OFFSET   2304u       /* in the header page, past the crash record */
#define BUF_REGION_UPDATES_CAPACITY 96u

struct buf_region_updates {
    uint32_t magic;
    uint32_t capacity;
    uint64_t seq;
    uint64_t unreleased_bytes;
    uint64_t released_bytes;
    uint64_t oldest_done_ns;
    uint64_t written;
    uint64_t read;
    uint64_t read_seq;
    struct buf_released_chunk entries[BUF_REGION_UPDATES_CAPACITY];
};

_Static_assert(BUF_REGION_UPDATES_OFFSET + sizeof(struct buf_region_updates) <= 4096u,
               "the update ring lives in the region's header page");

/* The ring of the header page that starts at page. */
static inline struct buf_region_updates *buf_region_updates_of(void *page)
{
    return (struct buf_region_updates *)((uint8_t *)page + BUF_REGION_UPDATES_OFFSET);
}

/* ---- the owner (one thread at a time) ---------------------------------------------------- */

/* Publishes update u (a change: counts and newly released chunks, owned by the caller) into
 * ring: its counts, and as many of its chunks, oldest first, as the ring has room for; those
 * leave u. Returns the chunks left in u: 0 (all published; u is None), or more when the
 * reader has not taken enough yet (then u keeps its counts and the rest, to be published
 * first next time; a later change folds into it). Nothing is written when no chunk fits.
 * -EINVAL when u is not a change. */
int buf_region_updates_publish(struct buf_region_updates *ring, struct buf_update *u);

/* Publications the reader took so far (from its read_seq: the owner's seq counts 2 per
 * publication). */
uint64_t buf_region_updates_taken(const struct buf_region_updates *ring);

/* ---- the reader (the daemon) ---------------------------------------------------------- */

/* The reader's own state: never read back from the page, which the owner can scribble on. */
struct buf_region_updates_reader {
    uint64_t seq;  /* of the publication taken last; 0 = none */
    uint64_t read; /* chunks taken */
};

/* What one take found: the owner's counts as of its latest publication, and the chunks
 * released since the previous take, those destroyed meanwhile (done before oldest_done_ns)
 * left out, as a fold of the publications would. */
struct buf_region_updates_take {
    uint64_t unreleased_bytes;
    uint64_t released_bytes;
    uint64_t oldest_done_ns;
    struct buf_released_chunk chunks[BUF_REGION_UPDATES_CAPACITY];
    size_t count;
    uint64_t publications; /* publications folded into this take */
};

/* Starts reading ring, which may hold publications a previous reader left (a child that
 * reconnected): they are taken by the first take, the chunks past a previous reader's read
 * point included when the point is sane. */
void buf_region_updates_reader_init(struct buf_region_updates_reader *r,
                                    const struct buf_region_updates *ring);

/* Takes whatever the owner published since the last take. Returns 1 (*ret filled; the ring's
 * read point moves past the chunks, so the owner may reuse them), 0 (nothing new, or the
 * owner is writing right now: look again later), or -EBADMSG (the ring contradicts itself;
 * *ret_why says how). One load when nothing changed. */
int buf_region_updates_take(struct buf_region_updates *ring, struct buf_region_updates_reader *r,
                            struct buf_region_updates_take *ret, const char **ret_why);

#endif /* FLEETPROF_BUFFER_REGION_UPDATES_H */
