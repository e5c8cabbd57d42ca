/* Unit tests for daemon/departures.c: who left the fleet since the last capture, in the order
 * they left, with how (ended without an exit profile, recovered, never profiled), at most
 * DEPARTURES_MAX of them and the rest counted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon-fixture.h"
#include "testlib.h"

static void test_departures_are_kept_in_order_with_how_they_left(void **state)
{
    static const char why[] = "it exec'd a static program";
    struct fx f;
    struct conn *a, *b;
    uint64_t before, after;

    (void)state;
    fx_setup(&f, NULL);
    a = fx_child(&f, 501, "alpha");
    b = fx_child(&f, 502, "beta");
    before = daemon__now_ns();
    daemon__departure_add(f.d, a, NULL);
    daemon__departure_never(f.d, 503, "gamma", why);
    daemon__departure_add(f.d, b, "killed (no crash recorded), 3 entries");
    after = daemon__now_ns();

    assert_int_equal(f.d->departure_count, 3);
    assert_int_equal(f.d->departures_dropped, 0);
    assert_int_equal(f.d->departures[0].pid, 501);
    assert_string_equal(f.d->departures[0].name, "alpha");
    assert_string_equal(f.d->departures[0].recovered, "");
    assert_null(f.d->departures[0].never);
    assert_null(f.d->departures[0].dropped);

    assert_int_equal(f.d->departures[1].pid, 503);
    assert_string_equal(f.d->departures[1].name, "gamma");
    assert_ptr_equal(f.d->departures[1].never, why);
    assert_string_equal(f.d->departures[1].recovered, "");
    assert_null(f.d->departures[1].dropped);

    assert_int_equal(f.d->departures[2].pid, 502);
    assert_string_equal(f.d->departures[2].name, "beta");
    assert_string_equal(f.d->departures[2].recovered, "killed (no crash recorded), 3 entries");
    assert_null(f.d->departures[2].never);

    for (size_t i = 0; i < 3; i++) {
        assert_true(f.d->departures[i].time_ns >= before);
        assert_true(f.d->departures[i].time_ns <= after);
        if (i)
            assert_true(f.d->departures[i].time_ns >= f.d->departures[i - 1].time_ns);
    }
    /* A departure without a profile is said in the log, with how it was recovered. */
    assert_int_equal(fx_logged_at(&f, DAEMON_LOG_INFO,
                                  "child 501 (alpha) ended without sending an exit profile"),
                     1);
    assert_int_equal(fx_logged(&f, "child 502 (beta) ended without sending an exit profile; "
                                   "recovered: killed (no crash recorded), 3 entries"),
                     1);
    fx_teardown(&f);
}

static void test_at_most_departures_max_the_rest_counted(void **state)
{
    struct fx f;
    struct conn *c;

    (void)state;
    fx_setup(&f, NULL);
    c = fx_child(&f, 600, "last");
    for (int32_t i = 0; i < DEPARTURES_MAX; i++) {
        struct departure *dep = daemon__departure_push(f.d, 10000 + i, "one");

        assert_non_null(dep);
        assert_int_equal(dep->pid, 10000 + i);
    }
    assert_int_equal(f.d->departure_count, DEPARTURES_MAX);
    assert_int_equal(f.d->departures_dropped, 0);
    /* Full: each kind of departure is counted, none kept, none overwritten. */
    assert_null(daemon__departure_push(f.d, 1, "over"));
    daemon__departure_never(f.d, 2, "over", "why");
    daemon__departure_add(f.d, c, "recovered");
    assert_int_equal(f.d->departure_count, DEPARTURES_MAX);
    assert_int_equal(f.d->departures_dropped, 3);
    for (int32_t i = 0; i < DEPARTURES_MAX; i++) {
        assert_int_equal(f.d->departures[i].pid, 10000 + i);
        assert_null(f.d->departures[i].never);
        assert_string_equal(f.d->departures[i].recovered, "");
    }
    /* Still said in the log, though not kept. */
    assert_int_equal(fx_logged(&f, "child 600 (last) ended without"), 1);
    fx_teardown(&f);
}

static void test_long_names_and_hows_are_cut(void **state)
{
    char name[200], how[400];
    struct fx f;
    struct conn *c;

    (void)state;
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    memset(how, 'h', sizeof(how) - 1);
    how[sizeof(how) - 1] = '\0';
    fx_setup(&f, NULL);
    c = fx_child(&f, 700, "c");
    daemon__departure_never(f.d, 701, name, "why");
    daemon__departure_add(f.d, c, how);
    assert_int_equal(f.d->departure_count, 2);
    assert_int_equal(strlen(f.d->departures[0].name), sizeof(f.d->departures[0].name) - 1);
    assert_memory_equal(f.d->departures[0].name, name, sizeof(f.d->departures[0].name) - 1);
    assert_int_equal(strlen(f.d->departures[1].recovered),
                     sizeof(f.d->departures[1].recovered) - 1);
    fx_teardown(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_departures_are_kept_in_order_with_how_they_left),
            cmocka_unit_test(test_at_most_departures_max_the_rest_counted),
            cmocka_unit_test(test_long_names_and_hows_are_cut),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
