/* Unit tests for common/parse.h: what a user may type for a size or a duration, on the
 * command line or in the environment. Decimal numbers only: strtod()'s other forms
 * (hexadecimal, exponents, infinity, signs, leading space) are refused, since "0x10" taken
 * as 16 ms surprised a user; values round to the nearest nanosecond. */
#include <stdint.h>

#include "common/parse.h"
#include "testlib.h"

static void test_durations_take_plain_decimals_to_the_nearest_ns(void **state)
{
    static const struct {
        const char *text;
        double unit_ns;
        uint64_t min_ns, max_ns, want_ns;
    } cases[] = {
            {"0.3", 1e9, 0, UINT64_C(3600000000000), 300000000},
            {"0.25", 1e9, 0, UINT64_C(3600000000000), 250000000},
            {"0.05", 1e6, 50000, 1000000000, 50000},
            {".5", 1e6, 0, 1000000000, 500000},
            {"2.", 1e6, 0, 1000000000, 2000000},
            {"1000", 1e6, 50000, 1000000000, 1000000000},
            {"007", 1e6, 0, 1000000000, 7000000},
            {"0.000001", 1e9, 0, 10000, 1000},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t ns = 0;

        if (parse_duration(cases[i].text, cases[i].unit_ns, cases[i].min_ns, cases[i].max_ns,
                           &ns) != 0 ||
            ns != cases[i].want_ns)
            fail_msg("\"%s\": %llu ns, expected %llu", cases[i].text, (unsigned long long)ns,
                     (unsigned long long)cases[i].want_ns);
    }
}

static void test_other_forms_of_numbers_are_refused(void **state)
{
    static const char *const bad[] = {
            "0x10",     "0X1p3", "1e3", "1E-2",  "inf",
            "infinity", "nan",   "-1",  "+1",    " 1",
            "1 ",       "",      ".",   "..5",   "1.2.3",
            "1,5",      "ten",   "1ms", "0.05s", "1234567890123456",
    };
    uint64_t ns = 42;
    double d = 42;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse_duration(bad[i], 1e6, 0, UINT64_MAX / 2, &ns) == 0)
            fail_msg("parse_duration accepted \"%s\"", bad[i]);
        if (parse_decimal(bad[i], 0, 1e18, &d) == 0)
            fail_msg("parse_decimal accepted \"%s\"", bad[i]);
    }
    assert_int_equal(ns, 42); /* untouched on failure */
    assert_true(d == 42);
    assert_int_equal(parse_duration(NULL, 1e6, 0, 1, &ns), -EINVAL);
}

static void test_durations_outside_the_range_are_refused(void **state)
{
    uint64_t ns = 0;

    (void)state;
    assert_int_equal(parse_duration("0.04", 1e6, 50000, 1000000000, &ns), -EINVAL);
    assert_int_equal(parse_duration("1000.1", 1e6, 50000, 1000000000, &ns), -EINVAL);
    assert_int_equal(parse_duration("0", 1e9, 0, 10, &ns), 0);
    assert_int_equal(ns, 0);
}

static void test_sizes_take_decimals_and_units(void **state)
{
    uint64_t b = 0;

    (void)state;
    assert_int_equal(parse_size("4096", &b), 0);
    assert_int_equal(b, 4096);
    assert_int_equal(parse_size("64K", &b), 0);
    assert_int_equal(b, 64 * 1024);
    assert_int_equal(parse_size("256MiB", &b), 0);
    assert_int_equal(b, 256u << 20);
    assert_int_equal(parse_size("1.5G", &b), 0);
    assert_int_equal(b, UINT64_C(3) << 29);
    assert_int_equal(parse_size("10b", &b), 0);
    assert_int_equal(b, 10);
    assert_int_equal(parse_size("0x10", &b), -EINVAL);
    assert_int_equal(parse_size("1e3K", &b), -EINVAL);
    assert_int_equal(parse_size("-1K", &b), -EINVAL);
    assert_int_equal(parse_size("K", &b), -EINVAL);
    assert_int_equal(parse_size("64KB ", &b), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_durations_take_plain_decimals_to_the_nearest_ns),
            cmocka_unit_test(test_other_forms_of_numbers_are_refused),
            cmocka_unit_test(test_durations_outside_the_range_are_refused),
            cmocka_unit_test(test_sizes_take_decimals_and_units),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
