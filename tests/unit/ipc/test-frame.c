/* Unit tests for ipc/frame.c and ipc/stream.c: encoding, reassembly across every split point
 * and random ones, hostile frames (garbage, truncated, oversized, zero-length, wrong oneof),
 * the pool, and cutting a payload into ProfileData pieces. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/leb128.h"
#include "ipc-samples.h"
#include "ipc/ipc.h"
#include "testlib.h"

/* Collects what a reader delivers: the message kinds and the re-encoded frames. */
struct sink {
    size_t count;
    Fleetprof__Envelope__MsgCase kinds[256];
    uint8_t *bytes; /* concatenation of re-encoded frames */
    size_t len, cap;
    int stop_after; /* return -ECANCELED after this many, if > 0 */
};

static int collect(void *userdata, const Fleetprof__Envelope *env)
{
    struct sink *s = userdata;
    size_t need = ipc_frame_size(env);

    assert_true(s->count < ARRAY_SIZE(s->kinds));
    s->kinds[s->count++] = env->msg_case;
    if (s->len + need > s->cap) {
        s->cap = (s->len + need) * 2;
        s->bytes = realloc(s->bytes, s->cap);
        assert_non_null(s->bytes);
    }
    assert_int_equal(ipc_frame_encode(env, s->bytes + s->len, need), (ssize_t)need);
    s->len += need;
    if (s->stop_after > 0 && s->count == (size_t)s->stop_after)
        return -ECANCELED;
    return 0;
}

static void sink_reset(struct sink *s)
{
    free(s->bytes);
    memset(s, 0, sizeof(*s));
}

/* The encoded frames of all samples, concatenated. */
static uint8_t *sample_stream(size_t *ret_len, size_t *ret_count)
{
    size_t n, len = 0, cap = 0;
    const Fleetprof__Envelope *const *samples = ipc_samples(&n);
    uint8_t *buf;

    for (size_t i = 0; i < n; i++)
        cap += ipc_frame_size(samples[i]);
    buf = malloc(cap);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) {
        ssize_t w = ipc_frame_encode(samples[i], buf + len, cap - len);

        assert_true(w > 0);
        len += (size_t)w;
    }
    assert_int_equal(len, cap);
    *ret_len = len;
    *ret_count = n;
    return buf;
}

static void test_encode(void **state)
{
    size_t n;
    const Fleetprof__Envelope *const *samples = ipc_samples(&n);
    Fleetprof__Envelope empty = FLEETPROF__ENVELOPE__INIT;
    uint8_t buf[4096];
    uint64_t len;

    (void)state;
    for (size_t i = 0; i < n; i++) {
        size_t size = ipc_frame_size(samples[i]);
        ssize_t prefix;

        assert_true(size <= sizeof(buf));
        assert_int_equal(ipc_frame_encode(samples[i], buf, size - 1), -ENOBUFS);
        assert_int_equal(ipc_frame_encode(samples[i], buf, size), (ssize_t)size);
        prefix = buf_uleb128_decode(buf, size, &len);
        assert_true(prefix > 0);
        assert_true(len == size - (size_t)prefix);
        assert_true(len == fleetprof__envelope__get_packed_size(samples[i]));
    }
    assert_int_equal(ipc_frame_encode(&empty, buf, sizeof(buf)), -EINVAL);
}

/* Feeds stream in the given pieces and checks every sample comes out, identical. */
static void feed_pieces(const uint8_t *stream, size_t len, size_t count, const size_t *cuts,
                        size_t n_cuts)
{
    struct ipc_reader r;
    struct sink s = {0};
    size_t off = 0, delivered = 0;

    ipc_reader_init(&r, 0);
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        ssize_t got = ipc_reader_feed(&r, stream + off, end - off, collect, &s);

        assert_true(got >= 0);
        delivered += (size_t)got;
        off = end;
    }
    assert_int_equal(ipc_reader_end(&r), 0);
    assert_int_equal(delivered, count);
    assert_int_equal(s.count, count);
    assert_int_equal(s.len, len);
    assert_memory_equal(s.bytes, stream, len);
    assert_int_equal(ipc_reader_pending_bytes(&r), 0);
    ipc_reader_done(&r);
    sink_reset(&s);
}

