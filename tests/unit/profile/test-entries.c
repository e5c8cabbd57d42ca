/* Unit tests for profile/entries: every entry kind round-trips with non-default
 * values through a real chunked buffer whose small chunks make entries straddle; every
 * truncation of an encoded entry is -EBADMSG (never a crash), every split into two spans
 * decodes alike; over-long strings, frames, labels and fields are truncated on write;
 * hostile values are refused; unknown kinds are -ENOTSUP. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/entry.h"
#include "buffer/leb128.h"
#include "profile/entries.h"
#include "testlib.h"

#define STRING_ARENA (64 * 1024)

/* One source entry with the storage its pointers borrow. */
struct model {
    uint8_t kind;
    struct prof_sample sample;
    struct prof_marker marker;
    struct prof_counter_sample counter;
    uint64_t pause_ns;
    struct prof_overhead overhead;
    uint64_t frames[PROF_MAX_FRAMES + 8];
    struct prof_label labels[PROF_MAX_LABELS + 4];
    struct prof_field fields[PROF_MAX_FIELDS + 2];
    char strings[STRING_ARENA];
    size_t strings_used;
};

/* Sizes the generator may pick: "small" entries fit tiny chunks. */
struct gen_limits {
    uint32_t frames, labels, fields;
    size_t string, label_name, text;
};

static const struct gen_limits full_limits = {PROF_MAX_FRAMES,     PROF_MAX_LABELS,
                                              PROF_MAX_FIELDS,     PROF_MAX_STRING,
                                              PROF_MAX_LABEL_NAME, PROF_MAX_MARKER_TEXT};
static const struct gen_limits small_limits = {12, 2, 3, 24, 16, 40};

static struct model *model_new(void)
{
    struct model *m = calloc(1, sizeof(*m));

    assert_non_null(m);
    return m;
}

static struct prof_entry *entry_new(void)
{
    struct prof_entry *e = calloc(1, sizeof(*e));

    assert_non_null(e);
    return e;
}

/* A value of a random bit length, so every LEB128 length (1..10 bytes) occurs. */
static uint64_t rand_u64(struct test_rng *rng)
{
    unsigned bits = (unsigned)test_rng_range(rng, 0, 64);
    uint64_t v = test_rng_next(rng);

    return bits == 64 ? v : v & ((1ull << bits) - 1);
}

static int64_t rand_i64(struct test_rng *rng)
{
    switch (test_rng_range(rng, 0, 5)) {
    case 0:
        return INT64_MIN;
    case 1:
        return INT64_MAX;
    case 2:
        return -(int64_t)(rand_u64(rng) >> 1);
    default:
        return (int64_t)(rand_u64(rng) >> 1);
    }
}

static int32_t rand_i32(struct test_rng *rng)
{
    switch (test_rng_range(rng, 0, 4)) {
    case 0:
        return INT32_MIN;
    case 1:
        return INT32_MAX;
    default:
        return (int32_t)(uint32_t)test_rng_next(rng);
    }
}

/* Random bytes (NUL and invalid UTF-8 included: entries carry bytes, not text). */
static struct prof_string rand_string(struct test_rng *rng, struct model *m, size_t max)
{
    struct prof_string s;
    size_t len = test_rng_range(rng, 0, 3) == 0 ? max : test_rng_range(rng, 0, max);

    assert_true(m->strings_used + len <= sizeof(m->strings));
    test_rng_fill(rng, m->strings + m->strings_used, len);
    s.data = m->strings + m->strings_used;
    s.len = len;
    m->strings_used += len;
    return s;
}

static void gen_frames(struct test_rng *rng, struct model *m, uint32_t max, uint32_t *ret_count)
{
    uint32_t n = (uint32_t)test_rng_range(rng, 0, max);

    for (uint32_t i = 0; i < n; i++)
        m->frames[i] = rand_u64(rng);
    *ret_count = n;
}

