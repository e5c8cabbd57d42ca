/* Unit tests for buffer/progress: proportion arithmetic (saturation, invalid values),
 * conversions, logger sub-ranges and loops, the monotonic cell, and a reader thread polling
 * the cell while a writer thread steps it.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "buffer/progress.h"
#include "testlib.h"

#define ONE     PROPORTION_ONE_RAW
#define INVALID PROPORTION_INVALID_RAW
#define HALF    (ONE / 2)
#define QUARTER (ONE / 4)

/* The reference for exact ratios; a GNU extension, hence __extension__ under -Wpedantic. */
__extension__ typedef unsigned __int128 u128;

static struct proportion raw(uint32_t r)
{
    return (struct proportion){r};
}

static void test_constants_and_validity(void **state)
{
    (void)state;
    assert_int_equal(ONE, 0x80000000u);
    assert_true(proportion_is_valid(PROPORTION_ZERO));
    assert_true(proportion_is_valid(PROPORTION_ONE));
    assert_false(proportion_is_valid(PROPORTION_INVALID));
    assert_false(proportion_is_valid(raw(ONE + 1)));
    assert_int_equal(proportion_from_raw(ONE).raw, ONE);
    assert_int_equal(proportion_from_raw(12345).raw, 12345);
    assert_int_equal(proportion_from_raw(ONE + 1).raw, INVALID);
    assert_int_equal(proportion_from_raw(0xfffffffe).raw, INVALID);
}

static void test_conversions(void **state)
{
    (void)state;
    assert_int_equal(proportion_from_double(0.0).raw, 0);
    assert_int_equal(proportion_from_double(1.0).raw, ONE);
    assert_int_equal(proportion_from_double(0.5).raw, HALF);
    assert_int_equal(proportion_from_double(0.25).raw, QUARTER);
    assert_int_equal(proportion_from_double(-3.0).raw, 0);
    assert_int_equal(proportion_from_double(7.0).raw, ONE);
    assert_int_equal(proportion_from_double(INFINITY).raw, ONE);
    assert_int_equal(proportion_from_double(-INFINITY).raw, 0);
    assert_int_equal(proportion_from_double(NAN).raw, INVALID);
    assert_int_equal(proportion_from_percent(50.0).raw, HALF);
    assert_int_equal(proportion_from_percent(100.0).raw, ONE);
    assert_int_equal(proportion_from_percent(250.0).raw, ONE);
    assert_int_equal(proportion_from_percent(-1.0).raw, 0);
    assert_int_equal(proportion_from_percent(25.0).raw, QUARTER);

    assert_true(proportion_to_double(PROPORTION_ONE) == 1.0);
    assert_true(proportion_to_double(raw(HALF)) == 0.5);
    assert_true(proportion_to_double(PROPORTION_ZERO) == 0.0);
    assert_true(isnan(proportion_to_double(PROPORTION_INVALID)));
    assert_true(isnan(proportion_to_double(raw(ONE + 7))));
    /* Round trip of every representable value we try is exact (31 bits fit a double). */
    for (uint32_t r = 0; r <= ONE; r += 0x10001)
        assert_int_equal(proportion_from_double(proportion_to_double(raw(r))).raw, r);
}

static void test_ratio(void **state)
{
    static const struct {
        uint64_t num, den;
        uint32_t raw;
    } cases[] = {
            {0, 1, 0},
            {1, 2, HALF},
            {1, 4, QUARTER},
            {3, 4, 3 * QUARTER},
            {5, 5, ONE},
            {6, 5, ONE},
            {UINT64_MAX, 1, ONE},
            {1, 0, INVALID},
            {0, 0, INVALID},
            {1, 3, 0x2aaaaaaa}, /* rounded down */
            {2, 3, 0x55555555},
            {UINT64_MAX / 2, UINT64_MAX, 0x3fffffff}, /* big operands, 64-bit only */
            {UINT64_MAX - 1, UINT64_MAX, ONE - 1},
            {(uint64_t)1 << 40, (uint64_t)1 << 41, HALF},
            {1, UINT64_MAX, 0},
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct proportion p = proportion_from_ratio(cases[i].num, cases[i].den);

        if (p.raw != cases[i].raw)
            fail_msg("ratio %zu: %#x, want %#x", i, p.raw, cases[i].raw);
    }
    /* Against 128-bit arithmetic. */
    {
        struct test_rng rng;

        test_rng_init(&rng, test_seed());
        for (int i = 0; i < 100000; i++) {
            uint64_t den = (test_rng_next(&rng) >> test_rng_range(&rng, 0, 63)) | 1;
            uint64_t num = test_rng_range(&rng, 0, den);
            struct proportion p = proportion_from_ratio(num, den);
            u128 scaled = (u128)num << 31;

            /* Exact: floor(num * 2^31 / den), checked in 128 bits. */
            assert_true(proportion_is_valid(p));
            assert_true(p.raw == (uint32_t)(scaled / den));
        }
    }
}

