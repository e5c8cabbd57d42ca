/* tests/workloads/wl-cpu.h - work measured in the thread's own CPU time, not wall time:
 * on a busy machine a workload still does all of it, so what a test expects of its
 * samples does not depend on how much CPU the machine had to spare. */
#ifndef FLEETPROF_TESTS_WL_CPU_H
#define FLEETPROF_TESTS_WL_CPU_H

#include <time.h>

static volatile unsigned long wl_cpu_sink;

static inline double wl_thread_cpu_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Spins until the calling thread has used cpu_ms more of CPU. Inlined into the caller, so
 * the caller's (noinline) frame is the one sampled. */
static inline __attribute__((always_inline)) void wl_burn_cpu_ms(double cpu_ms)
{
    double until = wl_thread_cpu_ms() + cpu_ms;

    while (wl_thread_cpu_ms() < until)
        for (int i = 0; i < 5000; i++)
            wl_cpu_sink += (unsigned long)i * 2654435761u;
    wl_cpu_sink++; /* work after the loop: no tail call */
}

#endif
