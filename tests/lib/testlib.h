/* tests/lib/testlib.h - shared helpers for unit tests: cmocka, a seeded PRNG, temp dirs.
 *
 * Property tests draw from test_rng seeded by test_seed(): FLEETPROF_TEST_SEED=N reproduces
 * a run; otherwise a fresh seed is chosen and printed (as a TAP comment) so a failure can be
 * replayed.
 */
#ifndef FLEETPROF_TESTS_LIB_TESTLIB_H
#define FLEETPROF_TESTS_LIB_TESTLIB_H

/* cmocka needs these before its header. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/macros.h"

struct test_rng {
    uint64_t state;
};

/* Returns the seed for this process: FLEETPROF_TEST_SEED if set, else one from the clock and
 * pid. Prints "# seed: N" once. */
uint64_t test_seed(void);

void test_rng_init(struct test_rng *rng, uint64_t seed);
uint64_t test_rng_next(struct test_rng *rng);
/* Uniform in [lo, hi] (inclusive). */
uint64_t test_rng_range(struct test_rng *rng, uint64_t lo, uint64_t hi);
void test_rng_fill(struct test_rng *rng, void *dst, size_t len);

/* Creates a fresh directory under $TMPDIR (or /tmp); returns a malloc'd path. */
char *test_tmpdir(const char *tag);
/* Removes a directory tree created by test_tmpdir(); ignores errors. */
void test_rmtree(const char *path);

#endif /* FLEETPROF_TESTS_LIB_TESTLIB_H */