static void test_split_at_every_point(void **state)
{
    size_t len, count;
    uint8_t *stream = sample_stream(&len, &count);

    (void)state;
    feed_pieces(stream, len, count, &len, 0); /* no cut */
    for (size_t cut = 0; cut <= len; cut++)
        feed_pieces(stream, len, count, &cut, 1);
    free(stream);
}

static void test_one_byte_at_a_time(void **state)
{
    size_t len, count;
    uint8_t *stream = sample_stream(&len, &count);
    size_t *cuts = malloc(len * sizeof(*cuts));

    (void)state;
    assert_non_null(cuts);
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    feed_pieces(stream, len, count, cuts, len - 1);
    free(cuts);
    free(stream);
}

static void test_random_splits(void **state)
{
    struct test_rng rng;
    size_t len, count;
    uint8_t *stream = sample_stream(&len, &count);
    size_t cuts[64];

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int iter = 0; iter < 2000; iter++) {
        size_t n_cuts = (size_t)test_rng_range(&rng, 1, ARRAY_SIZE(cuts));

        for (size_t i = 0; i < n_cuts; i++)
            cuts[i] = (size_t)test_rng_range(&rng, 0, len);
        /* Sorted (duplicates give empty pieces, which must be harmless). */
        for (size_t i = 1; i < n_cuts; i++)
            for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
                size_t t = cuts[j];

                cuts[j] = cuts[j - 1];
                cuts[j - 1] = t;
            }
        feed_pieces(stream, len, count, cuts, n_cuts);
    }
    free(stream);
}

/* A large frame (a 1 MiB ProfileData piece) arriving in small reads, among small frames. */
static void test_large_frame_in_pieces(void **state)
{
    struct test_rng rng;
    Fleetprof__Envelope env;
    Fleetprof__ProfileData piece;
    struct ipc_profile_stream ps;
    size_t payload_len = IPC_PROFILE_PIECE_MAX_BYTES, cap, len = 0;
    uint8_t *payload = malloc(payload_len), *stream;
    struct ipc_reader r;
    struct sink s = {0};

    (void)state;
    assert_non_null(payload);
    test_rng_init(&rng, test_seed());
    test_rng_fill(&rng, payload, payload_len);
    ipc_profile_stream_init(&ps, 5, payload, payload_len, 0, false, NULL);
    assert_int_equal(ipc_profile_stream_next(&ps, &env, &piece), 1);
    assert_true(ipc_profile_stream_done(&ps));
    cap = ipc_frame_size(&env) * 2;
    stream = malloc(cap);
    assert_non_null(stream);
    len += (size_t)ipc_frame_encode(&env, stream, cap);
    len += (size_t)ipc_frame_encode(&env, stream + len, cap - len);

    ipc_reader_init(&r, 0);
    for (size_t off = 0; off < len;) {
        /* MIN() evaluates its arguments twice: draw the random size once. */
        size_t want = (size_t)test_rng_range(&rng, 1, 100000);
        size_t n = MIN(len - off, want);

        assert_true(ipc_reader_feed(&r, stream + off, n, collect, &s) >= 0);
        off += n;
        assert_true(ipc_reader_pending_bytes(&r) <= ipc_frame_size(&env));
    }
    assert_int_equal(s.count, 2);
    assert_memory_equal(s.bytes, stream, len);
    ipc_reader_done(&r);
    sink_reset(&s);
    free(stream);
    free(payload);
}

/* Feeds bytes in one piece and in single bytes; both must end in the same error. */
static void expect_error(const uint8_t *bytes, size_t len, size_t max_frame, int code,
                         size_t good_before)
{
    for (int mode = 0; mode < 2; mode++) {
        struct ipc_reader r;
        struct sink s = {0};
        ssize_t got = 0;

        ipc_reader_init(&r, max_frame);
        if (mode == 0) {
            got = ipc_reader_feed(&r, bytes, len, collect, &s);
        } else {
            for (size_t i = 0; i < len && got >= 0; i++)
                got = ipc_reader_feed(&r, bytes + i, 1, collect, &s);
        }
        if (got >= 0)
            got = ipc_reader_end(&r);
        assert_int_equal(got, code);
        assert_int_equal(s.count, good_before);
        assert_true(strlen(ipc_reader_reason(&r)) > 0);
        /* Latched: nothing more is consumed, even a good frame. */
        assert_int_equal(ipc_reader_feed(&r, bytes, len, collect, &s), code);
        assert_int_equal(s.count, good_before);
        assert_int_equal(ipc_reader_end(&r), code);
        ipc_reader_done(&r);
        sink_reset(&s);
    }
}

