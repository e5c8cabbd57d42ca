/* Unit tests for the sampler's tick grid (rt_sampler_next_tick(), child/core/sampler.c): the
 * next tick is the previous one plus an interval per tick (and per tick skipped), restarted
 * from now when that is already past, on the grid of whole intervals of CLOCK_MONOTONIC
 * that every profiled process shares, and never at or before now. */
#include <stdint.h>

#include "child/core/core.h"
#include "testlib.h"

#define MS   1000000ull
#define SEC  1000000000ull
#define SKIP 0xdeadu /* what *ret_skipped holds before a call: it must be overwritten */

static uint64_t next_tick(uint64_t prev, uint64_t now, uint64_t interval, unsigned skip,
                          unsigned *ret_skipped)
{
    *ret_skipped = SKIP;
    return rt_sampler_next_tick(prev, now, interval, skip, ret_skipped);
}

static void test_a_tick_on_time_is_one_interval_after_the_last(void **state)
{
    unsigned skipped;
    uint64_t t = 5 * SEC;

    (void)state;
    /* Woken on its tick, or a little after it (less than an interval late): the next tick
     * is the grid's next point, not one interval after the wake. */
    assert_int_equal(next_tick(1000 * MS, 1000 * MS, MS, 0, &skipped), 1001 * MS);
    assert_int_equal(skipped, 0);
    assert_int_equal(next_tick(1000 * MS, 1000 * MS + 1, MS, 0, &skipped), 1001 * MS);
    assert_int_equal(next_tick(1000 * MS, 1000 * MS + 900000, MS, 0, &skipped), 1001 * MS);
    assert_int_equal(skipped, 0);
    /* A second of ticks on time: a thousand, each exactly one interval after the last. */
    for (int i = 0; i < 1000; i++) {
        uint64_t n = next_tick(t, t + 20000, MS, 0, &skipped);

        assert_int_equal(n, t + MS);
        assert_int_equal(skipped, 0);
        t = n;
    }
    assert_int_equal(t, 6 * SEC);
}

static void test_the_first_tick_snaps_onto_the_grid(void **state)
{
    unsigned skipped;

    (void)state;
    /* The sampler starts at any instant: its first tick is the grid point at or before one
     * interval later, so its ticks line up with every other process's. */
    assert_int_equal(next_tick(12345678, 12345678, MS, 0, &skipped), 13 * MS);
    assert_int_equal(skipped, 0);
    /* Just past a grid point: rounding down lands less than an interval after now, still
     * after it. */
    assert_int_equal(next_tick(7 * MS + 1, 7 * MS + 1, MS, 0, &skipped), 8 * MS);
    /* Just before one: that point, 1 ns later. */
    assert_int_equal(next_tick(7 * MS - 1, 7 * MS - 1, MS, 0, &skipped), 7 * MS);
    /* Rounded down onto now itself: one interval more. */
    assert_int_equal(next_tick(7 * MS + 1, 8 * MS, MS, 0, &skipped), 9 * MS);
    /* Exactly on it: never the instant itself. */
    assert_int_equal(next_tick(8 * MS, 8 * MS, MS, 0, &skipped), 9 * MS);
    /* The previous tick exactly now minus one interval: the sum is now, not after it. */
    assert_int_equal(next_tick(9 * MS, 10 * MS, MS, 0, &skipped), 11 * MS);
    assert_int_equal(skipped, 0);
}

static void test_skipped_ticks_sleep_through_whole_intervals(void **state)
{
    unsigned skipped;

    (void)state;
    /* An idle sampler sleeps through `skip` ticks: the tick after them, on the grid. */
    assert_int_equal(next_tick(1000 * MS, 1000 * MS + 10, MS, 1, &skipped), 1002 * MS);
    assert_int_equal(skipped, 1);
    assert_int_equal(next_tick(1000 * MS, 1000 * MS + 10, MS, 3, &skipped), 1004 * MS);
    assert_int_equal(skipped, 3);
    /* Off the grid (the first tick): skipping still ends on a grid point. */
    assert_int_equal(next_tick(1000 * MS + 300, 1000 * MS + 300, MS, 3, &skipped), 1004 * MS);
    assert_int_equal(skipped, 3);
    /* Woken early (a wake-up, an exit): the skipped ticks still count from the last tick. */
    assert_int_equal(next_tick(1000 * MS, 1001 * MS + 500, MS, 3, &skipped), 1004 * MS);
    assert_int_equal(skipped, 3);
}

