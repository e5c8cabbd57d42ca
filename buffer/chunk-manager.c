/* buffer/chunk-manager.c - the single-chunk manager and the calls common to all managers. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buf-internal.h"
#include "common/macros.h"

struct buf_chunk_manager *buf_chunk_manager_free(struct buf_chunk_manager *m)
{
    if (m) {
        assert(!m->in_use);
        m->ops->free(m);
    }
    return NULL;
}

void buf_chunk_manager_get_stats(const struct buf_chunk_manager *m,
                                 struct buf_chunk_manager_stats *ret_stats)
{
    memset(ret_stats, 0, sizeof(*ret_stats));
    m->ops->get_stats(m, ret_stats);
}

/* The single manager's one chunk is in exactly one place: available, out with the buffer,
 * or released. */
struct single_manager {
    struct buf_chunk_manager base;
    struct buf_chunk *available; /* owned; NULL while out or released */
    struct buf_chunk *released;  /* owned; Done */
    struct buf_chunk *out;       /* borrowed: the buffer holds it */
};

static struct single_manager *to_single(struct buf_chunk_manager *m)
{
    return container_of(m, struct single_manager, base);
}

static int single_get_chunk(struct buf_chunk_manager *m, struct buf_chunk **ret_chunk)
{
    struct single_manager *s = to_single(m);

    if (!s->available)
        return -ENOSPC;
    s->out = s->available;
    s->available = NULL;
    *ret_chunk = s->out;
    return 0;
}

static void single_release_chunk(struct buf_chunk_manager *m, struct buf_chunk *c)
{
    struct single_manager *s = to_single(m);

    assert(c == s->out);
    s->out = NULL;
    s->released = c;
}

static void single_forget_chunk(struct buf_chunk_manager *m, struct buf_chunk *c)
{
    struct single_manager *s = to_single(m);

    assert(c == s->out);
    buf__chunk_mark_recycled(c);
    s->out = NULL;
    s->available = c;
}

static const struct buf_chunk *single_released_head(const struct buf_chunk_manager *m)
{
    return container_of(m, const struct single_manager, base)->released;
}

static void single_destroy_released(struct buf_chunk_manager *m, uint64_t done_ns)
{
    struct single_manager *s = to_single(m);
    struct buf_chunk *c = s->released;

    if (!c || c->header.done_ns > done_ns)
        return;
    m->destroyed_blocks += c->header.block_count;
    m->destroyed_chunks++;
    buf__chunk_mark_recycled(c);
    s->released = NULL;
    s->available = c;
}

static void single_set_update_cb(struct buf_chunk_manager *m, buf_update_cb cb, void *userdata)
{
    /* A single chunk is never under a global budget: nothing to report. */
    (void)m;
    (void)cb;
    (void)userdata;
}

static void single_get_stats(const struct buf_chunk_manager *m, struct buf_chunk_manager_stats *ret)
{
    const struct single_manager *s = container_of(m, const struct single_manager, base);

    ret->limit_bytes = m->chunk_bytes;
    ret->unreleased_bytes = s->out ? m->chunk_bytes : 0;
    ret->released_bytes = s->released ? m->chunk_bytes : 0;
    ret->released_chunks = s->released ? 1 : 0;
    ret->destroyed_chunks = m->destroyed_chunks;
}

static int single_set_limit(struct buf_chunk_manager *m, uint64_t limit_bytes)
{
    (void)m;
    (void)limit_bytes;
    return -ENOTSUP; /* its one chunk is its limit */
}

static void single_free(struct buf_chunk_manager *m)
{
    struct single_manager *s = to_single(m);

    assert(!s->out);
    buf_chunk_free(s->available);
    buf_chunk_free(s->released);
    free(s);
}

static const struct buf_chunk_manager_ops single_ops = {
        .get_chunk = single_get_chunk,
        .release_chunk = single_release_chunk,
        .forget_chunk = single_forget_chunk,
        .released_head = single_released_head,
        .destroy_released_at_or_before = single_destroy_released,
        .set_update_cb = single_set_update_cb,
        .get_stats = single_get_stats,
        .set_limit = single_set_limit,
        .free = single_free,
};

int buf_chunk_manager_single_new(uint32_t chunk_bytes, struct buf_chunk_manager **ret_manager)
{
    struct single_manager *s;
    int r;

    if (chunk_bytes == 0 || chunk_bytes > BUF_CHUNK_MAX_BYTES)
        return -EINVAL;
    s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    r = buf_chunk_new(chunk_bytes, &s->available);
    if (r < 0) {
        free(s);
        return r;
    }
    s->base.ops = &single_ops;
    s->base.chunk_bytes = chunk_bytes;
    *ret_manager = &s->base;
    return 0;
}