static void test_hostile_frames(void **state)
{
    static const uint8_t zero_len[] = {0x00};
    static const uint8_t long_prefix[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                          0x80, 0x80, 0x80, 0x80, 0x01};
    static const uint8_t wide_prefix[] = {0x80, 0x80, 0x80, 0x80, 0x80,
                                          0x80, 0x80, 0x80, 0x80, 0x02};
    static const uint8_t oversized[] = {0x81, 0x80, 0x80, 0x02}; /* 4 MiB + 1 */
    static const uint8_t huge[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const uint8_t wrong_oneof[] = {0x03, 0xf8, 0x06, 0x01}; /* field 111 only */
    static const uint8_t empty_envelope[] = {0x02, 0xf8, 0x06};    /* truncated varint field */
    static const uint8_t garbage[] = {0x04, 0xff, 0xff, 0xff, 0xff};
    static const uint8_t truncated_prefix[] = {0x80};
    static const uint8_t truncated_body[] = {0x10, 0x0a, 0x02};
    static const uint8_t invalid_hello[] = {0x04, 0x0a, 0x02, 0x18, 0x05}; /* id 0 */
    size_t len, count;
    uint8_t *stream = sample_stream(&len, &count);
    uint8_t *mixed = malloc(len + sizeof(garbage));

    (void)state;
    expect_error(zero_len, sizeof(zero_len), 0, -ENOMSG, 0);
    expect_error(long_prefix, sizeof(long_prefix), SIZE_MAX, -EPROTO, 0);
    expect_error(wide_prefix, sizeof(wide_prefix), SIZE_MAX, -EPROTO, 0);
    expect_error(oversized, sizeof(oversized), 0, -EMSGSIZE, 0);
    expect_error(huge, sizeof(huge), 0, -EMSGSIZE, 0);
    expect_error(wrong_oneof, sizeof(wrong_oneof), 0, -ENOMSG, 0);
    expect_error(empty_envelope, sizeof(empty_envelope), 0, -EBADMSG, 0);
    expect_error(garbage, sizeof(garbage), 0, -EBADMSG, 0);
    expect_error(truncated_prefix, sizeof(truncated_prefix), 0, -ENODATA, 0);
    expect_error(truncated_body, sizeof(truncated_body), 0, -ENODATA, 0);
    expect_error(invalid_hello, sizeof(invalid_hello), 0, -EBADMSG, 0);

    /* Good frames before the bad one are delivered; a frame cut short is truncated. */
    assert_non_null(mixed);
    memcpy(mixed, stream, len);
    memcpy(mixed + len, garbage, sizeof(garbage));
    expect_error(mixed, len + sizeof(garbage), 0, -EBADMSG, count);
    expect_error(stream, len - 1, 0, -ENODATA, count - 1);
    /* A smaller limit: the largest sample no longer fits. */
    expect_error(stream, len, 8, -EMSGSIZE, 0);
    free(mixed);
    free(stream);
}

/* The oversized length is refused on its own bytes, before any body arrives. */
static void test_oversized_refused_before_buffering(void **state)
{
    struct ipc_reader r;
    uint8_t prefix[IPC_FRAME_PREFIX_MAX_BYTES];
    size_t n = buf_uleb128_encode(IPC_FRAME_MAX_BYTES_DEFAULT + 1, prefix);

    (void)state;
    ipc_reader_init(&r, 0);
    assert_int_equal(ipc_reader_feed(&r, prefix, n, collect, NULL), -EMSGSIZE);
    assert_int_equal(ipc_reader_pending_bytes(&r), 0);
    ipc_reader_done(&r);

    /* Exactly the limit is fine (and then incomplete). */
    ipc_reader_init(&r, 0);
    n = buf_uleb128_encode(IPC_FRAME_MAX_BYTES_DEFAULT, prefix);
    assert_int_equal(ipc_reader_feed(&r, prefix, n, collect, NULL), 0);
    assert_int_equal(ipc_reader_end(&r), -ENODATA);
    ipc_reader_done(&r);
}

static void test_callback_stops(void **state)
{
    size_t len, count;
    uint8_t *stream = sample_stream(&len, &count);
    struct ipc_reader r;
    struct sink s = {.stop_after = 3};

    (void)state;
    ipc_reader_init(&r, 0);
    assert_int_equal(ipc_reader_feed(&r, stream, len, collect, &s), -ECANCELED);
    assert_int_equal(s.count, 3);
    assert_int_equal(ipc_reader_feed(&r, stream, len, collect, &s), -ECANCELED);
    assert_int_equal(s.count, 3);
    ipc_reader_done(&r);
    sink_reset(&s);
    free(stream);
}

static void test_garbage_never_crashes(void **state)
{
    struct test_rng rng;
    uint8_t buf[512];

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int iter = 0; iter < 20000; iter++) {
        struct ipc_reader r;
        size_t len = (size_t)test_rng_range(&rng, 0, sizeof(buf));
        ssize_t got;

        test_rng_fill(&rng, buf, len);
        /* Plausible small length prefixes make the body reach the decoder more often. */
        if (len && (iter & 1))
            buf[0] = (uint8_t)(test_rng_range(&rng, 1, 127));
        ipc_reader_init(&r, (size_t)test_rng_range(&rng, 1, 1024));
        got = ipc_reader_feed(&r, buf, len, NULL, NULL);
        if (got >= 0)
            (void)ipc_reader_end(&r);
        ipc_reader_done(&r);
    }
}

