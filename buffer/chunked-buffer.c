/* buffer/chunked-buffer.c - see chunked-buffer.h; block layout in docs/buffer-format.md.
 *
 * The buffer owns at most two chunks (current, prepared next); released chunks belong to
 * the manager. The global index of byte k of a chunk is its range_start + k; each chunk
 * that becomes current starts where the previous one ended, so indexes are contiguous.
 */
#include "buffer/chunked-buffer.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buffer/buf-internal.h"
#include "buffer/leb128.h"

struct buf_chunked_buffer {
    pthread_mutex_t lock;
    struct buf_chunk_manager *manager; /* borrowed; outlives us */
    struct buf_chunk *current;         /* from the manager, InUse; NULL before first put */
    struct buf_chunk *next;            /* from the manager, prepared; not yet InUse */
    int32_t pid;
    uint64_t next_range_start; /* range_start of the next chunk to become current */
    uint64_t last_done_ns;     /* done times are kept strictly increasing */
    buf_clock_fn clock;
    void *clock_userdata;
    uint64_t pushed_blocks;
    uint64_t forgotten_blocks; /* blocks of current chunks dropped by clear() */
    uint64_t failed_puts;
    uint64_t failed_bytes;
};

static uint64_t monotonic_ns(void *userdata)
{
    struct timespec ts;

    (void)userdata;
    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

size_t buf_entry_writer_remaining(const struct buf_entry_writer *w)
{
    return w->len[0] + w->len[1] - w->pos;
}

int buf_entry_writer_write(struct buf_entry_writer *w, const void *src, size_t len)
{
    const uint8_t *in = src;

    if (len > buf_entry_writer_remaining(w))
        return -EMSGSIZE;
    if (w->pos < w->len[0]) {
        size_t n = w->len[0] - w->pos;

        if (n > len)
            n = len;
        memcpy(w->span[0] + w->pos, in, n);
        w->pos += n;
        in += n;
        len -= n;
    }
    if (len > 0) {
        memcpy(w->span[1] + (w->pos - w->len[0]), in, len);
        w->pos += len;
    }
    return 0;
}

int buf_entry_writer_write_uleb128(struct buf_entry_writer *w, uint64_t value)
{
    uint8_t tmp[BUF_ULEB128_MAX_BYTES];

    return buf_entry_writer_write(w, tmp, buf_uleb128_encode(value, tmp));
}

int buf_chunked_buffer_new(struct buf_chunk_manager *manager, int32_t pid,
                           struct buf_chunked_buffer **ret_buffer)
{
    struct buf_chunked_buffer *b;
    int r;

    if (!manager || manager->in_use)
        return -EINVAL;
    b = calloc(1, sizeof(*b));
    if (!b)
        return -ENOMEM;
    r = pthread_mutex_init(&b->lock, NULL);
    if (r != 0) {
        free(b);
        return -r;
    }
    b->manager = manager;
    b->pid = pid;
    b->next_range_start = 1; /* index 0 means "unset" */
    b->clock = monotonic_ns;
    manager->in_use = true;
    *ret_buffer = b;
    return 0;
}

/* Gives the buffer's unreleased chunks back to the manager. Caller holds the lock. */
static void forget_own_chunks(struct buf_chunked_buffer *b)
{
    if (b->current) {
        b->forgotten_blocks += b->current->header.block_count;
        b->manager->ops->forget_chunk(b->manager, b->current);
        b->current = NULL;
    }
    if (b->next) {
        b->manager->ops->forget_chunk(b->manager, b->next);
        b->next = NULL;
    }
}

struct buf_chunked_buffer *buf_chunked_buffer_free(struct buf_chunked_buffer *b)
{
    if (!b)
        return NULL;
    (void)pthread_mutex_lock(&b->lock);
    forget_own_chunks(b);
    b->manager->in_use = false;
    (void)pthread_mutex_unlock(&b->lock);
    (void)pthread_mutex_destroy(&b->lock);
    free(b);
    return NULL;
}

void buf_chunked_buffer_set_clock(struct buf_chunked_buffer *b, buf_clock_fn clock, void *userdata)
{
    (void)pthread_mutex_lock(&b->lock);
    b->clock = clock ? clock : monotonic_ns;
    b->clock_userdata = userdata;
    (void)pthread_mutex_unlock(&b->lock);
}

static uint64_t now_ns(struct buf_chunked_buffer *b)
{
    return b->clock(b->clock_userdata);
}

/* A chunk for the next switch: the prepared one, or one from the manager now. */
static int take_chunk(struct buf_chunked_buffer *b, struct buf_chunk **ret_chunk)
{
    if (b->next) {
        *ret_chunk = b->next;
        b->next = NULL;
        return 0;
    }
    return b->manager->ops->get_chunk(b->manager, ret_chunk);
}

static void make_current(struct buf_chunked_buffer *b, struct buf_chunk *c)
{
    buf__chunk_set_in_use(c, b->next_range_start, now_ns(b));
    c->header.pid = b->pid;
    b->next_range_start += c->header.buffer_bytes;
    b->current = c;
}

/* Stamps the current chunk done and hands it to the manager. */
static void retire_current(struct buf_chunked_buffer *b)
{
    uint64_t done = now_ns(b);

    if (done <= b->last_done_ns)
        done = b->last_done_ns + 1;
    b->last_done_ns = done;
    buf__chunk_mark_done(b->current, done);
    b->manager->ops->release_chunk(b->manager, b->current);
    b->current = NULL;
}

/* Replaces a full current chunk with a fresh one. On failure the full chunk stays
 * current (still readable) and the next put tries again. */
static int switch_chunk(struct buf_chunked_buffer *b)
{
    struct buf_chunk *c;
    int r = take_chunk(b, &c);

    if (r < 0)
        return r;
    retire_current(b);
    make_current(b, c);
    return 0;
}

static int put_locked(struct buf_chunked_buffer *b, size_t entry_bytes, size_t total,
                      buf_put_cb write_cb, void *userdata, uint64_t *ret_index)
{
    struct buf_entry_writer w = {0};
    uint8_t size_prefix[BUF_ULEB128_MAX_BYTES];
    size_t prefix_len = buf_uleb128_encode(entry_bytes, size_prefix);
    struct buf_chunk *c, *tail_chunk = NULL;
    size_t offset, room;
    int r;

    if (!b->current) {
        r = take_chunk(b, &c);
        if (r < 0)
            return r;
        make_current(b, c);
    }
    c = b->current;
    if (c->header.past_last_block_offset == c->header.buffer_bytes) {
        r = switch_chunk(b);
        if (r < 0)
            return r;
        c = b->current;
    }
    offset = c->header.past_last_block_offset;
    room = c->header.buffer_bytes - offset;

    if (total <= room) {
        memcpy(c->bytes + offset, size_prefix, prefix_len);
        w.span[0] = c->bytes + offset + prefix_len;
        w.len[0] = entry_bytes;
        c->header.past_last_block_offset += (uint32_t)total;
    } else {
        /* The block straddles: its tail opens the next chunk, which skips it. */
        size_t tail = total - room;
        size_t prefix_here = prefix_len < room ? prefix_len : room;

        r = take_chunk(b, &tail_chunk);
        if (r < 0)
            return r;
        memcpy(c->bytes + offset, size_prefix, prefix_here);
        memcpy(tail_chunk->bytes, size_prefix + prefix_here, prefix_len - prefix_here);
        w.span[0] = c->bytes + offset + prefix_here;
        w.len[0] = room - prefix_here;
        w.span[1] = tail_chunk->bytes + (prefix_len - prefix_here);
        w.len[1] = tail - (prefix_len - prefix_here);
        c->header.past_last_block_offset = c->header.buffer_bytes;
    }
    c->header.block_count++;
    b->pushed_blocks++;
    if (ret_index)
        *ret_index = c->header.range_start + offset;

    r = write_cb(&w, userdata);
    /* Never leave stale bytes from a recycled chunk inside a block. */
    if (w.pos < entry_bytes) {
        size_t pos = w.pos;

        w.pos = entry_bytes; /* marks the rest as ours, then zero it span by span */
        if (pos < w.len[0]) {
            memset(w.span[0] + pos, 0, w.len[0] - pos);
            pos = w.len[0];
        }
        if (pos < entry_bytes)
            memset(w.span[1] + (pos - w.len[0]), 0, entry_bytes - pos);
    }

    if (tail_chunk) {
        retire_current(b);
        make_current(b, tail_chunk);
        tail_chunk->header.first_block_offset = (uint32_t)(total - room);
        tail_chunk->header.past_last_block_offset = (uint32_t)(total - room);
    } else if (c->header.past_last_block_offset == c->header.buffer_bytes) {
        (void)switch_chunk(b); /* eagerly; failure is retried by the next put */
    }
    return r < 0 ? r : 0;
}

int buf_chunked_buffer_put(struct buf_chunked_buffer *b, size_t entry_bytes, buf_put_cb write_cb,
                           void *userdata, uint64_t *ret_index)
{
    size_t total;
    int r;

    if (entry_bytes == 0)
        return -EINVAL;
    total = buf_uleb128_size(entry_bytes) + entry_bytes;
    (void)pthread_mutex_lock(&b->lock);
    if (entry_bytes >= b->manager->chunk_bytes || total >= b->manager->chunk_bytes)
        r = -EMSGSIZE;
    else
        r = put_locked(b, entry_bytes, total, write_cb, userdata, ret_index);
    if (r == -EMSGSIZE || r == -ENOSPC || r == -ENOMEM) {
        b->failed_puts++;
        b->failed_bytes += entry_bytes;
    }
    (void)pthread_mutex_unlock(&b->lock);
    return r;
}

struct bytes_source {
    const void *data;
    size_t len;
};

static int copy_bytes(struct buf_entry_writer *w, void *userdata)
{
    const struct bytes_source *src = userdata;

    return buf_entry_writer_write(w, src->data, src->len);
}

int buf_chunked_buffer_put_bytes(struct buf_chunked_buffer *b, const void *data, size_t len,
                                 uint64_t *ret_index)
{
    struct bytes_source src = {data, len};

    return buf_chunked_buffer_put(b, len, copy_bytes, &src, ret_index);
}

static struct buf__chunk_view view_of(const struct buf_chunk *c)
{
    return (struct buf__chunk_view){&c->header, c->bytes};
}

int buf_chunked_buffer_read_each(struct buf_chunked_buffer *b, buf_read_cb cb, void *userdata)
{
    uint64_t blocks = 0, skipped = 0;
    struct buf__chunk_view cv, nv;
    int r = 0;

    (void)pthread_mutex_lock(&b->lock);
    for (const struct buf_chunk *c = b->manager->ops->released_head(b->manager); c && r == 0;
         c = c->next) {
        const struct buf_chunk *n = c->next ? c->next : b->current;

        cv = view_of(c);
        if (n)
            nv = view_of(n);
        r = buf__walk_blocks(&cv, n ? &nv : NULL, cb, userdata, &blocks, &skipped);
    }
    if (r == 0 && b->current) {
        cv = view_of(b->current);
        r = buf__walk_blocks(&cv, NULL, cb, userdata, &blocks, &skipped);
    }
    (void)pthread_mutex_unlock(&b->lock);
    return r;
}

int buf_chunked_buffer_each_chunk(struct buf_chunked_buffer *b,
                                  int (*cb)(const struct buf_chunk *chunk, void *userdata),
                                  void *userdata)
{
    int r = 0;

    (void)pthread_mutex_lock(&b->lock);
    for (const struct buf_chunk *c = b->manager->ops->released_head(b->manager); c && r == 0;
         c = c->next)
        r = cb(c, userdata);
    if (r == 0 && b->current)
        r = cb(b->current, userdata);
    (void)pthread_mutex_unlock(&b->lock);
    return r;
}

int buf_chunked_buffer_prepare_next(struct buf_chunked_buffer *b)
{
    int r = 0;

    (void)pthread_mutex_lock(&b->lock);
    if (!b->next)
        r = b->manager->ops->get_chunk(b->manager, &b->next);
    (void)pthread_mutex_unlock(&b->lock);
    return r;
}

void buf_chunked_buffer_destroy_at_or_before(struct buf_chunked_buffer *b, uint64_t done_ns)
{
    (void)pthread_mutex_lock(&b->lock);
    b->manager->ops->destroy_released_at_or_before(b->manager, done_ns);
    (void)pthread_mutex_unlock(&b->lock);
}

void buf_chunked_buffer_clear(struct buf_chunked_buffer *b)
{
    (void)pthread_mutex_lock(&b->lock);
    b->manager->ops->destroy_released_at_or_before(b->manager, UINT64_MAX);
    forget_own_chunks(b);
    (void)pthread_mutex_unlock(&b->lock);
}

void buf_chunked_buffer_set_update_cb(struct buf_chunked_buffer *b, buf_update_cb cb,
                                      void *userdata)
{
    (void)pthread_mutex_lock(&b->lock);
    b->manager->ops->set_update_cb(b->manager, cb, userdata);
    (void)pthread_mutex_unlock(&b->lock);
}

int buf_chunked_buffer_set_limit(struct buf_chunked_buffer *b, uint64_t limit_bytes)
{
    int r;

    (void)pthread_mutex_lock(&b->lock);
    r = b->manager->ops->set_limit(b->manager, limit_bytes);
    (void)pthread_mutex_unlock(&b->lock);
    return r;
}

void buf_chunked_buffer_get_state(struct buf_chunked_buffer *b,
                                  struct buf_chunked_buffer_state *ret_state)
{
    const struct buf_chunk *oldest;

    (void)pthread_mutex_lock(&b->lock);
    oldest = b->manager->ops->released_head(b->manager);
    if (!oldest)
        oldest = b->current;
    ret_state->range_end =
            b->current ? b->current->header.range_start + b->current->header.past_last_block_offset
                       : b->next_range_start;
    ret_state->range_start = oldest ? oldest->header.range_start + oldest->header.first_block_offset
                                    : ret_state->range_end;
    ret_state->pushed_blocks = b->pushed_blocks;
    ret_state->cleared_blocks = b->manager->destroyed_blocks + b->forgotten_blocks;
    ret_state->failed_puts = b->failed_puts;
    ret_state->failed_bytes = b->failed_bytes;
    (void)pthread_mutex_unlock(&b->lock);
}