static void gen_sample(struct test_rng *rng, struct model *m, const struct gen_limits *lim)
{
    struct prof_sample *s = &m->sample;

    s->tid = rand_i32(rng);
    s->time_ns = rand_u64(rng);
    s->cpu_delta_ns = rand_u64(rng);
    /* The writer adds TRUNCATED only for too many frames; any other flag bits pass. */
    s->flags = (uint32_t)rand_u64(rng);
    gen_frames(rng, m, lim->frames, &s->frame_count);
    s->frames = m->frames;
    s->label_count = (uint32_t)test_rng_range(rng, 0, lim->labels);
    for (uint32_t i = 0; i < s->label_count; i++) {
        m->labels[i].name = rand_string(rng, m, lim->label_name);
        m->labels[i].category = (uint32_t)rand_u64(rng);
        m->labels[i].native_depth = (uint32_t)test_rng_range(rng, 0, PROF_MAX_FRAMES);
        m->labels[i].stack_address = rand_u64(rng);
        m->labels[i].code_address = rand_u64(rng);
    }
    s->labels = m->labels;
}

static void gen_marker(struct test_rng *rng, struct model *m, const struct gen_limits *lim)
{
    struct prof_marker *k = &m->marker;

    k->tid = rand_i32(rng);
    k->category = (uint32_t)rand_u64(rng);
    k->phase = (enum prof_marker_phase)test_rng_range(rng, PROF_PHASE_INSTANT, PROF_PHASE_END);
    k->start_ns = rand_u64(rng);
    k->end_ns = rand_u64(rng);
    k->name = rand_string(rng, m, lim->string);
    k->payload_kind =
            (enum prof_payload_kind)test_rng_range(rng, PROF_PAYLOAD_NONE, PROF_PAYLOAD_TYPED);
    if (k->payload_kind == PROF_PAYLOAD_TEXT) {
        k->text = rand_string(rng, m, lim->text);
    } else if (k->payload_kind == PROF_PAYLOAD_TYPED) {
        k->schema_id = (uint32_t)rand_u64(rng);
        k->field_count = (uint32_t)test_rng_range(rng, 0, lim->fields);
        for (uint32_t i = 0; i < k->field_count; i++) {
            struct prof_field *f = &m->fields[i];
            uint64_t bits;

            f->kind = (enum prof_field_kind)test_rng_range(rng, PROF_FIELD_INT, PROF_FIELD_STRING);
            switch (f->kind) {
            case PROF_FIELD_INT:
                f->v.i = rand_i64(rng);
                break;
            case PROF_FIELD_UINT:
                f->v.u = rand_u64(rng);
                break;
            case PROF_FIELD_DOUBLE:
                bits = test_rng_next(rng); /* NaNs, infinities, denormals: any bits */
                memcpy(&f->v.d, &bits, sizeof(bits));
                break;
            case PROF_FIELD_STRING:
                f->v.s = rand_string(rng, m, lim->string);
                break;
            }
        }
        k->fields = m->fields;
    }
    gen_frames(rng, m, lim->frames, &k->frame_count);
    k->frames = m->frames;
}

/* Fills m with a random entry of a random kind (or of kind if non-zero). */
static void gen_model(struct test_rng *rng, struct model *m, const struct gen_limits *lim,
                      uint8_t kind)
{
    static const uint8_t kinds[] = {BUF_ENTRY_SAMPLE,  BUF_ENTRY_SAME_SAMPLE, BUF_ENTRY_MARKER,
                                    BUF_ENTRY_COUNTER, BUF_ENTRY_PAUSE,       BUF_ENTRY_RESUME,
                                    BUF_ENTRY_OVERHEAD};

    memset(m, 0, offsetof(struct model, strings));
    m->strings_used = 0;
    m->kind = kind ? kind : kinds[test_rng_range(rng, 0, ARRAY_SIZE(kinds) - 1)];
    switch (m->kind) {
    case BUF_ENTRY_SAMPLE:
        gen_sample(rng, m, lim);
        break;
    case BUF_ENTRY_SAME_SAMPLE:
        m->sample.tid = rand_i32(rng);
        m->sample.time_ns = rand_u64(rng);
        break;
    case BUF_ENTRY_MARKER:
        gen_marker(rng, m, lim);
        break;
    case BUF_ENTRY_COUNTER:
        m->counter.counter_id = (uint32_t)rand_u64(rng);
        m->counter.time_ns = rand_u64(rng);
        m->counter.delta = rand_i64(rng);
        m->counter.number = rand_u64(rng);
        break;
    case BUF_ENTRY_PAUSE:
    case BUF_ENTRY_RESUME:
        m->pause_ns = rand_u64(rng);
        break;
    case BUF_ENTRY_OVERHEAD:
        m->overhead = (struct prof_overhead){rand_u64(rng), rand_u64(rng), rand_u64(rng),
                                             rand_u64(rng), rand_u64(rng)};
        break;
    default:
        fail();
    }
}

