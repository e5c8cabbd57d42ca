/* daemon/pace.h - batching a busy loop's wake-ups.
 *
 * A daemon serving a thousand children gets their updates one at a time: its loop wakes,
 * reads one message and waits again (bench-daemon, 256 children: 1.2 reads per
 * epoll_wait), and on a VM the wake-up costs more than the read. Once the loop has gone
 * round faster than the pace (events keep arriving), it sleeps out the rest of the pace
 * before it polls again, so what arrived meanwhile is read in one wake-up. A quiet loop
 * never sleeps: a message after a pause is read at once, and under load a message waits at
 * most one pace.
 */
#ifndef FLEETPROF_DAEMON_PACE_H
#define FLEETPROF_DAEMON_PACE_H

#include <stdint.h>

#include <uv.h>

struct loop_pace;

/* Paces loop (borrowed; it must outlive the pace's close). The handles are unreferenced:
 * they never keep the loop alive. Returns 0 or a negative errno. */
int loop_pace_new(uv_loop_t *loop, uint64_t pace_ns, struct loop_pace **ret);
/* Stops pacing; the memory is freed once libuv has closed the handles. NULL is a no-op. */
void loop_pace_close(struct loop_pace *p);

struct loop_pace_stats {
    uint64_t rounds; /* loop iterations seen */
    uint64_t sleeps; /* of which slept before polling */
    uint64_t slept_ns;
};
struct loop_pace_stats loop_pace_stats(const struct loop_pace *p);

#endif
