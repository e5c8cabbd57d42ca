/* buffer/chunk.c - chunk allocation, state changes, entry reader and the block walker.
 *
 * The walker is the only code that parses blocks. It treats headers as untrusted (bounds
 * before use), so the chunked buffer's reads and recovery from foreign memory share it.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buf-internal.h"
#include "buffer/leb128.h"

int buf_chunk_new(uint32_t buffer_bytes, struct buf_chunk **ret_chunk)
{
    struct buf_chunk *c;

    if (buffer_bytes == 0 || buffer_bytes > BUF_CHUNK_MAX_BYTES)
        return -EINVAL;
    c = malloc(sizeof(*c) + buffer_bytes);
    if (!c)
        return -ENOMEM;
    memset(c, 0, sizeof(*c));
    c->state = BUF_CHUNK_CREATED;
    c->header.magic = BUF_CHUNK_MAGIC;
    c->header.buffer_bytes = buffer_bytes;
    *ret_chunk = c;
    return 0;
}

struct buf_chunk *buf_chunk_free(struct buf_chunk *chunk)
{
    free(chunk);
    return NULL;
}

const struct buf_chunk_header *buf_chunk_header(const struct buf_chunk *chunk)
{
    return &chunk->header;
}

void buf_chunk_image(const struct buf_chunk *chunk, const uint8_t **ret_image, size_t *ret_len)
{
    *ret_image = (const uint8_t *)&chunk->header;
    *ret_len = BUF_CHUNK_HEADER_BYTES + chunk->header.buffer_bytes;
}

void buf__chunk_set_in_use(struct buf_chunk *c, uint64_t range_start, uint64_t now_ns)
{
    assert(c->state == BUF_CHUNK_CREATED || c->state == BUF_CHUNK_RECYCLED);
    assert(range_start != 0);
    c->state = BUF_CHUNK_IN_USE;
    c->next = NULL;
    c->header.first_block_offset = 0;
    c->header.past_last_block_offset = 0;
    c->header.block_count = 0;
    c->header.start_ns = now_ns;
    c->header.done_ns = 0;
    c->header.range_start = range_start;
}

void buf__chunk_mark_done(struct buf_chunk *c, uint64_t done_ns)
{
    assert(c->state == BUF_CHUNK_IN_USE);
    assert(done_ns != 0);
    c->state = BUF_CHUNK_DONE;
    c->header.done_ns = done_ns;
}

void buf__chunk_mark_recycled(struct buf_chunk *c)
{
    /* Any state: a prepared next chunk may be given back before it was ever used. */
    c->state = BUF_CHUNK_RECYCLED;
    c->next = NULL;
    c->header.range_start = 0;
    c->header.done_ns = 0;
}

int buf__entry_reader_read_slow(struct buf_entry_reader *r, void *dst, size_t len)
{
    uint8_t *out = dst;

    if (len > buf_entry_reader_remaining(r))
        return -EBADMSG;
    if (r->pos < r->len[0]) {
        size_t n = r->len[0] - r->pos;

        if (n > len)
            n = len;
        memcpy(out, r->span[0] + r->pos, n);
        r->pos += n;
        out += n;
        len -= n;
    }
    if (len > 0) {
        memcpy(out, r->span[1] + (r->pos - r->len[0]), len);
        r->pos += len;
    }
    return 0;
}

int buf__entry_reader_read_uleb128_slow(struct buf_entry_reader *r, uint64_t *ret_value)
{
    struct buf_uleb128_decoder d;
    size_t start = r->pos;

    buf_uleb128_decoder_init(&d);
    while (buf_entry_reader_remaining(r) > 0) {
        uint8_t byte;
        int k;

        (void)buf_entry_reader_read(r, &byte, 1);
        k = buf_uleb128_decoder_feed(&d, byte, ret_value);
        if (k < 0) {
            r->pos = start;
            return k;
        }
        if (k > 0)
            return 0;
    }
    r->pos = start;
    return -EBADMSG;
}

/* A chunk header is usable only if its offsets fit its buffer. */
static bool header_is_sane(const struct buf_chunk_header *h)
{
    return h->magic == BUF_CHUNK_MAGIC && h->buffer_bytes > 0 &&
           h->buffer_bytes <= BUF_CHUNK_MAX_BYTES &&
           h->first_block_offset <= h->past_last_block_offset &&
           h->past_last_block_offset <= h->buffer_bytes;
}

/* Does `next` continue `c` in the index space, so that c's last block may end there? */
static bool continues(const struct buf_chunk_header *c, const struct buf_chunk_header *next)
{
    return next && header_is_sane(next) && c->range_start != 0 &&
           next->range_start == c->range_start + c->buffer_bytes;
}

