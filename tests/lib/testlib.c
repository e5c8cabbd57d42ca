/* tests/lib/testlib.c - see testlib.h. */
#include "testlib.h"

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t test_seed(void)
{
    static uint64_t seed;
    static int chosen;
    const char *env;

    if (chosen)
        return seed;
    env = getenv("FLEETPROF_TEST_SEED");
    if (env && *env) {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;

        (void)clock_gettime(CLOCK_REALTIME, &ts);
        seed = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
               ((uint64_t)getpid() << 32);
    }
    chosen = 1;
    printf("# seed: %" PRIu64 " (replay with FLEETPROF_TEST_SEED=%" PRIu64 ")\n", seed, seed);
    (void)fflush(stdout);
    return seed;
}

void test_rng_init(struct test_rng *rng, uint64_t seed)
{
    /* splitmix64 of the seed, so small seeds still give well-mixed states. */
    uint64_t z = seed + 0x9e3779b97f4a7c15u;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    rng->state = (z ^ (z >> 31)) | 1;
}

uint64_t test_rng_next(struct test_rng *rng)
{
    /* xorshift64* */
    uint64_t x = rng->state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng->state = x;
    return x * 0x2545f4914f6cdd1du;
}

uint64_t test_rng_range(struct test_rng *rng, uint64_t lo, uint64_t hi)
{
    uint64_t span = hi - lo + 1;

    if (span == 0) /* the full 64-bit range */
        return test_rng_next(rng);
    return lo + test_rng_next(rng) % span;
}

void test_rng_fill(struct test_rng *rng, void *dst, size_t len)
{
    unsigned char *p = dst;

    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(test_rng_next(rng) >> 56);
}

char *test_tmpdir(const char *tag)
{
    const char *base = getenv("TMPDIR");
    char *path;

    if (!base || !*base)
        base = "/tmp";
    if (asprintf(&path, "%s/fleetprof-%s-XXXXXX", base, tag) < 0)
        return NULL;
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    (void)remove(path);
    return 0;
}

void test_rmtree(const char *path)
{
    if (path)
        (void)nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
