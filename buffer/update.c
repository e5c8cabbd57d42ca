/* buffer/update.c - folding controlled updates, and the slot they wait in. See update.h. */
#include "buffer/update.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

void buf_update_init(struct buf_update *u)
{
    memset(u, 0, sizeof(*u));
    u->kind = BUF_UPDATE_NONE;
}

void buf_update_done(struct buf_update *u)
{
    if (u->newly_released_cap > 0)
        free(u->newly_released);
    buf_update_init(u);
}

/* Drops the entries of u done before oldest_ns, keeping order. */
static void prune_before(struct buf_update *u, uint64_t oldest_ns)
{
    size_t kept = 0;

    for (size_t i = 0; i < u->newly_released_count; i++)
        if (u->newly_released[i].done_ns >= oldest_ns)
            u->newly_released[kept++] = u->newly_released[i];
    u->newly_released_count = kept;
}

/* Makes older own its array with room for `extra` more entries. */
static int reserve(struct buf_update *u, size_t extra)
{
    size_t need = u->newly_released_count + extra;
    struct buf_released_chunk *grown = NULL;
    size_t cap;

    if (u->newly_released_cap >= need)
        return 0;
    cap = fleetprof_grown_capacity(u->newly_released_cap, need, sizeof(*grown));
    if (!cap)
        return -ENOMEM;
    if (u->newly_released_cap > 0) {
        grown = u->newly_released;
        if (FLEETPROF_RESIZE(grown, cap) < 0)
            return -ENOMEM;
    } else {
        /* The array was borrowed (or absent): copy it into one we own. */
        if (FLEETPROF_RESIZE(grown, cap) < 0)
            return -ENOMEM;
        if (u->newly_released_count > 0)
            memcpy(grown, u->newly_released, u->newly_released_count * sizeof(*grown));
    }
    u->newly_released = grown;
    u->newly_released_cap = cap;
    return 0;
}

int buf_update_fold(struct buf_update *older, const struct buf_update *newer)
{
    if (newer->kind == BUF_UPDATE_NONE)
        return 0;
    if (older->kind == BUF_UPDATE_FINAL)
        return 0; /* Final is final: nothing may follow it. */
    if (newer->kind == BUF_UPDATE_FINAL) {
        buf_update_done(older);
        older->kind = BUF_UPDATE_FINAL;
        return 0;
    }
    if (older->kind == BUF_UPDATE_NONE) {
        /* Keep older's storage (if any) for reuse; counts and entries come from newer. */
        older->newly_released_count = 0;
        older->oldest_done_ns = 0;
    }
    older->kind = BUF_UPDATE_CHANGE;
    older->unreleased_bytes = newer->unreleased_bytes;
    older->released_bytes = newer->released_bytes;
    if (newer->oldest_done_ns != 0) {
        older->oldest_done_ns = newer->oldest_done_ns;
        prune_before(older, newer->oldest_done_ns);
    }
    if (newer->newly_released_count == 0)
        return 0;
    if (reserve(older, newer->newly_released_count) < 0)
        return -ENOMEM;
    memcpy(older->newly_released + older->newly_released_count, newer->newly_released,
           newer->newly_released_count * sizeof(*newer->newly_released));
    older->newly_released_count += newer->newly_released_count;
    return 0;
}

int buf_update_slot_init(struct buf_update_slot *s)
{
    int r = pthread_mutex_init(&s->lock, NULL);

    if (r != 0)
        return -r;
    buf_update_init(&s->pending);
    s->lost_entries = 0;
    return 0;
}

void buf_update_slot_done(struct buf_update_slot *s)
{
    buf_update_done(&s->pending);
    (void)pthread_mutex_destroy(&s->lock);
}

void buf_update_slot_fold(struct buf_update_slot *s, const struct buf_update *update)
{
    (void)pthread_mutex_lock(&s->lock);
    if (buf_update_fold(&s->pending, update) < 0)
        s->lost_entries += update->newly_released_count;
    (void)pthread_mutex_unlock(&s->lock);
}

void buf_update_slot_cb(const struct buf_update *update, void *slot)
{
    buf_update_slot_fold(slot, update);
}

enum buf_update_kind buf_update_slot_peek(struct buf_update_slot *s, size_t *ret_newly_released,
                                          uint64_t *ret_unreleased_bytes)
{
    enum buf_update_kind kind;

    (void)pthread_mutex_lock(&s->lock);
    kind = s->pending.kind;
    *ret_newly_released = s->pending.newly_released_count;
    *ret_unreleased_bytes = s->pending.unreleased_bytes;
    (void)pthread_mutex_unlock(&s->lock);
    return kind;
}

int buf_update_slot_take(struct buf_update_slot *s, struct buf_update *ret_update)
{
    int had;

    (void)pthread_mutex_lock(&s->lock);
    had = s->pending.kind != BUF_UPDATE_NONE;
    if (had) {
        *ret_update = s->pending;
        buf_update_init(&s->pending);
    }
    (void)pthread_mutex_unlock(&s->lock);
    return had;
}

void buf_update_pace_init(struct buf_update_pace *p, uint64_t hold_ns)
{
    *p = (struct buf_update_pace){.hold_ns = hold_ns, .retry_ms = BUF_UPDATE_RETRY_MIN_MS};
}

bool buf_update_pace_hold(struct buf_update_pace *p, bool standing, bool exiting,
                          enum buf_update_kind kind, size_t released, uint64_t unreleased,
                          uint64_t now_ns, uint64_t *ret_wait_ns)
{
    uint64_t held;

    if (!standing || !p->hold_ns || exiting || kind != BUF_UPDATE_CHANGE ||
        released >= BUF_UPDATE_HOLD_CHUNKS || unreleased > p->sent_unreleased_bytes)
        return false;
    if (!p->hold_since_ns)
        p->hold_since_ns = now_ns;
    held = now_ns - p->hold_since_ns;
    if (held >= p->hold_ns)
        return false;
    *ret_wait_ns = p->hold_ns - held;
    return true;
}

uint64_t buf_update_pace_retry(struct buf_update_pace *p)
{
    uint64_t wait = p->retry_ms;

    if (p->retry_ms < BUF_UPDATE_RETRY_MAX_MS)
        p->retry_ms *= 2;
    return wait;
}

void buf_update_pace_sent(struct buf_update_pace *p, uint64_t unreleased)
{
    p->retry_ms = BUF_UPDATE_RETRY_MIN_MS;
    p->hold_since_ns = 0;
    p->sent_unreleased_bytes = unreleased;
}