int buf__walk_blocks(const struct buf__chunk_view *c, const struct buf__chunk_view *next,
                     buf_read_cb cb, void *userdata, uint64_t *blocks, uint64_t *skipped_tails)
{
    const struct buf_chunk_header *h = c->header;
    const struct buf_chunk_header *nh = next ? next->header : NULL;
    size_t pos = h->first_block_offset;
    size_t end = h->past_last_block_offset;

    if (!header_is_sane(h))
        return -EBADMSG;
    for (uint32_t i = 0; i < h->block_count; i++) {
        struct buf_uleb128_decoder d;
        struct buf_entry_reader r = {0};
        uint64_t size = 0;
        size_t block_start = pos, tail_used = 0, tail_avail = 0;
        bool last = i + 1 == h->block_count;
        int k = 0;

        /* Only the last block may straddle, and only into a chunk that continues this one
         * and whose first_block_offset is exactly the tail. */
        if (last && end == h->buffer_bytes && continues(h, nh))
            tail_avail = nh->first_block_offset;

        buf_uleb128_decoder_init(&d);
        /* Block sizes of one or two bytes within the chunk (blocks under 16 KiB, nearly all):
         * decoded here rather than a call per byte; the same value the decoder gives. */
        if (pos < end && c->bytes[pos] < 0x80) {
            size = c->bytes[pos++];
            k = 1;
        } else if (end - pos >= 2 && c->bytes[pos + 1] < 0x80) {
            size = (c->bytes[pos] & 0x7fu) | (uint64_t)c->bytes[pos + 1] << 7;
            pos += 2;
            k = 1;
        }
        while (k == 0) {
            uint8_t byte;

            if (pos < end)
                byte = c->bytes[pos++];
            else if (tail_used < tail_avail)
                byte = next->bytes[tail_used++];
            else if (last && end == h->buffer_bytes && !continues(h, nh))
                goto skipped_tail;
            else
                return -EBADMSG;
            k = buf_uleb128_decoder_feed(&d, byte, &size);
        }
        if (k < 0 || size == 0 || size >= BUF_CHUNK_MAX_BYTES)
            return -EBADMSG;

        if (size <= end - pos && tail_used == 0) {
            r.span[0] = c->bytes + pos;
            r.len[0] = (size_t)size;
            pos += (size_t)size;
        } else {
            size_t first = end - pos;

            if (!last)
                return -EBADMSG;
            if (end != h->buffer_bytes || !continues(h, nh))
                goto skipped_tail;
            if (size - first != tail_avail - tail_used)
                return -EBADMSG;
            r.span[0] = c->bytes + pos;
            r.len[0] = first;
            r.span[1] = next->bytes + tail_used;
            r.len[1] = (size_t)size - first;
            pos = end;
        }
        (*blocks)++;
        k = cb(&r, h->range_start + block_start, userdata);
        if (k != 0)
            return k;
        continue;

skipped_tail:
        (*skipped_tails)++;
        return 0;
    }
    return pos == end ? 0 : -EBADMSG;
}

int buf_chunk_images_read_each(const uint8_t *mem, size_t len, buf_read_cb cb, void *userdata,
                               struct buf_images_stats *ret_stats)
{
    struct buf_images_stats stats = {0};
    struct buf_chunk_header cur, nxt;
    struct buf__chunk_view cv, nv;
    size_t off = 0;
    int r = 0;

    /* Headers are copied out: the image may be unaligned, and the walker must see values
     * that cannot change under it. */
    while (off < len) {
        size_t cur_len, next_off;
        bool have_next = false;

        if (len - off < BUF_CHUNK_HEADER_BYTES) {
            r = -EBADMSG;
            break;
        }
        memcpy(&cur, mem + off, sizeof(cur));
        if (cur.magic != BUF_CHUNK_MAGIC || cur.buffer_bytes > BUF_CHUNK_MAX_BYTES ||
            cur.buffer_bytes > len - off - BUF_CHUNK_HEADER_BYTES) {
            r = -EBADMSG;
            break;
        }
        cur_len = BUF_CHUNK_HEADER_BYTES + cur.buffer_bytes;
        next_off = off + cur_len;
        if (len - next_off >= BUF_CHUNK_HEADER_BYTES) {
            memcpy(&nxt, mem + next_off, sizeof(nxt));
            have_next = nxt.magic == BUF_CHUNK_MAGIC &&
                        nxt.buffer_bytes <= len - next_off - BUF_CHUNK_HEADER_BYTES;
        }
        cv = (struct buf__chunk_view){&cur, mem + off + BUF_CHUNK_HEADER_BYTES};
        nv = (struct buf__chunk_view){&nxt, mem + next_off + BUF_CHUNK_HEADER_BYTES};
        r = buf__walk_blocks(&cv, have_next ? &nv : NULL, cb, userdata, &stats.blocks,
                             &stats.skipped_tails);
        if (r == -EBADMSG) {
            stats.corrupt_chunks++;
            r = 0;
        } else if (r != 0) {
            break;
        } else {
            stats.chunks++;
        }
        off = next_off;
    }
    if (ret_stats)
        *ret_stats = stats;
    return r;
}
