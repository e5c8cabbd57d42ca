/* Unit tests for buffer/chunk-manager*: the single manager's cycle, the local-limit
 * manager's eviction order, limit and recycling, and the update stream it reports. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/buf-internal.h"
#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "testlib.h"

static uint64_t fake_clock(void *userdata)
{
    uint64_t *t = userdata;

    return ++*t;
}

static void test_rejects_bad_sizes(void **state)
{
    struct buf_chunk_manager *m = NULL;

    (void)state;
    assert_int_equal(buf_chunk_manager_local_new(100, 0, &m), -EINVAL);
    assert_int_equal(buf_chunk_manager_local_new(99, 100, &m), -EINVAL);
    assert_int_equal(buf_chunk_manager_local_new(1ull << 40, BUF_CHUNK_MAX_BYTES + 1, &m), -EINVAL);
    assert_int_equal(buf_chunk_manager_single_new(0, &m), -EINVAL);
    assert_null(m);
    assert_null(buf_chunk_manager_free(NULL));
}

static void test_single_cycle(void **state)
{
    struct buf_chunk_manager *m;
    struct buf_chunk *c, *again;
    struct buf_chunk_manager_stats st;

    (void)state;
    assert_int_equal(buf_chunk_manager_single_new(256, &m), 0);
    assert_int_equal(m->ops->get_chunk(m, &c), 0);
    assert_int_equal(m->ops->get_chunk(m, &again), -ENOSPC);
    buf__chunk_set_in_use(c, 1, 10);
    buf__chunk_mark_done(c, 20);
    m->ops->release_chunk(m, c);
    assert_ptr_equal(m->ops->released_head(m), c);
    buf_chunk_manager_get_stats(m, &st);
    assert_true(st.released_chunks == 1);
    m->ops->destroy_released_at_or_before(m, 19); /* too early: stays */
    assert_ptr_equal(m->ops->released_head(m), c);
    m->ops->destroy_released_at_or_before(m, 20);
    assert_null(m->ops->released_head(m));
    assert_int_equal(m->ops->get_chunk(m, &again), 0);
    assert_ptr_equal(again, c); /* the same chunk, reused */
    m->ops->forget_chunk(m, again);
    m = buf_chunk_manager_free(m);
}

/* Writes n blocks of len bytes. */
static void fill(struct buf_chunked_buffer *b, int n, size_t len)
{
    uint8_t data[4096];

    memset(data, 0x5a, sizeof(data));
    for (int i = 0; i < n; i++)
        assert_int_equal(buf_chunked_buffer_put_bytes(b, data, len, NULL), 0);
}

/* Limit of 4 chunks: before each new chunk the oldest released ones go while
 * unreleased + released + chunk >= limit, so a steady state keeps exactly 2 released. */
static void test_local_steady_state(void **state)
{
    struct buf_chunk_manager *m;
    struct buf_chunked_buffer *b;
    struct buf_chunk_manager_stats st;
    uint64_t clock = 0;

    (void)state;
    assert_int_equal(buf_chunk_manager_local_new(4 * 1000, 1000, &m), 0);
    assert_int_equal(buf_chunked_buffer_new(m, 7, &b), 0);
    buf_chunked_buffer_set_clock(b, fake_clock, &clock);
    fill(b, 200, 99); /* 1-byte prefix + 99 = 100 bytes a block: 10 per chunk, 20 chunks */
    buf_chunk_manager_get_stats(m, &st);
    assert_true(st.unreleased_bytes == 1000);
    assert_true(st.released_chunks == 2);
    assert_true(st.released_bytes == 2000);
    assert_true(st.recycled_chunks <= BUF_MANAGER_MAX_RECYCLED);
    assert_true(st.destroyed_chunks == 20 - 2);

    /* A prepared next chunk is unreleased too, and costs one more released chunk. */
    assert_int_equal(buf_chunked_buffer_prepare_next(b), 0);
    buf_chunk_manager_get_stats(m, &st);
    assert_true(st.unreleased_bytes == 2000);
    assert_true(st.released_chunks == 1);
    /* A smaller limit applies when the next chunk is needed. */
    assert_int_equal(buf_chunked_buffer_set_limit(b, 999), -EINVAL);
    assert_int_equal(buf_chunked_buffer_set_limit(b, 3 * 1000), 0);
    fill(b, 30, 99); /* three chunks: the chunk prepared under the old limit is used up */
    buf_chunk_manager_get_stats(m, &st);
    assert_true(st.limit_bytes == 3000);
    assert_true(st.released_chunks == 0 || st.unreleased_bytes + st.released_bytes < 3000);
    b = buf_chunked_buffer_free(b);
    buf_chunk_manager_get_stats(m, &st);
    assert_true(st.unreleased_bytes == 0);
    m = buf_chunk_manager_free(m);
}

