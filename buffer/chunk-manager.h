/* buffer/chunk-manager.h - who hands out chunks to a chunked buffer, and who keeps them.
 *
 * Two kinds, after Gecko's ProfileBufferChunkManager{Single,WithLocalLimit}:
 *  - single: owns one reusable chunk; a buffer on it holds at most that chunk's bytes
 *    (for capturing one stack or one marker payload, then clearing);
 *  - local-limit: the process's main manager. Keeps released chunks sorted by done time and,
 *    before handing out a chunk, destroys its oldest released chunks while
 *    `unreleased + released + chunk_bytes >= limit`. Keeps at most 2 destroyed chunks for
 *    recycling. Reports every change to an update callback (buffer/update.h).
 *
 * A manager is attached to exactly one chunked buffer and is driven only through it (and
 * under its lock); it must outlive the buffer. Free it after the buffer.
 */
#ifndef FLEETPROF_BUFFER_CHUNK_MANAGER_H
#define FLEETPROF_BUFFER_CHUNK_MANAGER_H

#include <stdint.h>

#define BUF_CHUNK_DEFAULT_BYTES  (256u * 1024u)
#define BUF_CHUNK_MIN_BYTES      (64u * 1024u) /* smallest chunk the runtime configures */
#define BUF_LOCAL_DEFAULT_LIMIT  (64ull * 1024u * 1024u)
#define BUF_MANAGER_MAX_RECYCLED 2u

struct buf_chunk_manager; /* opaque */

/* A manager owning one chunk of chunk_bytes (1..BUF_CHUNK_MAX_BYTES).
 * Returns 0, -EINVAL or -ENOMEM; *ret_manager untouched on failure. */
int buf_chunk_manager_single_new(uint32_t chunk_bytes, struct buf_chunk_manager **ret_manager);

/* A local-limit manager: chunks of chunk_bytes, total kept under limit_bytes (see above).
 * limit_bytes must be at least chunk_bytes. Returns 0, -EINVAL or -ENOMEM. */
int buf_chunk_manager_local_new(uint64_t limit_bytes, uint32_t chunk_bytes,
                                struct buf_chunk_manager **ret_manager);

/* Frees the manager and every chunk it holds. For a local-limit manager with an update
 * callback, sends a Final update first. Accepts NULL; returns NULL. Must not be attached to
 * a buffer any more. */
struct buf_chunk_manager *buf_chunk_manager_free(struct buf_chunk_manager *m);

/* Accounting of a local-limit manager (zeros for other kinds). Not thread-safe: call it
 * under the buffer's lock or when nothing writes (tests, shutdown). */
struct buf_chunk_manager_stats {
    uint64_t limit_bytes;
    uint64_t unreleased_bytes;
    uint64_t released_bytes;
    uint64_t released_chunks;
    uint64_t recycled_chunks;
    uint64_t destroyed_chunks;
};
void buf_chunk_manager_get_stats(const struct buf_chunk_manager *m,
                                 struct buf_chunk_manager_stats *ret_stats);

#endif /* FLEETPROF_BUFFER_CHUNK_MANAGER_H */
