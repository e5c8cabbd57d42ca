/* buffer/region-updates.c - chunk-manager updates through a region's header page (see the
 * header for the layout and who writes what). */
#include "buffer/region-updates.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

static void init_ring(struct buf_region_updates *ring)
{
    /* A new region's page is zeros; the magic goes last, so a reader never sees a ring
     * without its capacity. */
    ring->capacity = BUF_REGION_UPDATES_CAPACITY;
    __atomic_store_n(&ring->magic, BUF_REGION_UPDATES_MAGIC, __ATOMIC_RELEASE);
}

static int chunks_left(size_t n)
{
    return n > INT_MAX ? INT_MAX : (int)n;
}

int buf_region_updates_publish(struct buf_region_updates *ring, struct buf_update *u)
{
    uint64_t written, read, seq, room;
    size_t n;

    if (u->kind != BUF_UPDATE_CHANGE)
        return -EINVAL;
    if (__atomic_load_n(&ring->magic, __ATOMIC_RELAXED) != BUF_REGION_UPDATES_MAGIC)
        init_ring(ring);
    written = __atomic_load_n(&ring->written, __ATOMIC_RELAXED);
    read = __atomic_load_n(&ring->read, __ATOMIC_ACQUIRE);
    /* A read point past what was written, or further back than the ring holds, is not the
     * daemon's: no room, rather than overwrite chunks it may be reading. */
    room = read <= written && written - read <= BUF_REGION_UPDATES_CAPACITY
                   ? BUF_REGION_UPDATES_CAPACITY - (written - read)
                   : 0;
    n = u->newly_released_count < room ? u->newly_released_count : (size_t)room;
    if (n == 0 && u->newly_released_count)
        return chunks_left(u->newly_released_count);
    /* The entries first: the reader reads none past written, which moves under the lock. */
    for (size_t i = 0; i < n; i++)
        ring->entries[(written + i) % BUF_REGION_UPDATES_CAPACITY] = u->newly_released[i];
    seq = __atomic_load_n(&ring->seq, __ATOMIC_RELAXED);
    seq += seq & 1; /* an odd value is a write we never finished (we are the only writer) */
    __atomic_store_n(&ring->seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&ring->unreleased_bytes, u->unreleased_bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&ring->released_bytes, u->released_bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&ring->oldest_done_ns, u->oldest_done_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&ring->written, written + n, __ATOMIC_RELAXED);
    __atomic_store_n(&ring->seq, seq + 2, __ATOMIC_RELEASE);
    if (n == u->newly_released_count) {
        buf_update_done(u);
        return 0;
    }
    /* The rest goes first next time. */
    memmove(u->newly_released, u->newly_released + n,
            (u->newly_released_count - n) * sizeof(*u->newly_released));
    u->newly_released_count -= n;
    return chunks_left(u->newly_released_count);
}

uint64_t buf_region_updates_taken(const struct buf_region_updates *ring)
{
    return __atomic_load_n(&ring->read_seq, __ATOMIC_ACQUIRE) / 2;
}

void buf_region_updates_reader_init(struct buf_region_updates_reader *r,
                                    const struct buf_region_updates *ring)
{
    uint64_t written = __atomic_load_n(&ring->written, __ATOMIC_ACQUIRE);
    uint64_t read = __atomic_load_n(&ring->read, __ATOMIC_RELAXED);

    r->seq = 0; /* the first take returns the counts, whatever was taken before */
    r->read = read <= written && written - read <= BUF_REGION_UPDATES_CAPACITY ? read : written;
}

/* One attempt: 1, 0 (nothing new), -EAGAIN (torn: the owner wrote meanwhile), -EBADMSG. */
static int take_once(struct buf_region_updates *ring, struct buf_region_updates_reader *r,
                     struct buf_region_updates_take *ret, const char **ret_why)
{
    uint64_t seq = __atomic_load_n(&ring->seq, __ATOMIC_ACQUIRE), written, n;
    size_t kept = 0;

    if (seq == r->seq)
        return 0;
    if (seq & 1)
        return -EAGAIN;
    if (__atomic_load_n(&ring->magic, __ATOMIC_RELAXED) != BUF_REGION_UPDATES_MAGIC ||
        __atomic_load_n(&ring->capacity, __ATOMIC_RELAXED) != BUF_REGION_UPDATES_CAPACITY) {
        *ret_why = "its update ring has no valid header";
        return -EBADMSG;
    }
    ret->unreleased_bytes = __atomic_load_n(&ring->unreleased_bytes, __ATOMIC_RELAXED);
    ret->released_bytes = __atomic_load_n(&ring->released_bytes, __ATOMIC_RELAXED);
    ret->oldest_done_ns = __atomic_load_n(&ring->oldest_done_ns, __ATOMIC_RELAXED);
    written = __atomic_load_n(&ring->written, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&ring->seq, __ATOMIC_RELAXED) != seq)
        return -EAGAIN;
    if (seq < r->seq || written < r->read) {
        *ret_why = "its update ring went backwards";
        return -EBADMSG;
    }
    n = written - r->read;
    if (n > BUF_REGION_UPDATES_CAPACITY) {
        *ret_why = "its update ring lists more chunks than it holds";
        return -EBADMSG;
    }
    /* The owner does not touch these until our read point passes them. */
    for (uint64_t i = 0; i < n; i++) {
        struct buf_released_chunk k = ring->entries[(r->read + i) % BUF_REGION_UPDATES_CAPACITY];

        /* Released and destroyed again before we looked: as a fold of the updates would. */
        if (ret->oldest_done_ns && k.done_ns < ret->oldest_done_ns)
            continue;
        ret->chunks[kept++] = k;
    }
    ret->count = kept;
    ret->publications = (seq - r->seq) / 2;
    r->seq = seq;
    r->read = written;
    __atomic_store_n(&ring->read, written, __ATOMIC_RELEASE);
    __atomic_store_n(&ring->read_seq, seq, __ATOMIC_RELEASE);
    return 1;
}

int buf_region_updates_take(struct buf_region_updates *ring, struct buf_region_updates_reader *r,
                            struct buf_region_updates_take *ret, const char **ret_why)
{
    /* A torn read means a publication is under way right now (a few stores): look again at
     * once, a few times, then leave it for the next round. */
    for (int i = 0; i < 4; i++) {
        int k = take_once(ring, r, ret, ret_why);

        if (k != -EAGAIN)
            return k;
    }
    return 0;
}