static void test_arithmetic_table(void **state)
{
    enum { ADD, SUB, MUL, MUL_INT, DIV_INT };
    static const struct {
        int op;
        uint32_t a, b, want;
    } cases[] = {
            {ADD, 0, 0, 0},
            {ADD, QUARTER, QUARTER, HALF},
            {ADD, HALF, HALF, ONE},
            {ADD, 3 * QUARTER, HALF, ONE}, /* saturates */
            {ADD, ONE, ONE, ONE},
            {ADD, INVALID, 0, INVALID},
            {ADD, 0, INVALID, INVALID},
            {ADD, ONE + 1, 0, INVALID}, /* any raw above 1.0 is invalid */
            {SUB, HALF, QUARTER, QUARTER},
            {SUB, QUARTER, HALF, 0}, /* saturates at 0 */
            {SUB, ONE, ONE, 0},
            {SUB, ONE, 0, ONE},
            {SUB, INVALID, 0, INVALID},
            {SUB, 0, INVALID, INVALID},
            {MUL, HALF, HALF, QUARTER},
            {MUL, ONE, ONE, ONE},
            {MUL, ONE, 12345, 12345},
            {MUL, 0, ONE, 0},
            {MUL, 3, HALF, 1}, /* rounded down */
            {MUL, INVALID, ONE, INVALID},
            {MUL, ONE, INVALID, INVALID},
            {MUL_INT, QUARTER, 2, HALF},
            {MUL_INT, QUARTER, 4, ONE},
            {MUL_INT, QUARTER, 5, ONE}, /* saturates */
            {MUL_INT, 1, UINT32_MAX, ONE},
            {MUL_INT, ONE, UINT32_MAX, ONE},
            {MUL_INT, 0, 1000, 0}, /* Gecko divides by zero here */
            {MUL_INT, HALF, 0, 0},
            {MUL_INT, INVALID, 1, INVALID},
            {DIV_INT, ONE, 2, HALF},
            {DIV_INT, ONE, 4, QUARTER},
            {DIV_INT, 10, 3, 3}, /* rounded down */
            {DIV_INT, ONE, 1, ONE},
            {DIV_INT, 0, 7, 0},
            {DIV_INT, HALF, 0, INVALID},
            {DIV_INT, INVALID, 2, INVALID},
    };

    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        struct proportion a = raw(cases[i].a), b = raw(cases[i].b), r = {0};

        switch (cases[i].op) {
        case ADD:
            r = proportion_add(a, b);
            break;
        case SUB:
            r = proportion_sub(a, b);
            break;
        case MUL:
            r = proportion_mul(a, b);
            break;
        case MUL_INT:
            r = proportion_mul_int(a, cases[i].b);
            break;
        default:
            r = proportion_div_int(a, cases[i].b);
        }
        if (r.raw != cases[i].want)
            fail_msg("case %zu: got %#x, want %#x", i, r.raw, cases[i].want);
    }
}

/* Random operands: results always valid and within [0, 1] for valid operands, and
 * a - (a / n) * n < n (Gecko's documented lossiness of division). */
