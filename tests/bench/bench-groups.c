/* tests/bench/bench-groups.c - cost and accuracy of performance groups.
 *
 * One thread, pinned to the CPU it starts on. Each figure is the median of RUNS runs,
 * measured in this one process so that ratios compare like with like:
 *   - groups.off_ns: fleetprof_stopwatch_start + stop with no profiler running (before
 *     fleetprof_init): what a program linked against the API pays when nobody profiles it;
 *   - groups.counter_pair_ns: two bare time-stamp counter reads, the physical floor of any
 *     cycle stopwatch;
 *   - groups.clock_stopwatch_ns: a stopwatch made of two CLOCK_MONOTONIC reads;
 *   - groups.stopwatch_ns: fleetprof_stopwatch_start + stop of one group inside an open
 *     event, same CPU (what the API costs per measure), and its ratio to the floor;
 *   - groups.event_ns: fleetprof_event_begin + end (two CPU-time reads, the commit);
 *   - groups.share_error_points: three groups taking 50/30/20 % of each event's CPU in
 *     interleaved slices on one thread, the largest distance of a charged share from the
 *     truth, in points (the design's error on this machine under whatever load it has).
 * The profiler runs with its defaults (1 kHz sampling) for all but the first. Prints a table
 * and BENCH lines; measures, never asserts on time.
 */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "fleetprof.h"

#define RUNS        7
#define STOPWATCHES 5000000
#define EVENTS      20000

