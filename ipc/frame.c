/* ipc/frame.c - frame encoding, reassembly of frames from a byte stream, the buffer pool.
 *
 * The reader is a small state machine: prefix bytes one at a time (a prefix may straddle two
 * reads), then envelope bytes. A frame that arrives whole inside one input span is decoded in
 * place, without a copy; otherwise its bytes are collected in a buffer that grows as they
 * arrive, so a peer that announces 4 MiB and sends 1 byte holds 1 byte, not 4 MiB. A large
 * ProfileData frame whose data is its last field (as ipc_frame_encode_profile_header() sends
 * it) can instead be streamed: only its header is collected, and its data bytes are handed on
 * as they arrive, never held (the daemon writes a child's JSON straight to the file).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/leb128.h"
#include "common/grow.h"
#include "common/macros.h"
#include "ipc/ipc-internal.h"
#include "ipc/ipc.h"

/* First allocation for a frame that does not arrive in one piece. */
#define FRAME_BUF_MIN_BYTES    ((size_t)64 << 10)
/* A frame at least this large that does not arrive whole is offered to the piece callbacks:
 * smaller ones cost little to buffer. */
#define PIECE_STREAM_MIN_BYTES ((size_t)16 << 10)
/* Header bytes looked at for a piece's data before buffering the frame instead (a long error
 * text makes a long header: only the last piece has one). */
#define PIECE_HEADER_MAX_BYTES ((size_t)256)

enum {
    IPC__PIECE_NONE,      /* the frame is buffered whole */
    IPC__PIECE_PROBING,   /* collecting the first bytes of a large frame */
    IPC__PIECE_STREAMING, /* its data goes to the piece callbacks as it arrives */
};

size_t ipc_frame_size(const Fleetprof__Envelope *env)
{
    size_t packed = fleetprof__envelope__get_packed_size(env);

    return buf_uleb128_size(packed) + packed;
}

ssize_t ipc__frame_encode_packed(const Fleetprof__Envelope *env, size_t packed, uint8_t *out,
                                 size_t out_len)
{
    size_t prefix = buf_uleb128_size(packed);

    if (out_len < prefix || out_len - prefix < packed)
        return -ENOBUFS;
    (void)buf_uleb128_encode(packed, out);
    if (fleetprof__envelope__pack(env, out + prefix) != packed)
        return -EINVAL; /* cannot happen: protobuf-c packs exactly get_packed_size bytes */
    return (ssize_t)(prefix + packed);
}

ssize_t ipc_frame_encode(const Fleetprof__Envelope *env, uint8_t *out, size_t out_len)
{
    if (!env || env->msg_case == FLEETPROF__ENVELOPE__MSG__NOT_SET)
        return -EINVAL;
    return ipc__frame_encode_packed(env, fleetprof__envelope__get_packed_size(env), out, out_len);
}

/* Wire tags (field number << 3 | wire type 2, length-delimited) of Envelope.profile_data
 * (15) and ProfileData.data (2), from fleetprof.proto; both fit in one byte. */
#define TAG_ENVELOPE_PROFILE_DATA ((15u << 3) | 2u)
#define TAG_PROFILE_DATA_DATA     ((2u << 3) | 2u)

ssize_t ipc_frame_encode_profile_header(const Fleetprof__ProfileData *piece, uint8_t *out,
                                        size_t out_len, size_t *ret_frame_bytes)
{
    Fleetprof__ProfileData rest;
    size_t n, rest_len, piece_len, env_len, header;
    uint8_t *o;

    if (!piece || (piece->data.len > 0 && !piece->data.data) || !ret_frame_bytes)
        return -EINVAL;
    /* Every field but data, packed by protobuf-c; then data's tag and length by hand. */
    rest = *piece;
    rest.data.data = NULL;
    rest.data.len = 0;
    n = piece->data.len;
    rest_len = fleetprof__profile_data__get_packed_size(&rest);
    piece_len = rest_len + (n ? 1 + buf_uleb128_size(n) + n : 0);
    env_len = 1 + buf_uleb128_size(piece_len) + piece_len;
    header = buf_uleb128_size(env_len) + env_len - n;
    if (out && out_len < header)
        return -ENOBUFS;
    *ret_frame_bytes = header + n;
    if (!out)
        return (ssize_t)header;
    o = out;
    o += buf_uleb128_encode(env_len, o);
    *o++ = TAG_ENVELOPE_PROFILE_DATA;
    o += buf_uleb128_encode(piece_len, o);
    if (fleetprof__profile_data__pack(&rest, o) != rest_len)
        return -EINVAL; /* cannot happen: protobuf-c packs exactly get_packed_size bytes */
    o += rest_len;
    if (n) {
        *o++ = TAG_PROFILE_DATA_DATA;
        o += buf_uleb128_encode(n, o);
    }
    return (ssize_t)(o - out);
}

