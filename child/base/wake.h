/* child/base/wake.h - the sampler's wake-up: a futex word the sampler sleeps on between its
 * ticks, and that anyone may raise (async-signal-safe): stopping, an exit signal to handle
 * (crash.c), a thread's ring half full (handler.c).
 */
#ifndef FLEETPROF_CHILD_BASE_WAKE_H
#define FLEETPROF_CHILD_BASE_WAKE_H

#include <time.h>

/* Sleeps until the absolute CLOCK_MONOTONIC time ts or a wake, whichever comes first, and
 * lowers the word. */
void rt_wake_sleep_until(const struct timespec *ts);
/* Raises the word and wakes the sleeper. Async-signal-safe; errno kept. */
void rt_sampler_wake(void);
/* The word lowered (the sampler starts). */
void rt_wake_reset(void);

#endif /* FLEETPROF_CHILD_BASE_WAKE_H */
