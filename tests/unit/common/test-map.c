/* Unit tests for common/map.h: keys found, added once, removed without breaking the probe
 * chains of the keys after them, kept through growth; checked against a plain array over a
 * long random walk whose keys collide on purpose. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/map.h"
#include "testlib.h"

struct names {
    const char *v[64];
    size_t n;
};

static bool same_name(const void *ctx, const void *key, uint64_t value)
{
    const struct names *names = ctx;

    return strcmp(names->v[value], key) == 0;
}

static void test_interning_names_gives_each_one_index(void **state)
{
    static const char *words[] = {"main", "work", "main", "idle", "work", "main", "x"};
    struct fleetprof_map m = {0};
    struct names names = {0};
    uint64_t got[7];

    (void)state;
    for (size_t i = 0; i < 7; i++) {
        int r = fleetprof_map_intern(&m, fleetprof_fnv1a64_str(words[i]), same_name, &names,
                                     words[i], names.n, &got[i]);

        assert_true(r == 0 || r == 1);
        if (r == 1)
            names.v[names.n++] = words[i];
    }
    assert_int_equal(names.n, 4);
    assert_int_equal(m.count, 4);
    assert_int_equal(got[0], 0);
    assert_int_equal(got[1], 1);
    assert_int_equal(got[2], 0);
    assert_int_equal(got[3], 2);
    assert_int_equal(got[4], 1);
    assert_int_equal(got[5], 0);
    assert_int_equal(got[6], 3);
    assert_false(fleetprof_map_find(&m, fleetprof_fnv1a64_str("absent"), same_name, &names,
                                    "absent", NULL));
    fleetprof_map_free(&m);
    assert_null(m.slots);
    assert_int_equal(m.cap, 0);
}

static void test_an_empty_map_finds_and_removes_nothing(void **state)
{
    struct fleetprof_map m = {0};
    uint64_t v = 7;

    (void)state;
    assert_false(fleetprof_map_find(&m, 1, NULL, NULL, NULL, &v));
    assert_false(fleetprof_map_remove(&m, 1, NULL, NULL, NULL));
    assert_int_equal(v, 7);
    fleetprof_map_free(&m);
}

static void test_integer_keys_mix_one_to_one(void **state)
{
    struct fleetprof_map m = {0};
    uint64_t v;

    (void)state;
    /* Keys that differ only in high bits, as pids of one fleet or addresses of one page do,
     * land all over the table. */
    for (uint64_t k = 0; k < 4096; k++)
        assert_int_equal(
                fleetprof_map_set(&m, fleetprof_map_mix64(k << 32), NULL, NULL, NULL, k * 10), 0);
    assert_int_equal(m.count, 4096);
    assert_true(m.cap >= 8192);
    for (uint64_t k = 0; k < 4096; k++) {
        assert_true(fleetprof_map_find(&m, fleetprof_map_mix64(k << 32), NULL, NULL, NULL, &v));
        assert_int_equal(v, k * 10);
    }
    /* set() replaces. */
    assert_int_equal(fleetprof_map_set(&m, fleetprof_map_mix64(5ull << 32), NULL, NULL, NULL, 0),
                     0);
    assert_int_equal(m.count, 4096);
    assert_true(fleetprof_map_find(&m, fleetprof_map_mix64(5ull << 32), NULL, NULL, NULL, &v));
    assert_int_equal(v, 0);
    fleetprof_map_free(&m);
}

/* A key whose hash is chosen by the test: collisions by design. */
struct pair {
    uint64_t key, hash;
};

static bool same_key(const void *ctx, const void *key, uint64_t value)
{
    (void)ctx;
    return *(const uint64_t *)key == value;
}

static void test_a_random_walk_matches_an_array(void **state)
{
    enum { KEYS = 600, STEPS = 200000 };
    static bool present[KEYS];
    struct fleetprof_map m = {0};
    uint64_t rng = 0x12345678u;
    size_t count = 0;

    (void)state;
    memset(present, 0, sizeof(present));
    for (int step = 0; step < STEPS; step++) {
        uint64_t key, hash, v;
        int op;

        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        key = (rng >> 33) % KEYS;
        op = (int)((rng >> 20) % 3);
        /* 40 distinct hashes for 600 keys, and hashes that share low bits: long chains
         * that wrap around the table's end. */
        hash = (key % 40) * 0x10000000ull + (key % 40 < 5 ? 0 : key % 7);
        if (op == 0) {
            int r = fleetprof_map_intern(&m, hash, same_key, NULL, &key, key, &v);

            assert_int_equal(r, present[key] ? 0 : 1);
            assert_int_equal(v, key);
            count += !present[key];
            present[key] = true;
        } else if (op == 1) {
            assert_int_equal(fleetprof_map_remove(&m, hash, same_key, NULL, &key), present[key]);
            count -= present[key];
            present[key] = false;
        } else {
            assert_int_equal(fleetprof_map_find(&m, hash, same_key, NULL, &key, &v), present[key]);
            if (present[key])
                assert_int_equal(v, key);
        }
        assert_int_equal(m.count, count);
    }
    /* Every key still present is found; the walk sees each exactly once. */
    {
        size_t cursor = 0, seen = 0;
        uint64_t v;

        while (fleetprof_map_next(&m, &cursor, &v)) {
            assert_true(v < KEYS && present[v]);
            seen++;
        }
        assert_int_equal(seen, count);
    }
    fleetprof_map_clear(&m);
    assert_int_equal(m.count, 0);
    for (uint64_t k = 0; k < KEYS; k++)
        assert_false(fleetprof_map_find(&m, (k % 40) * 0x10000000ull, same_key, NULL, &k, NULL));
    fleetprof_map_free(&m);
}

static void test_a_reserve_past_size_max_is_refused_and_nothing_changes(void **state)
{
    struct fleetprof_map m = {0};
    uint64_t v;

    (void)state;
    assert_int_equal(fleetprof_map_set(&m, 3, NULL, NULL, NULL, 33), 0);
    assert_int_equal(fleetprof_map_reserve(&m, SIZE_MAX / 4), -ENOMEM);
    assert_int_equal(fleetprof_map_reserve(&m, SIZE_MAX), -ENOMEM);
    assert_int_equal(m.count, 1);
    assert_true(fleetprof_map_find(&m, 3, NULL, NULL, NULL, &v));
    assert_int_equal(v, 33);
    fleetprof_map_free(&m);
}

static void test_values_up_to_uint64_max_less_one_are_kept(void **state)
{
    struct fleetprof_map m = {0};
    uint64_t v;

    (void)state;
    assert_int_equal(fleetprof_map_set(&m, 1, NULL, NULL, NULL, 0), 0);
    assert_int_equal(fleetprof_map_set(&m, 2, NULL, NULL, NULL, UINT64_MAX - 1), 0);
    assert_true(fleetprof_map_find(&m, 1, NULL, NULL, NULL, &v));
    assert_int_equal(v, 0);
    assert_true(fleetprof_map_find(&m, 2, NULL, NULL, NULL, &v));
    assert_true(v == UINT64_MAX - 1);
    fleetprof_map_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_interning_names_gives_each_one_index),
            cmocka_unit_test(test_an_empty_map_finds_and_removes_nothing),
            cmocka_unit_test(test_integer_keys_mix_one_to_one),
            cmocka_unit_test(test_a_random_walk_matches_an_array),
            cmocka_unit_test(test_a_reserve_past_size_max_is_refused_and_nothing_changes),
            cmocka_unit_test(test_values_up_to_uint64_max_less_one_are_kept),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