static void test_profile_stream(void **state)
{
    size_t sizes[] = {0,
                      1,
                      IPC_PROFILE_PIECE_MAX_BYTES - 1,
                      IPC_PROFILE_PIECE_MAX_BYTES,
                      IPC_PROFILE_PIECE_MAX_BYTES + 1,
                      3 * IPC_PROFILE_PIECE_MAX_BYTES + 17};
    uint8_t *payload = malloc(sizes[ARRAY_SIZE(sizes) - 1]);

    (void)state;
    assert_non_null(payload);
    for (size_t i = 0; i < sizes[ARRAY_SIZE(sizes) - 1]; i++)
        payload[i] = (uint8_t)(i * 7);
    for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
        for (int with_error = 0; with_error < 2; with_error++) {
            struct ipc_profile_stream ps;
            Fleetprof__Envelope env;
            Fleetprof__ProfileData piece;
            size_t off = 0, pieces = 0;

            ipc_profile_stream_init(&ps, 77, payload, sizes[k], 0, with_error,
                                    with_error ? "out of memory" : NULL);
            while (ipc_profile_stream_next(&ps, &env, &piece) == 1) {
                const char *reason;

                assert_int_equal(ipc_envelope_validate(&env, &reason), 0);
                assert_true(piece.data.len <= IPC_PROFILE_PIECE_MAX_BYTES);
                assert_int_equal(piece.offset, off);
                assert_int_equal(piece.request_id, 77);
                assert_int_equal(piece.exit, with_error);
                assert_memory_equal(piece.data.data ? piece.data.data : payload, payload + off,
                                    piece.data.len);
                off += piece.data.len;
                pieces++;
                assert_int_equal(piece.last, off == sizes[k]);
                assert_int_equal(piece.last && with_error, piece.error[0] != '\0');
            }
            assert_true(ipc_profile_stream_done(&ps));
            assert_int_equal(off, sizes[k]);
            assert_int_equal(pieces, sizes[k] ? (sizes[k] + IPC_PROFILE_PIECE_MAX_BYTES - 1) /
                                                        IPC_PROFILE_PIECE_MAX_BYTES
                                              : 1);
            assert_int_equal(ipc_profile_stream_next(&ps, &env, &piece), 0);
        }
    }
    free(payload);
}

/* A payload in many spans (a memory writer's chunks: full ones, partly filled ones, empty
 * ones) streams as the same bytes, in pieces of at most piece_bytes gathered from at most
 * max_slices spans, each piece carrying the total. */
