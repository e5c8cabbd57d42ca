/* buffer/chunk-manager-local.c - the local-limit chunk manager (a process's main manager).
 *
 * Invariant: after get_chunk(), unreleased + released < limit, unless no released chunk
 * was left to destroy (a limit under two chunks). Released chunks are destroyed oldest
 * first, so the oldest done time only grows, which keeps update folding associative.
 * Every change is reported to the update callback with the new totals.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>

#include "buffer/buf-internal.h"
#include "buffer/region.h"
#include "common/macros.h"

struct local_manager {
    struct buf_chunk_manager base;
    uint64_t limit_bytes;
    uint64_t unreleased_bytes;
    uint64_t released_bytes;
    uint64_t released_count;
    uint64_t destroyed_through_ns;   /* done_ns of the newest chunk destroyed so far */
    struct buf_chunk *released_head; /* owned list, sorted by done_ns, oldest first */
    struct buf_chunk *released_tail; /* borrowed: last of that list */
    struct buf_chunk *recycled;      /* owned list of at most BUF_MANAGER_MAX_RECYCLED */
    uint32_t recycled_count;
    struct buf_region *region; /* new chunks come from here when set (borrowed) */
    buf_update_cb update_cb;   /* may be NULL */
    void *update_userdata;
};

static struct local_manager *to_local(struct buf_chunk_manager *m)
{
    return container_of(m, struct local_manager, base);
}

/* The oldest done time still alive. With no released chunk left, one past the newest
 * destroyed one: "everything at or before that is gone", so folds prune stale entries.
 * It never decreases, because chunks are destroyed oldest first. */
static uint64_t oldest_done_ns(const struct local_manager *l)
{
    if (l->released_head)
        return l->released_head->header.done_ns;
    return l->destroyed_through_ns ? l->destroyed_through_ns + 1 : 0;
}

static void notify(struct local_manager *l, const struct buf_chunk *newly_released)
{
    struct buf_released_chunk entry;
    struct buf_update u = {
            .kind = BUF_UPDATE_CHANGE,
            .unreleased_bytes = l->unreleased_bytes,
            .released_bytes = l->released_bytes,
            .oldest_done_ns = oldest_done_ns(l),
    };

    if (!l->update_cb)
        return;
    if (newly_released) {
        entry.done_ns = newly_released->header.done_ns;
        entry.bytes = newly_released->header.buffer_bytes;
        u.newly_released = &entry;
        u.newly_released_count = 1;
    }
    l->update_cb(&u, l->update_userdata);
}

static void chunk_free(struct local_manager *l, struct buf_chunk *c)
{
    if (c->origin == BUF_CHUNK_ORIGIN_REGION)
        buf__region_chunk_free(l->region, c);
    else
        buf_chunk_free(c);
}

/* Keeps c for reuse if there is room and it has the standard size, else frees it. A heap
 * chunk is not recycled once chunks come from a region: only those survive a crash. */
static void recycle_or_free(struct local_manager *l, struct buf_chunk *c)
{
    if (l->recycled_count < BUF_MANAGER_MAX_RECYCLED &&
        c->header.buffer_bytes == l->base.chunk_bytes &&
        (c->origin == BUF_CHUNK_ORIGIN_REGION || !l->region)) {
        buf__chunk_mark_recycled(c);
        c->next = l->recycled;
        l->recycled = c;
        l->recycled_count++;
    } else {
        chunk_free(l, c);
    }
}

static void destroy_oldest(struct local_manager *l)
{
    struct buf_chunk *c = l->released_head;

    l->released_head = c->next;
    if (!l->released_head)
        l->released_tail = NULL;
    l->released_bytes -= c->header.buffer_bytes;
    l->released_count--;
    if (c->header.done_ns > l->destroyed_through_ns)
        l->destroyed_through_ns = c->header.done_ns;
    l->base.destroyed_blocks += c->header.block_count;
    l->base.destroyed_chunks++;
    recycle_or_free(l, c);
}

static int local_get_chunk(struct buf_chunk_manager *m, struct buf_chunk **ret_chunk)
{
    struct local_manager *l = to_local(m);
    struct buf_chunk *c;
    int r;

    while (l->released_head &&
           l->unreleased_bytes + l->released_bytes + m->chunk_bytes >= l->limit_bytes)
        destroy_oldest(l);

    if (l->recycled) {
        c = l->recycled;
        l->recycled = c->next;
        c->next = NULL;
        l->recycled_count--;
    } else {
        r = l->region ? buf__region_chunk_new(l->region, &c) : -ENOSPC;
        /* A full region (or a file size limit) costs crash-survival, never samples. */
        if (r < 0)
            r = buf_chunk_new(m->chunk_bytes, &c);
        if (r < 0)
            return r;
    }
    l->unreleased_bytes += c->header.buffer_bytes;
    notify(l, NULL);
    *ret_chunk = c;
    return 0;
}

