/* tools/top-model.h - the pure part of `fleetprof top`: snapshots of the fleet's performance
 * groups, rates between two snapshots, ranking, and the text and JSON that show them.
 *
 * No sockets, terminal or clock here (tools/cmd-top.c does the I/O), so that
 * tests/unit/tools/test-top.c can drive it with made-up reports. Every total in a report is
 * cumulative (since each process started; exited processes stay in). Processes report about
 * once a second, each at its own times, so a rate is the difference of two snapshots'
 * settled totals (as of the time every process had reported up to) over the difference of
 * their settled times: right over any interval, and as processes come and go.
 */
#ifndef FLEETPROF_TOOLS_TOP_MODEL_H
#define FLEETPROF_TOOLS_TOP_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "proto/fleetprof-protocol.h"

/* Per-event charged time histogram, log2 from 1 us: bucket 0 is under 1 us, bucket b in
 * 1..20 is [2^(b-1), 2^b) us, bucket 21 is 2^20 us or more (profile/groups.h; tools/
 * may not include it, and the wire carries the same layout). */
#define TOP_BUCKETS 22

/* One group's cumulative totals (GroupTotals on the wire). */
struct top_totals {
    char *name; /* owned; valid UTF-8 without control characters (the daemon checks) */
    uint64_t cpu_ns;
    uint64_t cycles;
    uint64_t activations;
    uint64_t events;
    uint64_t worst_event_ns;
    uint64_t slow_events;
    uint64_t discarded;
    uint64_t migrated;
    uint64_t stale;
    uint64_t durations[TOP_BUCKETS]; /* events per bucket; missing buckets are 0 */
    /* At the snapshot's settled_ns: what rates are differences of. */
    uint64_t settled_cpu_ns;
    uint64_t settled_events;
    uint64_t settled_slow_events;
};

struct top_process {
    int32_t pid;
    char *name; /* owned */
    bool exited;
    struct top_totals totals;
};

struct top_group {
    struct top_totals totals;        /* summed over every process, exited ones included */
    uint32_t processes;              /* that measured the group */
    uint32_t live_processes;         /* of those, still connected */
    struct top_process *per_process; /* owned, n_per_process entries; only for the group
                                      * the request asked a breakdown of */
    size_t n_per_process;
};

/* One GroupsReport, owned by the tool. */
struct top_snapshot {
    uint64_t time_ns;      /* the daemon's CLOCK_MONOTONIC when it made the report */
    uint64_t fleet_cpu_ns; /* CPU time of the fleet's processes, cumulative */
    /* The time every process's totals are known up to (<= time_ns), and the fleet's CPU
     * then; a daemon that does not say: time_ns and the latest totals. */
    uint64_t settled_ns;
    uint64_t settled_fleet_cpu_ns;
    uint32_t processes;       /* known to the daemon, exited ones included */
    struct top_group *groups; /* owned, n_groups entries */
    size_t n_groups;
    char *breakdown; /* owned: the group the request asked a per-process breakdown
                      * of, NULL for none */
};

/* Copies a report, the answer to a request for a breakdown of group breakdown (NULL for
 * none). Returns 0 or -ENOMEM; on success *ret_snap is the caller's (top_snapshot_free). */
int top_snapshot_from_report(const Fleetprof__GroupsReport *rep, const char *breakdown,
                             struct top_snapshot **ret_snap);
/* Accepts NULL; returns NULL. */
struct top_snapshot *top_snapshot_free(struct top_snapshot *snap);

/* Which of n snapshots (oldest first; the last is the current one) to take rates against:
 * the one whose settled time is before the current one's by the nearest to interval_ns
 * (the longer of two as near), else the oldest (no rates while every settled time is the
 * same). The ones before it are needed no more. 0 for n <= 1. */
size_t top_history_pick(struct top_snapshot *const *hist, size_t n, uint64_t interval_ns);

/* The q-quantile (0 < q <= 1) of per-event charged time from the histogram: the upper bound
 * of the bucket that holds it, or the worst event when that is smaller or the bucket has no
 * bound; 0 when there is no event. histogram_quantile_bucket() picks the bucket, as for
 * the runtime and `summary`. */
