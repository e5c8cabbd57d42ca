/* Unit tests for daemon/controller: eviction order (invariant 2), the global bound
 * (invariant 1) under random fleets, hostile updates, daemon-owned chunks, the log. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/controller.h"
#include "testlib.h"

#define MiB (1024ull * 1024)

static struct ctl_update change(uint64_t unreleased, const struct ctl_chunk *chunks, size_t n,
                                uint64_t oldest)
{
    return (struct ctl_update){false, unreleased, 0, oldest, chunks, n};
}

static void test_rejects_hostile_updates(void **state)
{
    struct ctl *c;
    struct ctl_actions a;
    struct ctl_totals t;
    const char *why = NULL;
    struct ctl_chunk ok[] = {{100, MiB}, {200, MiB}};
    struct ctl_chunk backwards[] = {{300, MiB}, {250, MiB}};
    struct ctl_chunk zero[] = {{400, 0}};
    struct ctl_chunk future[] = {{1000000 + CTL_FUTURE_SLACK_NS + 1, MiB}};
    struct ctl_chunk stale[] = {{150, MiB}};
    struct ctl_update u;

    (void)state;
    assert_int_equal(ctl_new(64 * MiB, &c), 0);
    u = change(MiB, ok, 2, 100);
    assert_int_equal(ctl_update(c, 10, &u, 1000000, &a, &why), 0);

    u = change(MiB, backwards, 2, 100);
    assert_int_equal(ctl_update(c, 10, &u, 1000000, &a, &why), -EBADMSG);
    assert_string_equal(why, "released chunks not in increasing done time");
    u = change(MiB, stale, 1, 100); /* older than what the owner already released */
    assert_int_equal(ctl_update(c, 10, &u, 1000000, &a, &why), -EBADMSG);
    u = change(MiB, zero, 1, 100);
    assert_int_equal(ctl_update(c, 10, &u, 1000000, &a, &why), -EBADMSG);
    assert_string_equal(why, "a released chunk with an impossible size");
    u = change(MiB, future, 1, 100);
    assert_int_equal(ctl_update(c, 10, &u, 1000000, &a, &why), -EBADMSG);
    assert_string_equal(why, "a chunk done in the future");
    u = change(CTL_MAX_BYTES + 1, NULL, 0, 100);
    assert_int_equal(ctl_update(c, 10, &u, 1000000, &a, &why), -EBADMSG);
    u = change(MiB, NULL, 0, 50); /* oldest went backwards */
    assert_int_equal(ctl_update(c, 10, &u, 1000000, &a, &why), -EBADMSG);
    assert_string_equal(why, "oldest done time went backwards");
    u = change(MiB, ok, 2, 100);
    assert_int_equal(ctl_update(c, -3, &u, 1000000, &a, &why), -EBADMSG);
    u = change(MiB, NULL, 3, 100); /* a count without an array */
    assert_int_equal(ctl_update(c, 10, &u, 1000000, &a, &why), -EBADMSG);

    /* Nothing of the rejected updates was applied. */
    ctl_get_totals(c, &t);
    assert_true(t.unreleased_bytes == MiB && t.released_bytes == 2 * MiB);
    assert_true(t.released_chunks == 2 && t.rejected_updates == 8);
    c = ctl_free(c);
}

/* Invariant 2 with two owners whose chunks interleave in time: evictions go globally
 * oldest first, and each round asks each owner once, for the newest chunk it lost. */
static void test_evicts_globally_oldest(void **state)
{
    struct ctl *c;
    struct ctl_actions a;
    const char *why;
    struct ctl_chunk p1[] = {{10, MiB}, {30, MiB}, {50, MiB}};
    struct ctl_chunk p2[] = {{20, MiB}, {40, MiB}, {60, MiB}};
    struct ctl_chunk more[] = {{70, 2 * MiB}};
    struct ctl_update u;
    struct ctl_owner_status s1, s2;

    (void)state;
    assert_int_equal(ctl_new(6 * MiB, &c), 0);
    u = change(0, p1, 3, 10);
    assert_int_equal(ctl_update(c, 1, &u, 100, &a, &why), 0);
    assert_int_equal(a.destroy_count, 0);
    u = change(0, p2, 3, 20);
    assert_int_equal(ctl_update(c, 2, &u, 100, &a, &why), 0);
    assert_int_equal(a.destroy_count, 0); /* exactly at the limit */

    /* 2 MiB more: the two oldest (10 of pid 1, 20 of pid 2) must go. */
    u = change(0, more, 1, 10);
    assert_int_equal(ctl_update(c, 1, &u, 100, &a, &why), 0);
    assert_int_equal(a.destroy_count, 2);
    assert_true(a.destroy[0].owner == 1 && a.destroy[0].done_ns == 10);
    assert_true(a.destroy[1].owner == 2 && a.destroy[1].done_ns == 20);
    assert_true(ctl_get_owner(c, 1, &s1) && ctl_get_owner(c, 2, &s2));
    assert_true(s1.released_chunks == 3 && s2.released_chunks == 2);

    /* The owners' next updates confirm (oldest moved on): nothing changes. */
    u = change(0, NULL, 0, 30);
    assert_int_equal(ctl_update(c, 1, &u, 100, &a, &why), 0);
    assert_int_equal(a.destroy_count, 0);
    assert_true(ctl_oldest_child_done_ns(c) == 30);
    c = ctl_free(c);
}