/* ---- pool -------------------------------------------------------------------------------- */

int ipc_pool_init(struct ipc_pool *pool, size_t buf_bytes, size_t max_cached)
{
    pool->free_bufs = NULL;
    pool->n_free = 0;
    pool->max_cached = max_cached;
    pool->buf_bytes = buf_bytes;
    if (max_cached > 0) {
        pool->free_bufs = calloc(max_cached, sizeof(*pool->free_bufs));
        if (!pool->free_bufs)
            return -ENOMEM;
    }
    return 0;
}

void ipc_pool_done(struct ipc_pool *pool)
{
    for (size_t i = 0; i < pool->n_free; i++)
        free(pool->free_bufs[i]);
    free(pool->free_bufs);
    pool->free_bufs = NULL;
    pool->n_free = 0;
    pool->max_cached = 0;
}

void *ipc_pool_get(struct ipc_pool *pool, size_t bytes)
{
    if (bytes > pool->buf_bytes)
        return malloc(bytes);
    if (pool->n_free > 0)
        return pool->free_bufs[--pool->n_free];
    return malloc(pool->buf_bytes);
}

void ipc_pool_put(struct ipc_pool *pool, void *buf, size_t bytes)
{
    if (!buf)
        return;
    if (bytes > pool->buf_bytes || pool->n_free >= pool->max_cached) {
        free(buf);
        return;
    }
    pool->free_bufs[pool->n_free++] = buf;
}

/* ---- reader ------------------------------------------------------------------------------ */

void ipc_reader_init(struct ipc_reader *r, size_t max_frame_bytes)
{
    memset(r, 0, sizeof(*r));
    r->max_frame_bytes = max_frame_bytes ? max_frame_bytes : IPC_FRAME_MAX_BYTES_DEFAULT;
    r->max_decode_bytes = r->max_frame_bytes <= SIZE_MAX / IPC_DECODE_BUDGET_FACTOR
                                  ? r->max_frame_bytes * IPC_DECODE_BUDGET_FACTOR
                                  : SIZE_MAX;
    r->reason = "";
}

static void reset_frame(struct ipc_reader *r)
{
    free(r->frame);
    r->frame = NULL;
    r->cap = 0;
    r->have = 0;
    r->frame_len = 0;
    r->in_frame = false;
    r->len_value = 0;
    r->len_shift = 0;
    r->piece_state = IPC__PIECE_NONE;
    r->piece_left = 0;
}

void ipc_reader_set_piece_cbs(struct ipc_reader *r, const struct ipc_piece_cbs *cbs)
{
    r->piece_cbs = cbs;
}

void ipc_reader_done(struct ipc_reader *r)
{
    reset_frame(r);
    r->arena = ipc__arena_free(r->arena);
}

static ssize_t latch(struct ipc_reader *r, int error, const char *reason)
{
    r->error = error;
    r->reason = reason;
    reset_frame(r);
    return error;
}

