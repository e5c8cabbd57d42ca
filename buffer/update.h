/* buffer/update.h - controlled chunk-manager updates, their fold, and the slot they wait in.
 *
 * The local-limit manager reports every change of its memory as an Update (bytes in use,
 * bytes released, oldest released done time, chunks newly released) or a Final (manager
 * gone). The child folds updates into a mutex-guarded slot; its IPC thread takes the folded
 * update and sends it to the daemon, whose global controller folds them per process.
 *
 * Fold rules (fold(older, newer)), from Gecko's ProfileBufferControlledChunkManager:
 *   - older is None, or newer is Final: the result is newer;
 *   - newer is None: the result is older (Final stays Final);
 *   - otherwise byte counts come from newer; if newer has an oldest done time it replaces
 *     older's, and older's newly-released entries done before it are pruned; newer's
 *     newly-released entries are appended.
 * Fold is associative for sequences whose oldest done time never decreases, which the
 * local-limit manager guarantees (it destroys from the oldest end only).
 */
#ifndef FLEETPROF_BUFFER_UPDATE_H
#define FLEETPROF_BUFFER_UPDATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum buf_update_kind {
    BUF_UPDATE_NONE,   /* nothing to report */
    BUF_UPDATE_CHANGE, /* counts + newly released chunks */
    BUF_UPDATE_FINAL,  /* the manager is gone: forget everything about it */
};

struct buf_released_chunk {
    uint64_t done_ns; /* identity of the chunk in its process */
    uint64_t bytes;   /* its buffer bytes */
};

struct buf_update {
    enum buf_update_kind kind;
    uint64_t unreleased_bytes; /* chunks handed out and not released (current + next) */
    uint64_t released_bytes;   /* chunks released and not yet destroyed */
    uint64_t oldest_done_ns;   /* oldest released chunk still alive; if none is, one past
                                  the newest destroyed (all before it are gone); 0 = none
                                  was ever destroyed nor is released */
    struct buf_released_chunk *newly_released; /* see `owned` */
    size_t newly_released_count;
    size_t newly_released_cap; /* > 0 only when this update owns the array (malloc'd) */
};

/* Empties u (None) without freeing; for a fresh, caller-embedded update. */
void buf_update_init(struct buf_update *u);
/* Frees an owned array and resets u to None. */
void buf_update_done(struct buf_update *u);

/* Folds newer (borrowed, unchanged) into older (which owns its array afterwards).
 * Returns 0, or -ENOMEM when the newly-released list could not grow: older then has newer's
 * counts but lacks newer's entries (the caller should count the loss). */
int buf_update_fold(struct buf_update *older, const struct buf_update *newer);

/* Called by a manager on every change, under the buffer's lock: must not block or do I/O. */
typedef void (*buf_update_cb)(const struct buf_update *update, void *userdata);

/* A mutex-guarded pending update: the manager's callback folds into it from the writing
 * thread, the IPC thread takes it. */
struct buf_update_slot {
    pthread_mutex_t lock;
    struct buf_update pending; /* owned, guarded by lock */
    uint64_t lost_entries;     /* newly-released entries dropped on -ENOMEM */
};

int buf_update_slot_init(struct buf_update_slot *s);
void buf_update_slot_done(struct buf_update_slot *s);
/* Folds update into the slot (thread-safe). Suitable as a buf_update_cb with the slot as
 * userdata: see buf_update_slot_cb. */
void buf_update_slot_fold(struct buf_update_slot *s, const struct buf_update *update);
void buf_update_slot_cb(const struct buf_update *update, void *slot);
/* The pending update's kind, how many chunks it lists as newly released and its unreleased
 * bytes, without taking it (thread-safe): to decide whether it is worth sending yet. */
enum buf_update_kind buf_update_slot_peek(struct buf_update_slot *s, size_t *ret_newly_released,
                                          uint64_t *ret_unreleased_bytes);
/* Moves the pending update into *ret_update (the caller owns it, and must call
 * buf_update_done) and leaves None behind. Returns 1 if there was something, 0 if None. */
int buf_update_slot_take(struct buf_update_slot *s, struct buf_update *ret_update);

/* The pace of a child's updates under a standing poll, sans I/O: the runtime's IPC module
 * and the daemon benchmark's simulated children both follow it.
 *  - Hold: an update waits for more until it lists BUF_UPDATE_HOLD_CHUNKS newly released
 *    chunks, or until the hold (Welcome's update_hold_ns) has run since the first change it
 *    holds; a Final, an exit, and unreleased memory the daemon has not heard of never wait,
 *    so the daemon never lacks more than 2 chunks of a child (design invariant 1's slack).
 *    Fewer, bigger updates cost the daemon fewer reads and wake-ups.
 *  - Retry: while the daemon has not read the previous update, the slot folds and the child
 *    looks again after BUF_UPDATE_RETRY_MIN_MS, doubling up to BUF_UPDATE_RETRY_MAX_MS: a
 *    stopped daemon costs a child a few wake-ups a second, not one per tick. */
#define BUF_UPDATE_HOLD_CHUNKS  2
#define BUF_UPDATE_RETRY_MIN_MS 1
#define BUF_UPDATE_RETRY_MAX_MS 64

struct buf_update_pace {
    uint64_t hold_ns;               /* Welcome's update_hold_ns; 0: no holding */
    uint64_t hold_since_ns;         /* the held update's first change; 0: none held */
    uint64_t sent_unreleased_bytes; /* in the last update sent */
    uint64_t retry_ms;              /* the next look's wait */
};

void buf_update_pace_init(struct buf_update_pace *p, uint64_t hold_ns);
/* Whether the pending update (kind, listing released newly released chunks, unreleased
 * bytes) waits at now_ns; when it does, *ret_wait_ns is how long it may still wait. Holding
 * applies only under a standing poll, and never while exiting. */
bool buf_update_pace_hold(struct buf_update_pace *p, bool standing, bool exiting,
                          enum buf_update_kind kind, size_t released, uint64_t unreleased,
                          uint64_t now_ns, uint64_t *ret_wait_ns);
/* The daemon has not read the previous update: how long to wait before looking again (ms);
 * each call doubles the next, up to the max. */
uint64_t buf_update_pace_retry(struct buf_update_pace *p);
/* An update telling of unreleased bytes was sent: the next one starts afresh. */
void buf_update_pace_sent(struct buf_update_pace *p, uint64_t unreleased);

#endif /* FLEETPROF_BUFFER_UPDATE_H */
