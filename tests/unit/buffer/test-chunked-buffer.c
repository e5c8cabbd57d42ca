/* Unit tests for buffer/chunked-buffer: puts, straddling blocks, refusal, index continuity,
 * destroy/clear, and the read-back property (design invariant 4). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/leb128.h"
#include "testlib.h"

static uint64_t fake_clock(void *userdata)
{
    uint64_t *t = userdata;

    return ++*t;
}

/* Collects every block read, in order. */
struct collected {
    uint64_t *index;
    uint8_t **data;
    size_t *len;
    size_t count, cap;
};

static int collect_cb(struct buf_entry_reader *r, uint64_t index, void *userdata)
{
    struct collected *c = userdata;
    size_t n = buf_entry_reader_remaining(r);

    if (c->count == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 64;
        c->index = realloc(c->index, c->cap * sizeof(*c->index));
        c->data = realloc(c->data, c->cap * sizeof(*c->data));
        c->len = realloc(c->len, c->cap * sizeof(*c->len));
        assert_non_null(c->index);
        assert_non_null(c->data);
        assert_non_null(c->len);
    }
    c->data[c->count] = malloc(n ? n : 1);
    assert_non_null(c->data[c->count]);
    assert_int_equal(buf_entry_reader_read(r, c->data[c->count], n), 0);
    assert_int_equal(buf_entry_reader_remaining(r), 0);
    c->index[c->count] = index;
    c->len[c->count] = n;
    c->count++;
    return 0;
}

static void collected_reset(struct collected *c)
{
    for (size_t i = 0; i < c->count; i++)
        free(c->data[i]);
    c->count = 0;
}

static void collected_done(struct collected *c)
{
    collected_reset(c);
    free(c->index);
    free(c->data);
    free(c->len);
    memset(c, 0, sizeof(*c));
}

struct fixture {
    struct buf_chunk_manager *manager;
    struct buf_chunked_buffer *buffer;
    uint64_t clock;
};

static void fixture_open(struct fixture *f, uint64_t limit, uint32_t chunk_bytes)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(buf_chunk_manager_local_new(limit, chunk_bytes, &f->manager), 0);
    assert_int_equal(buf_chunked_buffer_new(f->manager, 1234, &f->buffer), 0);
    buf_chunked_buffer_set_clock(f->buffer, fake_clock, &f->clock);
}

static void fixture_close(struct fixture *f)
{
    f->buffer = buf_chunked_buffer_free(f->buffer);
    f->manager = buf_chunk_manager_free(f->manager);
}

static void test_put_read_small(void **state)
{
    struct fixture f;
    struct collected got = {0};
    uint64_t idx[3];

    (void)state;
    fixture_open(&f, 1 << 20, 1024);
    assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, "a", 1, &idx[0]), 0);
    assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, "bcd", 3, &idx[1]), 0);
    assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, "efghij", 6, &idx[2]), 0);
    /* Index starts at 1 and advances by prefix + payload. */
    assert_true(idx[0] == 1);
    assert_true(idx[1] == 1 + 2);
    assert_true(idx[2] == 1 + 2 + 4);
    assert_int_equal(buf_chunked_buffer_read_each(f.buffer, collect_cb, &got), 0);
    assert_int_equal(got.count, 3);
    assert_memory_equal(got.data[1], "bcd", 3);
    assert_true(got.index[2] == idx[2]);
    collected_done(&got);
    fixture_close(&f);
}

static void test_refuses_block_of_chunk_size(void **state)
{
    struct fixture f;
    struct buf_chunked_buffer_state st;
    uint8_t big[600] = {0};

    (void)state;
    fixture_open(&f, 1 << 20, 512);
    /* 509 bytes + 2-byte prefix = 511 < 512 fits; 510 + 2 = 512 does not. */
    assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, big, 509, NULL), 0);
    assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, big, 510, NULL), -EMSGSIZE);
    assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, big, 600, NULL), -EMSGSIZE);
    assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, big, 0, NULL), -EINVAL);
    buf_chunked_buffer_get_state(f.buffer, &st);
    assert_true(st.failed_puts == 2);
    assert_true(st.failed_bytes == 1110);
    assert_true(st.pushed_blocks == 1);
    fixture_close(&f);
}