static int put_model(struct buf_chunked_buffer *b, const struct model *m)
{
    switch (m->kind) {
    case BUF_ENTRY_SAMPLE:
        return prof_entry_put_sample(b, &m->sample);
    case BUF_ENTRY_SAME_SAMPLE:
        return prof_entry_put_same_sample(b, m->sample.tid, m->sample.time_ns);
    case BUF_ENTRY_MARKER:
        return prof_entry_put_marker(b, &m->marker);
    case BUF_ENTRY_COUNTER:
        return prof_entry_put_counter(b, &m->counter);
    case BUF_ENTRY_PAUSE:
    case BUF_ENTRY_RESUME:
        return prof_entry_put_pause(b, m->kind == BUF_ENTRY_PAUSE, m->pause_ns);
    case BUF_ENTRY_OVERHEAD:
        return prof_entry_put_overhead(b, &m->overhead);
    default:
        return -EINVAL;
    }
}

static void assert_string_equal_trunc(struct prof_string got, struct prof_string want, size_t max)
{
    size_t len = want.len < max ? want.len : max;

    assert_int_equal(got.len, len);
    if (len > 0)
        assert_memory_equal(got.data, want.data, len);
}

static void assert_frames_equal(const uint64_t *got, uint32_t got_count, const uint64_t *want,
                                uint32_t want_count)
{
    uint32_t n = want_count < PROF_MAX_FRAMES ? want_count : PROF_MAX_FRAMES;

    assert_int_equal(got_count, n);
    for (uint32_t i = 0; i < n; i++)
        assert_true(got[i] == want[i]);
}

/* The decoded entry equals the model, with the writer's documented truncations applied. */
static void assert_entry_matches(const struct prof_entry *e, const struct model *m)
{
    assert_int_equal(e->kind, m->kind);
    switch (m->kind) {
    case BUF_ENTRY_SAMPLE: {
        const struct prof_sample *got = &e->u.sample, *want = &m->sample;
        uint32_t flags =
                want->flags | (want->frame_count > PROF_MAX_FRAMES ? PROF_SAMPLE_TRUNCATED : 0);
        uint32_t labels = want->label_count < PROF_MAX_LABELS ? want->label_count : PROF_MAX_LABELS;

        assert_int_equal(got->tid, want->tid);
        assert_true(got->time_ns == want->time_ns);
        assert_true(got->cpu_delta_ns == want->cpu_delta_ns);
        assert_int_equal(got->flags, flags);
        assert_frames_equal(got->frames, got->frame_count, want->frames, want->frame_count);
        assert_int_equal(got->label_count, labels);
        for (uint32_t i = 0; i < labels; i++) {
            assert_string_equal_trunc(got->labels[i].name, want->labels[i].name,
                                      PROF_MAX_LABEL_NAME);
            assert_int_equal(got->labels[i].category, want->labels[i].category);
            assert_int_equal(got->labels[i].native_depth, want->labels[i].native_depth);
            assert_true(got->labels[i].stack_address == want->labels[i].stack_address);
            assert_true(got->labels[i].code_address == want->labels[i].code_address);
        }
        break;
    }
    case BUF_ENTRY_SAME_SAMPLE:
        assert_int_equal(e->u.sample.tid, m->sample.tid);
        assert_true(e->u.sample.time_ns == m->sample.time_ns);
        assert_int_equal(e->u.sample.frame_count, 0);
        assert_int_equal(e->u.sample.label_count, 0);
        break;
    case BUF_ENTRY_MARKER: {
        const struct prof_marker *got = &e->u.marker, *want = &m->marker;

        assert_int_equal(got->tid, want->tid);
        assert_int_equal(got->category, want->category);
        assert_int_equal(got->phase, want->phase);
        assert_true(got->start_ns == want->start_ns);
        assert_true(got->end_ns == want->end_ns);
        assert_string_equal_trunc(got->name, want->name, PROF_MAX_STRING);
        assert_int_equal(got->payload_kind, want->payload_kind);
        if (want->payload_kind == PROF_PAYLOAD_TEXT)
            assert_string_equal_trunc(got->text, want->text, PROF_MAX_MARKER_TEXT);
        if (want->payload_kind == PROF_PAYLOAD_TYPED) {
            uint32_t n = want->field_count < PROF_MAX_FIELDS ? want->field_count : PROF_MAX_FIELDS;

            assert_int_equal(got->schema_id, want->schema_id);
            assert_int_equal(got->field_count, n);
            for (uint32_t i = 0; i < n; i++) {
                const struct prof_field *gf = &got->fields[i], *wf = &want->fields[i];

                assert_int_equal(gf->kind, wf->kind);
                switch (wf->kind) {
                case PROF_FIELD_INT:
                    assert_true(gf->v.i == wf->v.i);
                    break;
                case PROF_FIELD_UINT:
                    assert_true(gf->v.u == wf->v.u);
                    break;
                case PROF_FIELD_DOUBLE:
                    assert_memory_equal(&gf->v.d, &wf->v.d, sizeof(double));
                    break;
                case PROF_FIELD_STRING:
                    assert_string_equal_trunc(gf->v.s, wf->v.s, PROF_MAX_STRING);
                    break;
                }
            }
        } else {
            assert_int_equal(got->field_count, 0);
        }
        assert_frames_equal(got->frames, got->frame_count, want->frames, want->frame_count);
        break;
    }
    case BUF_ENTRY_COUNTER:
        assert_int_equal(e->u.counter.counter_id, m->counter.counter_id);
        assert_true(e->u.counter.time_ns == m->counter.time_ns);
        assert_true(e->u.counter.delta == m->counter.delta);
        assert_true(e->u.counter.number == m->counter.number);
        break;
    case BUF_ENTRY_PAUSE:
    case BUF_ENTRY_RESUME:
        assert_true(e->u.pause_time_ns == m->pause_ns);
        break;
    case BUF_ENTRY_OVERHEAD:
        assert_memory_equal(&e->u.overhead, &m->overhead, sizeof(m->overhead));
        break;
    default:
        fail();
    }
}

