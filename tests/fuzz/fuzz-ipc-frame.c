/* tests/fuzz/fuzz-ipc-frame.c - frame reassembly with random split points.
 *
 * Input: byte 0 seeds the split points and picks the frame limit; the rest is a byte stream
 * as a peer would send it. The stream is fed to one reader whole, to another in pieces of
 * pseudo-random sizes (1 byte to the whole), and to a third the way the uv transport does it
 * (reading into ipc_reader_direct_buf() inside a frame, then ipc_reader_commit()), and to a
 * fourth in pieces with piece callbacks that take every large ProfileData piece they are
 * offered (its envelope is put back together from its header and data). All must agree
 * exactly: same envelopes (compared by their re-encoding), same error, same end-of-stream
 * verdict. Any crash, sanitizer report or disagreement is a bug.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/ipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct digest {
    uint64_t hash; /* FNV-1a over the re-encoded frames */
    uint64_t count;
    uint8_t *header; /* a streamed piece: its envelope without the data, packed */
    size_t header_len;
    uint8_t *data; /* its data so far */
    size_t data_len, data_want;
};

static int absorb(void *userdata, const Fleetprof__Envelope *env)
{
    struct digest *d = userdata;
    uint8_t stack_buf[4096];
    size_t n = ipc_frame_size(env);
    uint8_t *buf = n <= sizeof(stack_buf) ? stack_buf : malloc(n);
    const char *reason;

    if (!buf)
        return -12;
    /* What the reader delivers is always valid and re-encodable. */
    if (ipc_envelope_validate(env, &reason) != 0 || ipc_frame_encode(env, buf, n) != (ssize_t)n)
        __builtin_trap();
    for (size_t i = 0; i < n; i++)
        d->hash = (d->hash ^ buf[i]) * 0x100000001b3ull;
    d->count++;
    if (buf != stack_buf)
        free(buf);
    return 0;
}

static int piece_begin(void *userdata, const Fleetprof__Envelope *env)
{
    struct digest *d = userdata;
    Fleetprof__ProfileData piece = *env->profile_data;
    Fleetprof__Envelope copy = *env;

    if (env->msg_case != FLEETPROF__ENVELOPE__MSG_PROFILE_DATA || piece.data.data || d->header)
        __builtin_trap();
    d->data_want = piece.data.len;
    piece.data.len = 0;
    copy.profile_data = &piece;
    d->header_len = fleetprof__envelope__get_packed_size(&copy);
    d->header = malloc(d->header_len);
    d->data = malloc(d->data_want);
    if (!d->header || !d->data)
        return -12;
    (void)fleetprof__envelope__pack(&copy, d->header);
    d->data_len = 0;
    return 1;
}

static int piece_bytes(void *userdata, const uint8_t *data, size_t len)
{
    struct digest *d = userdata;

    if (!d->header || len > d->data_want - d->data_len)
        __builtin_trap();
    memcpy(d->data + d->data_len, data, len);
    d->data_len += len;
    return 0;
}

static void piece_drop(struct digest *d)
{
    free(d->header);
    free(d->data);
    d->header = d->data = NULL;
}

/* The piece's envelope, put back together, is absorbed as if it had come whole. */
static int piece_end(void *userdata)
{
    struct digest *d = userdata;
    Fleetprof__Envelope *env = NULL;
    int r;

    if (!d->header || d->data_len != d->data_want)
        __builtin_trap();
    if (ipc_envelope_decode(d->header, d->header_len, 0, &env, NULL) != 0)
        __builtin_trap();
    env->profile_data->data.data = d->data;
    env->profile_data->data.len = d->data_len;
    r = absorb(d, env);
    env->profile_data->data.data = NULL;
    env->profile_data->data.len = 0;
    ipc_envelope_free(env);
    piece_drop(d);
    return r;
}

static const struct ipc_piece_cbs piece_cbs = {piece_begin, piece_bytes, piece_end};

enum mode {
    WHOLE,    /* one feed */
    PIECES,   /* random piece sizes */
    DIRECT,   /* random piece sizes, read into the frame buffer when offered */
    STREAMED, /* random piece sizes, large ProfileData pieces taken as they arrive */
};

/* Feeds n bytes like the transport: into the reader's own buffer when it offers one. */
static ssize_t feed_direct(struct ipc_reader *r, const uint8_t *p, size_t n, struct digest *d)
{
    ssize_t total = 0;

    while (n > 0) {
        uint8_t *buf = NULL;
        ssize_t room = ipc_reader_direct_buf(r, &buf), got;
        size_t k;

        if (room < 0)
            return room;
        if (room == 0) {
            got = ipc_reader_feed(r, p, n, absorb, d);
            return got < 0 ? got : total + got;
        }
        k = (size_t)room < n ? (size_t)room : n;
        memcpy(buf, p, k);
        got = ipc_reader_commit(r, k, absorb, d);
        if (got < 0)
            return got;
        total += got;
        p += k;
        n -= k;
    }
    return total;
}

static int run(const uint8_t *p, size_t len, size_t max_frame, uint64_t split_state, enum mode mode,
               struct digest *d)
{
    struct ipc_reader r;
    size_t off = 0;
    ssize_t got = 0;
    int end;

    ipc_reader_init(&r, max_frame);
    if (mode == STREAMED)
        ipc_reader_set_piece_cbs(&r, &piece_cbs);
    while (off < len && got >= 0) {
        size_t n = len - off;

        if (mode != WHOLE) {
            split_state = split_state * 6364136223846793005ull + 1442695040888963407ull;
            /* Mostly tiny pieces, sometimes large ones. */
            n = (split_state >> 60) < 12 ? (size_t)(split_state >> 61) + 1
                                         : (size_t)(split_state >> 33) % (len - off) + 1;
            if (n > len - off)
                n = len - off;
        }
        if (mode == DIRECT)
            got = feed_direct(&r, p + off, n, d);
        else
            got = ipc_reader_feed(&r, p + off, n, absorb, d);
        off += n;
    }
    end = ipc_reader_end(&r);
    if (got < 0 && end != got)
        __builtin_trap(); /* the error latches */
    if (ipc_reader_feed(&r, p, len, absorb, d) != (end < 0 ? end : 0) && len > 0 && end < 0)
        __builtin_trap();
    ipc_reader_done(&r);
    piece_drop(d); /* a piece cut short by an error or the end */
    return end;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct digest whole = {.hash = 0xcbf29ce484222325ull}, pieces = whole, direct = whole,
                  streamed = whole;
    uint64_t seed;
    size_t max_frame;
    int e1, e2, e3, e4;

    if (size < 1)
        return 0;
    max_frame = (data[0] & 1) ? 0 : 16 + (size_t)data[0] * 4;
    seed = data[0] * 0x9e3779b97f4a7c15ull + size;
    e1 = run(data + 1, size - 1, max_frame, 0, WHOLE, &whole);
    e2 = run(data + 1, size - 1, max_frame, seed, PIECES, &pieces);
    e3 = run(data + 1, size - 1, max_frame, seed ^ 0x5555, DIRECT, &direct);
    e4 = run(data + 1, size - 1, max_frame, seed ^ 0xaaaa, STREAMED, &streamed);
    if (e1 != e2 || whole.hash != pieces.hash || whole.count != pieces.count)
        __builtin_trap();
    if (e1 != e3 || whole.hash != direct.hash || whole.count != direct.count)
        __builtin_trap();
    if (e1 != e4 || whole.hash != streamed.hash || whole.count != streamed.count)
        __builtin_trap();
    return 0;
}
