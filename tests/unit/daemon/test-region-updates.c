/* Unit tests for daemon/region-updates.c: a child that publishes its chunk-manager updates in
 * the update ring of its region's header page (buffer/region-updates.h) instead of sending
 * them. What it publishes reaches the controller, taken on the daemon's timer or before its
 * next message; the controller's evictions come back through the same page; a ring or an
 * update that contradicts itself drops the child; a child that leaves is no longer read, and
 * the others still are. The publisher is buffer/region-updates.c's own, on a real region. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer/region-updates.h"
#include "buffer/region.h"
#include "daemon-fixture.h"
#include "testlib.h"

#define KIB 1024u

static struct buf_region_updates *ring_of(struct buf_region *r)
{
    return buf_region_updates_of(buf_region_header_page(r));
}

/* What the child's sampler tick does with a change of its manager. */
static void publish(struct buf_region *r, uint64_t unreleased, uint64_t released,
                    struct buf_released_chunk *chunks, size_t n)
{
    struct buf_update u;

    buf_update_init(&u);
    u.kind = BUF_UPDATE_CHANGE;
    u.unreleased_bytes = unreleased;
    u.released_bytes = released;
    u.newly_released = chunks;
    u.newly_released_count = n;
    assert_int_equal(buf_region_updates_publish(ring_of(r), &u), 0);
}

/* A child whose region's header page is mapped for evictions, publishing its updates there. */
static struct conn *reader_of(struct fx *f, int32_t pid, struct buf_region *region)
{
    struct conn *c = fx_child(f, pid, "publisher");

    daemon__region_accept(c, fx_region_dup(region), true);
    assert_non_null(c->evict_page);
    assert_true(daemon__region_updates_accept(c));
    assert_true(c->updates_in_region);
    return c;
}

static struct conn *publisher(struct fx *f, int32_t pid, struct buf_region **ret)
{
    *ret = fx_region_new(64 * KIB);
    return reader_of(f, pid, *ret);
}

static void test_only_a_child_whose_page_is_mapped_publishes_there(void **state)
{
    struct buf_region *region = fx_region_new(64 * KIB);
    struct fx f;
    struct conn *c;

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 4000, "no-page");
    assert_false(daemon__region_updates_accept(c)); /* no region at all */
    daemon__region_accept(c, fx_region_dup(region), false);
    assert_false(daemon__region_updates_accept(c)); /* a region, its page not mapped */
    assert_false(c->updates_in_region);
    assert_null(f.d->region_scan);
    assert_true(daemon__region_updates_take(c)); /* a no-op for it */
    fx_teardown(&f);
    buf_region_free(region);
}

static void test_what_the_child_published_reaches_the_controller(void **state)
{
    struct buf_released_chunk chunks[3];
    struct buf_region *region;
    struct ctl_owner_status os;
    struct daemon_stats s;
    struct fx f;
    struct conn *c;
    uint64_t now = daemon__now_ns();

    (void)state;
    fx_setup(&f, NULL);
    c = publisher(&f, 4001, &region);
    assert_true(daemon__region_updates_take(c)); /* nothing yet */
    assert_false(ctl_get_owner(f.d->ctl, 4001, &os));

    chunks[0] = (struct buf_released_chunk){now - 3000, 64 * KIB};
    chunks[1] = (struct buf_released_chunk){now - 2000, 64 * KIB};
    publish(region, 128 * KIB, 128 * KIB, chunks, 2);
    assert_true(daemon__region_updates_take(c));
    assert_true(ctl_get_owner(f.d->ctl, 4001, &os));
    assert_int_equal(os.unreleased_bytes, 128 * KIB);
    assert_int_equal(os.released_bytes, 128 * KIB);
    assert_int_equal(os.released_chunks, 2);
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.updates, 1);
    assert_int_equal(s.region_updates, 1);
    assert_int_equal(c->region_updates, 1);
    assert_int_equal(buf_region_updates_taken(ring_of(region)), 1); /* the child sees it */

    /* Several publications between two takes: one update, each counted. */
    chunks[2] = (struct buf_released_chunk){now - 1000, 64 * KIB};
    publish(region, 64 * KIB, 192 * KIB, &chunks[2], 1);
    publish(region, 32 * KIB, 192 * KIB, NULL, 0);
    publish(region, 16 * KIB, 192 * KIB, NULL, 0);
    assert_true(daemon__region_updates_take(c));
    assert_true(ctl_get_owner(f.d->ctl, 4001, &os));
    assert_int_equal(os.unreleased_bytes, 16 * KIB);
    assert_int_equal(os.released_chunks, 3);
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.updates, 2);
    assert_int_equal(s.region_updates, 4);
    assert_int_equal(c->region_updates, 4);
    assert_true(daemon__region_updates_take(c)); /* nothing new */
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.updates, 2);
    fx_teardown(&f);
    buf_region_free(region);
}

