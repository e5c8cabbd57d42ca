/* Unit tests for buffer/update: the fold rules, associativity over real update streams
 * (design invariant 3), and the slot shared by two threads. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/chunk-manager.h"
#include "buffer/chunked-buffer.h"
#include "buffer/update.h"
#include "testlib.h"

static struct buf_update change(uint64_t unreleased, uint64_t released, uint64_t oldest,
                                struct buf_released_chunk *list, size_t n)
{
    return (struct buf_update){
            .kind = BUF_UPDATE_CHANGE,
            .unreleased_bytes = unreleased,
            .released_bytes = released,
            .oldest_done_ns = oldest,
            .newly_released = list,
            .newly_released_count = n,
    };
}

static void assert_same(const struct buf_update *a, const struct buf_update *b)
{
    assert_int_equal(a->kind, b->kind);
    if (a->kind != BUF_UPDATE_CHANGE)
        return;
    assert_true(a->unreleased_bytes == b->unreleased_bytes);
    assert_true(a->released_bytes == b->released_bytes);
    assert_true(a->oldest_done_ns == b->oldest_done_ns);
    assert_int_equal(a->newly_released_count, b->newly_released_count);
    for (size_t i = 0; i < a->newly_released_count; i++) {
        assert_true(a->newly_released[i].done_ns == b->newly_released[i].done_ns);
        assert_true(a->newly_released[i].bytes == b->newly_released[i].bytes);
    }
}

static void test_fold_rules(void **state)
{
    struct buf_released_chunk l1[] = {{10, 100}, {20, 100}};
    struct buf_released_chunk l2[] = {{30, 200}};
    struct buf_update u1 = change(1, 200, 10, l1, 2);
    struct buf_update u2 = change(2, 300, 20, l2, 1);
    struct buf_update none = {.kind = BUF_UPDATE_NONE};
    struct buf_update final_update = {.kind = BUF_UPDATE_FINAL};
    struct buf_update acc;

    (void)state;
    /* None + X = X, and X + None = X. */
    buf_update_init(&acc);
    assert_int_equal(buf_update_fold(&acc, &u1), 0);
    assert_same(&acc, &u1);
    assert_int_equal(buf_update_fold(&acc, &none), 0);
    assert_same(&acc, &u1);
    assert_true(acc.newly_released != l1); /* the fold owns a copy */

    /* Counts from newer; newer's oldest prunes older entries before it; lists append. */
    assert_int_equal(buf_update_fold(&acc, &u2), 0);
    assert_true(acc.unreleased_bytes == 2 && acc.released_bytes == 300);
    assert_true(acc.oldest_done_ns == 20);
    assert_int_equal(acc.newly_released_count, 2);
    assert_true(acc.newly_released[0].done_ns == 20 && acc.newly_released[1].done_ns == 30);

    /* No oldest in newer (nothing released): older's oldest and entries stay. */
    {
        struct buf_update u3 = change(5, 300, 0, NULL, 0);

        assert_int_equal(buf_update_fold(&acc, &u3), 0);
        assert_true(acc.oldest_done_ns == 20 && acc.newly_released_count == 2);
        assert_true(acc.unreleased_bytes == 5);
    }

    /* Final replaces everything and stays final. */
    assert_int_equal(buf_update_fold(&acc, &final_update), 0);
    assert_int_equal(acc.kind, BUF_UPDATE_FINAL);
    assert_int_equal(acc.newly_released_count, 0);
    assert_int_equal(buf_update_fold(&acc, &u1), 0);
    assert_int_equal(acc.kind, BUF_UPDATE_FINAL);
    buf_update_done(&acc);
    assert_int_equal(acc.kind, BUF_UPDATE_NONE);
}

/* A stream of owned update copies, recorded from a real manager. */
struct stream {
    struct buf_update *u;
    size_t count, cap;
};

static void record_cb(const struct buf_update *update, void *userdata)
{
    struct stream *s = userdata;

    if (update->kind == BUF_UPDATE_FINAL)
        return; /* Final only ends a stream; associativity is about what precedes it */
    if (s->count == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->u = realloc(s->u, s->cap * sizeof(*s->u));
        assert_non_null(s->u);
    }
    buf_update_init(&s->u[s->count]);
    assert_int_equal(buf_update_fold(&s->u[s->count], update), 0);
    s->count++;
}

static uint64_t fake_clock(void *userdata)
{
    uint64_t *t = userdata;

    return *t += 1 + (*t % 3);
}

/* Folds [lo, hi) of the stream with a random grouping. */
static void fold_tree(struct test_rng *rng, const struct stream *s, size_t lo, size_t hi,
                      struct buf_update *ret)
{
    struct buf_update right;
    size_t mid;

