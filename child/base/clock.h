/* child/base/clock.h - the runtime's one clock: CLOCK_MONOTONIC in nanoseconds, the time of
 * every sample, marker and counter row. The vDSO read is async-signal-safe, so the
 * profiling signal's handler uses it too. */
#ifndef FLEETPROF_CHILD_BASE_CLOCK_H
#define FLEETPROF_CHILD_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t rt_now_ns(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif /* FLEETPROF_CHILD_BASE_CLOCK_H */