static bool taken(void *arg)
{
    struct fx *f = arg;

    return f->d->stats.region_updates > 0;
}

/* No message at all: the daemon's timer finds the publication. */
static void test_the_timer_takes_what_was_published(void **state)
{
    struct buf_released_chunk chunk;
    struct buf_region *region;
    struct ctl_owner_status os;
    struct fx f;

    (void)state;
    fx_setup(&f, NULL);
    (void)publisher(&f, 4002, &region);
    chunk = (struct buf_released_chunk){daemon__now_ns() - 1000, 64 * KIB};
    publish(region, 256 * KIB, 64 * KIB, &chunk, 1);
    assert_true(fx_run_until(&f, taken, &f));
    assert_true(ctl_get_owner(f.d->ctl, 4002, &os));
    assert_int_equal(os.unreleased_bytes, 256 * KIB);
    assert_int_equal(os.released_chunks, 1);
    fx_teardown(&f);
    buf_region_free(region);
}

/* Over the global limit through the ring: the eviction point comes back in the same page. */
static void test_evictions_come_back_through_the_page(void **state)
{
    struct daemon_options o = {.chunk_bytes = 64 * KIB,
                               .process_limit_bytes = 1024 * KIB,
                               .global_limit_bytes = 128 * KIB};
    struct buf_released_chunk chunks[2];
    struct buf_region *region;
    struct daemon_stats s;
    struct fx f;
    struct conn *c;
    uint64_t now = daemon__now_ns();

    (void)state;
    fx_setup(&f, &o);
    c = publisher(&f, 4003, &region);
    chunks[0] = (struct buf_released_chunk){now - 2000, 64 * KIB};
    chunks[1] = (struct buf_released_chunk){now - 1000, 64 * KIB};
    publish(region, 64 * KIB, 128 * KIB, chunks, 2);
    assert_true(daemon__region_updates_take(c));
    assert_true(buf_region_eviction_ns(region) == now - 2000);
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.region_evictions, 1);
    assert_int_equal(s.destroy_requests, 0);
    fx_teardown(&f);
    buf_region_free(region);
}

/* A hostile or broken child: its ring contradicts itself, or what it says cannot be true. */
static void test_a_ring_or_an_update_that_contradicts_itself_drops_the_child(void **state)
{
    struct buf_released_chunk chunks[2];
    struct buf_region *ra, *rb;
    struct ctl_owner_status os;
    struct daemon_stats s;
    struct fx f;
    struct conn *a, *b;
    uint64_t now = daemon__now_ns();

    (void)state;
    fx_setup(&f, NULL);
    a = publisher(&f, 4004, &ra);
    b = publisher(&f, 4005, &rb);

    /* a scribbles over its ring's header. */
    publish(ra, 10, 0, NULL, 0);
    ring_of(ra)->magic = 0;
    assert_false(daemon__region_updates_take(a));
    assert_int_equal(a->kind, CONN_DEAD);
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_WARNING,
                                  "dropping child 4004 (publisher): its update ring has no valid "
                                  "header"),
                     1);
    assert_true(daemon__region_updates_take(a)); /* dropped: no longer read */

    /* b publishes chunks out of order: the controller refuses the update. */
    chunks[0] = (struct buf_released_chunk){now - 1000, 64 * KIB};
    chunks[1] = (struct buf_released_chunk){now - 2000, 64 * KIB};
    publish(rb, 10, 128 * KIB, chunks, 2);
    assert_false(daemon__region_updates_take(b));
    assert_int_equal(b->kind, CONN_DEAD);
    assert_false(ctl_get_owner(f.d->ctl, 4005, &os));
    assert_int_equal(fx_logged(&f, "dropping child 4005 (publisher): released chunks not in "
                                   "increasing done time"),
                     1);
    daemon_get_stats(f.d, &s);
    assert_int_equal(s.dropped_children, 2);
    assert_int_equal(s.region_updates, 0);
    fx_teardown(&f);
    buf_region_free(ra);
    buf_region_free(rb);
}

