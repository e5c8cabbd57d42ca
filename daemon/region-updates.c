/* daemon/region-updates.c - children's chunk-manager updates taken from their chunk regions.
 *
 * A child whose Hello offers it, and whose region header page we map for evictions anyway,
 * publishes its updates in an update ring in that page (buffer/region-updates.h) instead
 * of sending them: no message, no read, no wake-up per update. A timer takes every such
 * child's ring in one round: 10 ms while rounds find updates, backing off to 40 ms while
 * none do (an idle fleet wakes us 25 times a second). So the controller learns of a
 * released chunk, or of memory a new buffer took, at most one round late: a burst of ten
 * 256 KiB chunks per second per child is one chunk in flight, within invariant 1's slack.
 * A child's Final still comes as a message; so does everything else.
 */
#include "buffer/region-updates.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "daemon/core.h"
#include "daemon/daemon-internal.h"

#define SCAN_MIN_MS 10u
#define SCAN_MAX_MS 40u

/* One publishing child. The round walks these, not the connections: with a large fleet
 * each look at a connection was a cache miss of its own, and most rounds find most rings
 * unchanged (one load of the ring's seq). */
struct ring_child {
    struct buf_region_updates *ring; /* in the child's header page (c->evict_page) */
    struct buf_region_updates_reader reader;
    struct conn *c;
};

struct region_scan {
    uv_timer_t timer;
    struct daemon *d;
    uint64_t period_ms;
    struct ring_child *children; /* owned; [0, count) in use */
    size_t count, cap;
};

static bool take(struct ring_child *k)
{
    struct conn *c = k->c;
    struct daemon *d = c->d;
    struct buf_region_updates_take t;
    struct ctl_chunk chunks[BUF_REGION_UPDATES_CAPACITY];
    struct ctl_update u;
    const char *why = NULL;
    int r;

    if (c->kind != CONN_CHILD)
        return true;
    r = buf_region_updates_take(k->ring, &k->reader, &t, &why);
    if (r == 0)
        return true;
    if (r < 0) {
        daemon__drop(c, why);
        return false;
    }
    for (size_t i = 0; i < t.count; i++)
        chunks[i] = (struct ctl_chunk){t.chunks[i].done_ns, t.chunks[i].bytes};
    u = (struct ctl_update){false,  t.unreleased_bytes, t.released_bytes, t.oldest_done_ns, chunks,
                            t.count};
    if (!daemon__update_apply(c, &u))
        return false;
    d->stats.region_updates += t.publications;
    c->region_updates += t.publications;
    return true;
}

bool daemon__region_updates_take(struct conn *c)
{
    struct region_scan *s = c->d->region_scan;

    if (!c->updates_in_region || !s)
        return true;
    return take(&s->children[c->ring_index]);
}

static void on_scan(uv_timer_t *timer)
{
    struct region_scan *s = timer->data;
    uint64_t before = s->d->stats.region_updates;

    /* take() may drop a child, but its close (which removes it here) comes later. */
    for (size_t i = 0; i < s->count; i++) {
        struct ring_child *k = &s->children[i];

        if (__atomic_load_n(&k->ring->seq, __ATOMIC_RELAXED) != k->reader.seq)
            (void)take(k);
    }
    /* Busy: the short round; quiet: twice as long each time, up to the long one. */
    if (s->d->stats.region_updates != before)
        s->period_ms = SCAN_MIN_MS;
    else if (s->period_ms < SCAN_MAX_MS)
        s->period_ms *= 2;
    (void)uv_timer_start(&s->timer, on_scan, s->period_ms, 0);
}

static struct region_scan *scan_of(struct daemon *d)
{
    struct region_scan *s = d->region_scan;

    if (s)
        return s;
    s = calloc(1, sizeof(*s));
    if (!s || uv_timer_init(d->loop, &s->timer) < 0) {
        free(s);
        return NULL;
    }
    s->timer.data = s;
    s->d = d;
    d->region_scan = s;
    return s;
}

bool daemon__region_updates_accept(struct conn *c)
{
    struct region_scan *s;
    struct ring_child *k;

    if (!c->evict_page || c->d->closing || !(s = scan_of(c->d)))
        return false; /* updates keep coming as messages */
    if (FLEETPROF_GROW(s->children, s->cap, s->count + 1) < 0)
        return false;
    k = &s->children[s->count];
    k->ring = buf_region_updates_of(c->evict_page);
    k->c = c;
    buf_region_updates_reader_init(&k->reader, k->ring);
    c->ring_index = s->count++;
    c->updates_in_region = true;
    if (s->count == 1 || s->period_ms > SCAN_MIN_MS) {
        s->period_ms = SCAN_MIN_MS; /* a newcomer's first chunks are memory we do not know */
        (void)uv_timer_start(&s->timer, on_scan, s->period_ms, 0);
    }
    return true;
}

void daemon__region_updates_leave(struct conn *c)
{
    struct region_scan *s = c->d->region_scan;

    if (!c->updates_in_region || !s)
        return;
    c->updates_in_region = false;
    /* The last one takes its place. */
    s->children[c->ring_index] = s->children[--s->count];
    s->children[c->ring_index].c->ring_index = c->ring_index;
    if (s->count == 0)
        (void)uv_timer_stop(&s->timer);
}

static void on_scan_closed(uv_handle_t *h)
{
    struct region_scan *s = h->data;

    free(s->children);
    free(s);
}

void daemon__region_scan_close(struct daemon *d)
{
    if (d->region_scan) {
        uv_close((uv_handle_t *)&d->region_scan->timer, on_scan_closed);
        d->region_scan = NULL;
    }
}