struct fixture {
    struct buf_chunk_manager *manager;
    struct buf_chunked_buffer *buffer;
};

static void fixture_open(struct fixture *f, uint32_t chunk_bytes)
{
    assert_int_equal(buf_chunk_manager_local_new(256ull << 20, chunk_bytes, &f->manager), 0);
    assert_int_equal(buf_chunked_buffer_new(f->manager, 42, &f->buffer), 0);
}

static void fixture_close(struct fixture *f)
{
    f->buffer = buf_chunked_buffer_free(f->buffer);
    f->manager = buf_chunk_manager_free(f->manager);
}

/* Regenerates the put sequence from the same seed and compares block by block. */
struct replay {
    struct test_rng rng;
    const struct gen_limits *limits;
    struct model *model;
    struct prof_entry *entry;
    size_t blocks, straddling;
};

static int replay_cb(struct buf_entry_reader *r, uint64_t index, void *userdata)
{
    struct replay *p = userdata;

    (void)index;
    if (r->len[1] > 0)
        p->straddling++;
    gen_model(&p->rng, p->model, p->limits, 0);
    assert_int_equal(prof_entry_decode(r, p->entry), 0);
    assert_entry_matches(p->entry, p->model);
    p->blocks++;
    return 0;
}

static void round_trip(uint32_t chunk_bytes, const struct gen_limits *limits, size_t count)
{
    uint64_t seed = test_seed();
    struct replay p = {.limits = limits, .model = model_new(), .entry = entry_new()};
    struct buf_chunked_buffer_state st;
    struct test_rng rng;
    struct fixture f;

    fixture_open(&f, chunk_bytes);
    test_rng_init(&rng, seed);
    for (size_t i = 0; i < count; i++) {
        gen_model(&rng, p.model, limits, 0);
        assert_int_equal(put_model(f.buffer, p.model), 0);
    }
    buf_chunked_buffer_get_state(f.buffer, &st);
    assert_int_equal(st.failed_puts, 0);
    assert_int_equal(st.cleared_blocks, 0);

    test_rng_init(&p.rng, seed);
    assert_int_equal(buf_chunked_buffer_read_each(f.buffer, replay_cb, &p), 0);
    assert_int_equal(p.blocks, count);
    /* Nearly every chunk boundary falls inside an entry. */
    assert_true(p.straddling * 2 > (st.range_end - st.range_start) / chunk_bytes);
    assert_true(p.straddling > 50);
    printf("# %zu entries in %u-byte chunks, %zu straddling\n", p.blocks, chunk_bytes,
           p.straddling);
    fixture_close(&f);
    free(p.model);
    free(p.entry);
}