/* Every split of a block across two chunks, including a size prefix split byte by byte. */
static void test_straddle_every_offset(void **state)
{
    (void)state;
    for (size_t lead = 1; lead < 300; lead += 7) {
        for (size_t size = 1; size < 250; size += 13) {
            struct fixture f;
            struct collected got = {0};
            uint8_t payload[256];
            uint8_t filler[300];

            memset(filler, 0xaa, sizeof(filler));
            for (size_t i = 0; i < size; i++)
                payload[i] = (uint8_t)(i * 31 + size);
            fixture_open(&f, 1 << 20, 256);
            /* Fill to a varying point of the first chunk, then write the probe. */
            size_t filled = 0;
            while (filled + 100 < lead) {
                assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, filler, 98, NULL), 0);
                filled += 100;
            }
            if (lead - filled > 1)
                assert_int_equal(
                        buf_chunked_buffer_put_bytes(f.buffer, filler, lead - filled - 1, NULL), 0);
            assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, payload, size, NULL), 0);
            assert_int_equal(buf_chunked_buffer_read_each(f.buffer, collect_cb, &got), 0);
            assert_true(got.count >= 1);
            assert_int_equal(got.len[got.count - 1], size);
            assert_memory_equal(got.data[got.count - 1], payload, size);
            for (size_t i = 1; i < got.count; i++)
                assert_true(got.index[i] ==
                            got.index[i - 1] + buf_uleb128_size(got.len[i - 1]) + got.len[i - 1]);
            collected_done(&got);
            fixture_close(&f);
        }
    }
}

/* Buffer on a single-chunk manager: holds one chunk of data, then refuses. */
static void test_single_manager_capacity(void **state)
{
    struct buf_chunk_manager *m;
    struct buf_chunked_buffer *b;
    struct collected got = {0};
    uint8_t data[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    int r, ok = 0;

    (void)state;
    assert_int_equal(buf_chunk_manager_single_new(128, &m), 0);
    assert_int_equal(buf_chunked_buffer_new(m, 1, &b), 0);
    {
        struct buf_chunked_buffer *second = NULL;

        /* A manager serves one buffer only. */
        assert_int_equal(buf_chunked_buffer_new(m, 2, &second), -EINVAL);
        assert_null(second);
    }
    while ((r = buf_chunked_buffer_put_bytes(b, data, sizeof(data), NULL)) == 0)
        ok++;
    assert_int_equal(r, -ENOSPC);
    assert_int_equal(ok, 128 / 11); /* 11 whole blocks; the 12th would straddle */
    assert_int_equal(buf_chunked_buffer_read_each(b, collect_cb, &got), 0);
    assert_int_equal(got.count, (size_t)ok);
    collected_reset(&got);

    /* Clearing makes the one chunk available again. */
    buf_chunked_buffer_clear(b);
    assert_int_equal(buf_chunked_buffer_read_each(b, collect_cb, &got), 0);
    assert_int_equal(got.count, 0);
    assert_int_equal(buf_chunked_buffer_put_bytes(b, data, sizeof(data), NULL), 0);
    assert_int_equal(buf_chunked_buffer_read_each(b, collect_cb, &got), 0);
    assert_int_equal(got.count, 1);
    collected_done(&got);
    b = buf_chunked_buffer_free(b);
    m = buf_chunk_manager_free(m);
}

static void test_clear_keeps_indexes_growing(void **state)
{
    struct fixture f;
    struct buf_chunked_buffer_state st;
    uint64_t before, after;

    (void)state;
    fixture_open(&f, 1 << 20, 256);
    for (int i = 0; i < 50; i++)
        assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, "0123456789", 10, &before), 0);
    buf_chunked_buffer_clear(f.buffer);
    buf_chunked_buffer_get_state(f.buffer, &st);
    assert_true(st.range_start == st.range_end);
    assert_true(st.cleared_blocks == 50);
    assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, "x", 1, &after), 0);
    assert_true(after > before);
    fixture_close(&f);
}

/* Done times come from the update callback; destroying at one of them drops exactly the
 * chunks done at or before it, and the range start moves to the first surviving block. */
struct done_log {
    uint64_t done[4096];
    size_t count;
};

static void log_released(const struct buf_update *u, void *userdata)
{
    struct done_log *log = userdata;

    for (size_t i = 0; i < u->newly_released_count && log->count < ARRAY_SIZE(log->done); i++)
        log->done[log->count++] = u->newly_released[i].done_ns;
}