static void test_profile_stream_spans(void **state)
{
    static const size_t lens[] = {65000, 0, 13, 65000, 65000, 1, 0, 0, 400000, 7, 65000, 0};
    struct ipc_span spans[ARRAY_SIZE(lens)];
    size_t total = 0;
    uint8_t *payload;

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(lens); i++)
        total += lens[i];
    payload = malloc(total);
    assert_non_null(payload);
    for (size_t i = 0, at = 0; i < ARRAY_SIZE(lens); at += lens[i], i++) {
        spans[i] = (struct ipc_span){payload + at, lens[i]};
        if (!lens[i] && i % 2)
            spans[i].data = NULL; /* an empty span may have no bytes at all */
    }
    for (size_t i = 0; i < total; i++)
        payload[i] = (uint8_t)(i * 13 + 5);
    for (size_t max_slices = 1; max_slices <= IPC_PIECE_MAX_SLICES; max_slices *= 4) {
        for (size_t piece_bytes = 1000; piece_bytes <= IPC_PROFILE_PIECE_MAX_BYTES;
             piece_bytes *= 32) {
            struct ipc_profile_stream ps;
            Fleetprof__Envelope env;
            Fleetprof__ProfileData piece;
            struct ipc_span slices[IPC_PIECE_MAX_SLICES];
            size_t off = 0, count;

            ipc_profile_stream_init_spans(&ps, 9, spans, ARRAY_SIZE(spans), piece_bytes, false,
                                          NULL);
            while (ipc_profile_stream_next_slices(&ps, &env, &piece, slices, max_slices, &count) ==
                   1) {
                const char *reason;
                size_t sum = 0;

                assert_int_equal(ipc_envelope_validate(&env, &reason), 0);
                assert_true(count >= 1 && count <= max_slices);
                assert_true(piece.data.len > 0 && piece.data.len <= piece_bytes);
                assert_int_equal(piece.offset, off);
                assert_int_equal(piece.total, total);
                for (size_t k = 0; k < count; k++) {
                    assert_true(slices[k].len > 0);
                    assert_memory_equal(slices[k].data, payload + off + sum, slices[k].len);
                    sum += slices[k].len;
                }
                assert_int_equal(sum, piece.data.len);
                off += sum;
                assert_int_equal(piece.last, off == total);
            }
            assert_int_equal(off, total);
        }
    }
    free(payload);
}

/* The zero-copy piece header plus the data decodes as the same piece as a packed frame. */
/* What the piece callbacks saw. */
struct piece_sink {
    int take;       /* begin's answer */
    int stop_bytes; /* bytes returns -ECANCELED once this many bytes arrived, if > 0 */
    size_t begins, ends;
    uint64_t request_id, offset, total, data_len;
    bool last, data_null;
    uint8_t *bytes;
    size_t len, cap;
    struct sink whole;
};

static int piece_begin(void *userdata, const Fleetprof__Envelope *env)
{
    struct piece_sink *ps = userdata;
    const Fleetprof__ProfileData *m = env->profile_data;

    assert_int_equal(env->msg_case, FLEETPROF__ENVELOPE__MSG_PROFILE_DATA);
    assert_int_equal(ps->ends, ps->begins); /* one piece at a time */
    ps->request_id = m->request_id;
    ps->offset = m->offset;
    ps->total = m->total;
    ps->data_len = m->data.len;
    ps->last = m->last;
    ps->data_null = m->data.data == NULL;
    if (ps->take == 1)
        ps->begins++;
    return ps->take;
}

static int piece_bytes(void *userdata, const uint8_t *data, size_t len)
{
    struct piece_sink *ps = userdata;

    assert_true(ps->begins == ps->ends + 1);
    /* Doubling: a realloc per run of bytes (1-64 at a time here) copied the whole piece each
     * time, and under ASan, whose realloc always moves, the test took minutes. */
    if (ps->len + len > ps->cap) {
        ps->cap = ps->cap * 2 > ps->len + len ? ps->cap * 2 : ps->len + len;
        ps->bytes = realloc(ps->bytes, ps->cap);
        assert_non_null(ps->bytes);
    }
    memcpy(ps->bytes + ps->len, data, len);
    ps->len += len;
    return ps->stop_bytes > 0 && ps->len >= (size_t)ps->stop_bytes ? -ECANCELED : 0;
}