/* Eviction goes oldest first: the surviving released chunks are the newest, in order. */
static void test_local_evicts_oldest(void **state)
{
    struct buf_chunk_manager *m;
    struct buf_chunked_buffer *b;
    uint64_t clock = 0, prev = 0;
    int n = 0;

    (void)state;
    assert_int_equal(buf_chunk_manager_local_new(10 * 512, 512, &m), 0);
    assert_int_equal(buf_chunked_buffer_new(m, 7, &b), 0);
    buf_chunked_buffer_set_clock(b, fake_clock, &clock);
    fill(b, 1000, 50);
    for (const struct buf_chunk *c = m->ops->released_head(m); c; c = c->next, n++) {
        assert_true(c->header.done_ns > prev);
        assert_true(c->header.pid == 7);
        if (c->next) /* contiguous in the index space: nothing in between was dropped */
            assert_true(c->next->header.range_start ==
                        c->header.range_start + c->header.buffer_bytes);
        prev = c->header.done_ns;
    }
    assert_int_equal(n, 10 - 2);
    b = buf_chunked_buffer_free(b);
    m = buf_chunk_manager_free(m);
}

/* Property (c): whatever the operations, the manager never holds more chunk memory than its
 * limit plus the current and next chunk, nor more than 2 recycled chunks. */
static void test_property_memory_bound(void **state)
{
    struct test_rng rng;

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int round = 0; round < 60; round++) {
        uint32_t chunk = (uint32_t)test_rng_range(&rng, 64, 1024);
        uint64_t limit = chunk * test_rng_range(&rng, 1, 16) + test_rng_range(&rng, 0, chunk);
        struct buf_chunk_manager *m;
        struct buf_chunked_buffer *b;
        uint64_t clock = 0;
        uint8_t data[1024] = {0};

        assert_int_equal(buf_chunk_manager_local_new(limit, chunk, &m), 0);
        assert_int_equal(buf_chunked_buffer_new(m, 1, &b), 0);
        buf_chunked_buffer_set_clock(b, fake_clock, &clock);
        for (int op = 0; op < 2000; op++) {
            uint64_t dice = test_rng_range(&rng, 0, 99);
            struct buf_chunk_manager_stats st;

            if (dice < 85) {
                size_t len = (size_t)test_rng_range(&rng, 1, chunk - 3);

                assert_int_equal(buf_chunked_buffer_put_bytes(b, data, len, NULL), 0);
            } else if (dice < 92) {
                assert_int_equal(buf_chunked_buffer_prepare_next(b), 0);
            } else if (dice < 98) {
                buf_chunked_buffer_destroy_at_or_before(b, clock - test_rng_range(&rng, 0, clock));
            } else {
                buf_chunked_buffer_clear(b);
            }
            buf_chunk_manager_get_stats(m, &st);
            assert_true(st.unreleased_bytes <= 2ull * chunk);
            assert_true(st.unreleased_bytes + st.released_bytes <= limit + 2ull * chunk);
            assert_true(st.recycled_chunks <= BUF_MANAGER_MAX_RECYCLED);
            if (limit >= 3ull * chunk) /* room for current + next + one released */
                assert_true(st.unreleased_bytes + st.released_bytes < limit);
        }
        b = buf_chunked_buffer_free(b);
        m = buf_chunk_manager_free(m);
    }
}

