/* Unit tests for common/grow.h: an array grows by doubling to what is asked, keeps its
 * contents, and is left as it was when the size cannot be had. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/grow.h"
#include "testlib.h"

static void test_grows_by_doubling_and_keeps_the_contents(void **state)
{
    uint64_t *v = NULL;
    size_t cap = 0;

    (void)state;
    assert_int_equal(FLEETPROF_GROW(v, cap, 0), 0); /* nothing asked: nothing made */
    assert_null(v);
    for (size_t n = 0; n < 1000; n++) {
        assert_int_equal(FLEETPROF_GROW(v, cap, n + 1), 0);
        assert_true(cap >= n + 1);
        v[n] = n * 3;
    }
    assert_int_equal(cap, 1024); /* 16, doubled */
    for (size_t n = 0; n < 1000; n++)
        assert_int_equal(v[n], n * 3);
    /* A jump asks for more than double at once. */
    assert_int_equal(FLEETPROF_GROW(v, cap, 5000), 0);
    assert_int_equal(cap, 8192);
    assert_int_equal(v[999], 999 * 3);
    free(v);
}

static void test_a_size_past_size_max_is_refused_and_nothing_changes(void **state)
{
    uint64_t *v = NULL;
    size_t cap = 0;

    (void)state;
    assert_int_equal(FLEETPROF_GROW(v, cap, 4), 0);
    v[0] = 42;
    assert_int_equal(FLEETPROF_GROW(v, cap, SIZE_MAX / 4), -ENOMEM);
    assert_int_equal(FLEETPROF_GROW(v, cap, SIZE_MAX), -ENOMEM);
    assert_int_equal(cap, 16);
    assert_int_equal(v[0], 42);
    free(v);
}

static void test_arrays_sharing_a_capacity_and_exact_sizes(void **state)
{
    uint32_t *a = NULL;
    uint64_t *b = NULL;
    size_t cap = 0, c;

    (void)state;
    assert_int_equal(fleetprof_grown_capacity(0, 0, 8), 0); /* nothing asked, nothing had */
    assert_int_equal(fleetprof_grown_capacity(0, 1, 8), 16);
    assert_int_equal(fleetprof_grown_capacity(16, 16, 8), 16);
    assert_int_equal(fleetprof_grown_capacity(16, 17, 8), 32);
    assert_int_equal(fleetprof_grown_capacity(16, 100, 8), 128);
    assert_int_equal(fleetprof_grown_capacity(16, SIZE_MAX, 1), 0);
    assert_int_equal(fleetprof_grown_capacity(16, SIZE_MAX / 4, 8), 0);
    c = fleetprof_grown_capacity(cap, 20, sizeof(*b));
    assert_int_equal(c, 32);
    assert_int_equal(FLEETPROF_RESIZE(a, c), 0);
    assert_int_equal(FLEETPROF_RESIZE(b, c), 0);
    a[31] = 7;
    b[31] = 8;
    /* Shrunk to what it holds, contents kept. */
    assert_int_equal(FLEETPROF_RESIZE(b, 32), 0);
    assert_int_equal(b[31], 8);
    a[0] = 5;
    assert_int_equal(FLEETPROF_RESIZE(a, 1), 0);
    assert_int_equal(a[0], 5);
    /* Too big: refused, the array as it was. */
    assert_int_equal(FLEETPROF_RESIZE(b, SIZE_MAX / 2), -ENOMEM);
    assert_int_equal(b[31], 8);
    /* Zero frees. */
    assert_int_equal(FLEETPROF_RESIZE(a, 0), 0);
    assert_null(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_grows_by_doubling_and_keeps_the_contents),
            cmocka_unit_test(test_a_size_past_size_max_is_refused_and_nothing_changes),
            cmocka_unit_test(test_arrays_sharing_a_capacity_and_exact_sizes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
