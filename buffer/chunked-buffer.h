/* buffer/chunked-buffer.h - the profile buffer: blocks in a chain of chunks.
 *
 * Writers reserve a block of a known size and fill it through a callback; readers walk
 * every surviving block, oldest first (the manager's released chunks, then the current
 * chunk). Each block has a global index (its first byte's position since the buffer was
 * created, starting at 1), which doubles as a point in time. A block may straddle two
 * chunks; a block of the manager's chunk size or more is refused and counted.
 *
 * Thread-safety: every function may be called from any thread; one mutex guards the buffer
 * and its manager. Callbacks run under that mutex and must not call back into the buffer.
 * Not async-signal-safe (the sampler writes, never a signal handler).
 */
#ifndef FLEETPROF_BUFFER_CHUNKED_BUFFER_H
#define FLEETPROF_BUFFER_CHUNKED_BUFFER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buffer/chunk.h"
#include "buffer/update.h"

struct buf_chunk_manager;
struct buf_chunked_buffer; /* opaque */

/* Fills a reserved block. The writer covers exactly the block's payload (one or two spans). */
struct buf_entry_writer {
    uint8_t *span[2];
    size_t len[2];
    size_t pos; /* bytes written so far */
};

/* Copies len bytes; returns 0 or -EMSGSIZE (nothing written) if they do not fit. */
int buf_entry_writer_write(struct buf_entry_writer *w, const void *src, size_t len);
int buf_entry_writer_write_uleb128(struct buf_entry_writer *w, uint64_t value);
size_t buf_entry_writer_remaining(const struct buf_entry_writer *w);

/* Must write exactly the reserved size (unwritten bytes are zeroed by the buffer) and
 * return 0; a negative return is passed back to the putter, the block stays (zeroed). */
typedef int (*buf_put_cb)(struct buf_entry_writer *writer, void *userdata);

/* Monotonic clock used to stamp chunks (CLOCK_MONOTONIC ns by default). */
typedef uint64_t (*buf_clock_fn)(void *userdata);

/* Creates a buffer on manager (borrowed: it must outlive the buffer, and serve no other
 * buffer). pid is stamped into every chunk header. Returns 0, -EINVAL (manager already in
 * use) or -ENOMEM. */
int buf_chunked_buffer_new(struct buf_chunk_manager *manager, int32_t pid,
                           struct buf_chunked_buffer **ret_buffer);

/* Gives the current and next chunks back to the manager (their data is lost; released
 * chunks stay with the manager). Accepts NULL; returns NULL. */
struct buf_chunked_buffer *buf_chunked_buffer_free(struct buf_chunked_buffer *b);

/* Replaces the clock (tests use a deterministic one). Done times are kept strictly
 * increasing whatever the clock says. */
void buf_chunked_buffer_set_clock(struct buf_chunked_buffer *b, buf_clock_fn clock, void *userdata);

/* Reserves a block of entry_bytes (> 0) and calls write_cb to fill it. On success returns 0
 * and stores the block's global index in *ret_index (may be NULL). Errors: -EINVAL
 * (entry_bytes 0), -EMSGSIZE (block would not fit in one chunk), -ENOSPC or -ENOMEM (no
 * chunk to write to); these count entry_bytes as failed. Otherwise write_cb's error. */
int buf_chunked_buffer_put(struct buf_chunked_buffer *b, size_t entry_bytes, buf_put_cb write_cb,
                           void *userdata, uint64_t *ret_index);

/* Same as put with a callback copying len bytes from data. */
int buf_chunked_buffer_put_bytes(struct buf_chunked_buffer *b, const void *data, size_t len,
                                 uint64_t *ret_index);

/* Walks every surviving block, oldest first, under the buffer's lock. The callback's
 * non-zero return stops the walk and is returned. -EBADMSG means a chunk contradicted itself
 * (memory corruption: a bug). */
int buf_chunked_buffer_read_each(struct buf_chunked_buffer *b, buf_read_cb cb, void *userdata);

/* Calls cb for every chunk holding data, oldest first (released chunks, then the current
 * one), under the buffer's lock; e.g. to copy chunk images out (buf_chunk_image). A
 * non-zero return stops the walk and is returned. */
int buf_chunked_buffer_each_chunk(struct buf_chunked_buffer *b,
                                  int (*cb)(const struct buf_chunk *chunk, void *userdata),
                                  void *userdata);

/* Takes a chunk from the manager now for the next switch, so that puts rarely allocate.
 * Returns 0 (also when one is already prepared), -ENOSPC or -ENOMEM. */
int buf_chunked_buffer_prepare_next(struct buf_chunked_buffer *b);

/* Destroys the released chunks done at or before done_ns; the range start advances. */
void buf_chunked_buffer_destroy_at_or_before(struct buf_chunked_buffer *b, uint64_t done_ns);

/* Forgets every block. Indexes keep growing: the next block's index is past every old one. */
void buf_chunked_buffer_clear(struct buf_chunked_buffer *b);

/* Installs the manager's update callback (buffer/update.h), under the buffer's lock. The
 * previous callback receives a Final update; the new one receives the current state. */
void buf_chunked_buffer_set_update_cb(struct buf_chunked_buffer *b, buf_update_cb cb,
                                      void *userdata);

/* Changes the manager's memory limit (local-limit managers only: else -ENOTSUP;
 * -EINVAL below one chunk). Older data goes as new chunks are needed. */
int buf_chunked_buffer_set_limit(struct buf_chunked_buffer *b, uint64_t limit_bytes);

struct buf_chunked_buffer_state {
    uint64_t range_start;    /* index of the oldest readable block (= range_end if none) */
    uint64_t range_end;      /* index the next block would get if it fits the chunk */
    uint64_t pushed_blocks;  /* blocks written since creation */
    uint64_t cleared_blocks; /* blocks destroyed or cleared since creation */
    uint64_t failed_puts;    /* puts refused */
    uint64_t failed_bytes;   /* their entry bytes */
};
void buf_chunked_buffer_get_state(struct buf_chunked_buffer *b,
                                  struct buf_chunked_buffer_state *ret_state);

#endif /* FLEETPROF_BUFFER_CHUNKED_BUFFER_H */
