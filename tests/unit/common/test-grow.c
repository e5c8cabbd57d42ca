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

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_grows_by_doubling_and_keeps_the_contents),
            cmocka_unit_test(test_a_size_past_size_max_is_refused_and_nothing_changes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