static double now_s(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t read_counter(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#elif defined(__aarch64__)
    uint64_t v;

    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
#error "no cycle counter known for this architecture"
#endif
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

static volatile uint64_t sink;

static double stopwatch_run(fleetprof_group *g)
{
    double t0 = now_s();

    for (int i = 0; i < STOPWATCHES; i++) {
        fleetprof_stopwatch sw = fleetprof_stopwatch_start(g);

        fleetprof_stopwatch_stop(&sw);
    }
    return (now_s() - t0) * 1e9 / STOPWATCHES;
}

static double counter_pair_run(void)
{
    double t0 = now_s();
    uint64_t acc = 0;

    for (int i = 0; i < STOPWATCHES; i++) {
        uint64_t a = read_counter();

        acc += read_counter() - a;
    }
    sink = acc;
    return (now_s() - t0) * 1e9 / STOPWATCHES;
}

static double clock_stopwatch_run(void)
{
    double t0 = now_s();
    uint64_t acc = 0;

    for (int i = 0; i < STOPWATCHES; i++) {
        struct timespec a, b;

        (void)clock_gettime(CLOCK_MONOTONIC, &a);
        (void)clock_gettime(CLOCK_MONOTONIC, &b);
        acc += (uint64_t)(b.tv_nsec - a.tv_nsec);
    }
    sink = acc;
    return (now_s() - t0) * 1e9 / STOPWATCHES;
}

static double event_run(void)
{
    double t0 = now_s();

    for (int i = 0; i < EVENTS; i++) {
        fleetprof_event_begin();
        fleetprof_event_end();
    }
    return (now_s() - t0) * 1e9 / EVENTS;
}

static void spin_cpu(uint64_t ns)
{
    uint64_t end = thread_cpu_ns() + ns;

    while (thread_cpu_ns() < end) {
    }
}

/* Largest |charged share - true share| in points, three groups 50/30/20 interleaved. */
static double share_error_run(int run)
{
    static const uint64_t slice_ns[3] = {250000, 150000, 100000};
    struct fleetprof_group_stats s[3];
    fleetprof_group *g[3];
    double sum = 0, worst = 0;

    for (int i = 0; i < 3; i++) {
        char name[32];

        (void)snprintf(name, sizeof(name), "share-%d-%d", run, i);
        g[i] = fleetprof_group_get(name);
    }
    for (int e = 0; e < 40; e++) {
        fleetprof_event_begin();
        for (int k = 0; k < 10; k++)
            for (int i = 0; i < 3; i++) {
                FLEETPROF_GROUP(g[i]);
                spin_cpu(slice_ns[i]);
            }
        fleetprof_event_end();
    }
    for (int i = 0; i < 3; i++) {
        if (fleetprof_group_stats(g[i], &s[i]) < 0)
            return NAN;
        sum += (double)s[i].cpu_ns;
    }
    if (sum <= 0)
        return NAN;
    for (int i = 0; i < 3; i++) {
        double err = fabs(100.0 * (double)s[i].cpu_ns / sum - (double)slice_ns[i] / 5000.0);

        if (err > worst)
            worst = err;
    }
    return worst;
}

static int pin_to_current_cpu(void)
{
    cpu_set_t one;
    int cpu = sched_getcpu();

    if (cpu < 0)
        return -1;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    return sched_setaffinity(0, sizeof(one), &one);
}

int main(void)
{
    double off[RUNS], pair[RUNS], clock_sw[RUNS], sw[RUNS], event[RUNS], share[RUNS];
    fleetprof_group *g;
    int r;

    (void)unsetenv("FLEETPROF_OUTPUT");
    (void)unsetenv("FLEETPROF_SOCKET");
    (void)unsetenv("FLEETPROF_DIR");
    (void)unsetenv("FLEETPROF_SLOW_EVENT_MS");
    (void)setenv("FLEETPROF_INTERVAL_MS", "1", 1);
    if (pin_to_current_cpu() < 0) {
        perror("bench-groups: cannot pin to one CPU (a stopwatch that moves is dropped)");
        return 1;
    }
    g = fleetprof_group_get("bench");
    if (!g) {
        fprintf(stderr, "bench-groups: fleetprof_group_get failed\n");
        return 1;
    }
    for (int run = 0; run < RUNS; run++)
        off[run] = stopwatch_run(g);

    r = fleetprof_init();
    if (r < 0 || !fleetprof_is_active()) {
        fprintf(stderr, "bench-groups: fleetprof_init: %s\n", strerror(r < 0 ? -r : ESRCH));
        return 1;
    }
    for (int run = 0; run < RUNS; run++) {
        pair[run] = counter_pair_run();
        clock_sw[run] = clock_stopwatch_run();
        fleetprof_event_begin();
        sw[run] = stopwatch_run(g);
        fleetprof_event_end();
        event[run] = event_run();
        share[run] = share_error_run(run);
        if (isnan(share[run])) {
            fprintf(stderr, "bench-groups: no CPU charged to the accuracy groups\n");
            return 1;
        }
    }
    {
        struct fleetprof_group_stats s;

        if (fleetprof_group_stats(g, &s) < 0 || s.activations != (uint64_t)RUNS * STOPWATCHES) {
            fprintf(stderr, "bench-groups: %llu of %llu stopwatches measured: not comparable\n",
                    (unsigned long long)s.activations, (unsigned long long)RUNS * STOPWATCHES);
            return 1;
        }
    }
    fleetprof_shutdown();

    {
        double m_off = median(off, RUNS), m_pair = median(pair, RUNS),
               m_clock = median(clock_sw, RUNS), m_sw = median(sw, RUNS),
               m_event = median(event, RUNS), m_share = median(share, RUNS);

        printf("%-52s %10s %8s\n", "performance groups, one pinned thread", "median", "unit");
        printf("%-52s %10.2f %8s\n", "stopwatch start + stop, no profiler running", m_off, "ns");
        printf("%-52s %10.2f %8s\n", "two bare counter reads (floor)", m_pair, "ns");
        printf("%-52s %10.2f %8s\n", "stopwatch of two CLOCK_MONOTONIC reads", m_clock, "ns");
        printf("%-52s %10.2f %8s\n", "fleetprof stopwatch start + stop, in an event", m_sw, "ns");
        printf("%-52s %10.2f %8s\n", "  ratio to the floor", m_sw / m_pair, "x");
        printf("%-52s %10.1f %8s\n", "fleetprof_event_begin + end", m_event, "ns");
        printf("%-52s %10.2f %8s\n", "share error, 50/30/20 interleaved on one thread", m_share,
               "points");
        printf("BENCH groups.off_ns %.2f ns\n", m_off);
        printf("BENCH groups.counter_pair_ns %.2f ns\n", m_pair);
        printf("BENCH groups.clock_stopwatch_ns %.2f ns\n", m_clock);
        printf("BENCH groups.stopwatch_ns %.2f ns\n", m_sw);
        printf("BENCH groups.stopwatch_floor_ratio %.3f x\n", m_sw / m_pair);
        printf("BENCH groups.event_ns %.1f ns\n", m_event);
        printf("BENCH groups.share_error_points %.2f points\n", m_share);
    }
    return 0;
}