/* A child that leaves is no longer read; the one that took its place in the table still is. */
static void test_a_child_that_leaves_is_no_longer_read(void **state)
{
    struct buf_region *ra, *rb, *rc;
    struct ctl_owner_status os;
    struct fx f;
    struct conn *a, *b, *c;

    (void)state;
    fx_setup(&f, NULL);
    a = publisher(&f, 4006, &ra);
    b = publisher(&f, 4007, &rb);
    c = publisher(&f, 4008, &rc);
    assert_int_equal(a->ring_index, 0);
    assert_int_equal(c->ring_index, 2);
    daemon__region_updates_leave(a);
    assert_false(a->updates_in_region);
    assert_int_equal(c->ring_index, 0); /* the last one took its place */
    daemon__region_updates_leave(a);    /* idempotent */
    assert_int_equal(c->ring_index, 0);
    assert_int_equal(b->ring_index, 1);

    publish(ra, 1 * KIB, 0, NULL, 0);
    publish(rb, 2 * KIB, 0, NULL, 0);
    publish(rc, 3 * KIB, 0, NULL, 0);
    assert_true(daemon__region_updates_take(a));
    assert_true(daemon__region_updates_take(b));
    assert_true(daemon__region_updates_take(c));
    assert_false(ctl_get_owner(f.d->ctl, 4006, &os));
    assert_true(ctl_get_owner(f.d->ctl, 4007, &os));
    assert_int_equal(os.unreleased_bytes, 2 * KIB);
    assert_true(ctl_get_owner(f.d->ctl, 4008, &os));
    assert_int_equal(os.unreleased_bytes, 3 * KIB);

    daemon__region_updates_leave(b);
    daemon__region_updates_leave(c);
    assert_non_null(f.d->region_scan);
    daemon__region_scan_close(f.d);
    assert_null(f.d->region_scan);
    fx_teardown(&f);
    buf_region_free(ra);
    buf_region_free(rb);
    buf_region_free(rc);
}

/* A child that reconnects finds its ring as it left it: what it published while away is taken
 * by the new reader's first take. */
static void test_a_reconnected_child_is_read_from_where_it_was(void **state)
{
    struct buf_released_chunk chunk;
    struct buf_region *region;
    struct ctl_owner_status os;
    struct fx f;
    struct conn *c;

    (void)state;
    fx_setup(&f, NULL);
    c = publisher(&f, 4009, &region);
    publish(region, 5 * KIB, 0, NULL, 0);
    assert_true(daemon__region_updates_take(c));
    fx_child_free(&f, c);

    chunk = (struct buf_released_chunk){daemon__now_ns() - 1000, 64 * KIB};
    publish(region, 7 * KIB, 64 * KIB, &chunk, 1); /* while away */
    c = reader_of(&f, 4009, region);
    assert_true(daemon__region_updates_take(c));
    assert_true(ctl_get_owner(f.d->ctl, 4009, &os));
    assert_int_equal(os.unreleased_bytes, 7 * KIB);
    assert_int_equal(os.released_chunks, 1);
    fx_teardown(&f);
    buf_region_free(region);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_only_a_child_whose_page_is_mapped_publishes_there),
            cmocka_unit_test(test_what_the_child_published_reaches_the_controller),
            cmocka_unit_test(test_the_timer_takes_what_was_published),
            cmocka_unit_test(test_evictions_come_back_through_the_page),
            cmocka_unit_test(test_a_ring_or_an_update_that_contradicts_itself_drops_the_child),
            cmocka_unit_test(test_a_child_that_leaves_is_no_longer_read),
            cmocka_unit_test(test_a_reconnected_child_is_read_from_where_it_was),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
