/* Unit tests for common/hash.h: FNV-1a as published (its test vectors), so that the region
 * format's description hash (buffer/region.c) stays what older files hold. */
#include <stdint.h>
#include <string.h>

#include "common/hash.h"
#include "testlib.h"

static void test_fnv1a_matches_its_published_vectors(void **state)
{
    (void)state;
    /* FNV-1a test vectors (Fowler, Noll, Vo): "", "a", "foobar". */
    assert_true(fleetprof_fnv1a64("", 0, FLEETPROF_FNV64_SEED) == 0xcbf29ce484222325ull);
    assert_true(fleetprof_fnv1a64_str("a") == 0xaf63dc4c8601ec8cull);
    assert_true(fleetprof_fnv1a64_str("foobar") == 0x85944171f73967e8ull);
    assert_true(fleetprof_fnv1a32("", 0) == 0x811c9dc5u);
    assert_true(fleetprof_fnv1a32("a", 1) == 0xe40c292cu);
    assert_true(fleetprof_fnv1a32("foobar", 6) == 0xbf9cf968u);
}

static void test_a_key_hashed_in_parts_equals_the_whole(void **state)
{
    uint64_t parts;

    (void)state;
    parts = fleetprof_fnv1a64("foo", 3, FLEETPROF_FNV64_SEED);
    parts = fleetprof_fnv1a64("bar", 3, parts);
    assert_true(parts == fleetprof_fnv1a64_str("foobar"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_fnv1a_matches_its_published_vectors),
            cmocka_unit_test(test_a_key_hashed_in_parts_equals_the_whole),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
