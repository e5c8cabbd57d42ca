/* child/client/client.h - the runtime's daemon client: the connection (client.c, which forwards to
 * the IPC thread of libfleetprof-ipc.so, child/ipc-module/ipc.c) and the symbolizer that uses it
 * (symbolize-remote.c). Above the core, below the lifecycle (runtime.c), which gives it the
 * profile writer; the core never includes it.
 */
#ifndef FLEETPROF_CHILD_CLIENT_CLIENT_H
#define FLEETPROF_CHILD_CLIENT_CLIENT_H

#include "child/core/core.h"
#include "child/core/ipc-module.h"

struct json_writer;
struct progress_logger;

/* client.c: the connection to the daemon (FLEETPROF_SOCKET). write_profile (runtime.c's
 * rt_profile_write(), above the client) answers the daemon's requests for a profile. The
 * first start loads libfleetprof-ipc.so; without it (said once with FLEETPROF_DEBUG) the
 * process profiles alone, as when no daemon answers: -ELIBACC, and every other call here
 * does nothing (rt_ipc_connected() is false). Never from a signal handler. */
int rt_ipc_start(const char *socket_path, rt_profile_writer *write_profile);
/* Sends a Final update and closes, waiting at most 2 s. */
void rt_ipc_stop(void);
/* On the sampler thread each tick: wake the IPC thread if updates are pending. */
void rt_ipc_tick(void);
/* In a forked child: drop the parent's connection without touching it. */
void rt_ipc_forget_after_fork(void);
bool rt_ipc_connected(void);
/* The program started pid (fork, posix_spawn): the daemon is told (census). Connected only. */
void rt_ipc_spawned(int32_t pid);
/* Why the daemon at FLEETPROF_SOCKET was not trusted with our data (said once on stderr), or
 * NULL: the process then profiles alone, as without a daemon. */
const char *rt_ipc_untrusted_reason(void);
/* Whether fd is one of the connection's (its loop's, its socket). */
bool rt_ipc_owns_fd(int fd);
/* The program took one of those: the IPC thread is ended where it waits, what is still ours
 * is closed, and a new connection is made at the next tick (or by the exit path). */
int rt_ipc_abandon(void);
/* The program ran out of descriptors: as rt_ipc_abandon(), but no connection is made again
 * (the exit profile goes to FLEETPROF_DIR, as without a daemon). */
int rt_ipc_give_up(void);
/* Hands the exit profile (a finished memory writer, owned by the IPC layer from now on, even
 * on failure) to the IPC thread; rt_ipc_stop() then waits for it to leave before the Final
 * update. Returns 0 or -ENOMEM. */
int rt_ipc_send_exit_profile(struct json_writer *w);
/* Whether the daemon said (Welcome.exit_in_region) it holds our chunk region and builds our
 * exit profile from it when we ask. */
bool rt_ipc_exit_in_region_accepted(void);
/* Our exit profile is in the region (its exit description published): the Final update
 * that rt_ipc_stop() sends says so, and no profile is streamed. */
void rt_ipc_exit_in_region(void);
/* Takes the daemon's Welcome if it is on its way and not read yet, waiting at most 200 ms
 * (a light connection reads it at the sampler's ticks): at exit, before the sampler's last
 * drain, which writes the CPU before the start the Welcome tells. */
void rt_ipc_welcome_wait(void);
/* The program is about to chroot: a light connection starts its IPC thread now, while the
 * libraries that takes can still be loaded (libuv). */
void rt_ipc_before_chroot(void);
/* The program is about to change its user ids: a forked child of a connected process that
 * has not connected yet does now, as the user the daemon accepts (any thread; a lock is
 * taken only that once). */
void rt_ipc_before_credentials(void);

/* struct rt_symbol_batch: child/core/ipc-module.h. */
/* Sends batch through the daemon's symbol service and waits at most timeout_ns for the
 * whole reply. Never call it on the IPC thread. Returns 0 (batch filled), -ENOTCONN, or
 * the batch's error; on failure the batch may be partly filled. */
int rt_ipc_symbolize(struct rt_symbol_batch *batch, uint64_t timeout_ns);

/* symbolize-remote.c: the runtime's symbolizer for one profile write: the daemon's service
 * when connected (design §4 "Symbols"), else (or when it fails) a local libdw cache made on
 * first use. Strings it returns stay valid until rt_symbolizer_done(). */
struct prof_symbols;
struct rt_symbolizer {
    struct prof_symbols *local; /* owned; NULL until needed */
    char **arenas;              /* owned: strings of the daemon's replies */
    size_t arena_count, arena_cap;
    uint64_t remote_batches, remote_failures, remote_addresses, remote_unresolved;
    uint64_t module_errors;
    char error[256]; /* first error, for profilingLog; "" = none */
};
int rt_symbolizer_resolve(struct rt_symbolizer *s, const struct prof_frame_request *requests,
                          size_t count, struct prof_frame_result *results);
/* What this process resolved itself (all 0 when the daemon did the work). */
struct prof_symbols_stats rt_symbolizer_local_stats(const struct rt_symbolizer *s);
void rt_symbolizer_done(struct rt_symbolizer *s);

#endif /* FLEETPROF_CHILD_CLIENT_CLIENT_H */