static void test_round_trip_full_size_entries(void **state)
{
    (void)state;
    /* Just over the largest entry (a typed marker with 16 strings of 1 KiB and 256
     * frames is ~20 KiB): even the largest straddle. */
    round_trip(24 * 1024, &full_limits, 3000);
}

static void test_round_trip_tiny_chunks(void **state)
{
    (void)state;
    round_trip(384, &small_limits, 20000);
}

/* The only block of a buffer, as flat bytes. */
struct flat {
    uint8_t bytes[64 * 1024];
    size_t len;
    int blocks;
};

static int flatten_cb(struct buf_entry_reader *r, uint64_t index, void *userdata)
{
    struct flat *fl = userdata;

    (void)index;
    fl->len = buf_entry_reader_remaining(r);
    assert_true(fl->len <= sizeof(fl->bytes));
    assert_int_equal(buf_entry_reader_read(r, fl->bytes, fl->len), 0);
    fl->blocks++;
    return 0;
}

static void encode_flat(const struct model *m, struct flat *fl)
{
    struct fixture f;

    fixture_open(&f, 64 * 1024);
    assert_int_equal(put_model(f.buffer, m), 0);
    fl->blocks = 0;
    assert_int_equal(buf_chunked_buffer_read_each(f.buffer, flatten_cb, fl), 0);
    assert_int_equal(fl->blocks, 1);
    fixture_close(&f);
}

static int decode_spans(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                        struct prof_entry *e)
{
    struct buf_entry_reader r = {{a, b}, {alen, blen}, 0};

    return prof_entry_decode(&r, e);
}

/* A model of each kind and payload, with every optional part present. */
static void gen_each_kind(struct test_rng *rng, struct model *m, int which)
{
    static const uint8_t kinds[] = {BUF_ENTRY_SAMPLE, BUF_ENTRY_SAME_SAMPLE, BUF_ENTRY_MARKER,
                                    BUF_ENTRY_MARKER, BUF_ENTRY_MARKER,      BUF_ENTRY_COUNTER,
                                    BUF_ENTRY_PAUSE,  BUF_ENTRY_RESUME,      BUF_ENTRY_OVERHEAD};
    static const struct gen_limits lim = {40, 4, 6, 50, 30, 80};

    assert_true(which >= 0 && (size_t)which < ARRAY_SIZE(kinds));
    do {
        gen_model(rng, m, &lim, kinds[which]);
    } while ((m->kind == BUF_ENTRY_SAMPLE &&
              (m->sample.frame_count == 0 || m->sample.label_count == 0)) ||
             (m->kind == BUF_ENTRY_MARKER &&
              ((int)m->marker.payload_kind != which - 2 || m->marker.frame_count == 0 ||
               (m->marker.payload_kind == PROF_PAYLOAD_TYPED && m->marker.field_count < 4))));
}

static void test_truncation_and_splits(void **state)
{
    struct model *m = model_new();
    struct prof_entry *e = entry_new();
    struct flat *fl = calloc(1, sizeof(*fl));
    struct test_rng rng;

    (void)state;
    assert_non_null(fl);
    test_rng_init(&rng, test_seed());
    for (int rep = 0; rep < 20; rep++) {
        for (int which = 0; which < 9; which++) {
            gen_each_kind(&rng, m, which);
            encode_flat(m, fl);
            /* Every strict prefix is refused, whole and split in two. */
            for (size_t len = 0; len < fl->len; len++) {
                assert_int_equal(decode_spans(fl->bytes, len, NULL, 0, e), -EBADMSG);
                if (len > 0)
                    assert_int_equal(
                            decode_spans(fl->bytes, len / 2, fl->bytes + len / 2, len - len / 2, e),
                            -EBADMSG);
            }
            /* Every split of the whole entry decodes to the same thing. */
            for (size_t cut = 0; cut <= fl->len; cut++) {
                assert_int_equal(decode_spans(fl->bytes, cut, fl->bytes + cut, fl->len - cut, e),
                                 0);
                assert_entry_matches(e, m);
            }
            /* Trailing bytes of a newer writer are allowed. */
            fl->bytes[fl->len] = 0x7f;
            fl->bytes[fl->len + 1] = 0x01;
            assert_int_equal(decode_spans(fl->bytes, fl->len + 2, NULL, 0, e), 0);
            assert_entry_matches(e, m);
        }
    }
    free(fl);
    free(e);
    free(m);
}