static void test_a_late_tick_restarts_the_schedule_instead_of_catching_up(void **state)
{
    unsigned skipped;

    (void)state;
    /* 2.5 intervals late: the ticks missed are not made up; the next is the grid's first
     * point after now. */
    assert_int_equal(next_tick(1000 * MS, 1002 * MS + 500000, MS, 0, &skipped), 1003 * MS);
    assert_int_equal(skipped, 0);
    /* Late past the ticks it meant to skip: it skipped none (they were not slept through:
     * the sampler overran them), and the schedule restarts. */
    assert_int_equal(next_tick(1000 * MS, 1010 * MS + 5, MS, 3, &skipped), 1011 * MS);
    assert_int_equal(skipped, 0);
    /* Late exactly onto a grid point: the next one, not now. */
    assert_int_equal(next_tick(1000 * MS, 1005 * MS, MS, 3, &skipped), 1006 * MS);
    assert_int_equal(skipped, 0);
    /* Not late: the planned tick is now itself, so it is one interval later. */
    assert_int_equal(next_tick(1000 * MS, 1004 * MS, MS, 3, &skipped), 1005 * MS);
    assert_int_equal(skipped, 3);
}

static void test_an_interval_that_does_not_divide_a_second(void **state)
{
    const uint64_t interval = 7 * MS; /* 1 s is 142 6/7 intervals */
    unsigned skipped;
    uint64_t t;

    (void)state;
    /* The grid is of the monotonic clock, not of each second: a whole second is no tick. */
    assert_int_equal(SEC % interval, 6 * MS);
    assert_int_equal(next_tick(SEC - 10, SEC, interval, 0, &skipped), 1001 * MS);
    assert_int_equal(1001 * MS % interval, 0);
    assert_int_equal(next_tick(SEC, SEC, interval, 0, &skipped), 1001 * MS);
    /* Ticks keep their step across seconds: from 1.001 s to 4.004 s on time, 429 ticks, each
     * exactly one interval after the last, all on the grid. */
    t = next_tick(SEC + 3, SEC + 3, interval, 0, &skipped);
    assert_int_equal(t, 1001 * MS);
    for (int i = 0; i < 429; i++) {
        uint64_t n = next_tick(t, t + 1000, interval, 0, &skipped);

        assert_int_equal(n - t, interval);
        assert_int_equal(n % interval, 0);
        t = n;
    }
    assert_int_equal(t, 4004 * MS);
    /* An odd interval in nanoseconds (3 kHz) as well. */
    assert_int_equal(next_tick(SEC, SEC, 333333, 0, &skipped), 1000332333ull);
    assert_int_equal(1000332333ull % 333333, 0);
    assert_int_equal(next_tick(1000332333ull, 1000332333ull, 333333, 2, &skipped), 1001332332ull);
    assert_int_equal(skipped, 2);
}

/* The rules over random instants, intervals and skips: on the grid, after now, and either
 * the planned tick's grid point (or the next one, when that is not after now), or, when the
 * plan was already past, the grid's first point after now with no tick skipped. */
static void test_the_grid_rules_hold_for_any_instant(void **state)
{
    struct test_rng rng;

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int i = 0; i < 200000; i++) {
        uint64_t interval = test_rng_range(&rng, 1, 4) == 1 ? test_rng_range(&rng, 1, 1000)
                                                            : test_rng_range(&rng, 50000, SEC);
        unsigned skip = (unsigned)test_rng_range(&rng, 0, 4);
        uint64_t prev = test_rng_range(&rng, 0, 1ull << 50);
        uint64_t planned = prev + interval * (skip + 1);
        /* now: before the plan, at it, or past it by up to a few intervals. */
        uint64_t now = prev + test_rng_range(&rng, 0, interval * (skip + 4));
        unsigned skipped;
        uint64_t next = next_tick(prev, now, interval, skip, &skipped);

        assert_true(next > now);
        assert_int_equal(next % interval, 0);
        if (planned >= now) {
            uint64_t floor = planned - planned % interval;

            assert_int_equal(skipped, skip);
            assert_int_equal(next, floor > now ? floor : floor + interval);
        } else {
            assert_int_equal(skipped, 0);
            assert_true(next - interval <= now); /* the first grid point after now */
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_a_tick_on_time_is_one_interval_after_the_last),
            cmocka_unit_test(test_the_first_tick_snaps_onto_the_grid),
            cmocka_unit_test(test_skipped_ticks_sleep_through_whole_intervals),
            cmocka_unit_test(test_a_late_tick_restarts_the_schedule_instead_of_catching_up),
            cmocka_unit_test(test_an_interval_that_does_not_divide_a_second),
            cmocka_unit_test(test_the_grid_rules_hold_for_any_instant),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