static int piece_end(void *userdata)
{
    struct piece_sink *ps = userdata;

    ps->ends++;
    assert_int_equal(ps->ends, ps->begins);
    return 0;
}

static int piece_whole(void *userdata, const Fleetprof__Envelope *env)
{
    struct piece_sink *ps = userdata;

    return collect(&ps->whole, env);
}

static const struct ipc_piece_cbs piece_cbs = {piece_begin, piece_bytes, piece_end};

/* A ProfileData frame with its data last, as ipc_frame_encode_profile_header() makes it. */
static size_t encode_data_last(const Fleetprof__ProfileData *piece, uint8_t *out, size_t cap)
{
    size_t frame = 0;
    ssize_t header = ipc_frame_encode_profile_header(piece, out, cap, &frame);

    assert_true(header > 0 && frame <= cap);
    memcpy(out + header, piece->data.data, piece->data.len);
    return frame;
}

/* Large pieces with their data last reach the piece callbacks as they arrive, whatever the
 * reads' sizes, and nothing else does: the same piece encoded by protobuf-c (data second),
 * a small frame, or any frame the receiver does not take come whole, as without callbacks. */
static void test_streamed_pieces(void **state)
{
    struct test_rng rng;
    Fleetprof__ProfileData piece = FLEETPROF__PROFILE_DATA__INIT;
    Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
    size_t payload_len = 300000, cap = 3 * payload_len + 4096, len = 0, sample_len, samples;
    uint8_t *payload = malloc(payload_len), *stream = malloc(cap);
    uint8_t *sample = sample_stream(&sample_len, &samples);

    (void)state;
    assert_non_null(payload);
    assert_non_null(stream);
    test_rng_init(&rng, test_seed());
    test_rng_fill(&rng, payload, payload_len);
    piece.request_id = 77;
    piece.offset = 1000;
    piece.total = 5000000;
    piece.data.data = payload;
    piece.data.len = payload_len;
    env.msg_case = FLEETPROF__ENVELOPE__MSG_PROFILE_DATA;
    env.profile_data = &piece;
    len += encode_data_last(&piece, stream + len, cap - len);
    len += (size_t)ipc_frame_encode(&env, stream + len, cap - len); /* data not last */
    memcpy(stream + len, sample, sample_len);
    len += sample_len;
    piece.last = true;
    piece.error = (char *)"a long reason why the profile could not be written";
    piece.data.len = 20000;
    len += encode_data_last(&piece, stream + len, cap - len);

    for (int iter = 0; iter < 200; iter++) {
        struct piece_sink ps = {.take = iter % 2};
        struct ipc_reader r;
        size_t off = 0, delivered = 0;

        ipc_reader_init(&r, 0);
        ipc_reader_set_piece_cbs(&r, &piece_cbs);
        while (off < len) {
            size_t n = (size_t)test_rng_range(&rng, 1, iter < 100 ? 64 : 200000);
            ssize_t got;

            n = MIN(n, len - off);
            got = ipc_reader_feed(&r, stream + off, n, piece_whole, &ps);
            assert_true(got >= 0);
            delivered += (size_t)got;
            off += n;
        }
        assert_int_equal(ipc_reader_end(&r), 0);
        assert_int_equal(delivered, samples + 3);
        assert_int_equal(r.frames, samples + 3);
        if (ps.take) {
            /* The first piece streams, the middle one comes whole; the last streams unless
             * it came in one read (then it is decoded in place, as any whole frame). */
            assert_true(ps.begins == 2 || (ps.begins == 1 && iter >= 100));
            assert_int_equal(ps.ends, ps.begins);
            assert_int_equal(ps.len, payload_len + (ps.begins == 2 ? 20000 : 0));
            assert_memory_equal(ps.bytes, payload, payload_len);
            if (ps.begins == 2) {
                assert_memory_equal(ps.bytes + payload_len, payload, 20000);
                assert_true(ps.data_null && ps.last && ps.data_len == 20000);
            }
            assert_int_equal(ps.whole.count, samples + 3 - ps.begins);
        } else {
            assert_int_equal(ps.begins, 0);
            assert_int_equal(ps.len, 0);
            assert_int_equal(ps.whole.count, samples + 3);
        }
        assert_true(ps.request_id == 77 && ps.offset == 1000 && ps.total == 5000000);
        assert_int_equal(ps.whole.kinds[0], FLEETPROF__ENVELOPE__MSG_PROFILE_DATA);
        ipc_reader_done(&r);
        sink_reset(&ps.whole);
        free(ps.bytes);
    }
    free(sample);
    free(stream);
    free(payload);
}

