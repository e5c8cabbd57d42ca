/* buffer/buf-internal.h - definitions shared by the files of buffer/ only.
 *
 * The chunk struct, the chunk manager vtable, and the block walker that both the trusted
 * (chunked buffer) and untrusted (image) readers use. Chunk managers are driven by exactly
 * one chunked buffer, always under that buffer's mutex: they have no lock of their own.
 */
#ifndef FLEETPROF_BUFFER_BUF_INTERNAL_H
#define FLEETPROF_BUFFER_BUF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunk.h"
#include "buffer/update.h"

/* Chunk states; transitions are checked with assert() (debug builds). */
enum buf_chunk_state {
    BUF_CHUNK_CREATED,  /* fresh from buf_chunk_new() */
    BUF_CHUNK_IN_USE,   /* the current (or prepared next) chunk of a buffer */
    BUF_CHUNK_DONE,     /* full, done_ns stamped; owned by a manager's released list */
    BUF_CHUNK_RECYCLED, /* emptied, waiting to be handed out again */
};

enum buf_chunk_origin {
    BUF_CHUNK_ORIGIN_HEAP,   /* malloc()ed by buf_chunk_new() */
    BUF_CHUNK_ORIGIN_REGION, /* a slot of a shared region (region.h) */
};

struct buf_chunk {
    struct buf_chunk *next;         /* list link; owned by whoever holds the list */
    uint32_t state;                 /* enum buf_chunk_state */
    uint32_t origin;                /* enum buf_chunk_origin: who frees it */
    struct buf_chunk_header header; /* image starts here ... */
    uint8_t bytes[];                /* ... and continues with the buffer */
};

/* Created or Recycled -> InUse: empties it and gives it its place in the index space. */
void buf__chunk_set_in_use(struct buf_chunk *c, uint64_t range_start, uint64_t now_ns);
/* InUse -> Done. */
void buf__chunk_mark_done(struct buf_chunk *c, uint64_t done_ns);
/* Any state -> Recycled (its contents are forgotten). */
void buf__chunk_mark_recycled(struct buf_chunk *c);

/* region.c: a chunk in a free slot of r (growing it), and giving a slot back. */
struct buf_region;
int buf__region_chunk_new(struct buf_region *r, struct buf_chunk **ret_chunk);
void buf__region_chunk_free(struct buf_region *r, struct buf_chunk *c);
uint32_t buf__region_chunk_bytes(const struct buf_region *r);

/* One chunk seen by the block walker: a header and its bytes, possibly untrusted. */
struct buf__chunk_view {
    const struct buf_chunk_header *header;
    const uint8_t *bytes;
};

/* Walks the blocks that start in `c`, borrowing the start of `next` (may be NULL) for a
 * block that straddles. Validates every offset and size against the views first. Returns 0,
 * -EBADMSG when `c` contradicts itself (blocks already reported stay reported), or the
 * callback's non-zero value. *skipped_tails counts a straddling block without its tail. */
int buf__walk_blocks(const struct buf__chunk_view *c, const struct buf__chunk_view *next,
                     buf_read_cb cb, void *userdata, uint64_t *blocks, uint64_t *skipped_tails);

/* The vtable behind struct buf_chunk_manager. Every op runs under the owning buffer's lock. */
struct buf_chunk_manager_ops {
    /* A chunk of at least manager->chunk_bytes, in state InUse-ready (Created or Recycled),
     * now counted as unreleased. May destroy old released chunks to make room.
     * Returns 0, -ENOMEM, or -ENOSPC when the manager can hand out no more. */
    int (*get_chunk)(struct buf_chunk_manager *m, struct buf_chunk **ret_chunk);
    /* Takes a Done chunk into the released list. */
    void (*release_chunk)(struct buf_chunk_manager *m, struct buf_chunk *c);
    /* Takes back a chunk from get_chunk() that was never released (buffer cleared/freed). */
    void (*forget_chunk)(struct buf_chunk_manager *m, struct buf_chunk *c);
    /* Oldest released chunk; the rest follow through ->next, oldest first. */
    const struct buf_chunk *(*released_head)(const struct buf_chunk_manager *m);
    /* Destroys released chunks with done_ns <= done_ns (UINT64_MAX: all of them). */
    void (*destroy_released_at_or_before)(struct buf_chunk_manager *m, uint64_t done_ns);
    void (*set_update_cb)(struct buf_chunk_manager *m, buf_update_cb cb, void *userdata);
    void (*get_stats)(const struct buf_chunk_manager *m, struct buf_chunk_manager_stats *ret);
    /* Changes the limit (>= chunk_bytes); -ENOTSUP for managers without one. */
    int (*set_limit)(struct buf_chunk_manager *m, uint64_t limit_bytes);
    void (*free)(struct buf_chunk_manager *m);
};

struct buf_chunk_manager {
    const struct buf_chunk_manager_ops *ops;
    uint32_t chunk_bytes;      /* every chunk handed out has at least this much buffer */
    uint64_t destroyed_blocks; /* blocks that started in chunks destroyed so far */
    uint64_t destroyed_chunks; /* released chunks destroyed so far */
    bool in_use;               /* attached to a chunked buffer */
};

#endif /* FLEETPROF_BUFFER_BUF_INTERNAL_H */