/* Decodes, validates and delivers one envelope. */
static int deliver(struct ipc_reader *r, const uint8_t *p, size_t len, ipc_envelope_cb cb,
                   void *userdata)
{
    Fleetprof__Envelope *env = NULL;
    const char *reason = NULL;
    int ret;

    ret = ipc__envelope_decode_arena(&r->arena, p, len, r->max_decode_bytes, &env, &reason);
    if (ret < 0) {
        (void)latch(r, ret, reason ? reason : "undecodable envelope");
        return ret;
    }
    r->frames++;
    ret = cb ? cb(userdata, env) : 0;
    if (r->arena)
        ipc__arena_reset(r->arena);
    else
        (void)ipc_envelope_free(env); /* no arena: decoded with malloc */
    if (ret < 0)
        (void)latch(r, ret, "stopped by the receiver");
    return ret;
}

/* Reads a varint at p[*off..len): 1 (stored, *off past it), 0 when more bytes are needed,
 * -1 when malformed (beyond 64 bits). */
static int read_varint(const uint8_t *p, size_t len, size_t *off, uint64_t *ret)
{
    uint64_t v = 0;

    for (unsigned i = 0; i < IPC_FRAME_PREFIX_MAX_BYTES; i++) {
        uint8_t b;

        if (*off + i >= len)
            return 0;
        b = p[*off + i];
        if (i == IPC_FRAME_PREFIX_MAX_BYTES - 1 && b > 1)
            return -1;
        v |= (uint64_t)(b & 0x7fu) << (7 * i);
        if (!(b & 0x80u)) {
            *off += i + 1;
            *ret = v;
            return 1;
        }
    }
    return -1;
}

/* Finds, in the frame's first bytes, the header of a ProfileData envelope whose data field
 * is the frame's last: stores where the piece's other fields are ([*ret_rest, *ret_rest_end))
 * and where its data starts. Returns 1, 0 when more bytes are needed, -1 when the frame is
 * not one (it is then buffered and decoded whole, which judges it). */
static int piece_header(const struct ipc_reader *r, size_t *ret_rest, size_t *ret_rest_end,
                        size_t *ret_data)
{
    const uint8_t *p = r->frame;
    size_t len = r->have, off = 1;
    uint64_t v;
    int ret;

    if (len == 0)
        return 0;
    if (p[0] != TAG_ENVELOPE_PROFILE_DATA)
        return -1;
    ret = read_varint(p, len, &off, &v);
    if (ret <= 0)
        return ret;
    if (v != r->frame_len - off)
        return -1;
    *ret_rest = off;
    for (;;) {
        size_t field = off;
        uint64_t key;

        ret = read_varint(p, len, &off, &key);
        if (ret <= 0)
            return ret;
        if ((key >> 3) == 0)
            return -1;
        switch (key & 7u) {
        case 0:
            ret = read_varint(p, len, &off, &v);
            if (ret <= 0)
                return ret;
            break;
        case 1:
            off += 8;
            break;
        case 5:
            off += 4;
            break;
        case 2:
            ret = read_varint(p, len, &off, &v);
            if (ret <= 0)
                return ret;
            if (key == TAG_PROFILE_DATA_DATA) {
                if (v != r->frame_len - off)
                    return -1;
                *ret_rest_end = field;
                *ret_data = off;
                return 1;
            }
            if (v > r->frame_len - off)
                return -1;
            off += (size_t)v;
            break;
        default:
            return -1;
        }
        if (off >= PIECE_HEADER_MAX_BYTES || off >= r->frame_len)
            return -1;
        if (off > len)
            return 0;
    }
}

/* Hands n data bytes of the streamed piece on; at its end, calls end. Returns 1 when the piece
 * ended, 0, or the latched error. */
static int piece_bytes(struct ipc_reader *r, const uint8_t *data, size_t n, void *userdata)
{
    int ret = n ? r->piece_cbs->bytes(userdata, data, n) : 0;

    if (ret < 0)
        return (int)latch(r, ret, "stopped by the receiver");
    r->have += n;
    r->piece_left -= n;
    if (r->piece_left > 0)
        return 0;
    ret = r->piece_cbs->end(userdata);
    if (ret < 0)
        return (int)latch(r, ret, "stopped by the receiver");
    r->frames++;
    reset_frame(r);
    return 1;
}