/* A streamed piece is judged as the whole frame would be: one beyond 1 MiB is refused with
 * the same error, before any byte is handed on; a receiver's error stops the reader. */
static void test_streamed_piece_refused_or_stopped(void **state)
{
    Fleetprof__ProfileData piece = FLEETPROF__PROFILE_DATA__INIT;
    size_t payload_len = IPC_PROFILE_PIECE_MAX_BYTES + 1, cap = payload_len + 64, len;
    uint8_t *payload = calloc(1, payload_len), *stream = malloc(cap);

    (void)state;
    assert_non_null(payload);
    assert_non_null(stream);
    piece.request_id = 9;
    piece.data.data = payload;
    piece.data.len = payload_len;
    len = encode_data_last(&piece, stream, cap);
    for (int with_cbs = 0; with_cbs < 2; with_cbs++) {
        struct piece_sink ps = {.take = 1};
        struct ipc_reader r;

        ipc_reader_init(&r, 0);
        if (with_cbs)
            ipc_reader_set_piece_cbs(&r, &piece_cbs);
        assert_int_equal(ipc_reader_feed(&r, stream, 4096, piece_whole, &ps), 0);
        assert_int_equal(ipc_reader_feed(&r, stream + 4096, len - 4096, piece_whole, &ps),
                         -EBADMSG);
        assert_string_equal(ipc_reader_reason(&r), "profile_data: piece larger than 1 MiB");
        assert_int_equal(ps.begins + ps.len + ps.whole.count, 0);
        ipc_reader_done(&r);
    }
    {
        struct piece_sink ps = {.take = 1, .stop_bytes = 50000};
        struct ipc_reader r;

        piece.data.len = 100000;
        len = encode_data_last(&piece, stream, cap);
        ipc_reader_init(&r, 0);
        ipc_reader_set_piece_cbs(&r, &piece_cbs);
        assert_int_equal(ipc_reader_feed(&r, stream, 40000, piece_whole, &ps), 0);
        assert_int_equal(ipc_reader_feed(&r, stream + 40000, len - 40000, piece_whole, &ps),
                         -ECANCELED);
        assert_int_equal(ipc_reader_feed(&r, stream, 1, piece_whole, &ps), -ECANCELED);
        assert_int_equal(ps.ends, 0);
        ipc_reader_done(&r);
        free(ps.bytes);
    }
    free(stream);
    free(payload);
}