static void fill_string(char *buf, size_t len, char c)
{
    memset(buf, c, len);
}

static void test_over_long_values_truncated_on_write(void **state)
{
    static char long_name[PROF_MAX_STRING * 2], long_text[PROF_MAX_MARKER_TEXT + 500];
    static char long_label[PROF_MAX_LABEL_NAME + 100], long_field[PROF_MAX_STRING + 7];
    struct model *m = model_new();
    struct prof_entry *e = entry_new();
    struct flat *fl = calloc(1, sizeof(*fl));
    struct prof_string empty = {NULL, 0};

    (void)state;
    assert_non_null(fl);
    fill_string(long_name, sizeof(long_name), 'n');
    fill_string(long_text, sizeof(long_text), 't');
    fill_string(long_label, sizeof(long_label), 'l');
    fill_string(long_field, sizeof(long_field), 'f');

    /* Text marker: name and text cut at their limits; too many frames dropped. */
    memset(m, 0, sizeof(*m));
    m->kind = BUF_ENTRY_MARKER;
    m->marker = (struct prof_marker){.tid = -7,
                                     .category = 3,
                                     .phase = PROF_PHASE_INTERVAL,
                                     .start_ns = 5,
                                     .end_ns = 9,
                                     .name = {long_name, sizeof(long_name)},
                                     .payload_kind = PROF_PAYLOAD_TEXT,
                                     .text = {long_text, sizeof(long_text)},
                                     .frame_count = PROF_MAX_FRAMES + 5,
                                     .frames = m->frames};
    for (uint32_t i = 0; i < PROF_MAX_FRAMES + 5; i++)
        m->frames[i] = 0x1000 + i;
    encode_flat(m, fl);
    assert_int_equal(decode_spans(fl->bytes, fl->len, NULL, 0, e), 0);
    assert_int_equal(e->u.marker.name.len, PROF_MAX_STRING);
    assert_int_equal(e->u.marker.text.len, PROF_MAX_MARKER_TEXT);
    assert_int_equal(e->u.marker.frame_count, PROF_MAX_FRAMES);
    assert_entry_matches(e, m);

    /* Typed marker: 18 fields become 16, a long string field is cut; NULL string data
     * is written as empty. */
    m->marker.payload_kind = PROF_PAYLOAD_TYPED;
    m->marker.schema_id = 3;
    m->marker.field_count = PROF_MAX_FIELDS + 2;
    m->marker.fields = m->fields;
    m->marker.frame_count = 0;
    for (uint32_t i = 0; i < PROF_MAX_FIELDS + 2; i++) {
        m->fields[i].kind = PROF_FIELD_STRING;
        m->fields[i].v.s = (struct prof_string){long_field, i == 1 ? 3 : sizeof(long_field)};
    }
    m->fields[2].v.s = (struct prof_string){NULL, 12};
    encode_flat(m, fl);
    assert_int_equal(decode_spans(fl->bytes, fl->len, NULL, 0, e), 0);
    assert_int_equal(e->u.marker.field_count, PROF_MAX_FIELDS);
    assert_int_equal(e->u.marker.fields[0].v.s.len, PROF_MAX_STRING);
    assert_int_equal(e->u.marker.fields[1].v.s.len, 3);
    assert_int_equal(e->u.marker.fields[2].v.s.len, 0);
    m->fields[2].v.s = empty;
    assert_entry_matches(e, m);

    /* Sample: label names cut, labels beyond PROF_MAX_LABELS dropped, frames beyond
     * PROF_MAX_FRAMES dropped and flagged. */
    memset(m, 0, sizeof(*m));
    m->kind = BUF_ENTRY_SAMPLE;
    m->sample.tid = 1234;
    m->sample.time_ns = 1;
    m->sample.frame_count = PROF_MAX_FRAMES + 1;
    m->sample.frames = m->frames;
    m->sample.label_count = PROF_MAX_LABELS + 3;
    m->sample.labels = m->labels;
    for (uint32_t i = 0; i < PROF_MAX_LABELS + 3; i++)
        m->labels[i] = (struct prof_label){{long_label, sizeof(long_label)}, 7, 1, 2, 3};
    encode_flat(m, fl);
    assert_int_equal(decode_spans(fl->bytes, fl->len, NULL, 0, e), 0);
    assert_true(e->u.sample.flags & PROF_SAMPLE_TRUNCATED);
    assert_int_equal(e->u.sample.frame_count, PROF_MAX_FRAMES);
    assert_int_equal(e->u.sample.label_count, PROF_MAX_LABELS);
    assert_int_equal(e->u.sample.labels[0].name.len, PROF_MAX_LABEL_NAME);
    assert_entry_matches(e, m);

    free(fl);
    free(e);
    free(m);
}

