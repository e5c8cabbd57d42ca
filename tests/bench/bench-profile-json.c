/* tests/bench/bench-profile-json.c - speed of fleetprof_write_profile() on a well-filled buffer.
 *
 * Links the public libfleetprof, fleetprof_init() (1 kHz, dwarf stacks), then 4 threads run
 * for SECONDS on 30-deep recursions ending in one of 8 leaf functions (many distinct stacks)
 * and record a text marker every few microseconds of work plus interval markers, so the
 * buffer holds tens of MB of samples and markers. Then, with the sampler still running,
 * the main thread writes the whole profile RUNS times to a tmpfs file (/dev/shm, else
 * $TMPDIR) and times each write: entries decoded, stacks built, symbols resolved with libdw,
 * JSON written. Prints a table and `BENCH child.json_MBps <median> MB/s` (MB = 1e6 bytes of
 * JSON per second of wall time), plus `BENCH child.json_write_ms`. Measures, never asserts
 * on time.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fleetprof.h"

#define NOINLINE __attribute__((noinline))
#define THREADS  4
#define DEPTH    30
#define SECONDS  3.0
#define RUNS     3

static atomic_int stop;
static atomic_ulong markers_written;
static volatile uint64_t sink;

static double now_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double thread_cpu_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define LEAF(name)                                                  \
    NOINLINE void name(unsigned round);                             \
    NOINLINE void name(unsigned round)                              \
    {                                                               \
        for (int i = 0; i < 3000; i++)                              \
            sink += (uint64_t)(i + round) * 0x9e3779b97f4a7c15u;    \
        fleetprof_marker("bj-step", FLEETPROF_CATEGORY_APP, #name); \
        sink++;                                                     \
    }
LEAF(bj_leaf_0)
LEAF(bj_leaf_1)
LEAF(bj_leaf_2)
LEAF(bj_leaf_3)
LEAF(bj_leaf_4)
LEAF(bj_leaf_5)
LEAF(bj_leaf_6)
LEAF(bj_leaf_7)

static void (*const leaves[])(unsigned) = {bj_leaf_0, bj_leaf_1, bj_leaf_2, bj_leaf_3,
                                           bj_leaf_4, bj_leaf_5, bj_leaf_6, bj_leaf_7};

NOINLINE void bj_recurse(int depth, unsigned round);
NOINLINE void bj_recurse(int depth, unsigned round)
{
    if (depth <= 1) {
        for (int i = 0; i < 16; i++)
            leaves[(round + (unsigned)i) % 8](round);
    } else {
        bj_recurse(depth - 1, round);
    }
    sink++; /* work after the call: never a tail call */
}

static void *worker_main(void *p)
{
    unsigned round = (unsigned)(uintptr_t)p;
    unsigned long n = 0;

    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint64_t t0 = fleetprof_now_ns();
        FLEETPROF_LABEL("bj-round", FLEETPROF_CATEGORY_APP);

        bj_recurse(DEPTH - (int)(round % 4), round);
        fleetprof_marker_interval("bj-round", FLEETPROF_CATEGORY_OTHER, t0, fleetprof_now_ns(),
                                  NULL);
        round += THREADS;
        n += 17;
    }
    atomic_fetch_add(&markers_written, n);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The settings this benchmark documents, whatever the caller's environment says. */
static void pin_settings(void)
{
    (void)unsetenv("FLEETPROF_OUTPUT");
    (void)unsetenv("FLEETPROF_SOCKET");
    (void)unsetenv("FLEETPROF_BUFFER_MB");
    (void)unsetenv("FLEETPROF_CHUNK_KB");
    (void)setenv("FLEETPROF_STACKWALK", "dwarf", 1);
    (void)setenv("FLEETPROF_INTERVAL_MS", "1", 1);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    pthread_t threads[THREADS];
    double mbps[RUNS], ms[RUNS], cpu_ms[RUNS], mb = 0;
    struct timespec ts = {(time_t)SECONDS, (long)((SECONDS - (time_t)SECONDS) * 1e9)};
    int r;

    pin_settings();
    (void)snprintf(path, sizeof(path), "%s/fleetprof-bench-json-%d.json",
                   access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                   : tmp && *tmp                 ? tmp
                                                 : "/tmp",
                   (int)getpid());
    r = fleetprof_init();
    if (r < 0) {
        fprintf(stderr, "bench-profile-json: fleetprof_init: %s\n", strerror(-r));
        return 1;
    }
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, worker_main, (void *)(uintptr_t)i) != 0)
            return 1;
    while (nanosleep(&ts, &ts) != 0)
        ;
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++)
        (void)pthread_join(threads[i], NULL);

    for (int run = 0; run < RUNS; run++) {
        struct stat st;
        double t0 = now_s(), c0 = thread_cpu_s(), t1, c1;

        r = fleetprof_write_profile(path);
        t1 = now_s();
        c1 = thread_cpu_s();
        if (r < 0 || stat(path, &st) < 0) {
            fprintf(stderr, "bench-profile-json: fleetprof_write_profile: %s\n", strerror(-r));
            (void)unlink(path);
            return 1;
        }
        (void)unlink(path);
        if (t1 <= t0) {
            fprintf(stderr, "bench-profile-json: no time measured for a write: no rate\n");
            return 1;
        }
        mb = (double)st.st_size / 1e6;
        ms[run] = (t1 - t0) * 1e3;
        cpu_ms[run] = (c1 - c0) * 1e3;
        mbps[run] = mb / (t1 - t0);
    }
    fleetprof_shutdown();

    qsort(mbps, RUNS, sizeof(double), cmp_double);
    qsort(ms, RUNS, sizeof(double), cmp_double);
    qsort(cpu_ms, RUNS, sizeof(double), cmp_double);
    printf("fleetprof_write_profile: %d threads x %.0f s at 1 kHz, depth %d, %lu markers "
           "recorded; %d writes to tmpfs\n",
           THREADS, SECONDS, DEPTH, (unsigned long)atomic_load(&markers_written), RUNS);
    printf("%-28s %10s %10s %10s\n", "", "median", "best", "unit");
    printf("%-28s %10.1f %10s %10s\n", "profile size", mb, "", "MB");
    printf("%-28s %10.1f %10.1f %10s\n", "write time (wall)", ms[RUNS / 2], ms[0], "ms");
    printf("%-28s %10.1f %10.1f %10s\n", "write time (writer CPU)", cpu_ms[RUNS / 2], cpu_ms[0],
           "ms");
    printf("%-28s %10.1f %10.1f %10s\n", "throughput", mbps[RUNS / 2], mbps[RUNS - 1], "MB/s");
    printf("BENCH child.json_MBps %.1f MB/s\n", mbps[RUNS / 2]);
    printf("BENCH child.json_write_ms %.1f ms\n", ms[RUNS / 2]);
    return 0;
}