static void test_profile_header(void **state)
{
    static const size_t sizes[] = {0, 1, 127, 128, 16383, 16384, 300000, (size_t)1 << 20};
    uint8_t *payload = malloc((size_t)1 << 20);

    (void)state;
    assert_non_null(payload);
    for (size_t i = 0; i < ((size_t)1 << 20); i++)
        payload[i] = (uint8_t)(i * 131 + 7);
    for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
        for (int variant = 0; variant < 2; variant++) {
            Fleetprof__ProfileData piece = FLEETPROF__PROFILE_DATA__INIT;
            Fleetprof__Envelope env = FLEETPROF__ENVELOPE__INIT;
            Fleetprof__Envelope *got = NULL;
            size_t frame = 0, frame2 = 0, prefix_value = 0, prefix_len;
            uint8_t small[4];
            uint8_t *buf;
            ssize_t header;
            uint64_t v;

            piece.request_id = 1234567 + k;
            piece.data.data = sizes[k] ? payload : NULL;
            piece.data.len = sizes[k];
            piece.offset = variant ? 99999999 : 0;
            piece.last = variant;
            piece.exit = variant;
            piece.error = variant ? (char *)"it went \"wrong\"" : (char *)"";
            env.msg_case = FLEETPROF__ENVELOPE__MSG_PROFILE_DATA;
            env.profile_data = &piece;

            header = ipc_frame_encode_profile_header(&piece, NULL, 0, &frame);
            assert_true(header > 0);
            assert_int_equal(frame, (size_t)header + sizes[k]);
            assert_int_equal(ipc_frame_encode_profile_header(&piece, small, 1, &frame2), -ENOBUFS);
            assert_int_equal(frame2, 0);
            buf = malloc(frame);
            assert_non_null(buf);
            assert_int_equal(ipc_frame_encode_profile_header(&piece, buf, (size_t)header, &frame2),
                             header);
            assert_int_equal(frame2, frame);
            if (sizes[k])
                memcpy(buf + header, payload, sizes[k]);
            /* Same size as protobuf-c's own frame: only the field order differs. */
            assert_int_equal(frame, ipc_frame_size(&env));
            prefix_len = 0;
            v = 0;
            for (unsigned shift = 0;; shift += 7) {
                v |= (uint64_t)(buf[prefix_len] & 0x7f) << shift;
                if (!(buf[prefix_len++] & 0x80))
                    break;
            }
            prefix_value = (size_t)v;
            assert_int_equal(prefix_len + prefix_value, frame);
            assert_int_equal(ipc_envelope_decode(buf + prefix_len, prefix_value, 0, &got, NULL), 0);
            assert_int_equal(got->msg_case, FLEETPROF__ENVELOPE__MSG_PROFILE_DATA);
            assert_int_equal(got->profile_data->request_id, piece.request_id);
            assert_int_equal(got->profile_data->offset, piece.offset);
            assert_int_equal(got->profile_data->last, piece.last);
            assert_int_equal(got->profile_data->exit, piece.exit);
            assert_string_equal(got->profile_data->error, piece.error);
            assert_int_equal(got->profile_data->data.len, sizes[k]);
            if (sizes[k])
                assert_memory_equal(got->profile_data->data.data, payload, sizes[k]);
            got = ipc_envelope_free(got);
            free(buf);
        }
    }
    {
        Fleetprof__ProfileData bad = FLEETPROF__PROFILE_DATA__INIT;
        size_t frame = 0;

        bad.data.len = 1;
        assert_int_equal(ipc_frame_encode_profile_header(&bad, NULL, 0, &frame), -EINVAL);
        assert_int_equal(ipc_frame_encode_profile_header(NULL, NULL, 0, &frame), -EINVAL);
    }
    free(payload);
}

static void test_pool(void **state)
{
    struct ipc_pool pool;
    void *a, *b, *big;

    (void)state;
    assert_int_equal(ipc_pool_init(&pool, 128, 1), 0);
    a = ipc_pool_get(&pool, 100);
    b = ipc_pool_get(&pool, 128);
    big = ipc_pool_get(&pool, 4096);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(big);
    memset(a, 1, 128);
    memset(big, 2, 4096);
    ipc_pool_put(&pool, a, 100);
    ipc_pool_put(&pool, b, 128); /* beyond max_cached: freed */
    ipc_pool_put(&pool, big, 4096);
    ipc_pool_put(&pool, NULL, 1);
    assert_ptr_equal(ipc_pool_get(&pool, 10), a);
    ipc_pool_put(&pool, a, 10);
    ipc_pool_done(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_encode),
            cmocka_unit_test(test_split_at_every_point),
            cmocka_unit_test(test_one_byte_at_a_time),
            cmocka_unit_test(test_random_splits),
            cmocka_unit_test(test_large_frame_in_pieces),
            cmocka_unit_test(test_hostile_frames),
            cmocka_unit_test(test_oversized_refused_before_buffering),
            cmocka_unit_test(test_callback_stops),
            cmocka_unit_test(test_garbage_never_crashes),
            cmocka_unit_test(test_profile_stream),
            cmocka_unit_test(test_profile_stream_spans),
            cmocka_unit_test(test_profile_header),
            cmocka_unit_test(test_streamed_pieces),
            cmocka_unit_test(test_streamed_piece_refused_or_stopped),
            cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests_name("ipc-frame", tests, NULL, NULL);
}
