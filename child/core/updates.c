/* child/core/updates.c - this process's side of the global limit: the chunk manager's updates
 * and the daemon's evictions, the one owner of both in the runtime.
 *
 * The buffer's manager calls on_chunk_update() on every change, under the buffer's lock: it
 * folds the change into one slot (buffer/update.h) and flags it. The sampler's tick then, in
 * rt_updates_tick():
 *   - applies the eviction point a daemon that holds our region wrote into its header (one
 *     load; only a point that moved costs the buffer's lock);
 *   - publishes a flagged change in the region's update ring when the daemon reads it there
 *     (Welcome.updates_in_region): no message, no wake-up of either side;
 *   - else wakes the IPC module's thread, which sends it, paced by the hold and retry rule
 *     (buf_update_pace), taking it from the slot through the core's table.
 * A change the daemon asked for (a destroy message, an eviction) is not flagged: it counted
 * those chunks gone when it asked, so the change waits in the slot for the next update.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "buffer/chunked-buffer.h"
#include "buffer/region-updates.h"
#include "buffer/update.h"
#include "child/core/core.h"
#include "child/core/ipc-module.h"

static struct {
    struct buf_update_slot slot; /* the manager's changes, folded */
    bool slot_ready;
    _Atomic int pending;   /* set by on_chunk_update(), cleared by the sampler's tick */
    _Atomic int evictions; /* the daemon writes its evictions into our region's header */
    _Atomic int ring;      /* the daemon takes our changes from our region's update ring */
    /* The daemon said how it takes them (its Welcome, or the connection's end): until then a
     * change waits, flagged, rather than wake an IPC thread a light connection may not have
     * (ipc.c) for a change the region will carry. */
    _Atomic int told;
    struct buf_update ring_pending; /* sampler only: taken, not yet published (ring full) */
    uint64_t evicted_ns;            /* sampler only: the last eviction point applied */
} upd;

/* Set by the thread that applies a change the daemon asked for; never read in a signal
 * handler (the buffer's callbacks run under its mutex). */
static __thread bool applying_destroy __attribute__((tls_model("initial-exec")));

static void on_chunk_update(const struct buf_update *u, void *userdata)
{
    (void)userdata;
    /* Under the buffer's lock: fold and flag, nothing else. */
    buf_update_slot_fold(&upd.slot, u);
    if (!applying_destroy)
        atomic_store_explicit(&upd.pending, 1, memory_order_release);
}

int rt_updates_start(void)
{
    if (!upd.slot_ready) {
        int r = buf_update_slot_init(&upd.slot);

        if (r < 0)
            return r;
        upd.slot_ready = true;
    }
    /* Changes fold into the slot from now on, connected or not: the first answer to the
     * daemon's poll carries them all. A new connection's daemon has said nothing yet. */
    atomic_store(&upd.told, 0);
    buf_chunked_buffer_set_update_cb(rt.buffer, on_chunk_update, NULL);
    return 0;
}

void rt_updates_stop(void)
{
    buf_chunked_buffer_set_update_cb(rt.buffer, NULL, NULL);
}

void rt_updates_use_region(bool evictions, bool ring)
{
    atomic_store(&upd.evictions, evictions);
    atomic_store(&upd.ring, ring);
    atomic_store(&upd.told, 1);
}

void rt_updates_destroy(uint64_t done_ns, bool quiet)
{
    applying_destroy = quiet;
    buf_chunked_buffer_destroy_at_or_before(rt.buffer, done_ns);
    applying_destroy = false;
}

enum buf_update_kind rt_updates_peek(size_t *ret_newly_released, uint64_t *ret_unreleased_bytes)
{
    return buf_update_slot_peek(&upd.slot, ret_newly_released, ret_unreleased_bytes);
}

int rt_updates_take(struct buf_update *ret_update)
{
    return buf_update_slot_take(&upd.slot, ret_update);
}

void rt_updates_put_back(const struct buf_update *u)
{
    buf_update_slot_fold(&upd.slot, u);
}

/* The daemon's eviction point in our region's header. It is data from another process: a
 * point that goes backwards is old news, one in the future cannot name a released chunk
 * (done times are this clock's past), and both are ignored. */
static void apply_region_eviction(void)
{
    uint64_t at = rt_region_eviction_ns();

    if (at <= upd.evicted_ns || at > rt_now_ns())
        return;
    upd.evicted_ns = at;
    rt_updates_destroy(at, true);
}

/* The slot's change into our region's update ring, where the daemon's timer takes it.
 * Returns false when the slot holds a Final, which goes by message. A ring the daemon has
 * not emptied yet keeps the rest for the next tick. */
static bool publish_in_region(void)
{
    void *page = rt_region_header_page();
    struct buf_update u;

    if (!page)
        return false;
    if (buf_update_slot_take(&upd.slot, &u)) {
        if (u.kind == BUF_UPDATE_FINAL) {
            buf_update_slot_fold(&upd.slot, &u); /* back where the IPC thread takes it */
            buf_update_done(&u);
            return false;
        }
        /* Out of memory, the counts stay right and the chunks are lost, as in the slot. */
        (void)buf_update_fold(&upd.ring_pending, &u);
        buf_update_done(&u);
    }
    if (upd.ring_pending.kind == BUF_UPDATE_CHANGE &&
        buf_region_updates_publish(buf_region_updates_of(page), &upd.ring_pending) > 0)
        atomic_store(&upd.pending, 1); /* the rest on the next tick */
    return true;
}

void rt_updates_tick(void)
{
    const struct rt_ipc_module *m;

    if (atomic_load_explicit(&upd.evictions, memory_order_relaxed))
        apply_region_eviction();
    if (!atomic_load_explicit(&upd.pending, memory_order_acquire))
        return;
    /* A change waits in the slot until there is a daemon to tell. */
    m = rt_ipc_module(false);
    if (!m || !m->connected() || !atomic_load(&upd.told))
        return;
    atomic_store(&upd.pending, 0);
    if (!atomic_load_explicit(&upd.ring, memory_order_relaxed) || !publish_in_region())
        m->wake();
}

void rt_updates_forget_after_fork(void)
{
    /* The parent's chunks are not this process's. The slot's lock may have been held by a
     * thread of the parent: it starts afresh (what it held is the parent's, left). */
    buf_update_done(&upd.ring_pending);
    memset(&upd, 0, sizeof(upd));
}