static void test_arithmetic_random(void **state)
{
    struct test_rng rng;

    (void)state;
    test_rng_init(&rng, test_seed());
    for (int i = 0; i < 200000; i++) {
        struct proportion a = raw((uint32_t)test_rng_range(&rng, 0, ONE));
        struct proportion b = raw((uint32_t)test_rng_range(&rng, 0, ONE));
        uint32_t n = (uint32_t)test_rng_range(&rng, 1, i % 2 ? 10 : UINT32_MAX);
        uint64_t sum = (uint64_t)a.raw + b.raw;
        struct proportion d = proportion_div_int(a, n);

        assert_int_equal(proportion_add(a, b).raw, sum > ONE ? ONE : sum);
        assert_int_equal(proportion_sub(a, b).raw, a.raw > b.raw ? a.raw - b.raw : 0);
        assert_true(proportion_mul(a, b).raw <= (a.raw < b.raw ? a.raw : b.raw));
        assert_true(proportion_mul_int(a, n).raw <= ONE);
        assert_true(proportion_mul_int(d, n).raw <= a.raw);
        assert_true(a.raw - proportion_mul_int(d, n).raw < n);
    }
}

static void test_cell(void **state)
{
    struct progress_cell cell;
    struct proportion v;
    const char *loc = "unset";

    (void)state;
    progress_cell_init(&cell);
    progress_cell_read(&cell, &v, &loc);
    assert_int_equal(v.raw, 0);
    assert_null(loc);
    progress_cell_set(&cell, raw(HALF), "half");
    progress_cell_read(&cell, &v, &loc);
    assert_int_equal(v.raw, HALF);
    assert_string_equal(loc, "half");
    /* Never backwards; the location still moves on. */
    progress_cell_set(&cell, raw(QUARTER), "back");
    progress_cell_read(&cell, &v, &loc);
    assert_int_equal(v.raw, HALF);
    assert_string_equal(loc, "back");
    /* NULL and "" keep the location; invalid keeps the value. */
    progress_cell_set(&cell, raw(3 * QUARTER), NULL);
    progress_cell_set(&cell, PROPORTION_INVALID, "");
    progress_cell_read(&cell, &v, &loc);
    assert_int_equal(v.raw, 3 * QUARTER);
    assert_string_equal(loc, "back");
    progress_cell_set(&cell, PROPORTION_INVALID, "inv");
    progress_cell_read(&cell, &v, NULL);
    assert_int_equal(v.raw, 3 * QUARTER);
    progress_cell_read(&cell, NULL, &loc);
    assert_string_equal(loc, "inv");
    progress_cell_set(&cell, PROPORTION_ONE, "done");
    progress_cell_read(&cell, &v, &loc);
    assert_int_equal(v.raw, ONE);
    assert_string_equal(loc, "done");
}

static uint32_t cell_value(struct progress_cell *cell)
{
    struct proportion v;

    progress_cell_read(cell, &v, NULL);
    return v.raw;
}

static void test_logger_mapping(void **state)
{
    struct progress_cell cell;
    struct progress_logger root, sub, subsub;
    const char *loc;

    (void)state;
    progress_cell_init(&cell);
    root = progress_logger_root(&cell);
    assert_int_equal(cell_value(&cell), 0); /* creating the root does not touch the cell */
    progress_logger_set_local(&root, raw(QUARTER / 2), "root");
    assert_int_equal(cell_value(&cell), QUARTER / 2);

    /* A sub-logger over 25..75 % at its local 50 % puts the cell at 50 %. */
    sub = progress_logger_sub(&root, raw(QUARTER), raw(3 * QUARTER), "sub start");
    assert_int_equal(cell_value(&cell), QUARTER);
    progress_cell_read(&cell, NULL, &loc);
    assert_string_equal(loc, "sub start");
    progress_logger_set_local(&sub, raw(HALF), "sub half");
    assert_int_equal(cell_value(&cell), HALF);
    assert_int_equal(progress_logger_to_cell(&sub, PROPORTION_ONE).raw, 3 * QUARTER);
    assert_int_equal(progress_logger_to_cell(&sub, PROPORTION_ZERO).raw, QUARTER);

    /* Nested: the second half of 25..75 % is 50..75 %; its half is 62.5 %. */
    subsub = progress_logger_sub(&sub, raw(HALF), PROPORTION_ONE, NULL);
    progress_cell_read(&cell, NULL, &loc);
    assert_string_equal(loc, "sub half"); /* NULL kept it */
    progress_logger_set_local(&subsub, raw(HALF), "deep");
    assert_int_equal(cell_value(&cell), HALF + QUARTER / 2);
    progress_logger_set_local(&subsub, PROPORTION_ONE, NULL);
    assert_int_equal(cell_value(&cell), 3 * QUARTER);
    progress_logger_set_local(&root, PROPORTION_ONE, "end");
    assert_int_equal(cell_value(&cell), ONE);

    /* Percent in, percent out. */
    progress_cell_init(&cell);
    root = progress_logger_root(&cell);
    sub = progress_logger_sub(&root, proportion_from_percent(20), proportion_from_percent(40),
                              NULL);
    progress_logger_set_local(&sub, proportion_from_percent(50), NULL);
    assert_true(fabs(proportion_to_double(raw(cell_value(&cell))) - 0.30) < 1e-9);
}