/* Hand-made blocks. */
struct bytes {
    uint8_t b[4096];
    size_t n;
};

static void push_raw(struct bytes *x, const void *p, size_t n)
{
    assert_true(x->n + n <= sizeof(x->b));
    memcpy(x->b + x->n, p, n);
    x->n += n;
}

static void push_u(struct bytes *x, uint64_t v)
{
    uint8_t tmp[BUF_ULEB128_MAX_BYTES];

    push_raw(x, tmp, buf_uleb128_encode(v, tmp));
}

static void push_i(struct bytes *x, int64_t v)
{
    push_u(x, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static int decode_bytes(const struct bytes *x, struct prof_entry *e)
{
    return decode_spans(x->b, x->n, NULL, 0, e);
}

/* A text marker header up to (not including) the payload kind. */
static void push_marker_head(struct bytes *x, uint64_t phase, uint64_t name_len)
{
    x->n = 0;
    push_u(x, BUF_ENTRY_MARKER);
    push_i(x, 1);
    push_u(x, 0);
    push_u(x, phase);
    push_u(x, 10);
    push_u(x, 20);
    push_u(x, name_len);
    for (uint64_t i = 0; i < name_len && x->n < sizeof(x->b); i++)
        push_raw(x, "m", 1);
}

static void test_hostile_values_refused(void **state)
{
    struct prof_entry *e = entry_new();
    struct bytes x;

    (void)state;
    /* Sample with 257 frames. */
    x.n = 0;
    push_u(&x, BUF_ENTRY_SAMPLE);
    push_i(&x, 1);
    push_u(&x, 2);
    push_u(&x, 3);
    push_u(&x, 0);
    push_u(&x, PROF_MAX_FRAMES + 1);
    for (int i = 0; i < PROF_MAX_FRAMES + 1; i++)
        push_u(&x, 1);
    push_u(&x, 0);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);

    /* Sample with 33 labels, and with a label deeper than PROF_MAX_FRAMES. */
    x.n = 0;
    push_u(&x, BUF_ENTRY_SAMPLE);
    push_i(&x, 1);
    push_u(&x, 2);
    push_u(&x, 3);
    push_u(&x, 0);
    push_u(&x, 0);
    push_u(&x, PROF_MAX_LABELS + 1);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);
    x.n -= 1;
    push_u(&x, 1);
    push_u(&x, 1);
    push_raw(&x, "L", 1);
    push_u(&x, 0);
    push_u(&x, PROF_MAX_FRAMES + 1);
    push_u(&x, 0);
    push_u(&x, 0);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);

    /* Label name longer than PROF_MAX_LABEL_NAME. */
    x.n = 0;
    push_u(&x, BUF_ENTRY_SAMPLE);
    push_i(&x, 1);
    push_u(&x, 2);
    push_u(&x, 3);
    push_u(&x, 0);
    push_u(&x, 0);
    push_u(&x, 1);
    push_u(&x, PROF_MAX_LABEL_NAME + 1);
    for (int i = 0; i < PROF_MAX_LABEL_NAME + 1; i++)
        push_raw(&x, "L", 1);
    push_u(&x, 0);
    push_u(&x, 0);
    push_u(&x, 0);
    push_u(&x, 0);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);

    /* tid outside int32_t. */
    x.n = 0;
    push_u(&x, BUF_ENTRY_SAME_SAMPLE);
    push_i(&x, (int64_t)INT32_MAX + 1);
    push_u(&x, 1);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);
    x.n = 0;
    push_u(&x, BUF_ENTRY_SAME_SAMPLE);
    push_i(&x, (int64_t)INT32_MIN - 1);
    push_u(&x, 1);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);

    /* A LEB128 value over 64 bits. */
    x.n = 0;
    push_u(&x, BUF_ENTRY_PAUSE);
    for (int i = 0; i < 10; i++)
        push_raw(&x, "\xff", 1);
    push_raw(&x, "\x01", 1);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);

    /* Marker: bad phase, bad payload kind, name too long. */
    push_marker_head(&x, PROF_PHASE_END + 1, 1);
    push_u(&x, PROF_PAYLOAD_NONE);
    push_u(&x, 0);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);
    push_marker_head(&x, PROF_PHASE_INSTANT, 1);
    push_u(&x, PROF_PAYLOAD_TYPED + 1);
    push_u(&x, 0);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);
    push_marker_head(&x, PROF_PHASE_INSTANT, PROF_MAX_STRING + 1);
    push_u(&x, PROF_PAYLOAD_NONE);
    push_u(&x, 0);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);

    /* Typed payload: 17 fields, unknown field kind, string field too long, short double. */
    push_marker_head(&x, PROF_PHASE_INSTANT, 1);
    push_u(&x, PROF_PAYLOAD_TYPED);
    push_u(&x, 1);
    push_u(&x, PROF_MAX_FIELDS + 1);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);
    push_marker_head(&x, PROF_PHASE_INSTANT, 1);
    push_u(&x, PROF_PAYLOAD_TYPED);
    push_u(&x, 1);
    push_u(&x, 1);
    push_u(&x, PROF_FIELD_STRING + 1);
    push_u(&x, 0);
    push_u(&x, 0);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);
    push_marker_head(&x, PROF_PHASE_INSTANT, 1);
    push_u(&x, PROF_PAYLOAD_TYPED);
    push_u(&x, 1);
    push_u(&x, 1);
    push_u(&x, PROF_FIELD_STRING);
    push_u(&x, PROF_MAX_STRING + 1);
    for (int i = 0; i < PROF_MAX_STRING + 1; i++)
        push_raw(&x, "s", 1);
    push_u(&x, 0);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);
    push_marker_head(&x, PROF_PHASE_INSTANT, 1);
    push_u(&x, PROF_PAYLOAD_TYPED);
    push_u(&x, 1);
    push_u(&x, 1);
    push_u(&x, PROF_FIELD_DOUBLE);
    push_raw(&x, "1234567", 7);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);

    /* Text longer than PROF_MAX_MARKER_TEXT. */
    push_marker_head(&x, PROF_PHASE_INSTANT, 1);
    push_u(&x, PROF_PAYLOAD_TEXT);
    push_u(&x, PROF_MAX_MARKER_TEXT + 1);
    assert_int_equal(decode_bytes(&x, e), -EBADMSG);

    /* A failed decode leaves nothing behind: the next one succeeds. */
    x.n = 0;
    push_u(&x, BUF_ENTRY_COUNTER);
    push_u(&x, 4);
    push_u(&x, 5);
    push_i(&x, -6);
    push_u(&x, 7);
    assert_int_equal(decode_bytes(&x, e), 0);
    assert_int_equal(e->u.counter.counter_id, 4);
    assert_true(e->u.counter.delta == -6);
    free(e);
}

