/* daemon/groups.h - the fleet's performance groups: each process's latest cumulative totals
 * (GroupStats) and their sums over the fleet, exited processes included.
 *
 * Every GroupStats is hostile input: it is validated whole before anything is applied, and a
 * bad one is refused with a reason while the process and the fleet keep their last totals.
 * Because the totals are cumulative and must only grow, the fleet's sums are kept up to date
 * by adding each accepted message's increments in place: a message costs a hash lookup per
 * group, and allocates only when a process measures a group it had not reported before.
 * Sans-I/O and single-threaded: server.c calls it on the daemon's loop; fuzzed and
 * unit-tested directly.
 */
#ifndef FLEETPROF_DAEMON_GROUPS_H
#define FLEETPROF_DAEMON_GROUPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/fleetprof-protocol.h"

struct prof_group_totals;

#define FLEET_GROUPS_PER_PROCESS_MAX 4096  /* groups one process may report (the runtime's cap) */
#define FLEET_GROUPS_MAX             65536 /* distinct group names fleet-wide */
#define FLEET_GROUPS_EXITED_KEPT     65536 /* exited processes whose breakdown is kept */
#define FLEET_GROUPS_WHY_BYTES       256

struct fleet_groups;      /* opaque */
struct fleet_groups_proc; /* one profiled process, live or exited; owned by fleet_groups */

/* Returns 0 or -ENOMEM; *ret untouched on failure. */
int fleet_groups_new(struct fleet_groups **ret);
/* Accepts NULL; returns NULL. Every fleet_groups_proc goes with it. */
struct fleet_groups *fleet_groups_free(struct fleet_groups *fg);

/* The clock of the times in reports and of the joins and leaves: the daemon's
 * CLOCK_MONOTONIC (server.c), a test's own; none (every time 0) until set. A GroupStats'
 * own time (time_ns) is on the same clock. */
typedef uint64_t (*fleet_groups_clock_fn)(void *userdata);
void fleet_groups_set_clock(struct fleet_groups *fg, fleet_groups_clock_fn clock, void *userdata);

/* A profiled process joined (Hello). start_ns (Hello.start_ns, the runtime's start; 0 =
 * unknown) tells a process that reconnected (same pid and start, not yet final: its row is
 * taken up again, so its cumulative totals are not counted twice) from a new one (a new
 * process, or the same pid after exec). name is copied (truncated to 63 bytes). Returns the
 * process, borrowed by the caller until fleet_groups_leave(); NULL when out of memory (its
 * GroupStats are then refused). */
struct fleet_groups_proc *fleet_groups_join(struct fleet_groups *fg, int32_t pid, uint64_t start_ns,
                                            const char *name);

/* The process is gone. Its totals stay in the fleet's sums for good; its own row stays for
 * the per-process breakdown until FLEET_GROUPS_EXITED_KEPT newer exited processes push it out.
 * p must not be used afterwards. Accepts NULL. */
void fleet_groups_leave(struct fleet_groups *fg, struct fleet_groups_proc *p);

/* Validates one GroupStats of process p, then applies it: every group's totals replace the
 * process's previous ones (a group absent from the message keeps them) and the fleet's sums
 * move by the difference. Refused, with nothing applied, when: more than
 * FLEET_GROUPS_PER_PROCESS_MAX groups (in the message or in all); a name that is not
 * 1..PROF_GROUP_NAME_MAX bytes of UTF-8 without control characters; a name twice; a histogram
 * that does not have PROF_GROUP_BUCKETS buckets; any counter or bucket (or the process CPU
 * time) below what the process reported before; a message after its final one; the fleet
 * at FLEET_GROUPS_MAX names. Returns 0, or -EBADMSG with a reason in *ret_why (valid until
 * the next call on fg), or -ENOMEM. */
int fleet_groups_apply(struct fleet_groups *fg, struct fleet_groups_proc *p,
                       const Fleetprof__GroupStats *m, const char **ret_why);

/* CPU time of a live process that never reported (the daemon reads /proc/PID/stat); 0 when
 * unknown. */
typedef uint64_t (*fleet_groups_cpu_fn)(int32_t pid, void *userdata);

/* A GroupsReport (or StatusReport.groups) built from the current totals. Every pointer in it
 * borrows fg's memory or the report's own: valid until the next fleet_groups_apply(),
 * _join() or _leave(), and until fleet_groups_report_done(). */
struct fleet_groups_report {
    Fleetprof__GroupsReport msg; /* request_id and time_ns are the caller's to set */
    /* private */
    Fleetprof__FleetGroup *groups;          /* owned, msg.n_groups */
    Fleetprof__FleetGroup **group_ptrs;     /* owned */
    Fleetprof__GroupTotals *totals;         /* owned */
    Fleetprof__SettledTotals *settled;      /* owned */
    Fleetprof__GroupProcess *procs;         /* owned, the breakdown of one group */
    Fleetprof__GroupProcess **proc_ptrs;    /* owned */
    Fleetprof__GroupTotals *proc_totals;    /* owned */
    Fleetprof__SettledTotals *proc_settled; /* owned */
};

/* Fills *ret: fleet sums per group (groups measured by at least one process, most charged
 * CPU first), processes/live_processes per group, processes = every process that joined,
 * fleet_cpu_ns = the latest process CPU time each process reported, or for a live process
 * that never reported, cpu_fn's answer (may be NULL), kept as its last known value once it
 * is gone. per_process_group (NULL or "" = none) adds that group's rows by process.
 * settled_ns is the latest time every live process's totals are known up to (its latest
 * GroupStats, or FG_QUIET_NS ago for one that had nothing to report), never earlier than
 * the previous report's; the settled totals (fleet, groups, breakdown) are the totals at
 * that time, each process's interpolated between its own reports' times.
 * Returns 0 or -ENOMEM (then *ret needs no _done). */
int fleet_groups_report(struct fleet_groups *fg, const char *per_process_group,
                        fleet_groups_cpu_fn cpu_fn, void *cpu_userdata,
                        struct fleet_groups_report *ret);
void fleet_groups_report_done(struct fleet_groups_report *r);

/* p's latest totals, in the order it first reported them, names copied, and the slow-event
 * threshold it said (0 = none): the meta of the exit profile the daemon builds from its
 * region. Returns how many (0: none, *ret NULL) or -ENOMEM; free with fleet_groups_totals_free. */
int fleet_groups_proc_totals(const struct fleet_groups *fg, const struct fleet_groups_proc *p,
                             struct prof_group_totals **ret, uint64_t *ret_slow_event_ns);
void fleet_groups_totals_free(struct prof_group_totals *totals, size_t count);

struct fleet_groups_stats {
    uint64_t accepted;  /* GroupStats applied */
    uint64_t refused;   /* GroupStats refused */
    uint64_t groups;    /* distinct names measured by some process */
    uint64_t processes; /* processes that joined */
    uint64_t live;      /* of those, not gone */
};
void fleet_groups_get_stats(const struct fleet_groups *fg, struct fleet_groups_stats *ret);

#endif /* FLEETPROF_DAEMON_GROUPS_H */
