/* buffer/chunk.h - one chunk of a profile buffer: a fixed header and a run of blocks.
 *
 * A chunk is written by one chunked buffer at a time, then released to its chunk manager,
 * which may destroy or recycle it. Its done time (CLOCK_MONOTONIC ns) is its identity across
 * processes. Blocks are `ULEB128 size` + `size` bytes; the last block of a chunk may continue
 * at the start of the next chunk (whose first_block_offset skips that tail), never further.
 * Full layout, states and rules: docs/buffer-format.md.
 *
 * Chunk image (what buf_chunk_image() returns; native endianness, never sent over the wire):
 *
 *    0                   4                   8                  12                  16
 *    +-------------------+-------------------+-------------------+-------------------+
 *    | magic "FPCK"      | buffer_bytes      | first_block_off   | past_last_block   |
 *    +-------------------+-------------------+-------------------+-------------------+
 *    | block_count       | pid               | start_ns (u64)                        |
 *    +-------------------+-------------------+---------------------------------------+
 *    | done_ns (u64, 0 while in use)         | range_start (u64, 0 = unset)          |
 *    +---------------------------------------+---------------------------------------+
 * 48 | bytes[buffer_bytes]: blocks, each ULEB128(size) then size bytes (size > 0)      |
 *    +---------------------------------------------------------------------------------+
 */
#ifndef FLEETPROF_BUFFER_CHUNK_H
#define FLEETPROF_BUFFER_CHUNK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define BUF_CHUNK_MAGIC        0x4b435046u /* "FPCK" read as little-endian bytes */
#define BUF_CHUNK_HEADER_BYTES 48u
/* Largest buffer a chunk may have: offsets are u32 and images must stay addressable. */
#define BUF_CHUNK_MAX_BYTES    (1u << 30)

struct buf_chunk_header {
    uint32_t magic;                  /* BUF_CHUNK_MAGIC */
    uint32_t buffer_bytes;           /* size of bytes[] */
    uint32_t first_block_offset;     /* first block that starts here (skips a straddling tail) */
    uint32_t past_last_block_offset; /* end of written bytes */
    uint32_t block_count;            /* blocks that *start* in this chunk */
    int32_t pid;                     /* process that wrote it */
    uint64_t start_ns;               /* when it became the current chunk */
    uint64_t done_ns;                /* when it was full; 0 while in use */
    uint64_t range_start;            /* global index of bytes[0]; 0 = never used */
};

_Static_assert(sizeof(struct buf_chunk_header) == BUF_CHUNK_HEADER_BYTES,
               "chunk header layout is part of the image format");

struct buf_chunk; /* opaque */

/* Allocates a chunk with exactly buffer_bytes (1..BUF_CHUNK_MAX_BYTES) of buffer, in state
 * Created. Returns 0 and stores it in *ret_chunk (caller owns it), -EINVAL for a bad size or
 * -ENOMEM; *ret_chunk is untouched on failure. */
int buf_chunk_new(uint32_t buffer_bytes, struct buf_chunk **ret_chunk);

/* Accepts NULL; always returns NULL, so callers write c = buf_chunk_free(c). */
struct buf_chunk *buf_chunk_free(struct buf_chunk *chunk);

/* The chunk's header (borrowed; valid as long as the chunk). */
const struct buf_chunk_header *buf_chunk_header(const struct buf_chunk *chunk);

/* The chunk as one contiguous image, header then buffer bytes (borrowed). */
void buf_chunk_image(const struct buf_chunk *chunk, const uint8_t **ret_image, size_t *ret_len);

/* Reading blocks. The callback gets a reader over the block's bytes (which may be split in
 * two spans when the block straddles two chunks) and the block's global index. A non-zero
 * return stops the walk and is returned by the walker. */
struct buf_entry_reader {
    const uint8_t *span[2]; /* borrowed: inside the chunk(s), valid during the callback */
    size_t len[2];
    size_t pos; /* bytes consumed so far, over both spans */
};
typedef int (*buf_read_cb)(struct buf_entry_reader *reader, uint64_t block_index, void *userdata);

/* The general cases (straddling spans, errors) of the inline readers below. */
int buf__entry_reader_read_slow(struct buf_entry_reader *r, void *dst, size_t len);
int buf__entry_reader_read_uleb128_slow(struct buf_entry_reader *r, uint64_t *ret_value);

/* The readers are inline: decoding a profile calls them for every field of every entry, and
 * nearly every read lies within the first span. */

/* Bytes of the entry not read yet. */
static inline size_t buf_entry_reader_remaining(const struct buf_entry_reader *r)
{
    return r->len[0] + r->len[1] - r->pos;
}

/* Copies the next len bytes to dst. Returns 0, or -EBADMSG (nothing copied) if fewer remain. */
static inline int buf_entry_reader_read(struct buf_entry_reader *r, void *dst, size_t len)
{
    if (r->pos <= r->len[0] && len <= r->len[0] - r->pos) {
        memcpy(dst, r->span[0] + r->pos, len);
        r->pos += len;
        return 0;
    }
    return buf__entry_reader_read_slow(r, dst, len);
}

/* Decodes a ULEB128 value. Returns 0, -EBADMSG (truncated) or -EOVERFLOW. */
static inline int buf_entry_reader_read_uleb128(struct buf_entry_reader *r, uint64_t *ret_value)
{
    /* Up to 9 bytes (63 bits) within the first span cannot overflow; the rest is slow. */
    if (r->pos < r->len[0]) {
        const uint8_t *p = r->span[0] + r->pos;
        size_t avail = r->len[0] - r->pos;
        uint64_t value = 0;

        for (size_t i = 0; i < avail && i < 9; i++) {
            value |= (uint64_t)(p[i] & 0x7f) << (7 * i);
            if (!(p[i] & 0x80)) {
                r->pos += i + 1;
                *ret_value = value;
                return 0;
            }
        }
    }
    return buf__entry_reader_read_uleb128_slow(r, ret_value);
}

/* What buf_chunk_images_read_each() found. */
struct buf_images_stats {
    uint64_t chunks;         /* valid chunk images walked */
    uint64_t blocks;         /* blocks given to the callback */
    uint64_t skipped_tails;  /* straddling blocks whose other half is absent */
    uint64_t corrupt_chunks; /* images whose header or blocks contradict each other */
};

/* Walks the blocks of consecutive chunk images laid end to end in mem, as a recovery tool or
 * the daemon would read memory it does not trust: every header field and every block size
 * is checked before use; a chunk that contradicts itself is counted as corrupt and its
 * blocks are skipped; a straddling block is read only when the next image continues the
 * range. Returns 0, -EBADMSG if the images do not tile mem exactly (stats still filled), or
 * the callback's non-zero value. Never reads outside [mem, mem + len). */
int buf_chunk_images_read_each(const uint8_t *mem, size_t len, buf_read_cb cb, void *userdata,
                               struct buf_images_stats *ret_stats);

#endif /* FLEETPROF_BUFFER_CHUNK_H */