/* With the frame's first bytes collected, decides whether its data is streamed: the envelope
 * without the data is decoded and validated (with the data's length) as the whole would be,
 * and offered to begin. Returns 1 when the piece completed here, 0, or the latched error. */
static int piece_try_begin(struct ipc_reader *r, void *userdata)
{
    uint8_t head[1 + IPC_FRAME_PREFIX_MAX_BYTES + PIECE_HEADER_MAX_BYTES];
    Fleetprof__Envelope *env = NULL;
    size_t rest = 0, rest_end = 0, data = 0, n;
    const char *reason = NULL;
    int ret = piece_header(r, &rest, &rest_end, &data);

    if (ret == 0 && r->have < PIECE_HEADER_MAX_BYTES)
        return 0; /* probing on */
    r->piece_state = IPC__PIECE_NONE;
    if (ret <= 0)
        return 0;
    head[0] = TAG_ENVELOPE_PROFILE_DATA;
    n = 1 + buf_uleb128_encode(rest_end - rest, head + 1);
    memcpy(head + n, r->frame + rest, rest_end - rest);
    n += rest_end - rest;
    if (ipc__envelope_decode_arena(&r->arena, head, n, r->max_decode_bytes, &env, &reason) < 0)
        return 0; /* the whole frame's decode gives the reason */
    ret = 0;
    if (env->msg_case == FLEETPROF__ENVELOPE__MSG_PROFILE_DATA &&
        env->profile_data->data.len == 0) {
        /* Validated with its data's length; any non-NULL pointer stands for the bytes. */
        env->profile_data->data.len = r->frame_len - data;
        env->profile_data->data.data = r->frame;
        if (ipc_envelope_validate(env, &reason) == 0) {
            env->profile_data->data.data = NULL;
            ret = r->piece_cbs->begin(userdata, env);
        }
    }
    if (r->arena)
        ipc__arena_reset(r->arena);
    else
        (void)ipc_envelope_free(env);
    if (ret < 0)
        return (int)latch(r, ret, "stopped by the receiver");
    if (ret == 0)
        return 0;
    r->piece_state = IPC__PIECE_STREAMING;
    r->piece_left = r->frame_len - data;
    n = r->have - data;
    r->have = data;
    ret = piece_bytes(r, r->frame + data, n, userdata);
    if (ret == 0) {
        /* The rest goes on without a buffer. */
        free(r->frame);
        r->frame = NULL;
        r->cap = 0;
    }
    return ret;
}

/* Feeds one prefix byte. Returns 1 when the length is complete (and valid), 0 for more. */
static int feed_prefix_byte(struct ipc_reader *r, uint8_t byte)
{
    uint64_t bits = byte & 0x7fu;

    /* The 10th byte (shift 63) may only hold the top bit of a u64; there is no 11th. */
    if (r->len_shift > 63 || (r->len_shift == 63 && bits > 1))
        return (int)latch(r, -EPROTO, "malformed frame length (over 64 bits)");
    r->len_value |= bits << r->len_shift;
    /* Refuse an oversized length as soon as its bits show it, before the prefix ends. */
    if (r->len_value > r->max_frame_bytes)
        return (int)latch(r, -EMSGSIZE, "frame larger than the maximum frame size");
    if (byte & 0x80u) {
        r->len_shift += 7;
        return 0;
    }
    if (r->len_value == 0)
        return (int)latch(r, -ENOMSG, "zero-length frame");
    r->frame_len = (size_t)r->len_value;
    r->in_frame = true;
    r->have = 0;
    return 1;
}

/* Makes room for want more frame bytes: grows by four (a frame's length is known, so a big
 * one takes few steps), never beyond frame_len. */
static int reserve(struct ipc_reader *r, size_t want)
{
    size_t need = r->have + want, cap;

    if (need <= r->cap)
        return 0;
    cap = r->cap ? r->cap : MIN(r->frame_len, FRAME_BUF_MIN_BYTES);
    while (cap < need)
        cap = cap > r->frame_len / 4 ? r->frame_len : cap * 4;
    if (FLEETPROF_RESIZE(r->frame, cap) < 0)
        return -ENOMEM;
    r->cap = cap;
    return 0;
}

