/* tests/bench/bench-api.c - cost of the fleetprof_* calls a program makes on its hot paths.
 *
 * Links the public libfleetprof and starts it with fleetprof_init() (default settings:
 * 1 kHz sampling, dwarf stacks, 64 MiB buffer), so the sampler thread runs and takes the
 * buffer's lock as in real use. From the main thread, repeated RUNS times:
 *   - fleetprof_marker(name, category, "text"), MARKERS calls: ns per call;
 *   - fleetprof_label_push + fleetprof_label_pop, LABELS pairs: ns per pair;
 *   - fleetprof_counter_add, COUNTER_ADDS calls: ns per call.
 * 1M markers of ~45 bytes fill most of the buffer, so later runs also pay for the local
 * limit destroying old chunks: the steady state of a long-running process.
 * Prints a table and `BENCH child.marker_text_ns`, `child.label_push_pop_ns`,
 * `child.counter_add_ns` (medians of the runs). Measures, never asserts on time.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fleetprof.h"

#define RUNS         5
#define MARKERS      1000000
#define LABELS       10000000
#define COUNTER_ADDS 10000000

static double now_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return v[n / 2];
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
    double marker_ns[RUNS], label_ns[RUNS], counter_ns[RUNS];
    int counter, r;

    pin_settings();
    r = fleetprof_init();
    if (r < 0) {
        fprintf(stderr, "bench-api: fleetprof_init: %s\n", strerror(-r));
        return 1;
    }
    if (!fleetprof_is_active()) {
        fprintf(stderr, "bench-api: the profiler is not active\n");
        return 1;
    }
    counter = fleetprof_counter_create("bench-counter", "Other", "bench-api");
    if (counter < 0) {
        fprintf(stderr, "bench-api: fleetprof_counter_create: %s\n", strerror(-counter));
        return 1;
    }

    for (int run = 0; run < RUNS; run++) {
        double t0, t1;

        t0 = now_s();
        for (int i = 0; i < MARKERS; i++)
            fleetprof_marker("bench-marker", FLEETPROF_CATEGORY_APP, "text");
        t1 = now_s();
        marker_ns[run] = (t1 - t0) * 1e9 / MARKERS;

        t0 = now_s();
        for (int i = 0; i < LABELS; i++) {
            void *token = fleetprof_label_push("bench-label", FLEETPROF_CATEGORY_APP);

            fleetprof_label_pop(token);
        }
        t1 = now_s();
        label_ns[run] = (t1 - t0) * 1e9 / LABELS;

        t0 = now_s();
        for (int i = 0; i < COUNTER_ADDS; i++)
            fleetprof_counter_add(counter, 1);
        t1 = now_s();
        counter_ns[run] = (t1 - t0) * 1e9 / COUNTER_ADDS;
    }
    fleetprof_shutdown();

    printf("%-44s %10s %10s %8s\n", "fleetprof API, main thread, sampler running", "median", "best",
           "unit");
    {
        double m = median(marker_ns, RUNS), l = median(label_ns, RUNS),
               c = median(counter_ns, RUNS);

        printf("%-44s %10.1f %10.1f %8s\n", "fleetprof_marker(name, cat, \"text\")", m,
               marker_ns[0], "ns/call");
        printf("%-44s %10.1f %10.1f %8s\n", "fleetprof_label_push + fleetprof_label_pop", l,
               label_ns[0], "ns/pair");
        printf("%-44s %10.1f %10.1f %8s\n", "fleetprof_counter_add", c, counter_ns[0], "ns/call");
        printf("BENCH child.marker_text_ns %.1f ns\n", m);
        printf("BENCH child.label_push_pop_ns %.1f ns\n", l);
        printf("BENCH child.counter_add_ns %.1f ns\n", c);
    }
    return 0;
}
