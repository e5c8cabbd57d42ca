/* child/client/ipc-start.h - the deferred connection of a forked child (child/ipc-module/ipc.c).
 *
 * A child forked by a profiled process restarts the runtime at once (docs/threading.md
 * "Fork"), but most such children exec a moment later: connecting to the daemon there (an
 * IPC thread, a libuv loop, a Hello, a Welcome, a connection the daemon tracks for a
 * millisecond) was the larger part of the cost of a fork+exec under `fleetprof record`. So
 * after a fork, rt_ipc_start() only prepares (update slot and callback) and the connection is
 * made by the sampler's first tick (rt_ipc_tick()), or by whoever needs it first: the exit
 * profile's writer calls rt_ipc_start_deferred().
 */
#ifndef FLEETPROF_CHILD_CLIENT_IPC_START_H
#define FLEETPROF_CHILD_CLIENT_IPC_START_H

/* Makes the connection rt_ipc_start() deferred, now, on the calling thread (never the IPC
 * thread); a no-op when none is pending. Whoever calls it first does the work; callers that
 * must see the result (exit paths) run after the sampler is stopped, or on it. */
void rt_ipc_start_deferred(void);

#endif /* FLEETPROF_CHILD_CLIENT_IPC_START_H */
