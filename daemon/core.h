/* daemon/core.h - the daemon's lower core (core.c): what every file of the daemon may call.
 *
 * Layering inside daemon/: main.c -> server.c -> gather.c, symbols-service.c, recover.c,
 * region-updates.c -> core.c -> controller.c, groups.c. A file calls only files below it;
 * nothing below server.c calls server.c (tests/lint/check-layering.sh checks that no other
 * file uses a function server.c defines). State shared by these files is in daemon-internal.h.
 */
#ifndef FLEETPROF_DAEMON_CORE_H
#define FLEETPROF_DAEMON_CORE_H

#include <stdint.h>

#include "daemon/daemon.h"
#include "proto/fleetprof-protocol.h"

struct conn;
struct daemon;

uint64_t daemon__now_ns(void);
uint64_t daemon__epoch_ms(void);
void daemon__log(struct daemon *d, enum daemon_log_level level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* The table of connections: every connection in d->conns from its accept to its close,
 * children also by pid from their Hello (d->by_pid). */
void daemon__conn_link(struct daemon *d, struct conn *c);
/* Links c (whose pid is set) into the pid map. 0 or -ENOMEM. */
int daemon__pid_map_add(struct daemon *d, struct conn *c);
/* Takes c out of the pid map (idempotent). */
void daemon__pid_map_remove(struct daemon *d, struct conn *c);
/* Takes c out of the table and the pid map. */
void daemon__conn_unlink(struct daemon *d, struct conn *c);
/* The child connection of pid, or NULL. */
struct conn *daemon__child_by_pid(struct daemon *d, int32_t pid);

/* Drops a misbehaving peer; logs why once. */
void daemon__drop(struct conn *c, const char *why);
/* Sends, dropping the peer if its queue is full. Returns 0 or the negative errno. */
int daemon__send(struct conn *c, Fleetprof__Envelope *env);

/* Whether pid is dead or dying, or (start_ticks nonzero) now another process's. */
bool daemon__process_gone(int32_t pid, uint64_t start_ticks);
/* pid's start time (clock ticks since boot) in *ret_start_ticks; false when it has no entry. */
bool daemon__process_start(int32_t pid, uint64_t *ret_start_ticks);
/* pid's parent and start time (as above); false when it has no entry. */
bool daemon__process_parent(int32_t pid, int32_t *ret_ppid, uint64_t *ret_start_ticks);
/* A time of daemon__now_ns()'s clock in /proc's clock ticks since boot (start times). */
uint64_t daemon__boot_ticks(uint64_t monotonic_ns);

/* Once closing and nothing is left (connections, capture): d->finish_close(d), which frees
 * the daemon. */
void daemon__maybe_finish_close(struct daemon *d);

#endif /* FLEETPROF_DAEMON_CORE_H */
