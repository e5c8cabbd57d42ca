/* tests/unit/daemon/daemon-fixture.h - a real daemon for the unit tests of the daemon's modules
 * (core.c, budget.c, region.c, recover.c, ...): made by daemon_new() on a private libuv loop,
 * with a socket in a fresh directory, every log line kept for the test to read, and the
 * helpers a module's test needs around it: a child connection without a socket (as the
 * modules below server.c see one), a real client that connects and says Hello (a child with a
 * real ipc connection, for what a module sends), a bounded wait on a condition while the loop
 * runs, forked children that stay until killed.
 *
 * The modules' internals are the daemon's (daemon/daemon-internal.h): a test reads the state
 * its module keeps, as the module's callers do.
 */
#ifndef FLEETPROF_TESTS_UNIT_DAEMON_DAEMON_FIXTURE_H
#define FLEETPROF_TESTS_UNIT_DAEMON_DAEMON_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

/* <uv.h> brings <sys/param.h>, whose MIN/MAX clash with common/macros.h (via testlib.h). */
#undef MIN
#undef MAX

#include "daemon/core.h"
#include "daemon/daemon-internal.h"
#include "daemon/daemon.h"
#include "ipc/uv-ipc.h"
#include "proto/fleetprof-protocol.h"

#define FX_WAIT_MS      30000 /* a bounded wait on a condition: far beyond any real one */
#define FX_CLIENT_KEPT  64    /* messages a client keeps */
#define FX_LOG_LINE_MAX 512

struct fx_line {
    enum daemon_log_level level;
    char text[FX_LOG_LINE_MAX];
};

struct fx {
    uv_loop_t loop;
    struct daemon *d;
    char *dir;       /* the socket's directory, removed at teardown */
    char path[300];  /* the socket */
    uv_timer_t tick; /* wakes the loop while a test waits on a condition */
    struct fx_line *lines;
    size_t line_count, line_cap;
};

/* A process connected to the daemon's socket that said Hello: the daemon's side of it is a
 * child with a real ipc connection. What it receives is kept (copies). */
struct fx_client {
    struct ipc_conn *ipc;
    bool welcomed;
    bool closed;
    Fleetprof__Envelope *got[FX_CLIENT_KEPT];
    size_t got_count;
};

/* Makes the daemon: options o (may be NULL) with the socket, the log and the test settings
 * (any uid, no pacing) filled in. */
void fx_setup(struct fx *f, const struct daemon_options *o);
/* Frees what the test left: connections without a socket (as server.c frees them), clients;
 * closes the daemon and waits for it, then closes the loop (asserting nothing is left). */
void fx_teardown(struct fx *f);

/* A child connection as the modules below server.c see one after its Hello, without a
 * socket: pid, name, no region, in the table and the pid map, counted as a child. */
struct conn *fx_child(struct fx *f, int32_t pid, const char *name);
/* What server.c does with such a connection when it ends (it is freed). */
void fx_child_free(struct fx *f, struct conn *c);

/* Connects a client to the daemon's socket and says Hello as name: returns the daemon's child
 * connection for this process (NULL on failure). */
struct conn *fx_connect(struct fx *f, struct fx_client *cl, const char *name);
/* The same for a client of another process: a forked helper connects to the daemon's socket,
 * hands the connected socket over (SCM_RIGHTS) and waits until killed, holding nothing else of
 * this process's; this process speaks for it. The daemon takes the helper for the child (its
 * pid is SO_PEERCRED's, taken at connect): a test gets as many children as it needs. Returns
 * the daemon's child connection (NULL on failure); *ret_pid is the helper (0 if none), for
 * fx_kill_reap() once the client is closed. */
struct conn *fx_connect_forked(struct fx *f, struct fx_client *cl, const char *name,
                               pid_t *ret_pid);
/* Connects a client that says nothing yet: a tool once it sends its request. Returns 0 or a
 * negative errno. */
int fx_client_open(struct fx *f, struct fx_client *cl);
/* Closes the client (the daemon sees its connection end) and waits for both ends. */
void fx_client_close(struct fx *f, struct fx_client *cl);
/* The n-th message of kind msg_case the client received, or NULL. */
const Fleetprof__Envelope *fx_client_got(const struct fx_client *cl, int msg_case, size_t n);
size_t fx_client_count(const struct fx_client *cl, int msg_case);

/* Runs the loop until cond(arg) holds or FX_WAIT_MS pass; returns cond(arg). */
bool fx_run_until(struct fx *f, bool (*cond)(void *arg), void *arg);
/* Runs the loop until nothing is left to do right now. */
void fx_run_nowait(struct fx *f);

/* A test that cannot run here (no such program, no privilege, a known bug): says why, as a
 * TAP comment, and the caller returns. Not cmocka's skip(): cmocka 1.1 reports it as
 * "not ok # SKIP", which meson counts as a failure (tests/unit/json/test-writer.c). */
void fx_not_run(const char *why);

/* Log lines containing needle (at any level / at level). */
size_t fx_logged(const struct fx *f, const char *needle);
size_t fx_logged_at(const struct fx *f, enum daemon_log_level level, const char *needle);
void fx_log_clear(struct fx *f);
/* Prints the log as TAP comments (for a failing test's reader). */
void fx_log_dump(const struct fx *f);

/* A forked child that waits until it is killed (it dies with its parent too). */
pid_t fx_fork_idle(void);
/* Kills pid with SIGKILL and reaps it. */
void fx_kill_reap(pid_t pid);
/* Waits (bounded) until pid is a zombie, without reaping it: true when it is. */
bool fx_wait_zombie(pid_t pid);

/* Waits (bounded) until the clock /proc's start times are read in (clock ticks since boot) is
 * past ticks: a process forked then starts later than one that started at ticks. */
bool fx_wait_ticks_past(uint64_t ticks);
/* A forked child (waiting until killed) whose pid is want, which must be free: as root, by
 * /proc/sys/kernel/ns_last_pid (another process may take it first: tried again). 0 when this
 * system does not let the test choose. */
pid_t fx_fork_with_pid(pid_t want);

/* A sealed memfd region made by buffer/region.c in this process (chunks of chunk_bytes): the
 * daemon gets a duplicate of its descriptor, as it gets the one a child sends. */
struct buf_region;
struct buf_region *fx_region_new(uint32_t chunk_bytes);
int fx_region_dup(struct buf_region *r);

/* A descriptor through a Unix socket (SCM_RIGHTS), as a forked helper hands one back: 0 or
 * -1; the received descriptor (close-on-exec), or -1. */
int fx_send_fd(int sock, int fd);
int fx_recv_fd(int sock);

#endif /* FLEETPROF_TESTS_UNIT_DAEMON_DAEMON_FIXTURE_H */