static void test_logger_edge_cases(void **state)
{
    struct progress_cell cell;
    struct progress_logger root, l;

    (void)state;
    progress_cell_init(&cell);
    root = progress_logger_root(&cell);
    /* end < start: an empty range at start. */
    l = progress_logger_sub(&root, raw(HALF), raw(QUARTER), NULL);
    assert_int_equal(l.span.raw, 0);
    progress_logger_set_local(&l, PROPORTION_ONE, NULL);
    assert_int_equal(cell_value(&cell), HALF);
    /* An invalid bound gives a disabled logger; so does a NULL cell. */
    l = progress_logger_sub(&root, PROPORTION_INVALID, raw(QUARTER), NULL);
    assert_null(l.cell);
    progress_logger_set_local(&l, PROPORTION_ONE, "nothing");
    assert_int_equal(cell_value(&cell), HALF);
    root = progress_logger_root(NULL);
    l = progress_logger_sub(&root, PROPORTION_ZERO, PROPORTION_ONE, "x");
    assert_null(l.cell);
    progress_logger_set_local(&l, PROPORTION_ONE, "x");
    l = progress_logger_loop_sub(&root, PROPORTION_ZERO, PROPORTION_ONE, 4, 1);
    assert_null(l.cell);
    /* Invalid local progress leaves the cell alone. */
    root = progress_logger_root(&cell);
    progress_logger_set_local(&root, PROPORTION_INVALID, NULL);
    assert_int_equal(cell_value(&cell), HALF);
    /* Loops: count 0 or index out of range give a disabled logger. */
    l = progress_logger_loop_sub(&root, PROPORTION_ZERO, PROPORTION_ONE, 0, 0);
    assert_null(l.cell);
    l = progress_logger_loop_sub(&root, PROPORTION_ZERO, PROPORTION_ONE, 3, 3);
    assert_null(l.cell);
}

static void test_loop_sub(void **state)
{
    struct progress_cell cell;
    struct progress_logger root;
    struct proportion start = proportion_from_percent(30), end = proportion_from_percent(50);

    (void)state;
    progress_cell_init(&cell);
    root = progress_logger_root(&cell);
    /* 10 iterations over 30..50 %: [30, 32], [32, 34], ... [48, 50]. */
    for (uint32_t i = 0; i < 10; i++) {
        struct progress_logger it = progress_logger_loop_sub(&root, start, end, 10, i);
        uint64_t width = end.raw - start.raw;

        assert_int_equal(it.start.raw, start.raw + width * i / 10);
        assert_int_equal(it.start.raw + it.span.raw, start.raw + width * (i + 1) / 10);
        assert_int_equal(cell_value(&cell), it.start.raw); /* recorded at creation */
        progress_logger_set_local(&it, PROPORTION_ONE, NULL);
        assert_int_equal(cell_value(&cell), it.start.raw + it.span.raw);
    }
    assert_int_equal(cell_value(&cell), end.raw); /* the last one ends exactly at end */
    assert_true(fabs(proportion_to_double(raw(cell_value(&cell))) - 0.5) < 1e-9);

    /* Consecutive ranges tile [start, end] exactly for awkward counts, inside a sub-logger. */
    for (uint32_t count = 1; count < 50; count += 7) {
        struct progress_logger sub = progress_logger_sub(&root, raw(QUARTER), raw(HALF), NULL);
        uint32_t expect_start = QUARTER;

        for (uint32_t i = 0; i < count; i++) {
            struct progress_logger it =
                    progress_logger_loop_sub(&sub, PROPORTION_ZERO, PROPORTION_ONE, count, i);

            assert_int_equal(it.start.raw, expect_start);
            expect_start = it.start.raw + it.span.raw;
            assert_true(it.span.raw + 1 >= QUARTER / count);
        }
        assert_int_equal(expect_start, HALF);
    }
    /* More iterations than units: empty ranges, still in order. */
    {
        struct progress_logger tiny = progress_logger_sub(&root, raw(HALF), raw(HALF + 3), NULL);
        uint32_t prev = HALF;

        for (uint32_t i = 0; i < 10; i++) {
            struct progress_logger it =
                    progress_logger_loop_sub(&tiny, PROPORTION_ZERO, PROPORTION_ONE, 10, i);

            assert_true(it.start.raw >= prev);
            prev = it.start.raw;
            assert_true(it.start.raw + it.span.raw <= HALF + 3);
        }
    }
}