/* The update stream, folded from the start, equals the manager's own truth: its counts
 * and exactly its surviving released chunks. */
struct folded {
    struct buf_update u;
    int finals;
    int calls;
};

static void fold_cb(const struct buf_update *update, void *userdata)
{
    struct folded *f = userdata;

    f->calls++;
    if (update->kind == BUF_UPDATE_FINAL)
        f->finals++;
    assert_int_equal(buf_update_fold(&f->u, update), 0);
}

static void assert_matches_manager(struct folded *f, struct buf_chunk_manager *m)
{
    struct buf_chunk_manager_stats st;
    size_t i = 0;

    buf_chunk_manager_get_stats(m, &st);
    assert_int_equal(f->u.kind, BUF_UPDATE_CHANGE);
    assert_true(f->u.unreleased_bytes == st.unreleased_bytes);
    assert_true(f->u.released_bytes == st.released_bytes);
    for (const struct buf_chunk *c = m->ops->released_head(m); c; c = c->next, i++) {
        assert_true(i < f->u.newly_released_count);
        assert_true(f->u.newly_released[i].done_ns == c->header.done_ns);
        assert_true(f->u.newly_released[i].bytes == c->header.buffer_bytes);
    }
    assert_int_equal(i, f->u.newly_released_count);
    if (i > 0)
        assert_true(f->u.oldest_done_ns == m->ops->released_head(m)->header.done_ns);
}

static void test_updates_fold_to_truth(void **state)
{
    struct buf_chunk_manager *m;
    struct buf_chunked_buffer *b;
    struct folded first = {0}, second = {0};
    uint64_t clock = 0;

    (void)state;
    buf_update_init(&first.u);
    buf_update_init(&second.u);
    assert_int_equal(buf_chunk_manager_local_new(8 * 300, 300, &m), 0);
    assert_int_equal(buf_chunked_buffer_new(m, 1, &b), 0);
    buf_chunked_buffer_set_clock(b, fake_clock, &clock);
    buf_chunked_buffer_set_update_cb(b, fold_cb, &first);
    fill(b, 500, 37);
    assert_matches_manager(&first, m);
    buf_chunked_buffer_destroy_at_or_before(b, m->ops->released_head(m)->next->header.done_ns);
    assert_matches_manager(&first, m);

    /* A replacement callback starts from the full picture; the old one gets Final. */
    buf_chunked_buffer_set_update_cb(b, fold_cb, &second);
    assert_int_equal(first.finals, 1);
    assert_int_equal(first.u.kind, BUF_UPDATE_FINAL);
    assert_matches_manager(&second, m);
    fill(b, 300, 11);
    assert_matches_manager(&second, m);

    /* Destroying every released chunk must prune every entry, not leave stale ones. */
    buf_chunked_buffer_destroy_at_or_before(b, UINT64_MAX);
    assert_matches_manager(&second, m);
    assert_int_equal(second.u.newly_released_count, 0);
    assert_true(second.u.released_bytes == 0);
    fill(b, 100, 11);
    assert_matches_manager(&second, m);

    /* Freeing the manager sends Final. */
    b = buf_chunked_buffer_free(b);
    m = buf_chunk_manager_free(m);
    assert_int_equal(second.finals, 1);
    assert_int_equal(second.u.kind, BUF_UPDATE_FINAL);
    buf_update_done(&first.u);
    buf_update_done(&second.u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_rejects_bad_sizes),
            cmocka_unit_test(test_single_cycle),
            cmocka_unit_test(test_local_steady_state),
            cmocka_unit_test(test_local_evicts_oldest),
            cmocka_unit_test(test_property_memory_bound),
            cmocka_unit_test(test_updates_fold_to_truth),
    };
    return cmocka_run_group_tests_name("buffer-chunk-manager", tests, NULL, NULL);
}
