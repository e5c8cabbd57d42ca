/* Unit tests for buffer/region-updates: what a reader takes is the fold of what the owner
 * published, a full ring keeps the rest in order, a ring another process wrote wrong is
 * refused, and an owner and a reader on two threads lose nothing. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/region-updates.h"
#include "testlib.h"

static void *new_page(void)
{
    void *page = aligned_alloc(4096, 4096);

    assert_non_null(page);
    memset(page, 0, 4096);
    return page;
}

/* An owned change listing chunks done at first, first + step, ... (count of them). */
static struct buf_update owned_change(uint64_t unreleased, uint64_t oldest, uint64_t first,
                                      size_t count)
{
    struct buf_released_chunk *list = calloc(count ? count : 1, sizeof(*list));
    struct buf_update u = {.kind = BUF_UPDATE_CHANGE,
                           .unreleased_bytes = unreleased,
                           .released_bytes = count * 1000,
                           .oldest_done_ns = oldest};
    struct buf_update out;

    assert_non_null(list);
    for (size_t i = 0; i < count; i++)
        list[i] = (struct buf_released_chunk){first + i, 1000};
    u.newly_released = list;
    u.newly_released_count = count;
    buf_update_init(&out);
    assert_int_equal(buf_update_fold(&out, &u), 0); /* out owns its copy */
    free(list);
    return out;
}

static void test_take_is_the_fold_of_the_publications(void **state)
{
    struct buf_region_updates *ring;
    struct buf_region_updates_reader rd;
    struct buf_region_updates_take t;
    const char *why = NULL;
    void *page = new_page();
    struct buf_update u;

    (void)state;
    ring = buf_region_updates_of(page);
    buf_region_updates_reader_init(&rd, ring);
    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), 0); /* nothing yet */

    u = owned_change(5000, 0, 100, 3); /* chunks 100, 101, 102 */
    assert_int_equal(buf_region_updates_publish(ring, &u), 0);
    assert_int_equal(u.kind, BUF_UPDATE_NONE);
    u = owned_change(6000, 101, 103, 2); /* 100 destroyed meanwhile; 103, 104 */
    assert_int_equal(buf_region_updates_publish(ring, &u), 0);

    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), 1);
    assert_true(t.unreleased_bytes == 6000);
    assert_true(t.oldest_done_ns == 101);
    assert_int_equal(t.publications, 2);
    assert_int_equal(t.count, 4); /* 100 left out, as a fold prunes it */
    for (size_t i = 0; i < t.count; i++)
        assert_true(t.chunks[i].done_ns == 101 + i);
    assert_int_equal(buf_region_updates_taken(ring), 2);
    /* Taken: nothing new until the owner publishes again. */
    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), 0);

    u = owned_change(7000, 101, 0, 0); /* counts only */
    assert_int_equal(buf_region_updates_publish(ring, &u), 0);
    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), 1);
    assert_int_equal(t.count, 0);
    assert_true(t.unreleased_bytes == 7000);
    free(page);
}

static void test_a_full_ring_keeps_the_rest_in_order(void **state)
{
    struct buf_region_updates *ring;
    struct buf_region_updates_reader rd;
    struct buf_region_updates_take t;
    const char *why = NULL;
    void *page = new_page();
    struct buf_update u, more;
    uint64_t seq;

    (void)state;
    ring = buf_region_updates_of(page);
    buf_region_updates_reader_init(&rd, ring);
    u = owned_change(1, 0, 1, 150);
    assert_int_equal(buf_region_updates_publish(ring, &u), 150 - BUF_REGION_UPDATES_CAPACITY);
    assert_true(u.newly_released[0].done_ns == BUF_REGION_UPDATES_CAPACITY + 1);

    /* No room at all: nothing is written, not even the counts. */
    seq = ring->seq;
    assert_int_equal(buf_region_updates_publish(ring, &u), 150 - BUF_REGION_UPDATES_CAPACITY);
    assert_true(ring->seq == seq);

    /* A later change folds behind what is left. */
    more = owned_change(2, 0, 151, 10);
    assert_int_equal(buf_update_fold(&u, &more), 0);
    buf_update_done(&more);

    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), 1);
    assert_int_equal(t.count, BUF_REGION_UPDATES_CAPACITY);
    assert_int_equal(buf_region_updates_publish(ring, &u), 0);
    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), 1);
    assert_int_equal(t.count, 160 - BUF_REGION_UPDATES_CAPACITY);
    for (size_t i = 0; i < t.count; i++)
        assert_true(t.chunks[i].done_ns == BUF_REGION_UPDATES_CAPACITY + 1 + i);
    assert_true(t.unreleased_bytes == 2);
    free(page);
}

static void test_a_ring_that_contradicts_itself_is_refused(void **state)
{
    struct buf_region_updates *ring;
    struct buf_region_updates_reader rd;
    struct buf_region_updates_take t;
    const char *why;
    void *page = new_page();
    struct buf_update u;

    (void)state;
    ring = buf_region_updates_of(page);
    buf_region_updates_reader_init(&rd, ring);
    u = owned_change(1, 0, 1, 4);
    assert_int_equal(buf_region_updates_publish(ring, &u), 0);

    /* More chunks than the ring holds. */
    ring->written = 4 + BUF_REGION_UPDATES_CAPACITY;
    why = NULL;
    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), -EBADMSG);
    assert_string_equal(why, "its update ring lists more chunks than it holds");

    /* Written before what we already took. */
    ring->written = 4;
    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), 1);
    ring->written = 2;
    ring->seq += 2;
    why = NULL;
    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), -EBADMSG);
    assert_string_equal(why, "its update ring went backwards");

    /* Not a ring at all. */
    ring->written = 4;
    ring->magic = 0x12345678;
    ring->seq += 2;
    why = NULL;
    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), -EBADMSG);
    assert_string_equal(why, "its update ring has no valid header");

    /* A publication under way (odd seq) is left for the next look, not refused. */
    ring->magic = BUF_REGION_UPDATES_MAGIC;
    ring->seq += 1;
    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), 0);
    free(page);
}