/* Invariants 1 and 2 for a random fleet: after every update the total is within the
 * limit (plus what cannot be evicted: unreleased bytes), and every eviction takes a chunk
 * no newer than any surviving one. The owners obey destroy requests like real children. */
struct sim_owner {
    uint64_t done[4096];
    uint64_t bytes[4096];
    size_t head, count;
    uint64_t floor;
};

static void test_property_fleet(void **state)
{
    struct test_rng rng;

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int round = 0; round < 20; round++) {
        enum { OWNERS = 16 };
        struct sim_owner *sim = calloc(OWNERS + 1, sizeof(*sim));
        uint64_t limit = test_rng_range(&rng, 4, 64) * MiB, now = 1000;
        struct ctl *c;

        assert_non_null(sim);
        assert_int_equal(ctl_new(limit, &c), 0);
        for (int step = 0; step < 3000; step++) {
            int32_t pid = (int32_t)test_rng_range(&rng, 1, OWNERS);
            struct sim_owner *o = &sim[pid];
            struct ctl_chunk fresh[4];
            size_t n = (size_t)test_rng_range(&rng, 0, 3);
            struct ctl_actions a;
            struct ctl_update u;
            struct ctl_totals t;
            const char *why;
            uint64_t newest_evicted = 0;

            now += test_rng_range(&rng, 1, 50);
            for (size_t i = 0; i < n && o->count < 4000; i++) {
                fresh[i] = (struct ctl_chunk){now + i, test_rng_range(&rng, 1, 4) * 256 * 1024};
                o->done[o->head + o->count] = fresh[i].done_ns;
                o->bytes[o->head + o->count] = fresh[i].bytes;
                o->count++;
            }
            if (o->head + o->count >= 4000) { /* compact the simulation's own deque */
                memmove(o->done, o->done + o->head, o->count * sizeof(o->done[0]));
                memmove(o->bytes, o->bytes + o->head, o->count * sizeof(o->bytes[0]));
                o->head = 0;
            }
            now += n;
            u = change(2 * 256 * 1024, fresh, n, o->count ? o->done[o->head] : o->floor);
            if (test_rng_range(&rng, 0, 99) == 0) {
                u.final = true;
                o->head = o->count = 0;
                o->floor = 0;
            }
            assert_int_equal(ctl_update(c, pid, &u, now, &a, &why), 0);
            /* Owners obey: destroy at or before, as a real chunk manager does. */
            for (size_t k = 0; k < a.destroy_count; k++) {
                struct sim_owner *d = &sim[a.destroy[k].owner];

                while (d->count && d->done[d->head] <= a.destroy[k].done_ns) {
                    d->floor = d->done[d->head] + 1;
                    d->head++;
                    d->count--;
                }
                if (a.destroy[k].done_ns > newest_evicted)
                    newest_evicted = a.destroy[k].done_ns;
            }
            /* Invariant 2: nothing surviving anywhere is older than what was evicted. */
            for (int p = 1; p <= OWNERS && newest_evicted; p++)
                if (sim[p].count)
                    assert_true(sim[p].done[sim[p].head] > newest_evicted ||
                                sim[p].done[sim[p].head] == newest_evicted);
            /* Invariant 1: within the limit unless only unreleased bytes remain. */
            ctl_get_totals(c, &t);
            assert_true(t.unreleased_bytes + t.released_bytes <= limit || t.released_chunks == 0);
            assert_false(a.more);
        }
        c = ctl_free(c);
        free(sim);
    }
}