static void test_destroy_at_or_before(void **state)
{
    struct fixture f;
    struct done_log log = {0};
    struct collected got = {0};
    struct buf_chunked_buffer_state st;
    struct buf_chunk_manager_stats ms;

    (void)state;
    fixture_open(&f, 1 << 20, 256);
    buf_chunked_buffer_set_update_cb(f.buffer, log_released, &log);
    for (int i = 0; i < 100; i++)
        assert_int_equal(
                buf_chunked_buffer_put_bytes(f.buffer, "abcdefghijklmnopqrstuvwxyz", 26, NULL), 0);
    buf_chunk_manager_get_stats(f.manager, &ms);
    assert_true(ms.released_chunks == log.count);
    assert_true(log.count >= 8);
    for (size_t i = 1; i < log.count; i++)
        assert_true(log.done[i] > log.done[i - 1]);

    buf_chunked_buffer_destroy_at_or_before(f.buffer, log.done[3]);
    buf_chunk_manager_get_stats(f.manager, &ms);
    assert_true(ms.released_chunks == log.count - 4);
    buf_chunked_buffer_get_state(f.buffer, &st);
    assert_int_equal(buf_chunked_buffer_read_each(f.buffer, collect_cb, &got), 0);
    assert_true(got.count > 0);
    assert_true(got.index[0] == st.range_start);
    assert_true(st.cleared_blocks + got.count == st.pushed_blocks);
    for (size_t i = 0; i < got.count; i++)
        assert_memory_equal(got.data[i], "abcdefghijklmnopqrstuvwxyz", 26);
    collected_done(&got);
    buf_chunked_buffer_set_update_cb(f.buffer, NULL, NULL);
    fixture_close(&f);
}

/* Invariant 4: random puts (1 byte .. just under a chunk) interleaved with destroys and
 * clears read back byte-identical and in order; what survives is a suffix of what was put
 * since the last clear; every block is either readable or counted as cleared. */
static void test_property_read_back(void **state)
{
    struct test_rng rng;

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int round = 0; round < 40; round++) {
        uint32_t chunk = (uint32_t)test_rng_range(&rng, 64, 2048);
        uint64_t limit = chunk * test_rng_range(&rng, 2, 12);
        struct fixture f;
        struct done_log log = {0};
        struct collected got = {0};
        size_t cap = 4096, count = 0;
        uint8_t **model = calloc(cap, sizeof(*model));
        size_t *model_len = calloc(cap, sizeof(*model_len));
        uint64_t *model_idx = calloc(cap, sizeof(*model_idx));
        uint8_t *scratch = malloc(chunk);

        assert_non_null(model);
        assert_non_null(model_len);
        assert_non_null(model_idx);
        assert_non_null(scratch);
        fixture_open(&f, limit, chunk);
        buf_chunked_buffer_set_update_cb(f.buffer, log_released, &log);
        for (int op = 0; op < 600; op++) {
            uint64_t dice = test_rng_range(&rng, 0, 99);

            if (dice < 90 && count < cap) {
                /* Sizes skewed small, with some just under the limit. */
                size_t max = chunk - 1 - buf_uleb128_size(chunk);
                size_t len =
                        dice < 10 ? max : (size_t)test_rng_range(&rng, 1, dice < 60 ? 40 : max);
                uint64_t idx;

                test_rng_fill(&rng, scratch, len);
                assert_int_equal(buf_chunked_buffer_put_bytes(f.buffer, scratch, len, &idx), 0);
                model[count] = malloc(len);
                assert_non_null(model[count]);
                memcpy(model[count], scratch, len);
                model_len[count] = len;
                model_idx[count] = idx;
                if (count > 0)
                    assert_true(idx == model_idx[count - 1] +
                                               buf_uleb128_size(model_len[count - 1]) +
                                               model_len[count - 1]);
                count++;
            } else if (dice < 97 && log.count > 0) {
                buf_chunked_buffer_destroy_at_or_before(
                        f.buffer, log.done[test_rng_range(&rng, 0, log.count - 1)]);
            } else if (dice >= 97) {
                buf_chunked_buffer_clear(f.buffer);
                for (size_t i = 0; i < count; i++)
                    free(model[i]);
                count = 0;
            }

            if (op % 50 == 49 || op == 599) {
                struct buf_chunked_buffer_state st;
                size_t first;

                collected_reset(&got);
                assert_int_equal(buf_chunked_buffer_read_each(f.buffer, collect_cb, &got), 0);
                assert_true(got.count <= count);
                first = count - got.count;
                for (size_t i = 0; i < got.count; i++) {
                    assert_true(got.index[i] == model_idx[first + i]);
                    assert_int_equal(got.len[i], model_len[first + i]);
                    assert_memory_equal(got.data[i], model[first + i], got.len[i]);
                }
                buf_chunked_buffer_get_state(f.buffer, &st);
                assert_true(st.cleared_blocks + got.count == st.pushed_blocks);
                if (got.count > 0)
                    assert_true(st.range_start == got.index[0]);
            }
        }
        for (size_t i = 0; i < count; i++)
            free(model[i]);
        free(model);
        free(model_len);
        free(model_idx);
        free(scratch);
        collected_done(&got);
        buf_chunked_buffer_set_update_cb(f.buffer, NULL, NULL);
        fixture_close(&f);
    }
}