ssize_t ipc_reader_feed(struct ipc_reader *r, const uint8_t *data, size_t len, ipc_envelope_cb cb,
                        void *userdata)
{
    size_t off = 0;
    ssize_t delivered = 0;
    int ret;

    if (r->error)
        return r->error;
    if (!data && len)
        return -EINVAL;
    while (off < len) {
        if (!r->in_frame) {
            ret = feed_prefix_byte(r, data[off++]);
            if (ret < 0)
                return ret;
            if (ret == 0)
                continue;
            /* Whole frame in this span: decode in place. */
            if (len - off >= r->frame_len) {
                size_t n = r->frame_len;

                ret = deliver(r, data + off, n, cb, userdata);
                if (ret < 0)
                    return ret;
                off += n;
                delivered++;
                reset_frame(r);
            } else if (r->piece_cbs && r->frame_len >= PIECE_STREAM_MIN_BYTES) {
                r->piece_state = IPC__PIECE_PROBING;
            }
            continue;
        }
        if (r->piece_state == IPC__PIECE_STREAMING) {
            size_t n = MIN(r->piece_left, len - off);

            ret = piece_bytes(r, data + off, n, userdata);
            if (ret < 0)
                return ret;
            off += n;
            delivered += ret;
            continue;
        }
        {
            size_t n = MIN(r->frame_len - r->have, len - off);

            if (r->piece_state == IPC__PIECE_PROBING)
                n = MIN(n, PIECE_HEADER_MAX_BYTES - r->have);
            if (reserve(r, n) < 0)
                return latch(r, -ENOMEM, "out of memory buffering a frame");
            memcpy(r->frame + r->have, data + off, n);
            r->have += n;
            off += n;
        }
        if (r->piece_state == IPC__PIECE_PROBING) {
            ret = piece_try_begin(r, userdata);
            if (ret < 0)
                return ret;
            delivered += ret;
            if (r->piece_state != IPC__PIECE_NONE || ret > 0)
                continue;
        }
        if (r->have == r->frame_len) {
            ret = deliver(r, r->frame, r->frame_len, cb, userdata);
            if (ret < 0)
                return ret;
            delivered++;
            reset_frame(r);
        }
    }
    return delivered;
}

ssize_t ipc_reader_direct_buf(struct ipc_reader *r, uint8_t **ret_buf)
{
    size_t want;

    if (r->error || !r->in_frame)
        return r->error;
    if (r->piece_state != IPC__PIECE_NONE)
        return 0; /* a piece's header is read through ipc_reader_feed(), its data not kept */
    /* Offer what has arrived so far again (at least 64 KiB): memory stays within twice the
     * bytes received plus 64 KiB. */
    want = MIN(r->frame_len - r->have, MAX(r->have, FRAME_BUF_MIN_BYTES));
    if (reserve(r, want) < 0)
        return latch(r, -ENOMEM, "out of memory buffering a frame");
    *ret_buf = r->frame + r->have;
    return (ssize_t)(r->cap - r->have);
}

ssize_t ipc_reader_commit(struct ipc_reader *r, size_t n, ipc_envelope_cb cb, void *userdata)
{
    int ret;

    if (r->error)
        return r->error;
    if (!r->in_frame || r->piece_state != IPC__PIECE_NONE || n > r->cap - r->have)
        return -EINVAL;
    r->have += n;
    if (r->have < r->frame_len)
        return 0;
    ret = deliver(r, r->frame, r->frame_len, cb, userdata);
    if (ret < 0)
        return ret;
    reset_frame(r);
    return 1;
}

int ipc_reader_end(struct ipc_reader *r)
{
    if (r->error)
        return r->error;
    if (r->in_frame || r->len_shift > 0)
        return (int)latch(r, -ENODATA, "stream ended inside a frame");
    return 0;
}

const char *ipc_reader_reason(const struct ipc_reader *r)
{
    return r->reason ? r->reason : "";
}

size_t ipc_reader_pending_bytes(const struct ipc_reader *r)
{
    return r->in_frame ? r->have : 0;
}