static void local_release_chunk(struct buf_chunk_manager *m, struct buf_chunk *c)
{
    struct local_manager *l = to_local(m);
    struct buf_chunk **link = &l->released_head;

    assert(c->state == BUF_CHUNK_DONE);
    assert(l->unreleased_bytes >= c->header.buffer_bytes);
    l->unreleased_bytes -= c->header.buffer_bytes;
    l->released_bytes += c->header.buffer_bytes;
    l->released_count++;

    /* Chunks arrive in done order from one buffer: appending is the common case. */
    if (!l->released_tail || l->released_tail->header.done_ns <= c->header.done_ns) {
        c->next = NULL;
        if (l->released_tail)
            l->released_tail->next = c;
        else
            l->released_head = c;
        l->released_tail = c;
    } else {
        while (*link && (*link)->header.done_ns <= c->header.done_ns)
            link = &(*link)->next;
        c->next = *link;
        *link = c;
    }
    notify(l, c);
}

static void local_forget_chunk(struct buf_chunk_manager *m, struct buf_chunk *c)
{
    struct local_manager *l = to_local(m);

    assert(l->unreleased_bytes >= c->header.buffer_bytes);
    l->unreleased_bytes -= c->header.buffer_bytes;
    recycle_or_free(l, c);
    notify(l, NULL);
}

static const struct buf_chunk *local_released_head(const struct buf_chunk_manager *m)
{
    return container_of(m, const struct local_manager, base)->released_head;
}

static void local_destroy_released(struct buf_chunk_manager *m, uint64_t done_ns)
{
    struct local_manager *l = to_local(m);
    bool changed = false;

    while (l->released_head && l->released_head->header.done_ns <= done_ns) {
        destroy_oldest(l);
        changed = true;
    }
    if (changed)
        notify(l, NULL);
}

static void local_set_update_cb(struct buf_chunk_manager *m, buf_update_cb cb, void *userdata)
{
    struct local_manager *l = to_local(m);
    const struct buf_update final_update = {.kind = BUF_UPDATE_FINAL};

    /* The replaced callback learns that it will hear nothing more. */
    if (l->update_cb)
        l->update_cb(&final_update, l->update_userdata);
    l->update_cb = cb;
    l->update_userdata = userdata;
    if (!cb)
        return;

    /* The new callback starts from the full picture: the totals, then every released
     * chunk as newly released (one at a time, so no allocation is needed here). */
    notify(l, NULL);
    for (const struct buf_chunk *c = l->released_head; c; c = c->next)
        notify(l, c);
}

static void local_get_stats(const struct buf_chunk_manager *m, struct buf_chunk_manager_stats *ret)
{
    const struct local_manager *l = container_of(m, const struct local_manager, base);

    ret->limit_bytes = l->limit_bytes;
    ret->unreleased_bytes = l->unreleased_bytes;
    ret->released_bytes = l->released_bytes;
    ret->released_chunks = l->released_count;
    ret->recycled_chunks = l->recycled_count;
    ret->destroyed_chunks = m->destroyed_chunks;
}

static int local_set_limit(struct buf_chunk_manager *m, uint64_t limit_bytes)
{
    if (limit_bytes < m->chunk_bytes)
        return -EINVAL;
    /* Takes effect when the next chunk is handed out, like any other growth. */
    to_local(m)->limit_bytes = limit_bytes;
    return 0;
}

static void free_list(struct local_manager *l, struct buf_chunk *c)
{
    while (c) {
        struct buf_chunk *next = c->next;

        chunk_free(l, c);
        c = next;
    }
}

static void local_free(struct buf_chunk_manager *m)
{
    struct local_manager *l = to_local(m);
    const struct buf_update final_update = {.kind = BUF_UPDATE_FINAL};

    if (l->update_cb)
        l->update_cb(&final_update, l->update_userdata);
    free_list(l, l->released_head);
    free_list(l, l->recycled);
    free(l);
}

static const struct buf_chunk_manager_ops local_ops = {
        .get_chunk = local_get_chunk,
        .release_chunk = local_release_chunk,
        .forget_chunk = local_forget_chunk,
        .released_head = local_released_head,
        .destroy_released_at_or_before = local_destroy_released,
        .set_update_cb = local_set_update_cb,
        .get_stats = local_get_stats,
        .set_limit = local_set_limit,
        .free = local_free,
};

int buf_chunk_manager_local_set_region(struct buf_chunk_manager *m, struct buf_region *region)
{
    if (m->ops != &local_ops || buf__region_chunk_bytes(region) != m->chunk_bytes)
        return -EINVAL;
    to_local(m)->region = region;
    return 0;
}

int buf_chunk_manager_local_new(uint64_t limit_bytes, uint32_t chunk_bytes,
                                struct buf_chunk_manager **ret_manager)
{
    struct local_manager *l;

    if (chunk_bytes == 0 || chunk_bytes > BUF_CHUNK_MAX_BYTES || limit_bytes < chunk_bytes)
        return -EINVAL;
    l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->base.ops = &local_ops;
    l->base.chunk_bytes = chunk_bytes;
    l->limit_bytes = limit_bytes;
    *ret_manager = &l->base;
    return 0;
}