/* Two threads put concurrently; each thread's blocks read back complete and in its order. */
struct writer_arg {
    struct buf_chunked_buffer *buffer;
    uint8_t tag;
    int count;
};

static void *writer_main(void *p)
{
    struct writer_arg *a = p;

    for (int i = 0; i < a->count; i++) {
        uint8_t rec[9];

        rec[0] = a->tag;
        memcpy(rec + 1, &i, sizeof(i));
        memset(rec + 5, a->tag, 4);
        if (buf_chunked_buffer_put_bytes(a->buffer, rec, sizeof(rec), NULL) != 0)
            return (void *)1;
    }
    return NULL;
}

struct order_check {
    int next[2];
    int bad;
};

static int check_order(struct buf_entry_reader *r, uint64_t index, void *userdata)
{
    struct order_check *oc = userdata;
    uint8_t rec[9];
    int seq;

    (void)index;
    if (buf_entry_reader_read(r, rec, sizeof(rec)) != 0 || rec[0] > 1 || rec[5] != rec[0]) {
        oc->bad++;
        return 0;
    }
    memcpy(&seq, rec + 1, sizeof(seq));
    if (seq != oc->next[rec[0]])
        oc->bad++;
    oc->next[rec[0]] = seq + 1;
    return 0;
}

static void test_two_threads(void **state)
{
    struct buf_chunk_manager *m;
    struct buf_chunked_buffer *b;
    struct writer_arg args[2];
    pthread_t t[2];
    struct order_check oc = {{0, 0}, 0};

    (void)state;
    assert_int_equal(buf_chunk_manager_local_new(64u << 20, 4096, &m), 0);
    assert_int_equal(buf_chunked_buffer_new(m, 1, &b), 0);
    for (int i = 0; i < 2; i++) {
        args[i] = (struct writer_arg){b, (uint8_t)i, 200000};
        assert_int_equal(pthread_create(&t[i], NULL, writer_main, &args[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
        void *ret;

        assert_int_equal(pthread_join(t[i], &ret), 0);
        assert_null(ret);
    }
    assert_int_equal(buf_chunked_buffer_read_each(b, check_order, &oc), 0);
    assert_int_equal(oc.bad, 0);
    assert_int_equal(oc.next[0], 200000);
    assert_int_equal(oc.next[1], 200000);
    b = buf_chunked_buffer_free(b);
    m = buf_chunk_manager_free(m);
}

/* A callback that writes less than reserved gets its block zero-padded, not stale bytes. */
static int write_two(struct buf_entry_writer *w, void *userdata)
{
    (void)userdata;
    return buf_entry_writer_write(w, "hi", 2);
}

static int expect_padded(struct buf_entry_reader *r, uint64_t index, void *userdata)
{
    uint8_t got[8];
    static const uint8_t want[8] = {'h', 'i', 0, 0, 0, 0, 0, 0};

    (void)index;
    (void)userdata;
    assert_int_equal(buf_entry_reader_read(r, got, 8), 0);
    assert_memory_equal(got, want, 8);
    return 0;
}

static void test_short_write_is_zero_padded(void **state)
{
    struct fixture f;

    (void)state;
    fixture_open(&f, 1 << 20, 256);
    assert_int_equal(buf_chunked_buffer_put(f.buffer, 8, write_two, NULL, NULL), 0);
    assert_int_equal(buf_chunked_buffer_read_each(f.buffer, expect_padded, NULL), 0);
    fixture_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_put_read_small),
            cmocka_unit_test(test_refuses_block_of_chunk_size),
            cmocka_unit_test(test_straddle_every_offset),
            cmocka_unit_test(test_single_manager_capacity),
            cmocka_unit_test(test_clear_keeps_indexes_growing),
            cmocka_unit_test(test_destroy_at_or_before),
            cmocka_unit_test(test_property_read_back),
            cmocka_unit_test(test_two_threads),
            cmocka_unit_test(test_short_write_is_zero_padded),
    };
    return cmocka_run_group_tests_name("buffer-chunked-buffer", tests, NULL, NULL);
}
