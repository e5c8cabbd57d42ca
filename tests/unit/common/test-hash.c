/* Unit tests for common/hash.h: FNV-1a as published (its test vectors), so that the region
 * format's description hash (buffer/region.c) stays what older files hold. */
#include <stdbool.h>
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

/* The in-memory hash: every bit of the key changes it, and keys that differ a little (a
 * counter in the last bytes, as stacks that share a prefix do) spread over a table's slots. */
static void test_hash64_depends_on_every_bit_and_spreads(void **state)
{
    unsigned char key[100];
    uint64_t base;
    bool seen[256] = {false};
    unsigned used = 0;

    (void)state;
    for (size_t i = 0; i < sizeof(key); i++)
        key[i] = (unsigned char)(i * 7);
    base = fleetprof_hash64(key, sizeof(key));
    for (size_t bit = 0; bit < sizeof(key) * 8; bit++) {
        key[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        assert_true(fleetprof_hash64(key, sizeof(key)) != base);
        key[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    /* A key and its prefix differ, though the missing bytes were zeros. */
    memset(key, 0, sizeof(key));
    assert_true(fleetprof_hash64(key, 40) != fleetprof_hash64(key, 41));
    for (uint32_t n = 0; n < 4096; n++) {
        uint64_t h;

        memcpy(key + 60, &n, sizeof(n));
        h = fleetprof_hash64(key, 64);
        if (!seen[h & 255]) {
            seen[h & 255] = true;
            used++;
        }
    }
    assert_true(used >= 240); /* 4096 keys over 256 slots: all or nearly all used */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_fnv1a_matches_its_published_vectors),
            cmocka_unit_test(test_a_key_hashed_in_parts_equals_the_whole),
            cmocka_unit_test(test_hash64_depends_on_every_bit_and_spreads),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