/* A child that destroys chunks under its own local limit reports a newer oldest time: the
 * controller forgets those chunks (no request needed) and stops counting them. */
static void test_local_destruction_prunes(void **state)
{
    struct ctl *c;
    struct ctl_actions a;
    const char *why;
    struct ctl_chunk k[] = {{10, MiB}, {20, MiB}, {30, MiB}};
    struct ctl_update u = change(MiB, k, 3, 10);
    struct ctl_owner_status s;
    struct ctl_totals t;

    (void)state;
    assert_int_equal(ctl_new(64 * MiB, &c), 0);
    assert_int_equal(ctl_update(c, 4, &u, 100, &a, &why), 0);
    u = change(MiB, NULL, 0, 30);
    assert_int_equal(ctl_update(c, 4, &u, 200, &a, &why), 0);
    assert_true(ctl_get_owner(c, 4, &s));
    assert_true(s.released_chunks == 1 && s.released_bytes == MiB && s.last_update_ns == 200);
    ctl_get_totals(c, &t);
    assert_true(t.released_bytes == MiB && t.evicted_chunks == 0);
    assert_true(ctl_oldest_child_done_ns(c) == 30);
    c = ctl_free(c);
}

static void test_daemon_owned_chunks(void **state)
{
    struct ctl *c;
    struct ctl_actions a;
    const char *why;
    struct ctl_chunk child[] = {{500, 3 * MiB}};
    struct ctl_update u;
    struct ctl_totals t;

    (void)state;
    assert_int_equal(ctl_new(4 * MiB, &c), 0);
    assert_int_equal(ctl_add_owned(c, 100, MiB, 100, &a), 0);
    assert_int_equal(ctl_add_owned(c, 200, MiB, 200, &a), 0);
    assert_int_equal(ctl_add_owned(c, 150, MiB, 300, &a), -EINVAL); /* must be newer */
    /* A child's 3 MiB pushes the total to 5 MiB: the oldest exit profile is evicted. */
    u = change(0, child, 1, 500);
    assert_int_equal(ctl_update(c, 7, &u, 600, &a, &why), 0);
    assert_int_equal(a.destroy_count, 1);
    assert_true(a.destroy[0].owner == CTL_OWNER_DAEMON && a.destroy[0].done_ns == 100);
    /* Exit profiles older than every child's data are the expired ones. */
    assert_true(ctl_oldest_child_done_ns(c) == 500);
    ctl_remove_owned(c, 200);
    ctl_get_totals(c, &t);
    assert_true(t.released_bytes == 3 * MiB && t.released_chunks == 1);
    /* Disconnect forgets the child's bytes. */
    ctl_remove(c, 7, 700);
    ctl_get_totals(c, &t);
    assert_true(t.released_bytes == 0 && t.unreleased_bytes == 0);
    c = ctl_free(c);
}

static void test_log_records_releases_and_evictions(void **state)
{
    struct ctl *c;
    struct ctl_actions a;
    const char *why;
    struct ctl_chunk k[] = {{10, MiB}, {20, MiB}};
    struct ctl_update u = change(MiB, k, 2, 10);
    const struct ctl_log_entry *log;
    size_t n;
    uint64_t dropped;

    (void)state;
    assert_int_equal(ctl_new(2 * MiB, &c), 0);
    assert_int_equal(ctl_update(c, 5, &u, 99, &a, &why), 0);
    u = change(MiB, NULL, 0, 20);
    assert_int_equal(ctl_update(c, 5, &u, 100, &a, &why), 0);
    log = ctl_log(c, &n, &dropped);
    /* +1 +1 (released), -1 (evicted 10 to fit 3 MiB into 2), 0 (update, nothing new) */
    assert_int_equal(n, 4);
    assert_int_equal(log[0].delta, 1);
    assert_int_equal(log[1].delta, 1);
    assert_int_equal(log[2].delta, -1);
    assert_int_equal(log[3].delta, 0);
    assert_true(log[3].time_ns == 100 && log[3].owner == 5 && dropped == 0);
    c = ctl_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_rejects_hostile_updates),
            cmocka_unit_test(test_evicts_globally_oldest),
            cmocka_unit_test(test_property_fleet),
            cmocka_unit_test(test_local_destruction_prunes),
            cmocka_unit_test(test_daemon_owned_chunks),
            cmocka_unit_test(test_log_records_releases_and_evictions),
    };
    return cmocka_run_group_tests_name("daemon-controller", tests, NULL, NULL);
}
