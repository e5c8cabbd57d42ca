/* Unit tests for buffer/leb128: known encodings, every length boundary, hostile input. */
#include <errno.h>
#include <string.h>

#include "buffer/leb128.h"
#include "testlib.h"

static void test_known_encodings(void **state)
{
    static const struct {
        uint64_t value;
        uint8_t bytes[10];
        size_t len;
    } cases[] = {
            {0, {0x00}, 1},
            {1, {0x01}, 1},
            {127, {0x7f}, 1},
            {128, {0x80, 0x01}, 2},
            {300, {0xac, 0x02}, 2},
            {16384, {0x80, 0x80, 0x01}, 3},
            {UINT64_MAX, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 10},
    };
    (void)state;
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        uint8_t out[BUF_ULEB128_MAX_BYTES];
        uint64_t back = 0;

        assert_int_equal(buf_uleb128_size(cases[i].value), cases[i].len);
        assert_int_equal(buf_uleb128_encode(cases[i].value, out), cases[i].len);
        assert_memory_equal(out, cases[i].bytes, cases[i].len);
        assert_int_equal(buf_uleb128_decode(out, cases[i].len, &back), (ssize_t)cases[i].len);
        assert_true(back == cases[i].value);
    }
}

static void test_round_trip_boundaries(void **state)
{
    (void)state;
    for (unsigned bit = 0; bit < 64; bit++) {
        uint64_t base = (uint64_t)1 << bit;
        uint64_t values[] = {base - 1, base, base + 1};

        for (size_t i = 0; i < ARRAY_SIZE(values); i++) {
            uint8_t out[BUF_ULEB128_MAX_BYTES + 4];
            uint64_t back = 0;
            size_t n = buf_uleb128_encode(values[i], out);

            assert_int_equal(n, buf_uleb128_size(values[i]));
            assert_int_equal(n, values[i] == 0 ? 1
                                               : (64 - (size_t)__builtin_clzll(values[i]) + 6) / 7);
            /* Trailing bytes must not be consumed. */
            memset(out + n, 0xff, 4);
            assert_int_equal(buf_uleb128_decode(out, n + 4, &back), (ssize_t)n);
            assert_true(back == values[i]);
        }
    }
}

static void test_truncated_is_eagain(void **state)
{
    uint8_t out[BUF_ULEB128_MAX_BYTES];
    uint64_t back = 42;
    size_t n = buf_uleb128_encode(UINT64_MAX / 3, out);

    (void)state;
    for (size_t cut = 0; cut < n; cut++) {
        assert_int_equal(buf_uleb128_decode(out, cut, &back), -EAGAIN);
        assert_true(back == 42); /* untouched on failure */
    }
}

static void test_overflow_rejected(void **state)
{
    /* 11 continuation bytes, and a 10th byte carrying more than the top bit. */
    uint8_t too_long[12];
    uint8_t too_big[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    uint64_t back;

    (void)state;
    memset(too_long, 0x80, sizeof(too_long));
    assert_int_equal(buf_uleb128_decode(too_long, sizeof(too_long), &back), -EOVERFLOW);
    assert_int_equal(buf_uleb128_decode(too_big, sizeof(too_big), &back), -EOVERFLOW);
}

static void test_byte_at_a_time(void **state)
{
    struct test_rng rng;
    struct buf_uleb128_decoder d;
    uint8_t stream[BUF_ULEB128_MAX_BYTES * 256];
    uint64_t values[256];
    size_t len = 0, got = 0;

    (void)state;
    test_rng_init(&rng, test_seed());
    for (size_t i = 0; i < ARRAY_SIZE(values); i++) {
        values[i] = test_rng_next(&rng) >> test_rng_range(&rng, 0, 63);
        len += buf_uleb128_encode(values[i], stream + len);
    }
    buf_uleb128_decoder_init(&d);
    for (size_t i = 0; i < len; i++) {
        uint64_t v;
        int r = buf_uleb128_decoder_feed(&d, stream[i], &v);

        assert_true(r >= 0);
        if (r == 1) {
            assert_true(got < ARRAY_SIZE(values));
            assert_true(v == values[got]);
            got++;
        }
    }
    assert_int_equal(got, ARRAY_SIZE(values));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_known_encodings),
            cmocka_unit_test(test_round_trip_boundaries),
            cmocka_unit_test(test_truncated_is_eagain),
            cmocka_unit_test(test_overflow_rejected),
            cmocka_unit_test(test_byte_at_a_time),
    };
    return cmocka_run_group_tests_name("buffer-leb128", tests, NULL, NULL);
}