static void test_unknown_kinds_not_supported(void **state)
{
    static const uint8_t unknown[] = {BUF_ENTRY_INVALID,
                                      BUF_ENTRY_LABEL_STACK,
                                      BUF_ENTRY_CPU,
                                      BUF_ENTRY_THREAD,
                                      BUF_ENTRY_KIND_COUNT,
                                      0x7f,
                                      0x80,
                                      0xff};
    struct prof_entry *e = entry_new();
    uint8_t block[4];

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(unknown); i++) {
        block[0] = unknown[i];
        block[1] = 1;
        block[2] = 2;
        block[3] = 3;
        assert_int_equal(decode_spans(block, sizeof(block), NULL, 0, e), -ENOTSUP);
        assert_int_equal(decode_spans(block, 1, NULL, 0, e), -ENOTSUP);
    }
    /* An empty block has no kind at all. */
    assert_int_equal(decode_spans(block, 0, NULL, 0, e), -EBADMSG);
    free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_round_trip_full_size_entries),
            cmocka_unit_test(test_round_trip_tiny_chunks),
            cmocka_unit_test(test_truncation_and_splits),
            cmocka_unit_test(test_over_long_values_truncated_on_write),
            cmocka_unit_test(test_hostile_values_refused),
            cmocka_unit_test(test_unknown_kinds_not_supported),
    };
    return cmocka_run_group_tests_name("profile-entries", tests, NULL, NULL);
}