    buf_update_init(ret);
    if (hi - lo == 1) {
        assert_int_equal(buf_update_fold(ret, &s->u[lo]), 0);
        return;
    }
    mid = lo + 1 + (size_t)test_rng_range(rng, 0, hi - lo - 2);
    fold_tree(rng, s, lo, mid, ret);
    fold_tree(rng, s, mid, hi, &right);
    assert_int_equal(buf_update_fold(ret, &right), 0);
    buf_update_done(&right);
}

static void test_property_associative(void **state)
{
    struct test_rng rng;

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int round = 0; round < 30; round++) {
        struct buf_chunk_manager *m;
        struct buf_chunked_buffer *b;
        struct stream s = {0};
        struct buf_update left, tree;
        uint64_t clock = 0;
        uint8_t data[200] = {0};

        assert_int_equal(buf_chunk_manager_local_new(test_rng_range(&rng, 3, 10) * 256, 256, &m),
                         0);
        assert_int_equal(buf_chunked_buffer_new(m, 1, &b), 0);
        buf_chunked_buffer_set_clock(b, fake_clock, &clock);
        buf_chunked_buffer_set_update_cb(b, record_cb, &s);
        for (int op = 0; op < 400; op++) {
            if (test_rng_range(&rng, 0, 9) < 9)
                assert_int_equal(buf_chunked_buffer_put_bytes(
                                         b, data, (size_t)test_rng_range(&rng, 1, 200), NULL),
                                 0);
            else
                buf_chunked_buffer_destroy_at_or_before(b, clock - test_rng_range(&rng, 0, 30));
        }
        assert_true(s.count > 10);

        buf_update_init(&left);
        for (size_t i = 0; i < s.count; i++)
            assert_int_equal(buf_update_fold(&left, &s.u[i]), 0);
        for (int grouping = 0; grouping < 5; grouping++) {
            fold_tree(&rng, &s, 0, s.count, &tree);
            assert_same(&tree, &left);
            buf_update_done(&tree);
        }
        buf_update_done(&left);
        buf_chunked_buffer_set_update_cb(b, NULL, NULL);
        for (size_t i = 0; i < s.count; i++)
            buf_update_done(&s.u[i]);
        free(s.u);
        b = buf_chunked_buffer_free(b);
        m = buf_chunk_manager_free(m);
    }
}

/* Peeking tells what the slot holds (to decide whether it is worth sending) and leaves it. */
static void test_slot_peek_leaves_the_update(void **state)
{
    struct buf_released_chunk l1[] = {{10, 100}};
    struct buf_released_chunk l2[] = {{30, 200}};
    struct buf_update u1 = change(1, 100, 10, l1, 1), u2 = change(2, 300, 10, l2, 1);
    struct buf_update final_update = {.kind = BUF_UPDATE_FINAL}, taken;
    struct buf_update_slot slot;
    uint64_t unreleased = 99;
    size_t n = 99;

    (void)state;
    assert_int_equal(buf_update_slot_init(&slot), 0);
    assert_int_equal(buf_update_slot_peek(&slot, &n, &unreleased), BUF_UPDATE_NONE);
    assert_int_equal(n, 0);
    buf_update_slot_fold(&slot, &u1);
    assert_int_equal(buf_update_slot_peek(&slot, &n, &unreleased), BUF_UPDATE_CHANGE);
    assert_int_equal(n, 1);
    buf_update_slot_fold(&slot, &u2);
    assert_int_equal(buf_update_slot_peek(&slot, &n, &unreleased), BUF_UPDATE_CHANGE);
    assert_int_equal(n, 2);
    assert_int_equal(unreleased, 2);
    assert_int_equal(buf_update_slot_take(&slot, &taken), 1);
    assert_int_equal(taken.newly_released_count, 2);
    buf_update_done(&taken);
    assert_int_equal(buf_update_slot_peek(&slot, &n, &unreleased), BUF_UPDATE_NONE);
    buf_update_slot_fold(&slot, &final_update);
    assert_int_equal(buf_update_slot_peek(&slot, &n, &unreleased), BUF_UPDATE_FINAL);
    assert_int_equal(n, 0);
    buf_update_slot_done(&slot);
}

/* A writer thread folds updates into a slot while a reader takes them; the reader's own
 * fold of what it took equals the fold of everything written. */
struct slot_arg {
    struct buf_update_slot *slot;
    int count;
};

static void *slot_writer(void *p)
{
    struct slot_arg *a = p;

    for (int i = 1; i <= a->count; i++) {
        struct buf_released_chunk entry = {(uint64_t)i * 10, 64};
        struct buf_update u = change((uint64_t)i, (uint64_t)i * 64, 10, &entry, 1);

        buf_update_slot_fold(a->slot, &u);
    }
    return NULL;
}