uint64_t top_quantile_ns(const struct top_totals *t, double q);

/* A row of the table: a group (fleet view) or a process (breakdown of one group). */
struct top_row {
    const struct top_totals *totals; /* borrowed from the current snapshot */
    /* group rows */
    uint32_t processes;
    uint32_t live_processes;
    /* process rows */
    int32_t pid;
    const char *process_name; /* borrowed from the current snapshot */
    bool exited;
    /* over the interval since the previous snapshot (when the view is rated) */
    uint64_t interval_cpu_ns;
    uint64_t interval_events;
    uint64_t interval_slow_events;
    double cpu_per_s; /* CPU seconds per second (cores); NAN when not rated */
    double share_pct; /* of the fleet's CPU (group rows) or of the group's CPU (process rows)
                       * over the interval; NAN when not rated or nothing ran */
    double cumulative_share_pct; /* the same since the start; NAN when nothing ran */
    uint64_t p50_ns;             /* per-event charged time, all time (histogram) */
    uint64_t p99_ns;
};

/* What one screen shows: the groups ranked, and maybe one group's processes. */
struct top_view {
    bool rated;              /* a usable previous snapshot: rates are over interval_ns */
    uint64_t interval_ns;    /* between the two snapshots' settled times; 0 when not rated */
    uint64_t from_ns, to_ns; /* those settled times (daemon CLOCK_MONOTONIC) when rated */
    uint64_t time_ns;
    uint64_t fleet_cpu_ns;
    double fleet_cpu_per_s; /* NAN when not rated */
    uint32_t processes;
    struct top_row *groups; /* owned; ranked: CPU/s over the interval when rated, else
                             * cumulative CPU; ties by cumulative CPU, then name */
    size_t n_groups;
    const char *group;     /* borrowed: the group broken down, NULL for none */
    bool group_found;      /* the current snapshot has that group */
    struct top_row *procs; /* owned; its processes, ranked like groups */
    size_t n_procs;
};

/* Builds the view of cur, with rates against prev when prev is not NULL, is older and its
 * fleet CPU is not larger (a restarted daemon starts its totals again: no rates then).
 * group (borrowed, may be NULL) selects the breakdown. The view borrows from cur and group:
 * keep them until top_view_done(). Returns 0 or -ENOMEM (then *ret_view is untouched). */
int top_view_build(const struct top_snapshot *prev, const struct top_snapshot *cur,
                   const char *group, struct top_view *ret_view);
void top_view_done(struct top_view *view);

/* "0", "850ns", "12.3us", "4.0ms", "1.25s": four significant characters or so. */
void top_format_ns(char *out, size_t size, uint64_t ns);

struct top_render_opts {
    const char *clock; /* wall-clock text for the header ("14:31:02"), or NULL */
    size_t max_rows;   /* table rows at most (0: all); a terminal's height */
    size_t name_width; /* name column width at most (0: no limit); the column is as wide
                        * as the longest name, and longer names are cut, ending in '~' */
    long selected;     /* the group row to mark (-1: none), in the fleet view */
    bool keys_help;    /* a line of key help at the end (interactive terminal) */
};

/* Characters of a row besides the name column: a terminal's width minus these is room for
 * names. */
#define TOP_GROUP_ROW_FIXED   83 /* groups: name, 8 columns, PROCS */
#define TOP_PROCESS_ROW_FIXED 91 /* processes: PID, name, STATE, 8 columns */

/* Writes the screen as plain text lines (no escape codes; '\n' after each) to out: a
 * header line, a blank line, the table of groups (or, when view->group is set, that
 * group's header and its processes). Returns the 0-based index of the line of the selected
 * row (-1 if none is shown), so a terminal can highlight it. */
long top_render(FILE *out, const struct top_view *view, const struct top_render_opts *opts);

/* Writes the view as one JSON object and a newline (the --json format, docs/user-guide.md). */
void top_write_json(FILE *out, const struct top_view *view);

#endif /* FLEETPROF_TOOLS_TOP_MODEL_H */