/* A writer thread steps the cell; the main thread polls it. Location i is &steps[i], so a
 * reader can tell which step a location belongs to. */
#define STEPS 200000
static char steps[STEPS + 1]; /* filled with 'x': an empty location would be ignored */

struct writer_arg {
    struct progress_cell *cell;
    atomic_int done;
};

static void *writer_main(void *p)
{
    struct writer_arg *arg = p;
    struct progress_logger root = progress_logger_root(arg->cell);

    for (uint32_t i = 1; i <= STEPS; i++) {
        /* Each step is one loop iteration's sub-logger reaching its end. */
        struct progress_logger it =
                progress_logger_loop_sub(&root, PROPORTION_ZERO, raw(STEPS), STEPS, i - 1);

        progress_logger_set_local(&it, PROPORTION_ONE, &steps[i]);
    }
    atomic_store(&arg->done, 1);
    return NULL;
}

static void test_two_threads(void **state)
{
    struct progress_cell cell;
    struct writer_arg arg = {.cell = &cell};
    pthread_t thread;
    uint32_t prev_value = 0;
    size_t prev_loc = 0, reads = 0;
    int done;

    (void)state;
    memset(steps, 'x', sizeof(steps));
    progress_cell_init(&cell);
    assert_int_equal(pthread_create(&thread, NULL, writer_main, &arg), 0);
    do {
        struct proportion v;
        const char *loc;

        done = atomic_load(&arg.done);
        progress_cell_read(&cell, &v, &loc);
        reads++;
        assert_true(proportion_is_valid(v));
        assert_true(v.raw >= prev_value);
        assert_true(v.raw <= STEPS);
        if (v.raw > 0) {
            size_t step;

            /* Value step k was stored after location k: the location is step k or later. */
            assert_non_null(loc);
            assert_true(loc >= &steps[1] && loc <= &steps[STEPS]);
            step = (size_t)(loc - steps);
            assert_true(step >= v.raw);
            assert_true(step >= prev_loc);
            prev_loc = step;
        }
        prev_value = v.raw;
    } while (!done);
    assert_int_equal(pthread_join(thread, NULL), 0);
    assert_int_equal(cell_value(&cell), STEPS);
    assert_true(reads > 0);
    print_message("# %zu reads while writing\n", reads);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_constants_and_validity),
            cmocka_unit_test(test_conversions),
            cmocka_unit_test(test_ratio),
            cmocka_unit_test(test_arithmetic_table),
            cmocka_unit_test(test_arithmetic_random),
            cmocka_unit_test(test_cell),
            cmocka_unit_test(test_logger_mapping),
            cmocka_unit_test(test_logger_edge_cases),
            cmocka_unit_test(test_loop_sub),
            cmocka_unit_test(test_two_threads),
    };
    return cmocka_run_group_tests_name("buffer-progress", tests, NULL, NULL);
}