static void test_slot_two_threads(void **state)
{
    struct buf_update_slot slot;
    struct slot_arg arg;
    struct buf_update taken, total;
    pthread_t t;
    int done = 0;

    (void)state;
    assert_int_equal(buf_update_slot_init(&slot), 0);
    buf_update_init(&total);
    arg = (struct slot_arg){&slot, 20000};
    assert_int_equal(pthread_create(&t, NULL, slot_writer, &arg), 0);
    while (!done) {
        done = total.kind == BUF_UPDATE_CHANGE && total.unreleased_bytes == 20000;
        if (buf_update_slot_take(&slot, &taken)) {
            assert_int_equal(buf_update_fold(&total, &taken), 0);
            buf_update_done(&taken);
        }
    }
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(buf_update_slot_take(&slot, &taken), 0);
    assert_int_equal(total.newly_released_count, 20000);
    for (size_t i = 0; i < total.newly_released_count; i++)
        assert_true(total.newly_released[i].done_ns == (i + 1) * 10);
    assert_true(slot.lost_entries == 0);
    buf_update_done(&total);
    buf_update_slot_done(&slot);
}

/* The hold: under a standing poll, an update with fewer than 2 new chunks and no news of
 * unreleased memory waits, until the hold has run since the first change it holds. */
static void test_pace_holds_a_small_update_until_its_time(void **state)
{
    struct buf_update_pace p;
    uint64_t wait = 0;

    (void)state;
    buf_update_pace_init(&p, 200000000); /* 200 ms */
    buf_update_pace_sent(&p, 4096);      /* the daemon heard of 4096 unreleased */
    assert_true(buf_update_pace_hold(&p, true, false, BUF_UPDATE_CHANGE, 1, 4096, 1000, &wait));
    assert_int_equal(wait, 200000000);
    /* 150 ms later: still held, 50 ms to go; the first change's time is kept. */
    assert_true(buf_update_pace_hold(&p, true, false, BUF_UPDATE_CHANGE, 1, 4096, 1000 + 150000000,
                                     &wait));
    assert_int_equal(wait, 50000000);
    /* Its time is up: it goes. */
    assert_false(buf_update_pace_hold(&p, true, false, BUF_UPDATE_CHANGE, 1, 4096, 1000 + 200000000,
                                      &wait));
    /* Sent: the next change holds afresh from its own first time. */
    buf_update_pace_sent(&p, 4096);
    assert_true(buf_update_pace_hold(&p, true, false, BUF_UPDATE_CHANGE, 0, 0, 5000000000, &wait));
    assert_int_equal(wait, 200000000);
}

/* What never waits: two new chunks, more unreleased memory than the daemon heard of, a Final,
 * an exit, a poll that does not stand, a daemon that set no hold. */
static void test_pace_never_holds_what_the_daemon_must_hear(void **state)
{
    struct buf_update_pace p;
    uint64_t wait = 0;

    (void)state;
    buf_update_pace_init(&p, 200000000);
    buf_update_pace_sent(&p, 4096);
    assert_false(buf_update_pace_hold(&p, true, false, BUF_UPDATE_CHANGE, BUF_UPDATE_HOLD_CHUNKS,
                                      4096, 1, &wait));
    assert_false(buf_update_pace_hold(&p, true, false, BUF_UPDATE_CHANGE, 1, 8192, 1, &wait));
    assert_false(buf_update_pace_hold(&p, true, false, BUF_UPDATE_FINAL, 0, 0, 1, &wait));
    assert_false(buf_update_pace_hold(&p, true, true, BUF_UPDATE_CHANGE, 0, 0, 1, &wait));
    assert_false(buf_update_pace_hold(&p, false, false, BUF_UPDATE_CHANGE, 0, 0, 1, &wait));
    buf_update_pace_init(&p, 0);
    assert_false(buf_update_pace_hold(&p, true, false, BUF_UPDATE_CHANGE, 0, 0, 1, &wait));
}

/* The retry doubles from 1 ms to 64 ms and stays there; a sent update starts it again. */
static void test_pace_retry_backs_off_and_resets(void **state)
{
    struct buf_update_pace p;
    const uint64_t want[] = {1, 2, 4, 8, 16, 32, 64, 64, 64};

    (void)state;
    buf_update_pace_init(&p, 0);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        assert_int_equal(buf_update_pace_retry(&p), want[i]);
    buf_update_pace_sent(&p, 0);
    assert_int_equal(buf_update_pace_retry(&p), BUF_UPDATE_RETRY_MIN_MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_fold_rules),
            cmocka_unit_test(test_property_associative),
            cmocka_unit_test(test_slot_peek_leaves_the_update),
            cmocka_unit_test(test_slot_two_threads),
            cmocka_unit_test(test_pace_holds_a_small_update_until_its_time),
            cmocka_unit_test(test_pace_never_holds_what_the_daemon_must_hear),
            cmocka_unit_test(test_pace_retry_backs_off_and_resets),
    };
    return cmocka_run_group_tests_name("buffer-update", tests, NULL, NULL);
}