static void test_a_read_point_the_daemon_never_wrote_gives_no_room(void **state)
{
    struct buf_region_updates *ring;
    void *page = new_page();
    struct buf_update u;

    (void)state;
    ring = buf_region_updates_of(page);
    u = owned_change(1, 0, 1, 2);
    assert_int_equal(buf_region_updates_publish(ring, &u), 0);
    ring->read = 1000; /* past what was written */
    u = owned_change(1, 0, 3, 2);
    assert_int_equal(buf_region_updates_publish(ring, &u), 2);
    assert_true(ring->written == 2);
    buf_update_done(&u);
    free(page);
}

static void test_a_new_reader_takes_what_the_last_one_left(void **state)
{
    struct buf_region_updates *ring;
    struct buf_region_updates_reader rd, rd2;
    struct buf_region_updates_take t;
    const char *why = NULL;
    void *page = new_page();
    struct buf_update u;

    (void)state;
    ring = buf_region_updates_of(page);
    buf_region_updates_reader_init(&rd, ring);
    u = owned_change(1, 0, 1, 5);
    assert_int_equal(buf_region_updates_publish(ring, &u), 0);
    assert_int_equal(buf_region_updates_take(ring, &rd, &t, &why), 1);
    u = owned_change(9, 0, 6, 3);
    assert_int_equal(buf_region_updates_publish(ring, &u), 0);

    /* The child reconnected: a new reader starts at the old one's read point. */
    buf_region_updates_reader_init(&rd2, ring);
    assert_int_equal(buf_region_updates_take(ring, &rd2, &t, &why), 1);
    assert_int_equal(t.count, 3);
    assert_true(t.chunks[0].done_ns == 6);
    assert_true(t.unreleased_bytes == 9);
    free(page);
}

/* --- an owner and a reader on two threads ------------------------------------------- */

#define STREAM_CHUNKS 200000u

struct stream {
    struct buf_region_updates *ring;
    _Atomic bool done;
};

static void *owner_main(void *arg)
{
    struct stream *s = arg;
    struct buf_update pending;
    uint64_t next = 1;

    buf_update_init(&pending);
    while (next <= STREAM_CHUNKS || pending.kind != BUF_UPDATE_NONE) {
        if (next <= STREAM_CHUNKS) {
            size_t n = 1 + (size_t)(next % 7); /* 1 to 7 chunks per change */
            struct buf_update u;

            if (next + n > STREAM_CHUNKS + 1)
                n = (size_t)(STREAM_CHUNKS + 1 - next);
            u = owned_change(next + n - 1, 0, next, n); /* unreleased = newest done */
            u.released_bytes = 3 * u.unreleased_bytes;
            if (buf_update_fold(&pending, &u) != 0)
                abort(); /* no cmocka assertion off the test's thread */
            buf_update_done(&u);
            next += n;
        }
        (void)buf_region_updates_publish(s->ring, &pending);
    }
    atomic_store(&s->done, true);
    return NULL;
}

static void test_owner_and_reader_on_two_threads_lose_nothing(void **state)
{
    struct stream s = {0};
    struct buf_region_updates_reader rd;
    struct buf_region_updates_take *t = malloc(sizeof(*t));
    const char *why = NULL;
    void *page = new_page();
    uint64_t expect = 1, last_unreleased = 0;
    pthread_t owner;
    bool finished = false;

    (void)state;
    assert_non_null(t);
    s.ring = buf_region_updates_of(page);
    buf_region_updates_reader_init(&rd, s.ring);
    assert_int_equal(pthread_create(&owner, NULL, owner_main, &s), 0);
    while (!finished) {
        int r;

        finished = atomic_load(&s.done); /* then one last take sees everything */
        r = buf_region_updates_take(s.ring, &rd, t, &why);
        assert_true(r >= 0);
        if (r == 0)
            continue;
        for (size_t i = 0; i < t->count; i++)
            assert_true(t->chunks[i].done_ns == expect++);
        /* The counts are never torn (both from one publication), never behind the chunks
         * they came with (a full ring publishes the latest counts with fewer chunks). */
        assert_true(t->released_bytes == 3 * t->unreleased_bytes);
        assert_true(t->unreleased_bytes >= last_unreleased);
        assert_true(t->unreleased_bytes >= expect - 1);
        last_unreleased = t->unreleased_bytes;
    }
    assert_int_equal(pthread_join(owner, NULL), 0);
    assert_true(expect == STREAM_CHUNKS + 1);
    free(t);
    free(page);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_take_is_the_fold_of_the_publications),
            cmocka_unit_test(test_a_full_ring_keeps_the_rest_in_order),
            cmocka_unit_test(test_a_ring_that_contradicts_itself_is_refused),
            cmocka_unit_test(test_a_read_point_the_daemon_never_wrote_gives_no_room),
            cmocka_unit_test(test_a_new_reader_takes_what_the_last_one_left),
            cmocka_unit_test(test_owner_and_reader_on_two_threads_lose_nothing),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
